"""Run a split model: the prefix (any Runner: a TensorRT engine, onnxruntime) then the ONNX
tail (onnxruntime), wired by the split's manifest, returning the original model's outputs.

    chain = ChainedRunner.from_folder("split/")                  # onnxruntime for both parts
    chain = ChainedRunner(trt_runner, OnnxRuntimeRunner("split/tail.onnx"), manifest)
    outputs = chain.infer({"images": x})                          # the original's output names

The manifest (written by `workbench.surgery.split`) names the original inputs and outputs, the
prefix's outputs, and the tail's inputs: tensors crossing the cut (prefix outputs) and original
inputs the tail reads directly. A crossing tensor is handed to the tail in the dtype the tail
declares (a TensorRT engine may return INT32 where the ONNX says INT64).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.runtime.runners import Feed, OnnxRuntimeRunner, Runner, TensorMeta

MANIFEST = "split.json"
__all__ = ["ChainedRunner", "MANIFEST", "read_manifest"]


def _SPLIT_STEP(manifest: Path) -> Any:
    """The step that writes a split (prefix, tail and manifest) into the manifest's folder."""
    from workbench.core.findings import step

    return step("fix", "{model}", split=True, o=str(manifest.parent),
                why="cuts the model where the backend refuses it and writes the manifest")


def read_manifest(folder: Any) -> Dict[str, Any]:
    """The split manifest of `folder` (or the manifest file itself)."""
    p = Path(folder)
    path = p / MANIFEST if p.is_dir() else p
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkbenchError("split manifest not found", file=str(path),
                             hint="make one: fix --split writes it",
                             next_steps=[_SPLIT_STEP(path)]) from None
    except ValueError as e:
        raise WorkbenchError(f"split manifest is not JSON ({e})", file=str(path),
                             hint="write it again", next_steps=[_SPLIT_STEP(path)]) from None
    for key in ("inputs", "outputs", "prefix", "tail"):
        if key not in data:
            raise WorkbenchError(f"split manifest has no '{key}'", file=str(path), field=key,
                                 hint="write it again", next_steps=[_SPLIT_STEP(path)])
    return data


class ChainedRunner(Runner):
    """prefix then tail; `tail` is None when nothing was split off (the prefix is the model)."""

    name = "chain"

    def __init__(self, prefix: Runner, tail: Optional[Runner], manifest: Dict[str, Any]) -> None:
        super().__init__(manifest)
        self.prefix, self.tail, self.manifest = prefix, tail, manifest
        self.outputs: List[str] = list(manifest["outputs"])
        self.tail_inputs: List[str] = list((manifest.get("tail") or {}).get("inputs") or [])

    @classmethod
    def from_folder(cls, folder: Any, prefix: Optional[Runner] = None,
                    tail: Optional[Runner] = None) -> "ChainedRunner":
        """The runner of a split folder (or of a manifest file, e.g. the `ENGINE.split.json`
        a split build writes); onnxruntime for whichever part is not given."""
        man = read_manifest(folder)
        folder = Path(folder) if Path(folder).is_dir() else Path(folder).parent
        if prefix is None:
            prefix = OnnxRuntimeRunner(str(folder / man["prefix"]["file"]))
        if tail is None and man.get("tail"):
            tail = OnnxRuntimeRunner(str(folder / man["tail"]["file"]))
        return cls(prefix, tail, man)

    def _start(self) -> None:
        self.prefix.start()
        if self.tail is not None:
            self.tail.start()

    def input_metadata(self) -> Dict[str, TensorMeta]:
        """The original model's inputs: the prefix's, plus those only the tail reads."""
        meta = dict(self.prefix.input_metadata())
        if self.tail is not None:
            tail_meta = self.tail.input_metadata()
            for name in self.manifest["inputs"]:
                if name not in meta and name in tail_meta:
                    meta[name] = tail_meta[name]
        return meta

    def _infer(self, feed: Feed, names: Optional[Sequence[str]] = None) -> Feed:
        """The original's outputs (`names`: Runner.infer keeps only those)."""
        first = self.prefix.infer(feed)
        if self.tail is None:
            return {k: first[k] for k in self.outputs}
        meta = self.tail.input_metadata()
        tail_feed: Feed = {}
        for name in self.tail_inputs:
            if name in first:
                value = first[name]
            elif name in feed:
                value = feed[name]
            else:
                raise WorkbenchError(f"the tail needs '{name}', which neither the prefix nor "
                                     "the feed gives", field=name,
                                     hint="re-run the split; the manifest does not match "
                                     "the models")
            tail_feed[name] = _as_declared(np.asarray(value), meta.get(name))
        rest = self.tail.infer(tail_feed)
        out: Feed = {}
        for k in self.outputs:
            out[k] = first[k] if k in first else rest[k]
        return out


def _as_declared(a: np.ndarray, meta: Optional[TensorMeta]) -> np.ndarray:
    """A crossing tensor in the tail's declared dtype (int32 -> int64 and the like)."""
    want = meta.dtype if meta is not None else None
    if want is None or a.dtype == want:
        return a
    if a.dtype.kind in "biuf" and want.kind in "biuf":
        return a.astype(want)
    return a
