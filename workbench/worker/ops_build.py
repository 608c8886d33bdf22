"""Worker ops `build` and `inspect_engine`: ONNX -> serialized engine, and what is in one.

`build` is the worker's one build op (workbench build, BuildPanel, timing-capture of an ONNX):
the client (workbench.engines) decides the route, prepares the ONNX and sends a BuildRequest
(workbench.worker.build_request); this side composes the loaders: plugins, network (strongly
typed on that route), builder config from the request, build, atomic write, timing cache. Python 3.9, stdlib + tensorrt only.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker import card as C
from workbench.worker import loaders as L
from workbench.worker.build_request import BuildRequest
from workbench.worker.iolayout import apply_io_formats
from workbench.worker.protocol import BUILD, INSPECT_ENGINE
from workbench.worker.registry import Context, OpError, op


@op(BUILD)
def build(ctx: Context, **args: Any) -> Dict[str, Any]:
    """Build the request's ONNX into its engine path (the client renames it into the cache):
    `args` are a BuildRequest's fields (workbench.worker.build_request)."""
    return run_build(ctx, BuildRequest.from_args(args))


def run_build(ctx: Context, req: BuildRequest) -> Dict[str, Any]:
    """Compose the loaders for one BuildRequest: backend, logger, builder, plugins, network
    (strongly typed on that route), I/O formats, builder config, build, atomic write, timing
    cache; the result carries what the engine card and the client's findings need.

    `input_io_formats` / `output_io_formats`: see iolayout.apply_io_formats.
    `layer_precisions` (weakly typed networks only) are held to with `precision_constraints`;
    the client's precision table chooses the types."""
    t_start = time.monotonic()
    name, trt = L.load_backend(req.backend)
    if req.hardware_compatibility not in (None, "none") and name == "tensorrt-rtx":
        raise OpError("TensorRT-RTX has no hardware-compatibility level", code="bad-args",
                      details={"field": "hardware_compatibility"},
                      hint="list the GPUs it should run on with --target (e.g. sm86,sm89,sm120)")
    have_monitor = getattr(trt, "IProgressMonitor", None) is not None
    logger = L.make_logger(trt, ctx, req.keep_log, phases_from_log=not have_monitor)
    ctx.progress("parsing", 0.0, os.path.basename(req.onnx_path))
    builder = L.create_builder(trt, logger)
    L.load_plugins(trt, logger, _listed(req.plugins))
    net = L.network_from_onnx(trt, builder, logger, req.onnx_path,
                              strongly_typed=req.strongly_typed)
    ctx.check_cancel()
    if req.layer_precisions and net.strongly_typed:
        raise OpError("layer_precisions need a weakly typed network; this build is strongly "
                      "typed", code="bad-args", details={"field": "layer_precisions"},
                      hint="keep nodes in FP32 with Casts in the ONNX on strongly typed builds")
    io_notes = apply_io_formats(trt, net.network, _listed(req.input_io_formats),
                                _listed(req.output_io_formats), net.strongly_typed)
    layers = L.describe_layers(trt, net.network) if req.report_layers else []
    cfg = L.create_config(
        trt, builder, net.network, logger, ctx, workspace_bytes=req.workspace_bytes,
        optimization_level=req.optimization_level, target=req.target,
        profiles=_listed(req.profiles) or [], extra_flags=_listed(req.extra_flags),
        tactic_sources=_listed(req.tactic_sources), precision=req.precision,
        legacy_flags=req.legacy_flags, builder_flag=req.builder_flag,
        calibrate=req.calibrate, layer_precisions=req.layer_precisions,
        precision_constraints=req.precision_constraints, calib_npz=req.calib_npz,
        calib_cache=req.calib_cache, calibrate_method=req.calibrate_method,
        timing_cache=req.timing_cache, progress=True, step_delay=req.test_step_delay,
        hardware_compatibility=req.hardware_compatibility, tf32=req.tf32)
    attributes = set_config_attributes(cfg.config, dict(req.config_attributes or {}))
    ctx.check_cancel()
    ctx.progress("building", 0.0, "")
    t_build = time.monotonic()
    serialized = L.build_serialized(builder, net.network, cfg, logger, ctx)
    build_s = time.monotonic() - t_build
    ctx.progress("writing", 0.98, req.engine_path)
    L.write_atomic(req.engine_path, serialized)
    L.save_timing_cache(cfg)
    # for the engine card: the engine's I/O (the network's) and where it runs, read before
    # "done" (the last event of a build); TensorRT-RTX has no hardware-compatibility level
    # (reading it logs an error there), its targets say where it runs
    card = {"io": L.network_io(trt, net.network),
            "hardware_compatibility": None if name == "tensorrt-rtx" else
            L.hardware_compatibility(cfg.config),
            "built_on": None if cfg.targets else C.device_info()}
    ctx.progress("done", 1.0, "")
    calib_cache = req.calib_cache
    return {
        "backend": name, "backend_version": L.version_of(trt), "engine_path": req.engine_path,
        "size_bytes": os.path.getsize(req.engine_path), "build_seconds": build_s,
        "seconds": time.monotonic() - t_start, "strongly_typed": net.strongly_typed,
        "route": req.route, "targets": cfg.targets, "log": logger.messages,
        "notes": cfg.notes + io_notes,
        "layers": layers, "unmatched_layers": cfg.unmatched_layers,
        "progress_monitor": have_monitor,
        "calibration_cache": calib_cache if calib_cache and os.path.isfile(calib_cache) else None,
        "config_attributes": attributes,
        **card,
    }


def _listed(values: Optional[Tuple[Any, ...]]) -> Optional[List[Any]]:
    """A request's tuple as the list the loaders take (None stays None)."""
    return None if values is None else list(values)


def _attach_context(trt: Any, engine: Any, inspector: Any) -> Tuple[Any, str]:
    """Give the inspector an execution context with every dynamic input at profile 0's opt
    shape: without one, formats and shapes of dynamic engines read "N/A due to dynamic shapes".
    Returns a note when that was not possible (the JSON is still returned)."""
    try:
        context = engine.create_execution_context()
        inputs = [engine.get_tensor_name(i) for i in range(getattr(engine, "num_io_tensors", 0))
                  if engine.get_tensor_mode(engine.get_tensor_name(i)) == trt.TensorIOMode.INPUT]
        dynamic = [t for t in inputs if -1 in tuple(engine.get_tensor_shape(t))]
        # the first profile whose opt shapes hold no empty tensor (a prefill profile's empty
        # KV cache gave TensorRT 8.6's inspector nothing to say: an empty JSON text)
        k = next((k for k in range(int(getattr(engine, "num_optimization_profiles", 1) or 1))
                  if all(0 not in tuple(engine.get_tensor_profile_shape(t, k)[1])
                         for t in dynamic)), 0)
        if k:
            context.active_optimization_profile = k
        for tname in dynamic:
            opt = engine.get_tensor_profile_shape(tname, k)[1]
            context.set_input_shape(tname, tuple(opt))
        infer = getattr(context, "infer_shapes", None)
        if infer is not None:  # 8.6/10.x: shapes propagate only when asked (seen on the rig)
            infer()
        inspector.execution_context = context
        return context, ""
    except Exception as e:  # e.g. no device memory for a context: info without shapes
        return None, "no execution context (%s: %s): dynamic shapes and formats read N/A" % (
            type(e).__name__, e)


@op(INSPECT_ENGINE)
def inspect_engine(ctx: Context, engine_path: str, backend: str = "auto",
                   onnx_path: Optional[str] = None, strongly_typed: bool = True
                   ) -> Dict[str, Any]:
    """Engine-inspector JSON when the engine deserializes here; else the parsed network's
    per-layer dtypes (e.g. a TensorRT-RTX engine built ahead of time on a CPU machine)."""
    name, trt = L.load_backend(L.backend_for(engine_path, backend))
    logger = L.make_logger(trt, ctx, "warning")
    try:
        engine, reason = L.deserialize(trt, logger, L.read_checked_engine(name, trt, engine_path))
    except OpError as e:  # the card refuses it: the network's dtypes still say what it holds
        if e.code != C.INCOMPATIBLE:
            raise
        if not onnx_path:
            raise
        engine, reason = None, e.message
    out: Dict[str, Any] = {"backend": name, "backend_version": L.version_of(trt)}
    if engine is not None and hasattr(engine, "create_engine_inspector"):
        inspector = engine.create_engine_inspector()
        context, context_note = _attach_context(trt, engine, inspector)
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        if not (text or "").strip() and context is not None:  # no words with that context:
            inspector = engine.create_engine_inspector()  # the engine's own, shapes N/A
            text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
            context_note = "the inspector said nothing with an execution context: " \
                "dynamic shapes and formats read N/A"
        del context  # kept alive until the inspector has read it
        try:
            info = json.loads(text, strict=False)
        except ValueError as e:
            raise OpError("the engine inspector gave no layer information (%s)" % e,
                          code="op-error", hint="build the engine with profiling verbosity "
                          "detailed (workbench build does) to read its layers") from None
        out.update(source="engine-inspector", info=info)
        if context_note:
            out["note"] = context_note
        return out
    reason = reason or "this TensorRT has no engine inspector"
    if not onnx_path:
        raise OpError("the engine cannot be deserialized here (%s) and no ONNX was given to "
                      "fall back to" % reason, code="cannot-deserialize")
    net = L.network_from_onnx(trt, L.create_builder(trt, logger), logger, onnx_path,
                              strongly_typed=strongly_typed)
    out.update(source="network", reason=reason, layers=L.describe_layers(trt, net.network))
    return out


def set_config_attributes(config: Any, values: Dict[str, Any]) -> Dict[str, Any]:
    """Set IBuilderConfig attributes by name (the client's build options name them: the
    worker knows none); probed, so a TensorRT without one refuses the build naming the
    field. Returns each as read back from the config (what TensorRT holds)."""
    out: Dict[str, Any] = {}
    for name, value in values.items():
        if not hasattr(config, name):
            raise OpError("this TensorRT's builder config has no '%s'" % name, code="bad-args",
                          details={"field": name},
                          hint="leave the option out, or build with a TensorRT that has it")
        try:
            setattr(config, name, value)
        except (TypeError, ValueError) as e:
            raise OpError("TensorRT refused %s = %r: %s" % (name, value, e), code="bad-args",
                          details={"field": name}) from None
        got = getattr(config, name)
        out[name] = got if isinstance(got, (int, float, bool, str)) else str(got)
    return out
