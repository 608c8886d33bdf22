"""What a parsed network holds, as JSON: its layers (name, type, output dtypes, ONNX
metadata) and its I/O tensors (name, dtype, shape, allowed formats). Read-only."""
from __future__ import annotations

from typing import Any, Dict, List


def _enum_namer(enum: Any) -> Any:
    """value -> member name for a pybind11 enum (str() of a member costs ~10 us; this ~0.3)."""
    try:
        table = {int(v): k for k, v in enum.__members__.items()}
    except Exception:  # no __members__: the slow, general way
        return lambda v: getattr(v, "name", None) or str(v).split(".")[-1]
    return lambda v: table.get(int(v)) or str(v).split(".")[-1]


def describe_layers(trt: Any, network: Any, detail: bool = False) -> List[Dict[str, Any]]:
    """Each layer: name, type, outputs (name, dtype) and ONNX metadata; with `detail` also
    index, inputs, shapes and (weakly typed networks) the layer precision."""
    type_name = _enum_namer(trt.LayerType)
    dtype_name = _enum_namer(trt.DataType)

    def tensor(t: Any) -> Dict[str, Any]:
        if t is None:
            return {"name": None, "dtype": None, "shape": None}
        rec = {"name": t.name, "dtype": dtype_name(t.dtype)}
        if detail:
            try:
                rec["shape"] = [int(d) for d in t.shape]
            except Exception:
                rec["shape"] = None
        return rec

    layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        rec: Dict[str, Any] = {"name": layer.name, "type": type_name(layer.type),
                               "outputs": [tensor(layer.get_output(j))
                                           for j in range(layer.num_outputs)]}
        if detail:
            rec["index"] = i
            rec["inputs"] = [tensor(layer.get_input(j)) for j in range(layer.num_inputs)]
        meta = getattr(layer, "metadata", None)
        if meta:
            rec["metadata"] = str(meta)
        layers.append(rec)
    return layers


def _format_names(trt: Any) -> List[str]:
    return [n for n in dir(getattr(trt, "TensorFormat", None)) if n.isupper()]


def allowed_formats(trt: Any, t: Any) -> List[str]:
    """The TensorFormat names an I/O tensor may take (its allowed_formats bit mask)."""
    tf, mask = getattr(trt, "TensorFormat", None), getattr(t, "allowed_formats", None)
    if tf is None or mask is None:
        return []
    return sorted(n for n in dir(tf) if n.isupper() and int(mask) >> int(getattr(tf, n)) & 1)


def network_io(trt: Any, network: Any) -> Dict[str, List[Dict[str, Any]]]:
    """The network's inputs and outputs: name, dtype, shape."""
    dtype_name = _enum_namer(trt.DataType)

    def tensor(t: Any) -> Dict[str, Any]:
        out = {"name": t.name, "dtype": dtype_name(t.dtype), "shape": [int(d) for d in t.shape]}
        fmts = allowed_formats(trt, t)
        if fmts and len(fmts) < len(_format_names(trt)):  # narrowed (I/O formats); by
            # default every format is allowed and TensorRT puts I/O in LINEAR
            out["formats"] = fmts
        return out

    return {"inputs": [tensor(network.get_input(i)) for i in range(network.num_inputs)],
            "outputs": [tensor(network.get_output(i)) for i in range(network.num_outputs)]}
