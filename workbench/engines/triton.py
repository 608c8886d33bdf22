"""Triton Inference Server model repository from engines the workbench built.

    models = export_triton(["fp16.engine", "int8.engine"], "repo", gpus=[0, 1])
    # repo/fp16/config.pbtxt, repo/fp16/1/model.plan (+ its card), repo/fp16/README.md, ...
    text = triton_config(read_card("fp16.engine"), "fp16")   # the config.pbtxt alone

Everything in config.pbtxt comes from the engine card (workbench.engines.card), which records the
engine's real I/O (names, dtypes, shapes with -1 for dynamic dims) and its optimization
profiles: platform `tensorrt_plan`; when every input and output has a dynamic first dim and
every profile starts that dim at 1, the first dim is Triton's batch (`max_batch_size` = the
smallest profile maximum, dims without it, `dynamic_batching`), else `max_batch_size: 0` and
full dims; one KIND_GPU instance group on the chosen GPU ids listing every profile. Where
tritonclient is installed (the `deploy` extra) the written text is parsed with Triton's own
schema (`model_config_pb2.ModelConfig`) before anything is written.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from workbench.engines.card import read_card, write_card
from workbench.core.errors import WorkbenchError

# TensorRT DataType name -> Triton data type
DTYPES: Dict[str, str] = {
    "FLOAT": "TYPE_FP32", "HALF": "TYPE_FP16", "BF16": "TYPE_BF16", "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BOOL": "TYPE_BOOL",
}
_NAME_OK = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class TritonModel:
    """One exported model: its folder, config text and what decided it."""

    name: str
    path: str
    config: str
    max_batch_size: int
    engine: str
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "max_batch_size": self.max_batch_size,
                "engine": self.engine, "notes": list(self.notes)}


def _dtype(t: Dict[str, Any], engine: str) -> str:
    dt = str(t.get("dtype", "")).upper()
    if dt not in DTYPES:
        raise WorkbenchError(f"tensor '{t.get('name')}' has TensorRT dtype {dt}, which Triton "
                             "has no data type for", file=engine, field=str(t.get("name")),
                             hint="build with keep_io_types so the engine's I/O stays FP32")
    return DTYPES[dt]


def batch_size(card: Dict[str, Any]) -> int:
    """Triton's max_batch_size for the engine of `card`: the first dim is a batch when every
    input and output has it dynamic and every profile's min there is 1 (0: no batch dim)."""
    io = card.get("io") or {}
    tensors = list(io.get("inputs") or []) + list(io.get("outputs") or [])
    if not tensors or any(not t.get("shape") or int(t["shape"][0]) != -1 for t in tensors):
        return 0
    maxima = []
    for prof in card.get("profiles") or []:
        for t in io.get("inputs") or []:
            shapes = prof.get(t["name"])
            if shapes is None:
                return 0
            if int(shapes[0][0]) != 1:
                return 0
            maxima.append(int(shapes[2][0]))
    return min(maxima) if maxima else 0


def _dims(shape: Sequence[int], batched: bool) -> str:
    dims = [int(d) for d in shape][1 if batched else 0:]
    return "[ " + ", ".join(str(d) for d in dims) + " ]" if dims else "[ 1 ]"


def triton_config(card: Dict[str, Any], name: str, *, max_batch_size: Optional[int] = None,
                  gpus: Optional[Sequence[int]] = None, instances: int = 1,
                  dynamic_batching: bool = True, queue_delay_us: int = 100,
                  engine: str = "") -> str:
    """config.pbtxt text for the engine described by `card` (see the module docstring);
    `max_batch_size` caps the batch (it must not exceed what the profiles allow)."""
    allowed = batch_size(card)
    mbs = allowed if max_batch_size is None else int(max_batch_size)
    if mbs < 0 or mbs > allowed:
        raise WorkbenchError(f"max batch {mbs} is more than the engine's profiles allow "
                             f"({allowed})" if allowed else
                             f"max batch {mbs}: the engine has no dynamic batch dim starting "
                             "at 1 (every input and output dynamic in dim 0, profile min 1)",
                             file=engine or None, field="max_batch_size",
                             hint=f"use at most {allowed}" if allowed else
                             "use 0 (no batching), or rebuild with a batch profile 1..N")
    if int(instances) < 1:
        raise WorkbenchError("instances must be >= 1", field="instances")
    io = card.get("io") or {}
    lines = [f'name: "{name}"', 'platform: "tensorrt_plan"', f"max_batch_size: {mbs}"]
    for kind in ("input", "output"):
        tensors = io.get(kind + "s") or []
        if not tensors:
            raise WorkbenchError(f"the engine card lists no {kind}s", file=engine or None,
                                 hint="rebuild with `workbench build` (its card records the I/O)")
        lines.append(f"{kind} [")
        entries = []
        for t in tensors:
            entries.append("  {\n"
                           f'    name: "{t["name"]}"\n'
                           f"    data_type: {_dtype(t, engine)}\n"
                           f"    dims: {_dims(t['shape'], mbs > 0)}\n"
                           "  }")
        lines.append(",\n".join(entries))
        lines.append("]")
    group = [f"    count: {int(instances)}", "    kind: KIND_GPU"]
    if gpus:
        group.append("    gpus: [ " + ", ".join(str(int(g)) for g in gpus) + " ]")
    n_profiles = len(card.get("profiles") or [])
    if n_profiles > 1:
        group.append("    profile: [ " + ", ".join(f'"{k}"' for k in range(n_profiles)) + " ]")
    lines.append("instance_group [\n  {\n" + "\n".join(group) + "\n  }\n]")
    if mbs > 0 and dynamic_batching:
        lines.append("dynamic_batching {\n"
                     f"  max_queue_delay_microseconds: {int(queue_delay_us)}\n}}")
    return "\n".join(lines) + "\n"


def check_config(text: str) -> Any:
    """Parse config.pbtxt text with Triton's own schema; returns the ModelConfig message, or
    None where tritonclient is not installed. WorkbenchError when Triton would refuse it."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except (ImportError, RuntimeError):  # (tritonclient without grpcio raises RuntimeError)
        return None
    msg = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise WorkbenchError(f"the generated config.pbtxt does not parse with Triton's schema: "
                             f"{e}", hint="please report it") from None
    return msg


def _readme(name: str, card: Dict[str, Any], config: str, mbs: int) -> str:
    from workbench.worker.card import built_for

    io = card.get("io") or {}
    rows = "\n".join(f"| {kind} | `{t['name']}` | {t['dtype']} | {t['shape']} |"
                     for kind in ("input", "output") for t in io.get(kind + "s") or [])
    profiles = "\n".join(f"- profile {k}: " + "; ".join(
        f"`{n}` min {s[0]} opt {s[1]} max {s[2]}" for n, s in p.items())
        for k, p in enumerate(card.get("profiles") or [])) or "- none (static shapes)"
    rtx = ("\n**TensorRT-RTX engine**: Triton's `tensorrt_plan` backend loads it only where "
           "that backend is built on TensorRT-RTX; otherwise rebuild with `--backend tensorrt` "
           "on the serving GPU.\n" if card.get("backend") == "tensorrt-rtx" else "")
    return f"""# {name}

Exported by trt-workbench from `{card.get('model_path') or card.get('onnx_path')}`
(ONNX sha256 `{str(card.get('onnx_sha256'))[:16]}...`, precision
`{(card.get('precision') or {}).get('precision')}`).

The plan was built with {built_for(card)}. A TensorRT plan runs only with the TensorRT
version and GPU architecture it was built for: serve it from a Triton whose TensorRT is
{card.get('tensorrt_version')}, on that GPU (`1/model.plan.card.json` is its engine card).
{rtx}
| | tensor | dtype | shape (-1 dynamic) |
|---|---|---|---|
{rows}

Optimization profiles:
{profiles}

max_batch_size {mbs}: {"the first dim is Triton's batch (dynamic batching on)" if mbs else
"no batch dim: clients send full shapes"}.

    tritonserver --model-repository <this repository's folder>

config.pbtxt:

```
{config}```
"""


def export_triton(engines: Sequence[Any], repo: Any, *, names: Optional[Sequence[str]] = None,
                  version: int = 1, gpus: Optional[Sequence[int]] = None, instances: int = 1,
                  max_batch_size: Optional[int] = None, dynamic_batching: bool = True
                  ) -> List[TritonModel]:
    """Write a Triton model repository under `repo` with one model per engine (named after
    the engine file, or `names`): `NAME/config.pbtxt`, `NAME/<version>/model.plan` with its
    card, `NAME/README.md`. Every config is checked before any file is written."""
    engines = [Path(e) for e in engines]
    if not engines:
        raise WorkbenchError("no engine given", hint="pass one or more ENGINE files")
    if names is not None and len(names) != len(engines):
        raise WorkbenchError(f"{len(names)} names for {len(engines)} engines", field="name",
                             hint="give one --name per engine, or none")
    if int(version) < 1:
        raise WorkbenchError("the model version must be >= 1", field="version")
    plans = []
    seen: Dict[str, Path] = {}
    for i, eng in enumerate(engines):
        if not eng.is_file():
            raise WorkbenchError("engine file not found", file=str(eng),
                                 hint="build it with `workbench build`")
        card = read_card(eng)
        if card is None:
            raise WorkbenchError("the engine has no card (ENGINE.card.json), so its I/O and "
                                 "profiles are unknown", file=str(eng),
                                 hint="build it with `workbench build -o ENGINE`, which "
                                 "writes one")
        name = _NAME_OK.sub("_", names[i] if names else eng.name.split(".")[0]) or "model"
        if name in seen:
            raise WorkbenchError(f"two engines would be model '{name}' ({seen[name]} and "
                                 f"{eng})", file=str(eng), field="name",
                                 hint="name them with --name")
        seen[name] = eng
        text = triton_config(card, name, max_batch_size=max_batch_size, gpus=gpus,
                             instances=instances, dynamic_batching=dynamic_batching,
                             engine=str(eng))
        check_config(text)
        plans.append((eng, card, name, text))
    from workbench.core.fsutil import atomic_write_text

    root = Path(repo)
    out: List[TritonModel] = []
    for eng, card, name, text in plans:
        folder = root / name
        vdir = folder / str(int(version))
        vdir.mkdir(parents=True, exist_ok=True)
        plan = vdir / "model.plan"
        write_card(plan, card)
        tmp = plan.with_name(".model.plan.tmp")
        shutil.copyfile(eng, tmp)
        tmp.replace(plan)
        atomic_write_text(folder / "config.pbtxt", text)
        mbs = int(re.search(r"max_batch_size: (\d+)", text).group(1))  # type: ignore[union-attr]
        atomic_write_text(folder / "README.md", _readme(name, card, text, mbs))
        notes = []
        if card.get("backend") == "tensorrt-rtx":
            notes.append("TensorRT-RTX engine: Triton's tensorrt_plan backend must be built on "
                         "TensorRT-RTX to load it (see README.md)")
        out.append(TritonModel(name=name, path=str(folder), config=text, max_batch_size=mbs,
                               engine=str(eng), notes=notes))
    return out
