"""Our own float-lowering pass (BF16; works for FP16 too): Casts around lowered nodes.

onnxconverter-common has no BF16 mode. This pass, on raw ONNX protos:
- lowers every node except control flow, dtype-producing ops and the user's exclusions;
- a FLOAT input of a lowered node gets one shared `Cast(to=low)` per tensor, except
  initializers / Constant tensors used only by lowered nodes, which are converted in place
  (BF16 keeps FP32's range, so nothing is clipped);
- a lowered node's FLOAT outputs become `low`; consumers that stay FP32 and graph outputs get a
  `Cast(to=FLOAT)` back (graph outputs keep their name and FP32 type when keep_io_types);
- inputs that must stay FP32 by the op's definition (Resize/Upsample scales) are left alone.
Types come from onnx shape inference; tensors whose type is unknown are left untouched.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np

from workbench.errors import WorkbenchError

DEFAULT_BLOCK_OPS = frozenset({
    "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    "ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
    "EyeLike", "Range", "Loop", "If", "Scan", "NonMaxSuppression", "RoiAlign", "TopK",
    "Multinomial", "Bernoulli", "Constant", "Shape", "Size", "CumSum",
})
# ops that read only a tensor's shape: no Cast needed in front of them
TYPE_AGNOSTIC_OPS = frozenset({"Shape", "Size"})
# (op type, input index) that the ONNX spec fixes to float32
FP32_ONLY_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}


def opset_of(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def op_accepts(op_type: str, opset: int, type_name: str) -> bool:
    """Does the ONNX schema of `op_type` at `opset` allow `type_name` for its first input?"""
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset)
    except Exception:
        return False
    if not schema.inputs:
        return True
    tvar = schema.inputs[0].type_str
    for c in schema.type_constraints:
        if c.type_param_str == tvar:
            return type_name in c.allowed_type_strs
    return tvar == type_name


def min_opset_for(proto: Any, type_name: str, skip_ops: Sequence[str] = ()) -> int:
    """The lowest opset at which every float op of the graph (not in skip_ops) takes `type_name`."""
    import onnx

    current = opset_of(proto)
    top = onnx.defs.onnx_opset_version()
    need = current
    for op in {n.op_type for n in proto.graph.node if n.domain in ("", "ai.onnx")} - set(skip_ops):
        if op_accepts(op, current, type_name):
            continue
        for v in range(current + 1, top + 1):
            if op_accepts(op, v, type_name):
                need = max(need, v)
                break
    return need


def lower_float(proto: Any, low: str = "bf16", *, exclude_nodes: Sequence[str] = (),
                exclude_ops: Sequence[str] = (), keep_io_types: bool = True,
                unsupported: Optional[List[str]] = None) -> Any:
    """Return a copy of `proto` with float computation lowered to `low` ("bf16" or "fp16").

    Nodes whose op does not accept the type at the model's opset stay FP32 and are appended to
    `unsupported` (raise the opset first with `min_opset_for` + onnx's version converter)."""
    if unsupported is None:
        unsupported = []
    import ml_dtypes
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    low_type = {"bf16": TensorProto.BFLOAT16, "fp16": TensorProto.FLOAT16}[low]
    low_np = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}[low]
    limit = float(ml_dtypes.finfo(low_np).max)

    def _clip(a: np.ndarray) -> np.ndarray:
        """Finite values beyond the type's range saturate (e.g. float32.min mask constants)."""
        a = a.astype(np.float32)
        return np.where(np.isfinite(a), np.clip(a, -limit, limit), a)

    m = copy.deepcopy(proto)
    g = m.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
    except Exception as e:
        raise WorkbenchError(f"shape inference failed, cannot place {low.upper()} casts: "
                             f"{' '.join(str(e).split())[:200]}",
                             hint="fix the model with `workbench fix` first") from None
    types: Dict[str, int] = {}
    for vi in list(inferred.graph.value_info) + list(g.input) + list(g.output):
        types[vi.name] = vi.type.tensor_type.elem_type
    inits = {t.name: t for t in g.initializer}
    for t in g.initializer:
        types[t.name] = t.data_type
    const_nodes = {n.output[0]: n for n in g.node if n.op_type == "Constant" and n.output}
    for name, n in const_nodes.items():
        for a in n.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                types[name] = a.t.data_type

    blocked_ops = set(DEFAULT_BLOCK_OPS) | set(exclude_ops)
    excluded = set(exclude_nodes)
    opset = opset_of(m)
    type_name = "tensor(bfloat16)" if low == "bf16" else "tensor(float16)"
    lowered: Set[int] = set()
    for i, n in enumerate(g.node):
        if n.op_type in blocked_ops or n.name in excluded or n.domain not in ("", "ai.onnx"):
            continue
        if not op_accepts(n.op_type, opset, type_name):
            unsupported.append(n.name)
            continue
        if any(types.get(o) == TensorProto.FLOAT for o in n.output):
            lowered.add(i)

    consumers: Dict[str, List[int]] = {}
    for i, n in enumerate(g.node):
        for j, name in enumerate(n.input):
            if name:
                consumers.setdefault(name, []).append(i)
    graph_inputs = {vi.name for vi in g.input}
    graph_outputs = {vi.name for vi in g.output}

    def only_lowered_users(name: str) -> bool:
        users = consumers.get(name, [])
        if not users or name in graph_outputs:
            return False
        for u in users:
            n = g.node[u]
            if u not in lowered:
                return False
            if any(inp == name and (n.op_type, k) in FP32_ONLY_INPUTS
                   for k, inp in enumerate(n.input)):
                return False
        return True

    new_nodes: List[Any] = []
    cast_down: Dict[str, str] = {}
    cast_up: Dict[str, str] = {}
    converted_in_place: Set[str] = set()
    renamed_outputs: Dict[str, str] = {}  # graph output name -> internal low-precision name

    def down(name: str) -> str:
        if name in converted_in_place:
            return name
        if name in inits and only_lowered_users(name):
            t = inits[name]
            arr = _clip(numpy_helper.to_array(t)).astype(low_np)
            t.CopyFrom(numpy_helper.from_array(arr, name))
            converted_in_place.add(name)
            return name
        if name in const_nodes and only_lowered_users(name):
            cn = const_nodes[name]
            for a in cn.attribute:
                if a.name == "value":
                    arr = _clip(numpy_helper.to_array(a.t)).astype(low_np)
                    a.t.CopyFrom(numpy_helper.from_array(arr, a.t.name))
            converted_in_place.add(name)
            return name
        if name not in cast_down:
            out = f"{name}__to_{low}"
            new_nodes.append(helper.make_node("Cast", [name], [out], name=f"{out}__cast",
                                              to=low_type))
            cast_down[name] = out
        return cast_down[name]

    lowered_outputs: Set[str] = set()
    for i, n in enumerate(g.node):
        if i in lowered:
            for k, name in enumerate(n.input):
                if not name or types.get(name) != TensorProto.FLOAT:
                    continue
                if (n.op_type, k) in FP32_ONLY_INPUTS:
                    continue
                if name in lowered_outputs:
                    continue  # already low precision
                if name in graph_inputs and not keep_io_types:
                    continue  # graph input retyped below
                n.input[k] = down(name)
            for k, name in enumerate(n.output):
                if types.get(name) == TensorProto.FLOAT:
                    lowered_outputs.add(name)
                    if name in graph_outputs and keep_io_types:
                        internal = f"{name}__{low}"
                        n.output[k] = internal
                        renamed_outputs[name] = internal
        else:
            for k, name in enumerate(n.input):
                if name in lowered_outputs and n.op_type not in TYPE_AGNOSTIC_OPS:
                    src = renamed_outputs.get(name, name)
                    if name not in cast_up:
                        up = f"{name}__to_fp32"
                        new_nodes.append(helper.make_node("Cast", [src], [up],
                                                          name=f"{up}__cast",
                                                          to=TensorProto.FLOAT))
                        cast_up[name] = up
                    n.input[k] = cast_up[name]
        new_nodes.append(n)
        # lowered nodes reading a renamed graph output must use the internal name
    for n in new_nodes:
        for k, name in enumerate(n.input):
            if name in renamed_outputs and n.op_type != "Cast":
                n.input[k] = renamed_outputs[name]
    for out_name, internal in renamed_outputs.items():
        new_nodes.append(helper.make_node("Cast", [internal], [out_name],
                                          name=f"{out_name}__to_fp32__cast", to=TensorProto.FLOAT))
    if not keep_io_types:
        for vi in list(g.input) + list(g.output):
            if vi.type.tensor_type.elem_type == TensorProto.FLOAT and (
                    vi.name in lowered_outputs or only_lowered_users(vi.name)):
                vi.type.tensor_type.elem_type = low_type
    del g.node[:]
    g.node.extend(_toposort(new_nodes, g))
    del g.value_info[:]  # stale types; consumers re-infer
    return m


def _toposort(nodes: List[Any], g: Any) -> List[Any]:
    """Kahn's algorithm over tensor names (the Casts we add must precede their users)."""
    available = {vi.name for vi in g.input} | {t.name for t in g.initializer} | {""}
    producers = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            producers[o] = i
    done: List[Any] = []
    placed = [False] * len(nodes)
    pending = list(range(len(nodes)))
    while pending:
        progressed = False
        rest = []
        for i in pending:
            n = nodes[i]
            if all(x in available or x not in producers for x in n.input):
                done.append(n)
                placed[i] = True
                available.update(n.output)
                progressed = True
            else:
                rest.append(i)
        if not progressed:
            raise WorkbenchError("the lowered graph has a cycle", hint="please report this model")
        pending = rest
    return done
