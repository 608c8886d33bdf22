"""Worker op `network_dtypes`: what precision TensorRT will really use for an ONNX model.

Parses the ONNX file (strongly typed where the backend has the flag: TensorRT >= 9 and
TensorRT-RTX; then types come from the ONNX Casts and Q/DQ, exactly as a build will see them)
and returns every layer's type and input/output dtypes, plus the network I/O. Python 3.9,
stdlib + tensorrt only.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from workbench.worker.registry import Context, OpError, op
from workbench.worker.trt import import_backend, make_logger, network_flags, version_of


def _name(x: Any) -> str:
    return getattr(x, "name", None) or str(x).split(".")[-1]


def _tensor(t: Any) -> Dict[str, Any]:
    if t is None:
        return {"name": None, "dtype": None, "shape": None}
    try:
        shape = [int(d) for d in t.shape]
    except Exception:
        shape = None
    return {"name": t.name, "dtype": _name(t.dtype), "shape": shape}


@op("network_dtypes")
def network_dtypes(ctx: Context, path: str, backend: str = "auto", strongly_typed: bool = True,
                   plugins: Optional[List[str]] = None) -> Dict[str, Any]:
    """Per-layer {name, type, inputs, outputs (name, dtype, shape)} of the parsed network."""
    from workbench.worker.ops_parse import load_plugins

    name, trt = import_backend(backend)
    load_plugins(trt, plugins)
    logger = make_logger(trt, ctx)
    builder = trt.Builder(logger)
    flags = network_flags(trt)
    st = getattr(getattr(trt, "NetworkDefinitionCreationFlag", None), "STRONGLY_TYPED", None)
    used_st = bool(strongly_typed and st is not None)
    if used_st:
        flags |= 1 << int(st)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    ctx.progress("parse", 0.0, path)
    ok = bool(parser.parse_from_file(path))
    if not ok:
        errs = []
        for i in range(parser.num_errors):
            e = parser.get_error(i)
            node = getattr(e, "node_name", None)
            errs.append({"node": node() if callable(node) else "",
                         "message": str(e.desc() if hasattr(e, "desc") else e)})
        first = errs[0] if errs else {"node": "", "message": "unknown parser error"}
        raise OpError("TensorRT could not parse %s: %s" % (path, first["message"]),
                      node=first["node"] or None, code="parse-failed",
                      hint="run `workbench check MODEL` for every parser error",
                      details={"errors": errs})
    layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        rec = {"index": i, "name": layer.name, "type": _name(layer.type),
               "inputs": [_tensor(layer.get_input(j)) for j in range(layer.num_inputs)],
               "outputs": [_tensor(layer.get_output(j)) for j in range(layer.num_outputs)]}
        prec = getattr(layer, "precision", None)
        if prec is not None and not used_st:
            rec["precision"] = _name(prec)
        layers.append(rec)
    ctx.progress("parse", 1.0, "%d layers" % len(layers))
    return {
        "backend": name, "version": version_of(trt), "strongly_typed": used_st,
        "inputs": [_tensor(network.get_input(i)) for i in range(network.num_inputs)],
        "outputs": [_tensor(network.get_output(i)) for i in range(network.num_outputs)],
        "layers": layers,
    }
