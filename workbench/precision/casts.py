"""Schema questions for float lowering (which op takes which type at which opset) and the
`lower_float` entry point kept for callers of the old pass.

The lowering itself is `workbench.precision.lowering` (subgraphs, type-constrained operands,
validation); `lower_float` is that pass without validation, reporting the nodes whose op takes
no low type at the model's opset in `unsupported`.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from workbench.precision.lowering import BLOCK_OPS as DEFAULT_BLOCK_OPS  # noqa: F401 (re-exported)
from workbench.precision.lowering import FP32_ONLY_INPUTS, TYPE_AGNOSTIC_OPS  # noqa: F401


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
    from workbench.precision.lowering import lower

    res = lower(proto, low, exclude_nodes=exclude_nodes, exclude_ops=exclude_ops,
                keep_io_types=keep_io_types, validate=False)
    if unsupported is not None:
        unsupported.extend(n for n, why in res.kept.items() if "takes no" in why)
    return res.proto
