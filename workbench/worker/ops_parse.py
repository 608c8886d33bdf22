"""Worker ops that ask TensorRT's own ONNX parser (and builder) whether it takes a model.

`parse`: parse one or many ONNX files (by path, so external data next to them is found) and
return every parser error (the loaders' one record shape) plus the supported-subgraph
partition where the parser has one. `check_build`: parse then attempt an engine build (ahead
of time on TensorRT-RTX: the target compute capability is set where the backend has one) and
name the layer/node it failed on. Plugin libraries load only when the caller names them.
Python 3.9, stdlib + tensorrt only.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

from workbench.worker import loaders as L
from workbench.worker.protocol import CHECK_BUILD, PARSE
from workbench.worker.registry import Context, OpError, op


@op(PARSE)
def parse(ctx: Context, paths: Any = None, path: Optional[str] = None, backend: str = "auto",
          plugins: Optional[List[str]] = None, partition: bool = True) -> Dict[str, Any]:
    """Parse each ONNX file with the real parser; errors and partition per file."""
    name, trt = L.load_backend(backend)
    files = list(paths or []) + ([path] if path else [])
    if not files:
        raise OpError("no model path given", code="bad-args")
    logger = L.make_logger(trt, None, "error", nodes=ctx)
    loaded = L.load_plugins(trt, logger, plugins)
    builder = L.create_builder(trt, logger)
    results = []
    for i, p in enumerate(files):
        ctx.check_cancel()
        ctx.progress("parse", i / max(1, len(files)), os.path.basename(p))
        t0 = time.monotonic()
        logger.messages.clear()
        net = L.network_from_onnx(trt, builder, logger, p, partition=partition, check=False)
        rec: Dict[str, Any] = {"path": p, "parsed": net.ok, "errors": net.errors,
                               "num_layers": int(net.network.num_layers),
                               "partition": net.partition}
        if net.partition_error:
            rec["partition_error"] = net.partition_error
        rec["log"] = logger.errors()[-20:]
        rec["seconds"] = round(time.monotonic() - t0, 4)
        results.append(rec)
    ctx.progress("parse", 1.0, "done")
    return {"backend": name, "module": trt.__name__, "version": L.version_of(trt),
            "plugins": loaded, "results": results}


@op(CHECK_BUILD)
def check_build(ctx: Context, path: str, backend: str = "auto",
                plugins: Optional[List[str]] = None, target: Optional[str] = "sm89",
                profiles: Optional[Dict[str, Any]] = None,
                memory_limit_mb: int = 1024) -> Dict[str, Any]:
    """Parse, then try to build an engine; report the layer (and ONNX node) a failure names.
    Dynamic inputs without a profile are built at 1 (noted); `target` is ignored where the
    backend cannot build ahead of time."""
    name, trt = L.load_backend(backend)
    logger = L.make_logger(trt, ctx, "warning")
    loaded = L.load_plugins(trt, logger, plugins)
    builder = L.create_builder(trt, logger)
    ctx.progress("parse", 0.0, os.path.basename(path))
    net = L.network_from_onnx(trt, builder, logger, path, check=False)
    base = {"backend": name, "module": trt.__name__, "version": L.version_of(trt),
            "plugins": loaded, "parsed": net.ok, "errors": net.errors}
    if not net.ok:
        base.update(built=False, build_errors=[], notes=[], log=[])
        return base
    cfg = L.create_config(trt, builder, net.network, logger, ctx,
                          workspace_bytes=int(memory_limit_mb) << 20, detailed_profiling=False,
                          target=target, target_required=False,
                          profiles=[profiles] if profiles else [], fill_dynamic=True)
    layer_nodes = L.layer_nodes(net.network)
    logger.messages.clear()
    ctx.progress("build", 0.1, "building")
    t0 = time.monotonic()
    blob, exc = L.serialize_network(builder, net.network, cfg.config)
    seconds = round(time.monotonic() - t0, 3)
    built = blob is not None
    msgs = logger.errors() + ([exc] if exc else [])
    build_errors = []
    for msg in msgs:
        layer, nodes = L.blame(msg, layer_nodes)
        build_errors.append({"layer": layer, "nodes": nodes, "message": msg})
    base.update(built=built, build_errors=build_errors if not built else [], notes=cfg.notes,
                target=cfg.targets[0] if cfg.targets else None, seconds=seconds,
                engine_bytes=int(blob.nbytes) if built and hasattr(blob, "nbytes") else None,
                layers=sorted(layer_nodes),
                log=[m["message"] for m in logger.messages][-30:])
    ctx.progress("build", 1.0, "built" if built else "failed")
    return base
