"""Debug precision in the engine itself: build, mark, run and compare with real TensorRT.

Wires the runner-agnostic pieces (`workbench.compare.engine_compare`, `compare.bisect`) to the
build (`workbench.build.build_engine`, engine cache) and the timing layer (layer information,
the profile op), which sit beside or above `compare`:
- `engine_candidate(model, config)`: a candidate factory. For a list of tensor names it marks
  them as ONNX graph outputs (the marked ONNX is cached like any build) and builds, and returns
  a `TensorRTRunner` on that engine. Marked outputs work on every TensorRT (8.6 has no debug
  tensors); where the worker's probe finds `mark_debug` a Finding says so (debug tensors read
  through an IDebugListener are not used yet).
- `layer_boundaries(result)`: the output tensor names of the engine's layers from the layer
  information of an unmarked build (constants and reformats left out); where the engine does
  not deserialize here (a TensorRT-RTX engine built on a CPU machine) the built network's
  layer outputs, which know nothing of fusions (a Finding says so).
- `compare_engine(model, config, feeds, mark=...)`: the unmarked build, the tensors to mark
  ("boundaries" default, "all" with a warning, or a list), then `engine_layerwise`.
- `bisect_engine(model, config, feeds)`: `compare.bisect.bisect_exclusions` with builds of
  `config.replace(exclude_nodes=...)` (strongly typed: Cast insertion by the precision
  transform; legacy route: layer precision) and the profile op's P50 latency as the cost.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from workbench.build.engine import BuildConfig, build_engine, inspect_engine
from workbench.build.result import BuildResult
from workbench.compare.bisect import BisectResult, bisect_exclusions, suspects
from workbench.compare.engine_compare import (EngineCompareReport, boundary_tensors,
                                              compare_tensors, engine_layerwise, mark_outputs,
                                              weightless)
from workbench.comparison import compare_outputs
from workbench.errors import Finding, WorkbenchError
from workbench.precision.table import tolerances
from workbench.runners import Feed, OnnxRuntimeRunner, Runner, load_proto
from workbench.trtrunner import TensorRTRunner

__all__ = ["engine_candidate", "layer_boundaries", "compare_engine", "bisect_engine",
           "with_feed_profile", "MARK_ALL_WARNING"]

MARK_ALL_WARNING = ("--mark all marks every tensor: TensorRT cannot fuse across marked tensors, "
                    "so the engine compared is not the engine you ship; the observer check says "
                    "whether that changed the answer")


def with_feed_profile(model: Any, config: BuildConfig, feeds: Sequence[Feed]) -> BuildConfig:
    """`config`, with one optimization profile spanning the feeds' shapes when it has none and
    the model has dynamic inputs (min/max over the feeds, opt = the first feed)."""
    from workbench.runners import input_metadata_of

    if config.profiles or not feeds:
        return config
    meta = input_metadata_of(load_proto(model))
    dyn = [n for n, m in meta.items() if any(not isinstance(d, int) or d <= 0 for d in m.shape)]
    if not dyn:
        return config
    prof = {}
    for n in dyn:
        shapes = [list(np.shape(f[n])) for f in feeds if n in f]
        if not shapes:
            raise WorkbenchError(f"no data for dynamic input '{n}'", field="inputs",
                                 hint="the .npz needs one array per model input")
        prof[n] = [[min(s[i] for s in shapes) for i in range(len(shapes[0]))], shapes[0],
                   [max(s[i] for s in shapes) for i in range(len(shapes[0]))]]
    return config.replace(profiles=[prof])


def _typed(proto: Any) -> Dict[str, Any]:
    import onnx

    try:
        typed = onnx.shape_inference.infer_shapes(weightless(proto))
    except Exception:
        typed = proto
    return {vi.name: vi for vi in typed.graph.value_info}


def _mark_typed(proto: Any, names: Sequence[str], types: Dict[str, Any]) -> Any:
    """mark_outputs, with each marked output's type from shape inference (parsers and the FP16
    transform read it)."""
    m = mark_outputs(proto, names)
    for o in m.graph.output:
        if o.name in types and not o.type.HasField("tensor_type"):
            o.CopyFrom(types[o.name])
    return m


def engine_candidate(model: Any, config: BuildConfig, *, client: Any = None,
                     timeout: Optional[float] = 1800, on_build: Optional[Callable[
                         [List[str], BuildResult], None]] = None,
                     unmarked: Optional[str] = None,
                     runners: Optional[List[TensorRTRunner]] = None
                     ) -> Callable[[List[str]], Runner]:
    """A candidate factory: names -> TensorRTRunner on a build marking them (cached).
    `unmarked`: an engine file to use for no names (else the unmarked build); `runners`
    collects the runners made (their `last` answer has the worker's debug-tensor probe)."""
    proto = load_proto(model)
    types = _typed(proto)
    made = runners if runners is not None else []

    def make(names: List[str]) -> Runner:
        if not names and unmarked:
            made.append(TensorRTRunner(unmarked, model=proto, backend=config.backend,
                                       client=client))
            return made[-1]
        # ONNX parsers need each output's type: a tensor shape inference cannot type is left
        # unmarked (the comparison counts it as not in the engine)
        names = [n for n in names if n in types]
        src = _mark_typed(proto, names, types) if names else proto
        res = build_engine(src, config, client=client, timeout=timeout)
        if on_build is not None:
            on_build(list(names), res)
        made.append(TensorRTRunner(res.engine_path, model=proto, backend=res.backend,
                                   client=client))
        return made[-1]

    return make


def layer_boundaries(result: Union[BuildResult, str], *, backend: str = "auto",
                     client: Any = None, findings: Optional[List[Finding]] = None,
                     keep: Optional[Dict[str, Any]] = None) -> List[str]:
    """Output tensor names of the engine's layers (see the module docstring); `keep["layers"]`
    receives the parsed layer information (`EngineLayers`) where the inspector gave it."""
    from workbench.timing.layers import parse_layers

    if isinstance(result, str):
        from workbench.worker.client import default_client

        info = (client or default_client()).call("inspect_engine", {
            "engine_path": result, "backend": backend}, timeout=300)
    else:
        info = inspect_engine(result, client=client)
    if info.get("source") == "engine-inspector":
        layers = parse_layers(info["info"], source="engine inspector")
        if layers.names_only:
            raise WorkbenchError("the engine's layer information has names only",
                                 field="ProfilingVerbosity",
                                 hint="build with detailed profiling verbosity (the workbench's "
                                      "builds do) or pass --mark all")
        return [t.name for ly in layers.layers if not (ly.is_constant or ly.is_reformat)
                for t in ly.outputs]
    if findings is not None:
        findings.append(Finding(
            "warning", "no-fusion-info", "the engine does not deserialize here "
            f"({info.get('reason', '?')}): every network layer output counts as a boundary, "
            "fusions unknown", hint="run the comparison where the engine runs",
            source="compare"))
    return [o["name"] for ly in info.get("layers", []) for o in ly.get("outputs", [])
            if o.get("name")]


def _marked(model: Any, mark: Union[str, Sequence[str]], boundaries: Callable[[], List[str]],
            findings: List[Finding]) -> List[str]:
    proto = load_proto(model)
    if isinstance(mark, str) and mark == "all":
        findings.append(Finding("warning", "mark-all", MARK_ALL_WARNING, source="compare"))
        return compare_tensors(proto)
    if isinstance(mark, str) and mark == "boundaries":
        return boundary_tensors(proto, boundaries())
    if isinstance(mark, str):
        raise WorkbenchError(f"unknown marking '{mark}'", field="--mark",
                             hint="boundaries (default), all, or tensor names")
    known = set(compare_tensors(proto))
    bad = [n for n in mark if n not in known]
    if bad:
        raise WorkbenchError(f"no float intermediate tensor named '{bad[0]}'", field="--mark",
                             hint="name node outputs of the model (workbench inspect)")
    order = compare_tensors(proto)
    return [n for n in order if n in set(mark)]


def compare_engine(model: Any, config: BuildConfig, feeds: Sequence[Feed], *,
                   engine: Optional[str] = None, mark: Union[str, Sequence[str]] = "boundaries",
                   memory_budget_mb: Optional[float] = None, stats_path: Any = None,
                   keep: Sequence[str] = (), keep_dir: Any = None,
                   atol: Optional[float] = None, rtol: Optional[float] = None,
                   client: Any = None, timeout: Optional[float] = 1800,
                   on_chunk: Optional[Callable[[int, int], None]] = None) -> EngineCompareReport:
    """Layer-wise compare of the engine for `config` (or the given `engine` file for the
    unmarked run) with onnxruntime FP32, fusion-aware by default. See the module docstring."""
    findings: List[Finding] = []
    base: Dict[str, Any] = {}
    config = with_feed_profile(model, config, feeds)

    def boundaries() -> List[str]:
        if engine:
            return layer_boundaries(engine, backend=config.backend, client=client,
                                    findings=findings, keep=base)
        res = build_engine(load_proto(model), config, client=client, timeout=timeout)
        base["result"] = res
        return layer_boundaries(res, client=client, findings=findings, keep=base)

    tensors = _marked(model, mark, boundaries, findings)
    runners: List[TensorRTRunner] = []
    cand = engine_candidate(model, config, client=client, timeout=timeout, unmarked=engine,
                            runners=runners)
    rep = engine_layerwise(model, cand, feeds, tensors=tensors,
                           marking=mark if isinstance(mark, str) else "given",
                           memory_budget_mb=memory_budget_mb, stats_path=stats_path, keep=keep,
                           keep_dir=keep_dir, atol=atol, rtol=rtol, precision=config.precision,
                           candidate_name=f"tensorrt-{config.precision}", findings=findings,
                           on_chunk=on_chunk)
    rep.layers = base.get("layers")  # the split view draws the engine from it
    probe = next((r.last.get("debug_api") for r in runners if r.last.get("debug_api")), None)
    if probe and probe.get("mark_debug"):
        rep.findings.append(Finding(
            "info", "debug-tensors", "this TensorRT has debug tensors (INetworkDefinition."
            "mark_debug" + (", mark_unfused_tensors_as_debug_tensors" if probe.get("mark_unfused")
                            else "") + "); the tensors were marked as network outputs, the "
            "route every TensorRT version has", source="compare"))
    return rep


def bisect_engine(model: Any, config: BuildConfig, feeds: Sequence[Feed], *,
                  candidates: Optional[Sequence[str]] = None, atol: Optional[float] = None,
                  rtol: Optional[float] = None, latency: bool = True, client: Any = None,
                  timeout: Optional[float] = 1800, report: Optional[EngineCompareReport] = None
                  ) -> BisectResult:
    """The ONNX nodes that must stay FP32 for the engine's outputs to meet atol/rtol, found by
    rebuilding with exclusions (see `compare.bisect`), with each exclusion's P50 latency."""
    proto = load_proto(model)
    config = with_feed_profile(proto, config, feeds)
    atol, rtol = tolerances(config.precision, atol, rtol)
    ref_out = OnnxRuntimeRunner(proto).infer_all(list(feeds))
    outs = [o.name for o in proto.graph.output]
    engines: Dict[tuple, BuildResult] = {}

    def build(excluded: Sequence[str]) -> BuildResult:
        key = tuple(sorted(excluded))
        if key not in engines:
            engines[key] = build_engine(proto, config.replace(exclude_nodes=list(key)),
                                        client=client, timeout=timeout)
        return engines[key]

    def evaluate(excluded: Sequence[str]) -> Any:
        res = build(excluded)
        got = TensorRTRunner(res.engine_path, model=proto, backend=res.backend,
                             client=client).infer_all(list(feeds))
        return compare_outputs(ref_out, got, atol, rtol, names=outs)

    def cost(excluded: Sequence[str]) -> float:
        from workbench.timing.capture import capture

        res = build(excluded)
        cap = capture(res.engine_path, backend=res.backend, client=client, iterations=50,
                      warmup=10, layer_iterations=1, timeout=timeout)
        return float(cap.latency.get("p50_ms", 0.0))

    if candidates is None:
        if report is None:  # where the fusion-aware compare puts the error
            report = compare_engine(proto, config, feeds, atol=atol, rtol=rtol, client=client,
                                    timeout=timeout)
        candidates = suspects(report, proto)
    return bisect_exclusions(list(candidates), evaluate, latency=cost if latency else None,
                             target=config.precision, route=_route_name(config))


def _route_name(config: BuildConfig) -> str:
    return config.route if config.route != "auto" else "auto (probed)"
