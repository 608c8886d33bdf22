"""Low-float emulation: an FP16/BF16 graph rewritten to compute in FP32 and *store* in FP16/BF16.

A GPU running an FP16 engine keeps every tensor in FP16 (values rounded, |x| > 65504 becomes
inf) but most kernels accumulate in FP32 (tensor cores; TensorRT's FP16 convolutions, GEMMs and
reductions). onnx's reference evaluator computes in float16 all the way (numpy, ~100x slower than
onnxruntime); onnxruntime's CPU provider upcasts FP16 ops and drops the casts between them, which
hides overflow. `emulate(proto)` gives a third, fast and faithful option: the same graph in FP32
with a Cast(to=low) -> Cast(to=float) pair after every value the candidate holds in low precision
(graph inputs, initializers, node outputs), so onnxruntime computes at FP32 speed while every stored
tensor is rounded and saturates exactly as the low type would. A value that is already exact
in the low type gets no pair: the output of a Constant / ConstantOfShape holding a low-float
value, and of an op that only selects or moves its low-float inputs (Relu, MaxPool, Reshape,
Concat ... `EXACT_OPS`); rounding it again would change no bit and cost two passes over it.
A Cast to the low type from a float keeps its type and rounds by itself: one widening Cast
follows it.

`emulate` returns None when it cannot keep that promise (control-flow bodies holding low-float
values, an opset without BF16 casts, dtype attributes it does not know): callers then use the
reference evaluator.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

import numpy as np

FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16
LOW = (FLOAT16, BFLOAT16)
_SUFFIX = "__wb_hi"
# ops whose float outputs are values of their float inputs (selected, moved or compared): when
# every float input already holds low-float values, so do the outputs (no rounding needed)
EXACT_OPS = frozenset({
    "Relu", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Max", "Min", "Clip", "Neg",
    "Abs", "Identity", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
    "Slice", "Gather", "GatherElements", "GatherND", "Concat", "Split", "Expand", "Tile",
    "DepthToSpace", "SpaceToDepth", "Where", "TopK",
})
FLOATS = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
# ops with an attribute naming an output dtype (besides Cast / Constant / ConstantOfShape)
_DTYPE_ATTRS = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype",
                "Bernoulli": "dtype"}


@dataclass
class Emulation:
    """The FP32 graph, the low type of each emulated value and the names in topological order."""

    proto: Any
    low: Dict[str, int] = field(default_factory=dict)   # value name -> 10 | 16
    order: List[str] = field(default_factory=list)      # original node outputs, topological


def _opset(proto: Any) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def _to_float_tensor(t: Any) -> Any:
    """An FP16/BF16 TensorProto as FP32 with the same (exactly representable) values."""
    from onnx import numpy_helper

    if t.data_type == BFLOAT16:
        import ml_dtypes

        if t.raw_data:
            a = np.frombuffer(t.raw_data, dtype=ml_dtypes.bfloat16).astype(np.float32)
        else:  # int32_data holds the 16-bit patterns
            bits = np.asarray(t.int32_data, dtype=np.uint32).astype(np.uint16)
            a = bits.view(ml_dtypes.bfloat16).astype(np.float32)
        a = a.reshape(tuple(t.dims))
    else:
        a = numpy_helper.to_array(t).astype(np.float32)
    out = numpy_helper.from_array(a, t.name)
    return out


def _types(proto: Any) -> Dict[str, int]:
    import onnx

    try:
        typed = onnx.shape_inference.infer_shapes(proto)
    except Exception:
        typed = proto
    g = typed.graph
    types: Dict[str, int] = {}
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        t = vi.type.tensor_type.elem_type
        if t or vi.name not in types:  # an untyped (marked) output keeps the inferred type
            types[vi.name] = t
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _has_low_subgraph(node: Any) -> bool:
    import onnx

    for a in node.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
        for sub in graphs:
            if any(t.data_type in LOW for t in sub.initializer):
                return True
            vis = list(sub.input) + list(sub.output) + list(sub.value_info)
            if any(v.type.tensor_type.elem_type in LOW for v in vis):
                return True
            for n in sub.node:
                if n.op_type == "Cast" and any(x.name == "to" and x.i in LOW
                                               for x in n.attribute):
                    return True
                if _has_low_subgraph(n):
                    return True
    return False


def _widen(values: Any) -> None:
    """Declare low-float value infos as FP32 (the emulated graph computes in FP32)."""
    for vi in values:
        if vi.type.tensor_type.elem_type in LOW:
            vi.type.tensor_type.elem_type = FLOAT


def _exact(node: Any, types: Dict[str, int], low: Dict[str, int]) -> bool:
    """Are `node`'s outputs already exact in their low type (see the module docstring)?"""
    if node.op_type in ("Constant", "ConstantOfShape"):
        return all(a.t.data_type in LOW for a in node.attribute if a.type == 4)  # TENSOR
    if node.op_type not in EXACT_OPS or node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Clip" and len(node.attribute):
        return False  # opset < 11: float bounds as attributes, not low-float inputs
    floats = [x for x in node.input if x and types.get(x, 0) in FLOATS]
    if any(x and not types.get(x) for x in node.input):
        return False  # an input of unknown type: round to be sure
    outs = [o for o in node.output if o and types.get(o, 0) in FLOATS]
    return bool(floats) and all(x in low for x in floats) and \
        all(low.get(o) == low[floats[0]] for o in outs)


def emulable(proto: Any) -> bool:
    """Can `emulate` keep its promise for this graph (without building the twin)?"""
    return _emulable(proto, _types(proto))


def _emulable(proto: Any, types: Dict[str, int]) -> bool:
    low = {t for t in types.values() if t in LOW}
    if not low:
        return False
    if BFLOAT16 in low and _opset(proto) < 13:
        return False  # Cast to bfloat16 needs opset 13
    for node in proto.graph.node:
        if _has_low_subgraph(node):
            return False
        if node.op_type in _DTYPE_ATTRS and any(a.name == _DTYPE_ATTRS[node.op_type]
                                                and a.i in LOW for a in node.attribute):
            return False
    return True


def emulate(proto: Any, outputs: str = "all", skip_exact: bool = True) -> Optional[Emulation]:
    """The FP32-compute / low-float-storage twin of `proto` (see the module docstring), or None.
    outputs="all": every original node output becomes a graph output (Polygraphy's mark all),
    holding the rounded value under its original name; "graph": the graph outputs only.
    skip_exact=False: a rounding pair after every low-float value, exact ones too, and after
    Casts to the low type (which round by themselves); the values are the same (tests compare
    the two)."""
    import onnx
    from onnx import helper

    types = _types(proto)
    if not _emulable(proto, types):
        return None
    low = {n: t for n, t in types.items() if t in LOW}
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    g = m.graph
    # initializers: exact FP32 copies of the low values; a weight held by reference
    # (`workbench.core.weights`: fed from its file as stored) stays low and is widened where read
    rename: Dict[str, str] = {}
    entry: List[Any] = []
    for i, t in enumerate(g.initializer):
        if t.data_type in LOW and t.data_location == 1:  # (EXTERNAL)
            rename[t.name] = t.name + "__wb_w"
            entry.append(helper.make_node("Cast", [t.name], [t.name + "__wb_w"], to=FLOAT,
                                          name=f"{t.name}__wb_widen"))
        elif t.data_type in LOW:
            g.initializer[i].CopyFrom(_to_float_tensor(t))
    # graph inputs of low type: declared FP32, rounded on entry (consumers read the rounded copy)
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        tt = vi.type.tensor_type
        if tt.elem_type in LOW and vi.name not in inits:
            lt = tt.elem_type
            tt.elem_type = FLOAT
            r = vi.name + "__wb_in"
            rename[vi.name] = r
            entry += [helper.make_node("Cast", [vi.name], [r + "_q"], to=lt,
                                       name=f"{vi.name}__wb_round"),
                      helper.make_node("Cast", [r + "_q"], [r], to=FLOAT,
                                       name=f"{vi.name}__wb_widen")]
    nodes: List[Any] = list(entry)
    order: List[str] = []
    for node in g.node:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        for k, x in enumerate(n.input):
            if x in rename:
                n.input[k] = rename[x]
        direct = False  # a Cast to the low type rounds itself: only the widening Cast follows
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i in LOW:
                    direct = skip_exact and types.get(n.input[0]) in (FLOAT, FLOAT16, BFLOAT16) \
                        and low.get(n.output[0]) == a.i  # (float input: one rounding, as before)
                    if not direct:
                        a.i = FLOAT
        elif n.op_type in ("Constant", "ConstantOfShape"):
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in LOW:
                    a.t.CopyFrom(_to_float_tensor(a.t))
        pairs: List[Any] = []
        exact = skip_exact and _exact(node, types, low)
        for k, o in enumerate(n.output):
            if not o:
                continue
            order.append(o)
            if o in low and direct:
                n.output[k] = o + _SUFFIX + "_q"
                pairs.append(helper.make_node("Cast", [o + _SUFFIX + "_q"], [o], to=FLOAT,
                                              name=f"{o}__wb_widen"))
            elif o in low and not exact:
                hi = o + _SUFFIX
                n.output[k] = hi
                pairs += [helper.make_node("Cast", [hi], [hi + "_q"], to=low[o],
                                           name=f"{o}__wb_round"),
                          helper.make_node("Cast", [hi + "_q"], [o], to=FLOAT,
                                           name=f"{o}__wb_widen")]
        nodes.append(n)
        nodes.extend(pairs)
    del g.node[:]
    g.node.extend(nodes)
    del g.value_info[:]
    _widen(g.output)
    if outputs == "all":
        have: Set[str] = {o.name for o in g.output}
        for o in order:
            if o not in have:
                t = types.get(o)
                g.output.append(helper.make_tensor_value_info(o, FLOAT if t in LOW else t, None)
                                if t else onnx.ValueInfoProto(name=o))
                have.add(o)
    return Emulation(m, low, order)
