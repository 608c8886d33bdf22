"""A quantized target with a float fallback: INT8 (FP8) where Q/DQ sits, a float precision
(FP16, BF16) for every other node, FP32 only where excluded: the precision an engine built
`trtexec --int8 --fp16` has on TensorRT <= 10, as a strongly typed ONNX (Casts + Q/DQ).

`transform.convert(model, "int8", fallback="fp16")` chains two conversions (the chain lives
there, these are its pieces): the quantized one, then the
float lowering of its result with every Q/DQ node, every node reading a DequantizeLinear
output (its compute is the quantized one) and every user exclusion kept out of it. A model
whose weights live in external data, written with `output`, chains the two streamed
conversions through a temporary file beside the output (memory does not follow the model's
size). The report counts the nodes in each precision (`precisions`, `nodes_by_precision`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence, Set

from workbench.core.errors import Finding
from workbench.precision import table


def qdq_kept(proto: Any) -> Set[str]:
    """The nodes the float lowering leaves alone in a Q/DQ model: the Q/DQ nodes and every
    node reading a DequantizeLinear output (their input is the dequantized FP32 tensor)."""
    from workbench.core.qdq import QDQ_OPS

    g = proto.graph
    dq = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    return {n.name for n in g.node
            if n.op_type in QDQ_OPS or any(i in dq for i in n.input)}


def quantizes(proto: Any, exclude_nodes: Sequence[str], exclude_ops: Sequence[str]) -> bool:
    """Does a node of the main graph take Q/DQ (an op of `core.qdq.QUANT_OPS`, neither its
    node nor its op type excluded; nodes named as `GraphIndex.key` names them)?"""
    from workbench.core.graphindex import GraphIndex
    from workbench.core.qdq import QUANT_OPS

    gi = GraphIndex.of(proto)
    nodes, ops = set(exclude_nodes), set(exclude_ops)
    return any(n.op_type in QUANT_OPS and n.op_type not in ops and gi.key(i) not in nodes
               for i, n in enumerate(gi.nodes))


def precision_nodes(qdq_model: Any, kept_fp32: Sequence[str], target: str, fallback: str
                    ) -> Dict[str, List[str]]:
    """{precision: node names} over the quantized model's nodes (Q/DQ nodes aside): `target`
    for the quantized ones (`core.qdq.quantized_nodes`), FP32 for those the float lowering
    kept (`kept_fp32`: exclusions, DQ readers the quantizer left in float, nodes the lowering
    had to keep), `fallback` for the rest."""
    from workbench.core.qdq import QDQ_OPS, quantized_nodes

    quant = quantized_nodes(qdq_model)
    kept = set(kept_fp32)
    out: Dict[str, List[str]] = {target: [], fallback: [], table.BASE: []}
    for n in qdq_model.graph.node:
        if n.op_type in QDQ_OPS or n.op_type in ("Constant",):
            continue
        key = target if n.name in quant else table.BASE if n.name in kept else fallback
        out[key].append(n.name)
    return out


def respec(path: Path, spec: Any) -> None:
    """Record `spec` in a streamed result's file (its structure rewritten atomically; the
    weights in its data file are left as they are)."""
    import onnx

    from workbench.core.fsutil import atomic_write_bytes
    from workbench.precision.spec import record_spec

    proto = onnx.load(str(path), load_external_data=False)
    record_spec(proto, spec)
    atomic_write_bytes(path, proto.SerializeToString())


def relevant(f: Finding) -> bool:
    """The float step's findings worth passing on: not its own 'kept FP32' list (every Q/DQ
    node and quantized op is on it: the fallback-precisions finding says it), nor its notes
    on the exclusions the chain made (the quantized step said those of the user's). Its
    'no overflow check' stays: a streamed chain checks no FP16 range."""
    return f.code not in ("kept-fp32", "exclude-op-no-effect", "exclude-op-absent",
                          "nodes-named")


