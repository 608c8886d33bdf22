"""Debug precision in the engine itself: build, mark, run and compare with real TensorRT.

Wires the runner-agnostic pieces (`workbench.compare.engine_compare`, `compare.bisect`) to the
build (`workbench.engines.build_engine`, engine cache) and the timing layer (layer information,
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
  `bisect_config(config).replace(exclude_nodes=...)` and the profile op's P50 latency as the
  cost. The route is probed (NetworkDefinitionCreationFlag.STRONGLY_TYPED): strongly typed
  TensorRT gets Casts inserted around the excluded nodes by the precision transform; a
  TensorRT without strongly typed networks (8.x-10.x) gets the builder-flag route with layer
  precision: every float layer held to the target precision, the excluded nodes' layers to
  FP32, OBEY_PRECISION_CONSTRAINTS (with the flag alone the builder keeps layers in FP32 as it
  likes, so an exclusion list means nothing there).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from workbench.engines.engine import (BuildCancelled, BuildConfig, BuildFailed, backend_info,
                                   build_engine, inspect_engine)
from workbench.engines.result import BuildResult
from workbench.compare.bisect import BisectResult, bisect_exclusions, suspects
from workbench.compare.engine_compare import (EngineCompareReport, boundary_tensors,
                                              compare_tensors, engine_layerwise, mark_outputs,
                                              weightless)
from workbench.runtime.comparison import Comparison
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.precision.table import is_base, is_quantized, tolerances
from workbench.runtime.runners import Feed, OnnxRuntimeRunner, Runner
from workbench.runtime.trtrunner import TensorRTRunner

__all__ = ["engine_candidate", "layer_boundaries", "compare_engine", "bisect_engine",
           "bisect_config", "fused_units", "with_feed_profile", "MARK_ALL_WARNING"]

MARK_ALL_WARNING = ("--mark all marks every tensor: TensorRT cannot fuse across marked tensors, "
                    "so the engine compared is not the engine you ship; the observer check says "
                    "whether that changed the answer")


def with_feed_profile(model: ModelLike, config: BuildConfig, feeds: Sequence[Feed]) -> BuildConfig:
    """`config`, with one optimization profile spanning the feeds' shapes when it has none and
    the model has dynamic inputs (min/max over the feeds, opt = the first feed)."""
    from workbench.runtime.runners import input_metadata_of

    if config.profiles or not feeds:
        return config
    meta = input_metadata_of(as_model(model).proto)
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


def engine_candidate(model: ModelLike, config: BuildConfig, *, client: Any = None,
                     timeout: Optional[float] = 1800, on_build: Optional[Callable[
                         [List[str], BuildResult], None]] = None,
                     unmarked: Optional[str] = None,
                     runners: Optional[List[TensorRTRunner]] = None, profile_index: int = -1
                     ) -> Callable[[List[str]], Runner]:
    """A candidate factory: names -> TensorRTRunner on a build of `model` marking them.
    `unmarked`: an engine file to use for no names (else the unmarked build); `runners`
    collects the runners made (their `last` answer has the worker's debug-tensor probe)."""
    structure = as_model(model).proto  # (types and inputs: no weights)
    types = _typed(structure)
    made = runners if runners is not None else []
    loaded: List[Any] = []  # the model with its weights, loaded once, for the marked builds

    def make(names: List[str]) -> Runner:
        if not names and unmarked:
            made.append(TensorRTRunner(unmarked, model=structure, backend=config.backend,
                                       client=client, profile_index=profile_index))
            return made[-1]
        # ONNX parsers need each output's type: a tensor shape inference cannot type is left
        # unmarked (the comparison counts it as not in the engine)
        names = [n for n in names if n in types]
        if names:
            if not loaded:
                loaded.append(as_model(model).with_weights())
            src = _mark_typed(loaded[0], names, types)
        else:  # the unmarked build: from the file as it is, when it is one
            src = model
        res = build_engine(src, config, client=client, timeout=timeout)
        if on_build is not None:
            on_build(list(names), res)
        made.append(TensorRTRunner(res.engine_path, model=structure, backend=res.backend,
                                   client=client, profile_index=profile_index))
        return made[-1]

    return make


def layer_boundaries(result: Union[BuildResult, str], *, backend: str = "auto",
                     client: Any = None, findings: Optional[List[Finding]] = None,
                     keep: Optional[Dict[str, Any]] = None) -> List[str]:
    """Output tensor names of the engine's layers (see the module docstring); `keep["layers"]`
    receives the parsed layer information (`EngineLayers`) where the inspector gave it."""
    from workbench.formats.layerinfo import parse_layers

    if isinstance(result, str):
        from workbench.worker.client import default_client

        from workbench.worker.client import WorkerError

        try:
            info = (client or default_client()).call("inspect_engine", {
                "engine_path": result, "backend": backend}, timeout=300)
        except WorkerError as e:
            if e.code != "cannot-deserialize":
                raise
            import re

            why = re.sub(r"^the engine cannot be deserialized here \((.*)\) and no ONNX was "
                         r"given to fall back to$", r"\1", e.message)
            raise WorkbenchError(
                f"the engine cannot be loaded on this machine ({why})",
                file=result, hint="comparing an engine runs it, on the GPU it was built for: run "
                "this there, or compare the ONNX on a CPU (`workbench compare MODEL --to fp16 "
                "--inputs DATA` emulates FP16 storage)") from None
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


FEW_BOUNDARIES = 0.1  # below this share of the model's tensors at layer boundaries: said


def few_boundaries_finding(model: ModelLike, tensors: Sequence[str], precision: str
                           ) -> Optional[Finding]:
    """Information when the engine's layer boundaries expose almost none of the model's
    intermediate tensors (TensorRT fused the graph into few layers, a Myelin ForeignNode
    region for transformers and recurrent nets): a fusion-aware compare has little to show,
    and the user needs the ways to see inside."""
    total = len(compare_tensors(as_model(model).proto))
    if not total or len(tensors) >= max(1, FEW_BOUNDARIES * total):
        return None
    name = getattr(model, "path", None) or (model if isinstance(model, (str, Path)) else None)
    m = shlex.quote(str(name)) if name else "MODEL"
    return Finding(
        "info", "few-boundaries",
        f"the engine's layers end at {len(tensors)} of the model's {total} intermediate "
        "tensors: TensorRT fused nearly all of the graph (a Myelin/ForeignNode region, as for "
        "transformers and recurrent nets), so the engine has nothing to compare inside it; "
        "its outputs are still compared",
        source="compare",
        hint=(f"to see where {precision.upper()} loses precision inside: `workbench compare "
              f"{m} --to {precision} --inputs DATA` (every tensor, {precision.upper()} "
              "emulated on onnxruntime), or " if not is_base(precision) else "") +
             "mark a few tensors (--mark T1,T2: each breaks the fusion there, so the engine "
             "differs from the one you ship)")


def _marked(model: Any, mark: Union[str, Sequence[str]], boundaries: Callable[[], List[str]],
            findings: List[Finding]) -> List[str]:
    proto = as_model(model).proto
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


def built_from(model: ModelLike, engine: Optional[str], config: BuildConfig,
               findings: List[Finding]) -> Tuple[Any, str]:
    """The ONNX the marked builds are built from (with `config` as it is), and the precision
    the comparison is judged in: the reference and the config's, unless the engine file's
    card says it was built from another ONNX that is still there (an INT8 engine built from
    its Q/DQ model: rebuilding the FP32 reference made another engine, and the observer
    check said so); a Q/DQ source is judged as INT8/FP8."""
    if not engine:
        return model, config.precision
    from workbench.engines.card import read_card
    from workbench.runtime.comparison import infer_precision

    card = read_card(engine) or {}
    src = card.get("model_path") or card.get("onnx_path")
    ref = getattr(model, "path", None) or (model if isinstance(model, (str, Path)) else None)
    if not src or not Path(src).is_file() or (
            ref is not None and Path(src).resolve() == Path(str(ref)).resolve()):
        return model, config.precision
    findings.append(Finding(
        "info", "engine-source",
        f"{Path(engine).name} was built from {src} (its card), not from the reference: the "
        "marked builds are built from that ONNX, the reference run stays the FP32 model",
        source="compare"))
    low = infer_precision(as_model(src).proto)
    return src, (low if is_base(config.precision) and is_quantized(low)
                 else config.precision)


def _quantized(source: Any, judged: str) -> Optional[Set[str]]:
    """The nodes an engine built from a Q/DQ model quantizes (None: not judged as INT8/FP8,
    or its source holds no Q/DQ: every node may add error)."""
    if not is_quantized(judged):
        return None
    from workbench.core.qdq import quantized_nodes

    return quantized_nodes(as_model(source).proto) or None


def compare_engine(model: ModelLike, config: BuildConfig, feeds: Sequence[Feed], *,
                   engine: Optional[str] = None, mark: Union[str, Sequence[str]] = "boundaries",
                   memory_budget_mb: Optional[float] = None, stats_path: Any = None,
                   keep: Sequence[str] = (), keep_dir: Any = None,
                   atol: Optional[float] = None, rtol: Optional[float] = None,
                   client: Any = None, timeout: Optional[float] = 1800,
                   on_chunk: Optional[Callable[[int, int], None]] = None,
                   profile_index: int = -1, metric: Any = None,
                   budget: Any = None) -> EngineCompareReport:
    """Layer-wise compare of the engine for `config` (or the given `engine` file for the
    unmarked run) with onnxruntime FP32, fusion-aware by default. See the module docstring.
    `profile_index`: the optimization profile the engine runs on (-1: the first that holds
    the feeds' shapes)."""
    findings: List[Finding] = []
    base: Dict[str, Any] = {}
    config = with_feed_profile(model, config, feeds)
    source, judged = built_from(model, engine, config, findings)

    def boundaries() -> List[str]:
        if engine:
            return layer_boundaries(engine, backend=config.backend, client=client,
                                    findings=findings, keep=base)
        res = build_engine(model, config, client=client, timeout=timeout)  # (a path as it is)
        base["result"] = res
        return layer_boundaries(res, client=client, findings=findings, keep=base)

    tensors = _marked(model, mark, boundaries, findings)
    if isinstance(mark, str) and mark == "boundaries":
        few = few_boundaries_finding(model, tensors, config.precision)
        if few is not None:
            findings.append(few)
    runners: List[TensorRTRunner] = []
    cand = engine_candidate(source, config, client=client, timeout=timeout, unmarked=engine,
                            runners=runners, profile_index=profile_index)
    rep = engine_layerwise(model, cand, feeds, tensors=tensors,
                           marking=mark if isinstance(mark, str) else "given",
                           memory_budget_mb=memory_budget_mb, stats_path=stats_path, keep=keep,
                           keep_dir=keep_dir, atol=atol, rtol=rtol, precision=judged,
                           metric=metric, budget=budget,
                           candidate_name=f"tensorrt-{judged}", findings=findings,
                           on_chunk=on_chunk, quantized_nodes=_quantized(source, judged))
    rep.layers = base.get("layers")  # the split view draws the engine from it
    probe = next((r.last.get("debug_api") for r in runners if r.last.get("debug_api")), None)
    if probe and probe.get("mark_debug"):
        rep.findings.append(Finding(
            "info", "debug-tensors", "this TensorRT has debug tensors (INetworkDefinition."
            "mark_debug" + (", mark_unfused_tensors_as_debug_tensors" if probe.get("mark_unfused")
                            else "") + "); the tensors were marked as network outputs, the "
            "route every TensorRT version has", source="compare"))
    return rep


def bisect_engine(model: ModelLike, config: BuildConfig, feeds: Sequence[Feed], *,
                  candidates: Optional[Sequence[str]] = None, atol: Optional[float] = None,
                  rtol: Optional[float] = None, latency: bool = True, client: Any = None,
                  timeout: Optional[float] = 1800, report: Optional[EngineCompareReport] = None,
                  metric: Any = None, budget: Any = None) -> BisectResult:
    """The ONNX nodes that must stay FP32 for the engine's outputs to be within budget, found
    by rebuilding with exclusions (see `compare.bisect`), with each exclusion's P50 latency.
    Within budget is the verdict `compare` gives (`workbench.runtime.verdict.judge_runs`):
    `metric` within `budget`; atol/rtol alone, the elementwise rule; else the default per
    output kind at the engine's precision."""
    from workbench.runtime.verdict import judge_runs, parse_budget, resolve_metric, \
        verdict_metric

    metric = resolve_metric(verdict_metric(metric, atol, rtol))
    parse_budget(budget)
    proto = as_model(model).with_weights()
    config = bisect_config(with_feed_profile(proto, config, feeds), client=client)
    atol, rtol = tolerances(config.precision, atol, rtol)
    ref_out = OnnxRuntimeRunner(proto).infer_all(list(feeds))
    outs = [o.name for o in proto.graph.output]
    engines: Dict[tuple, BuildResult] = {}

    unbuildable: List[List[str]] = []  # exclusion sets TensorRT could not build obeying

    def build(excluded: Sequence[str]) -> BuildResult:
        key = tuple(sorted(excluded))
        if key not in engines:
            engines[key] = build_engine(proto, config.replace(exclude_nodes=list(key)),
                                        client=client, timeout=timeout)
        return engines[key]

    def evaluate(excluded: Sequence[str]) -> Any:
        try:
            res = build(excluded)
        except BuildFailed as e:
            # an exclusion set that splits a layer TensorRT fuses (MatMul FP32 + Relu FP16)
            # can leave that layer no format obeying both: not an answer, so it fails
            if config.layer_precision != "obey" or not _not_buildable(e):
                raise
            unbuildable.append(list(excluded))
            return Comparison(atol, rtol, reason="TensorRT cannot build it obeying the layer "
                              f"precisions: {e.message[:300]}")
        got = TensorRTRunner(res.engine_path, model=proto, backend=res.backend,
                             client=client).infer_all(list(feeds))
        return judge_runs(ref_out, got, config.precision, atol=atol, rtol=rtol, names=outs,
                          metric=metric, budget=budget)

    def cost(excluded: Sequence[str]) -> Dict[str, Any]:
        from workbench.measure.capture import capture

        key = tuple(sorted(excluded))
        if key not in engines:  # (a prefix TensorRT could not build: no latency)
            return {"p50_ms": None}
        res = engines[key]
        cap = capture(res.engine_path, backend=res.backend, client=client, iterations=50,
                      warmup=10, layer_iterations=5, timeout=timeout)
        out: Dict[str, Any] = {"p50_ms": float(cap.latency.get("p50_ms", 0.0))}
        prof = cap.profile
        if prof is not None and prof.has_median:  # IProfiler: the sum of per-layer medians
            out["layers_ms"] = float(prof.layers["median_ms"].sum())
        return out

    note = ""
    if config.layer_precision == "obey":  # a layer TensorRT cannot run in the target type
        try:                              # fails the obeying build: prefer the constraints
            engines[()] = build_engine(proto, config, client=client, timeout=timeout)
        except BuildFailed as e:
            if not _not_buildable(e):
                raise
            note = (f"; TensorRT could not obey every layer in {config.entry.layer_dtype} "
                    f"({e.message[:200]}): the constraints were preferred instead")
            config = config.replace(layer_precision="prefer")
    units: List[List[str]] = []
    if config.layer_precision:  # whole fused layers go into FP32 together
        nodes = {n.name for n in proto.graph.node if n.op_type != "Constant" and n.name}
        fused = fused_units(build(()), client=client)
        units = [[n for n in u if n in nodes] for u in fused or []]
        if fused is None:  # no layer information here: exclusions may split fused layers
            note += ("; the engine's layer information was not readable here, so exclusions "
                     "are single nodes and may split layers TensorRT fuses")
    if candidates is None:
        if report is None:  # where the fusion-aware compare puts the error
            report = compare_engine(proto, config, feeds, atol=atol, rtol=rtol, client=client,
                                    timeout=timeout)
        candidates = suspects(report, proto)
    res = bisect_exclusions(list(candidates), evaluate, latency=cost if latency else None,
                            target=config.precision, route=_route_name(config), units=units)
    res.build_config = config.to_dict()
    res.message += note
    if unbuildable:
        res.message += (f"; {len(unbuildable)} exclusion set(s) split a layer TensorRT fuses "
                        "and could not be built obeying the precisions (counted as failing)")
        res.unbuildable = unbuildable
    return res


def fused_units(result: BuildResult, *, client: Any = None) -> Optional[List[List[str]]]:
    """The ONNX nodes of each engine layer that holds more than one (its layer information's
    metadata); None where the engine does not deserialize here."""
    from workbench.formats.layerinfo import parse_layers

    info = inspect_engine(result, client=client)
    if info.get("source") != "engine-inspector":
        return None
    layers = parse_layers(info["info"], source="engine inspector")
    return [list(dict.fromkeys(ly.onnx_from_metadata)) for ly in layers.layers
            if len(set(ly.onnx_from_metadata)) > 1]


def bisect_config(config: BuildConfig, *, client: Any = None) -> BuildConfig:
    """The config bisection builds with (see the module docstring): `config` where the
    worker's TensorRT has strongly typed networks or the target is not a float one; else the
    builder-flag route with `layer_precision` ("obey" unless the config says "prefer")."""
    entry = config.entry
    if entry.kind != "float" or not entry.layer_dtype or config.route == "strongly-typed":
        return config
    caps = backend_info(config.backend, client).get("capabilities", {})
    if caps.get("strongly_typed_flag") or not caps.get(entry.capability or ""):
        return config
    return config.replace(route="legacy-flags", layer_precision=config.layer_precision or "obey")


def _not_buildable(e: BuildFailed) -> bool:
    """Did TensorRT's builder find no engine (code "build-failed")? A cancel, a timeout, a
    crashed worker or bad arguments are not answers about the exclusion set: they propagate."""
    return e.code == "build-failed" and not isinstance(e, BuildCancelled)


def _route_name(config: BuildConfig) -> str:
    if config.layer_precision:
        return (f"legacy-flags, layer precision: every float layer {config.entry.layer_dtype}, "
                f"excluded nodes float32 ({config.layer_precision} precision constraints)")
    if config.route == "legacy-flags":
        return "legacy-flags (excluded nodes' layers in float32)"
    return (config.route if config.route != "auto" else "auto (probed)") + \
        " (Casts around the excluded nodes)"
