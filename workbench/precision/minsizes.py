"""The smallest size a dynamic input axis can take for the model to run, read from the graph.

A default profile's min of 1 is wrong for a model that takes the top 16 points of a cloud
(TopK K=16 along num_points) or slides a 7-wide kernel without padding along a dynamic image
axis: onnxruntime refuses to run it there, and TensorRT builds an engine whose min shapes
cannot run ("Profile kMIN values are not self-consistent"). `static_minimums` reads what is
cheap and honest to read: ONNX shape inference carries the inputs' dim names to each node,
and these consumers with constant sizes bound the axis they read along from below:

- TopK with a constant K along the axis: size >= K;
- Conv / MaxPool / AveragePool / LpPool along a spatial axis: size >= the dilated kernel
  less the explicit padding (auto_pad SAME keeps any size valid: no bound);
- Gather with constant indices along the axis: size >= the largest index + 1 (or -index for a
  negative one, counted from the end).

Slice clamps its bounds (any size runs); a Split or Reshape to constant sizes fixes the axis to
one size, which a minimum cannot express (`workbench profiles` runs the model on onnxruntime at
the profile's shapes and names such nodes). Subgraphs (If/Loop bodies) are not read.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from workbench.core.model import ModelLike, as_model

_SMALL_INIT = 64  # initializers up to this many elements stay in the copy shape inference reads
_POOLS = ("MaxPool", "AveragePool", "LpPool")
_PREFIX = "__wb_dim_"


def _ints(gi: Any, tensor: str) -> Optional[List[int]]:
    """The values of a constant integer tensor (an initializer or a Constant's value)."""
    from onnx import numpy_helper

    t = gi.initializers.get(tensor)
    if t is None:
        p = gi.producer_of(tensor)
        if p is None or gi.op(p) != "Constant":
            return None
        a = gi.attribute(p, "value")
        t = a.t if a is not None and a.HasField("t") else None
        if t is None:
            return None
    if t.data_type not in (6, 7):  # INT32, INT64
        return None
    try:
        return [int(v) for v in numpy_helper.to_array(t).reshape(-1)]
    except Exception:  # external data not loaded
        return None


def _attr(gi: Any, k: int, name: str, default: Any) -> Any:
    a = gi.attribute(k, name)
    if a is None:
        return default
    from onnx import helper

    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


def _inferred_dims(proto: Any, keys: Dict[str, Any]) -> Dict[str, List[Any]]:
    """tensor -> dims (int, or a dim name) after ONNX shape inference on a light copy of the
    graph (large initializers become inputs of the same shape); unnamed dynamic input dims get
    names of their own (`keys` maps them back to (input, axis))."""
    import onnx
    from onnx import helper

    g = proto.graph
    inits = [t for t in g.initializer if _numel(t.dims) <= _SMALL_INIT and
             t.data_location != onnx.TensorProto.EXTERNAL]
    kept = {t.name for t in inits}
    inputs = []
    for vi in g.input:
        if vi.name in kept:
            continue
        c = onnx.ValueInfoProto()
        c.CopyFrom(vi)
        if c.type.HasField("tensor_type") and c.type.tensor_type.HasField("shape"):
            for axis, d in enumerate(c.type.tensor_type.shape.dim):
                if not d.HasField("dim_value") and not d.dim_param:
                    d.dim_param = f"{_PREFIX}{len(keys)}"
                    keys[d.dim_param] = (vi.name, axis)
        inputs.append(c)
    have = {vi.name for vi in g.input}
    inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
               for t in g.initializer if t.name not in kept and t.name not in have]
    light = helper.make_model(helper.make_graph(list(g.node), "minsizes", inputs,
                                                list(g.output), inits),
                              opset_imports=list(proto.opset_import))
    light.ir_version = proto.ir_version
    light.functions.extend(proto.functions)
    typed = None
    for data_prop in (True, False):
        try:
            typed = onnx.shape_inference.infer_shapes(light, data_prop=data_prop)
            break
        except Exception:
            continue
    out: Dict[str, List[Any]] = {}
    for vi in list((typed or light).graph.input) + list((typed or light).graph.value_info) + \
            list((typed or light).graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            out[vi.name] = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                            for d in tt.shape.dim]
    return out


def _numel(dims: Any) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def static_minimums(model: ModelLike) -> Dict[Any, Tuple[int, str]]:
    """Per dynamic input dim (a dim name, or (input, axis) for an unnamed one: the keys of
    `workbench.precision.profiles.dim_key`): (the smallest size the graph's constant-size
    consumers allow, why: "/TopK takes the top 16 along it"). Dims without such a bound are
    absent. Never raises: a graph shape inference cannot read gives {}."""
    from workbench.core.graphindex import GraphIndex
    from workbench.core.inputs import model_inputs

    try:
        proto = as_model(model).proto
        gi = GraphIndex.of(proto)
        keys: Dict[str, Any] = {}
        for s in model_inputs(proto):
            for axis in s.dynamic_axes:
                d = s.dims[axis]
                if isinstance(d, str) and d:
                    keys[d] = d
        dims = _inferred_dims(proto, keys)
    except Exception:
        return {}
    out: Dict[Any, Tuple[int, str]] = {}

    def need(tensor: str, axis: int, size: int, why: str) -> None:
        sh = dims.get(tensor)
        if sh is None or size <= 1:
            return
        if axis < 0:
            axis += len(sh)
        if not 0 <= axis < len(sh) or sh[axis] not in keys:
            return
        key = keys[sh[axis]]
        if key not in out or out[key][0] < size:
            out[key] = (size, why)

    for k, node in enumerate(gi.nodes):
        if gi.domain(k) not in ("", "ai.onnx") or not node.input:
            continue
        op, name = node.op_type, node.name or f"{node.op_type} #{k}"
        try:
            if op == "TopK":
                kv = _ints(gi, node.input[1]) if len(node.input) > 1 else \
                    [int(_attr(gi, k, "k", 0))]
                if kv and len(kv) == 1:
                    need(node.input[0], int(_attr(gi, k, "axis", -1)), kv[0],
                         f"{name} takes the top {kv[0]} along it")
            elif op == "Conv" or op in _POOLS:
                if str(_attr(gi, k, "auto_pad", "NOTSET")).startswith("SAME"):
                    continue
                if op == "Conv":
                    w = dims.get(node.input[1]) if len(node.input) > 1 else None
                    kernel = list(_attr(gi, k, "kernel_shape", [])) or (w[2:] if w else [])
                else:
                    kernel = list(_attr(gi, k, "kernel_shape", []))
                if not kernel or not all(isinstance(v, int) for v in kernel):
                    continue
                n = len(kernel)
                dil = list(_attr(gi, k, "dilations", [])) or [1] * n
                pads = list(_attr(gi, k, "pads", [])) or [0] * (2 * n)
                for i, kk in enumerate(kernel):
                    span = (kk - 1) * dil[i] + 1
                    size = span - pads[i] - pads[i + n]
                    padded = f" (padding {pads[i]}+{pads[i + n]})" if pads[i] or pads[i + n] \
                        else " without padding"
                    need(node.input[0], 2 + i, size,
                         f"{name} slides a {span}-wide {'kernel' if op == 'Conv' else 'window'}"
                         f" along it{padded}")
            elif op == "Gather" and len(node.input) > 1:
                idx = _ints(gi, node.input[1])
                if idx:
                    size = max(max(idx) + 1, -min(idx))
                    i = max(idx, key=lambda v: v + 1 if v >= 0 else -v)
                    need(node.input[0], int(_attr(gi, k, "axis", 0)), size,
                         f"{name} reads index {i} along it")
        except Exception:  # (an odd node never stops the profile)
            continue
    return out
