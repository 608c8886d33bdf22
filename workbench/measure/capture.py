"""Live timing capture through the TensorRT worker (needs an NVIDIA GPU where the worker runs).

    res = capture("model.engine", batch_sizes=[1, 8, 32])
    res.table.df            # per-layer IProfiler times joined with the engine's layer info
    res.latency             # {"p50_ms", "p90_ms", "p99_ms", ...} from CUDA events

    res = capture_onnx("model.onnx", fp16=True)   # built like `workbench build --precision fp16`

An ONNX is built by workbench.engines's build_engine (the worker's one build op, the same
precision handling: FP16 as an ONNX transform on a strongly typed network where the backend
has them, the builder flag only on TensorRT <= 10 without; the engine cache too), then timed
like an engine. On a machine without a usable GPU this raises a WorkbenchError saying so (the
worker checks the CUDA runtime before anything else, before any build).
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Union)

from workbench.core.errors import WorkbenchError
from workbench.formats.profiledata import Profile, load_profile
from workbench.timing.table import LayerTable

if TYPE_CHECKING:  # pragma: no cover
    from workbench.engines.engine import BuildConfig, BuildResult

Profiles = Optional[Dict[str, Sequence[Sequence[int]]]]


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
            profile_index: int = -1, backend: str = "auto", out_dir: Optional[str] = None,
            client: Any = None, timeout: Optional[float] = 600,
            on_event: Optional[Callable[[Dict[str, Any]], None]] = None) -> CaptureResult:
    """Time a serialized engine on the GPU: per-layer times, latency percentiles, throughput
    per batch size (`batch_sizes`: a list, or "profile" for the profile's min/opt/max batch),
    and the engine's layer information (see module docstring). profile_index -1: the first
    optimization profile that holds `shapes` / `inputs` (a decode step of a two-profile
    decoder is timed on its decode profile), else profile 0."""
    from workbench.worker.protocol import PROFILE_ENGINE

    p = Path(engine_path)
    if not p.is_file():
        raise WorkbenchError("engine file not found", file=str(p), hint="build the engine first")
    shapes = _engine_inputs_only(p, shapes)
    args = _common(shapes, inputs, batch_sizes, iterations, warmup, layer_iterations, out_dir)
    args.update({"engine_path": str(p.resolve()), "profile_index": int(profile_index),
                 "backend": backend})
    res = _client(client).call(PROFILE_ENGINE, args, timeout=timeout, on_event=on_event)
    return _finish(res, onnx)


def _engine_inputs_only(engine: Path, shapes: Optional[Dict[str, Sequence[int]]]
                        ) -> Optional[Dict[str, Sequence[int]]]:
    """`shapes` without the inputs a split build's engine does not take (onnxruntime's tail
    reads them: the model's --shapes given whole were 'no engine input named ...')."""
    if not shapes:
        return shapes
    from workbench.engines.tail import split_manifest

    man = split_manifest(engine)
    if man is None:
        return shapes
    own = set((man.get("prefix") or {}).get("inputs") or [])
    return {k: v for k, v in shapes.items() if not own or k in own}


def capture_build_config(onnx_path: Any, *, fp16: bool = False, profiles: Profiles = None,
                         tactic_sources: Optional[Sequence[str]] = None,
                         workspace_mb: int = 2048, backend: str = "auto",
                         target: Optional[str] = None,
                         build: Optional[Mapping[str, Any]] = None) -> "BuildConfig":
    """The BuildConfig timing-capture builds `onnx_path` with: `workbench build --precision
    fp16` (or fp32) with one profile. `profiles`: {input: [min, opt, max]}; a dynamic input
    it leaves out is built at 1 on each dynamic axis (as timing-capture always did);
    `build`: more BuildConfig fields (the build options of `workbench build`)."""
    from workbench.engines.engine import BuildConfig

    prof = {k: [[int(d) for d in s] for s in v] for k, v in (profiles or {}).items()}
    prof.update(_fixed_profile(onnx_path, exclude=prof))
    kw: Dict[str, Any] = dict(tactic_sources=list(tactic_sources) if tactic_sources else None,
                              workspace_bytes=int(workspace_mb) << 20, target=target)
    kw.update(build or {})
    return BuildConfig(precision="fp16" if fp16 else "fp32", profiles=[prof] if prof else [],
                       backend=backend, **kw)


def _fixed_profile(onnx_path: Any, exclude: Dict[str, Any]) -> Dict[str, List[List[int]]]:
    """min/opt/max for the dynamic inputs not in `exclude`: a symbolic dim another input's
    profile covers takes that range (inputs sharing "batch" agree), any other dynamic dim 1."""
    from workbench.core.inputs import model_inputs
    from workbench.core.model import open_model

    specs = model_inputs(open_model(onnx_path))
    known: Dict[str, List[int]] = {}  # symbol -> [min, opt, max]
    for spec in specs:
        if spec.name in exclude:
            trio = exclude[spec.name]
            for axis, d in enumerate(spec.dims):
                if isinstance(d, str) and all(len(s) > axis for s in trio):
                    known.setdefault(d, [int(s[axis]) for s in trio])
    out = {}
    for spec in specs:
        if spec.name in exclude or not spec.dynamic_axes:
            continue
        cols = [[d] * 3 if isinstance(d, int) else known.get(d, [1, 1, 1]) if isinstance(d, str)
                else [1, 1, 1] for d in spec.dims]
        out[spec.name] = [[c[i] for c in cols] for i in range(3)]
    return out


def build_for_capture(onnx_path: Any, *, fp16: bool = False, profiles: Profiles = None,
                      tactic_sources: Optional[Sequence[str]] = None, workspace_mb: int = 2048,
                      backend: str = "auto", target: Optional[str] = None,
                      out_dir: Optional[str] = None, client: Any = None,
                      timeout: Optional[float] = 1800,
                      on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                      build: Optional[Mapping[str, Any]] = None) -> "BuildResult":
    """Build the engine capture_onnx times, through build_engine (engine cache included);
    a copy lands in `out_dir`/model.engine when given."""
    from workbench.engines.engine import build_engine

    cfg = capture_build_config(onnx_path, fp16=fp16, profiles=profiles,
                               tactic_sources=tactic_sources, workspace_mb=workspace_mb,
                               backend=backend, target=target, build=build)
    output = Path(out_dir) / "model.engine" if out_dir else None
    return build_engine(onnx_path, cfg, client=_client(client), timeout=timeout,
                        on_event=on_event, output=output)


def capture_onnx(onnx_path: Any, *, fp16: bool = False, profiles: Profiles = None,
                 tactic_sources: Optional[Sequence[str]] = None, workspace_mb: int = 2048,
                 shapes: Optional[Dict[str, Sequence[int]]] = None, inputs: Optional[str] = None,
                 batch_sizes: Union[Sequence[int], str, None] = None, iterations: int = 100,
                 warmup: int = 20, layer_iterations: int = 50, backend: str = "auto",
                 target: Optional[str] = None, out_dir: Optional[str] = None,
                 client: Any = None, timeout: Optional[float] = 1800,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 profile_index: int = -1,
                 build: Optional[Mapping[str, Any]] = None) -> CaptureResult:
    """Build an engine from ONNX the way `workbench build` does (see build_for_capture) and
    time it like `capture`; `timeout` covers both. `profiles`: {input: [min, opt, max]};
    `target`: as `workbench build --target` (default: this machine's GPU); `profile_index`:
    as `capture`'s; `build`: more BuildConfig fields (`workbench build`'s options)."""
    from workbench.worker.protocol import CUDA_INFO, PROFILE_ENGINE

    t0 = time.monotonic()
    p = Path(onnx_path)
    if not p.is_file():
        raise WorkbenchError("ONNX file not found", file=str(p))
    args = _common(shapes, inputs, batch_sizes, iterations, warmup, layer_iterations, out_dir)
    worker = _client(client)
    worker.call(CUDA_INFO, timeout=120)  # no GPU: say so now, not after a long build
    built = build_for_capture(p, fp16=fp16, profiles=profiles, tactic_sources=tactic_sources,
                              workspace_mb=workspace_mb, backend=backend, target=target,
                              out_dir=args["out_dir"], client=worker, timeout=timeout,
                              on_event=on_event, build=build)
    engine_path = built.output_path or built.engine_path
    args.update({"engine_path": engine_path, "profile_index": int(profile_index),
                 "backend": built.backend})
    left = None if timeout is None else max(1.0, timeout - (time.monotonic() - t0))
    res = worker.call(PROFILE_ENGINE, args, timeout=left, on_event=on_event)
    res.update({"backend": built.backend, "engine_path": engine_path,
                "build_s": built.build_seconds, "engine_bytes": built.size_bytes,
                "build_route": built.route, "build_cache_hit": built.cache_hit,
                "build_warnings": [m["message"] for m in built.log
                                   if m.get("level") == "warning"][:20]})
    return _finish(res, p)
