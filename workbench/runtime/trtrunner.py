"""`TensorRTRunner`: a serialized TensorRT engine as a `workbench.runtime.runners.Runner`.

The engine runs in the worker process (op `run_engine`, workbench/worker/ops_run.py): each
feed is written to an .npz in a scratch folder, the worker executes the engine on each and
writes the outputs to .npz files, which come back as numpy arrays. A TensorRT crash or hang
is the worker's (a one-line WorkerError), never the caller's. `infer_all` sends all feeds in
one request (several samples, one deserialization). `model` (the ONNX the engine was built
from) gives the input metadata, so feeds are cast like every other runner's; without it the
feeds go as they are and the worker casts them to the engine's dtypes.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.model import as_model
from workbench.runtime.runners import (Feed, Runner, TensorMeta, cast_feed, input_metadata_of)

__all__ = ["TensorRTRunner"]


class TensorRTRunner(Runner):
    """Runs `engine` (a path) through the worker. outputs: the engine outputs to fetch
    (default all); backend: the worker's TensorRT ("auto", "tensorrt", "tensorrt-rtx");
    profile_index: the optimization profile to run on (default -1: for each feed the first
    profile that holds its shapes, so prefill and decode feeds share one engine)."""

    name = "tensorrt"

    def __init__(self, engine: Any, *, model: Any = None, outputs: Optional[Sequence[str]] = None,
                 backend: str = "auto", client: Any = None, timeout: Optional[float] = 600,
                 profile_index: int = -1) -> None:
        super().__init__(model)
        self.engine_path = str(Path(engine).resolve())
        self.outputs = list(outputs) if outputs else None
        self.backend, self.client, self.timeout = backend, client, timeout
        self.profile_index = int(profile_index)
        self._meta: Dict[str, TensorMeta] = {}
        self.last: Dict[str, Any] = {}  # the worker's last answer (names, dtypes, debug_api)

    def _start(self) -> None:
        if not os.path.isfile(self.engine_path):
            raise WorkbenchError("engine file not found", file=self.engine_path,
                                 hint="build it first (workbench build MODEL.onnx)")
        if self.model is not None:
            self._meta = input_metadata_of(as_model(self.model).proto)  # (no weights)

    def input_metadata(self) -> Dict[str, TensorMeta]:
        self.start()
        return self._meta

    def infer(self, feed: Feed) -> Feed:
        return self.infer_all([feed])[0]

    def infer_all(self, feeds: Sequence[Feed]) -> List[Feed]:
        """All feeds in one worker request; outputs by name per feed."""
        from workbench.worker.client import default_client
        from workbench.worker.protocol import RUN_ENGINE

        self.start()
        if not feeds:
            return []
        scratch = tempfile.mkdtemp(prefix="wb-trtrun-")
        try:
            paths = []
            for k, f in enumerate(feeds):
                f = cast_feed(self._meta, f) if self._meta else {n: np.asarray(v)
                                                                 for n, v in f.items()}
                p = os.path.join(scratch, f"inputs_{k}.npz")
                np.savez(p, **f)
                paths.append(p)
            args = {"engine_path": self.engine_path, "inputs_npz": paths,
                    "out_dir": os.path.join(scratch, "out"), "outputs": self.outputs,
                    "backend": self.backend, "profile_index": self.profile_index}
            # a WorkerError keeps its code (bad input vs TensorRT failed: CLI exit 2 vs 1)
            res = (self.client or default_client()).call(RUN_ENGINE, args, timeout=self.timeout)
            self.last = {k: v for k, v in res.items() if k != "outputs"}
            out: List[Feed] = []
            for p in res["outputs"]:
                with np.load(p, allow_pickle=False) as z:
                    out.append({n: z[n] for n in z.files})
            return out
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _infer(self, feed: Feed) -> Feed:  # pragma: no cover - infer is overridden
        return self.infer(feed)
