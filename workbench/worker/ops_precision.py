"""Worker op `network_dtypes`: what precision TensorRT will really use for an ONNX model.

Parses the ONNX file (strongly typed where the backend has the flag: TensorRT >= 9 and
TensorRT-RTX; then types come from the ONNX Casts and Q/DQ, exactly as a build will see them)
and returns every layer's type and input/output dtypes, plus the network I/O. Python 3.9,
stdlib + tensorrt only.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from workbench.worker import loaders as L
from workbench.worker.protocol import NETWORK_DTYPES
from workbench.worker.registry import Context, op


@op(NETWORK_DTYPES)
def network_dtypes(ctx: Context, path: str, backend: str = "auto", strongly_typed: bool = True,
                   plugins: Optional[List[str]] = None) -> Dict[str, Any]:
    """Per-layer {index, name, type, inputs, outputs (name, dtype, shape)} of the parsed
    network; `precision` per layer where the network is not strongly typed."""
    name, trt = L.load_backend(backend)
    logger = L.make_logger(trt, ctx)
    L.load_plugins(trt, logger, plugins)
    ctx.progress("parse", 0.0, path)
    net = L.network_from_onnx(trt, L.create_builder(trt, logger), logger, path,
                              strongly_typed=strongly_typed)
    layers = L.describe_layers(trt, net.network, detail=True)
    if not net.strongly_typed:
        for rec in layers:
            prec = getattr(net.network.get_layer(rec["index"]), "precision", None)
            if prec is not None:
                rec["precision"] = getattr(prec, "name", None) or str(prec).split(".")[-1]
    ctx.progress("parse", 1.0, "%d layers" % len(layers))
    return dict(L.network_io(trt, net.network), backend=name, version=L.version_of(trt),
                strongly_typed=net.strongly_typed, layers=layers)
