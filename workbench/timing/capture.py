"""Live timing capture through the TensorRT worker (needs an NVIDIA GPU where the worker runs).

    res = capture("model.engine", batch_sizes=[1, 8, 32])
    res.table.df            # per-layer IProfiler times joined with the engine's layer info
    res.latency             # {"p50_ms", "p90_ms", "p99_ms", ...} from CUDA events

On a machine without a usable GPU this raises a WorkbenchError saying so (the worker checks
the CUDA runtime before anything else).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from workbench.errors import WorkbenchError
from workbench.timing.profile import Profile, load_profile
from workbench.timing.table import LayerTable


@dataclass
class CaptureResult:
    """What a live capture produced: files, the joined LayerTable, latency and throughput."""

    layers_json: Optional[str]
    profile_json: str
    latency: Dict[str, Any]
    throughput: List[Dict[str, Any]] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict)
    table: Optional[LayerTable] = None
    profile: Optional[Profile] = None


def _client(client: Any) -> Any:
    if client is not None:
        return client
    from workbench.worker.client import default_client

    return default_client()


def _finish(res: Dict[str, Any], onnx: Any) -> CaptureResult:
    prof = load_profile(res["profile_json"])
    table = None
    if res.get("layers_json"):
        table = LayerTable.build(res["layers_json"], prof, onnx=onnx)
    return CaptureResult(layers_json=res.get("layers_json"), profile_json=res["profile_json"],
                         latency=res.get("latency") or {}, throughput=res.get("throughput") or [],
                         raw=res, table=table, profile=prof)


def _common(shapes: Optional[Dict[str, Sequence[int]]], inputs: Optional[str],
            batch_sizes: Any, iterations: int, warmup: int,
            layer_iterations: int, out_dir: Optional[str]) -> Dict[str, Any]:
    if inputs is not None and not Path(inputs).is_file():
        raise WorkbenchError("input data file not found", file=str(inputs),
                             hint="pass an .npz with one array per engine input")
    if iterations < 1 or layer_iterations < 1 or warmup < 0:
        raise WorkbenchError("iterations must be >= 1 and warmup >= 0", field="iterations")
    out = out_dir or tempfile.mkdtemp(prefix="wb-timing-")
    os.makedirs(out, exist_ok=True)
    return {"shapes": {k: [int(d) for d in v] for k, v in (shapes or {}).items()} or None,
            "inputs_npz": str(Path(inputs).resolve()) if inputs else None,
            "batch_sizes": ("profile" if batch_sizes == "profile"
                            else [int(b) for b in batch_sizes] if batch_sizes else None),
            "iterations": int(iterations), "warmup": int(warmup),
            "layer_iterations": int(layer_iterations), "out_dir": str(Path(out).resolve())}


def capture(engine_path: Any, *, onnx: Any = None, shapes: Optional[Dict[str, Sequence[int]]] = None,
            inputs: Optional[str] = None, batch_sizes: Union[Sequence[int], str, None] = None,
            iterations: int = 100, warmup: int = 20, layer_iterations: int = 50,
            profile_index: int = 0, backend: str = "auto", out_dir: Optional[str] = None,
            client: Any = None, timeout: Optional[float] = 600,
            on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> CaptureResult:
    """Time a serialized engine on the GPU: per-layer times, latency percentiles, throughput
    per batch size (`batch_sizes`: a list, or "profile" for the profile's min/opt/max batch),
    and the engine's layer information (see module docstring)."""
    p = Path(engine_path)
    if not p.is_file():
        raise WorkbenchError("engine file not found", file=str(p), hint="build the engine first")
    args = _common(shapes, inputs, batch_sizes, iterations, warmup, layer_iterations, out_dir)
    args.update({"engine_path": str(p.resolve()), "profile_index": int(profile_index),
                 "backend": backend})
    res = _client(client).call("profile_engine", args, timeout=timeout, on_event=on_event)
    return _finish(res, onnx)


def capture_onnx(onnx_path: Any, *, fp16: bool = False,
                 profiles: Optional[Dict[str, Sequence[Sequence[int]]]] = None,
                 tactic_sources: Optional[Sequence[str]] = None, workspace_mb: int = 2048,
                 shapes: Optional[Dict[str, Sequence[int]]] = None, inputs: Optional[str] = None,
                 batch_sizes: Union[Sequence[int], str, None] = None, iterations: int = 100,
                 warmup: int = 20, layer_iterations: int = 50, backend: str = "auto",
                 out_dir: Optional[str] = None, client: Any = None,
                 timeout: Optional[float] = 1800,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> CaptureResult:
    """Build an engine from ONNX in the worker (builder-flag route, DETAILED verbosity) and
    time it like `capture`. `profiles`: {input: [min, opt, max]}."""
    p = Path(onnx_path)
    if not p.is_file():
        raise WorkbenchError("ONNX file not found", file=str(p))
    args = _common(shapes, inputs, batch_sizes, iterations, warmup, layer_iterations, out_dir)
    args.update({"onnx_path": str(p.resolve()), "fp16": bool(fp16), "backend": backend,
                 "profiles": {k: [list(map(int, s)) for s in v] for k, v in (profiles or {}).items()}
                 or None, "tactic_sources": list(tactic_sources) if tactic_sources else None,
                 "workspace_mb": int(workspace_mb)})
    res = _client(client).call("build_and_profile", args, timeout=timeout, on_event=on_event)
    return _finish(res, p)
