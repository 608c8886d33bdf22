"""What a graph's own QuantizeLinear / DequantizeLinear nodes say: which nodes they quantize
and in which precision (INT8 or FP8).

One reading for every command: `precision` reports the nodes it quantized, `compare` judges
only those as INT8 culprits and infers the candidate's precision, `build` sets the builder
flags the Q/DQ nodes need. The reading is structural (a node reads a DequantizeLinear output),
never by tensor names: onnxruntime's quantizer, NVIDIA ModelOpt and PyTorch's exporter name
their Q/DQ tensors differently.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
# the ops `workbench precision` quantizes (Q/DQ in front of them: weighted ops and pooling,
# TensorRT's placement advice); elementwise ops stay out (`precision.quantize`)
QUANT_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "AveragePool", "GlobalAveragePool",
             "MaxPool")
# ONNX TensorProto data types of the 8-bit float formats (FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ)
FP8_TYPES = (17, 18, 19, 20)
UINT8 = 2


def _graph(model_or_graph: Any) -> Any:
    return getattr(model_or_graph, "graph", model_or_graph)


def _key(n: Any) -> str:
    return n.name or f"{n.op_type}:{n.output[0] if n.output else ''}"


def quantized_nodes(model_or_graph: Any) -> Set[str]:
    """Names of the nodes (Q/DQ nodes aside) that a Q/DQ model quantizes (their nameless ones
    as `op:first output`): those reading a DequantizeLinear output, less the bystanders
    (`bystanders`): a node the quantizer leaves in float that only shares the DQ in front of
    a quantized op (a ReduceMax reading the same DQ as a Gemm). Keeping a bystander in FP32
    changes nothing: the Q/DQ stays for the op it belongs to."""
    g = _graph(model_or_graph)
    dq = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    readers = {_key(n) for n in g.node
               if n.op_type not in QDQ_OPS and any(i in dq for i in n.input)}
    return readers - bystanders(g)


def bystanders(model_or_graph: Any) -> Set[str]:
    """Readers of a DequantizeLinear output whose op the quantizer never quantizes
    (QUANT_OPS: weighted ops and pooling) and whose every DQ input is also read by a node
    of such an op: the Q/DQ is that node's, not theirs."""
    g = _graph(model_or_graph)
    dq = {o for n in g.node if n.op_type == "DequantizeLinear" for o in n.output}
    owned = {i for n in g.node if n.op_type in QUANT_OPS for i in n.input if i in dq}
    return {_key(n) for n in g.node
            if n.op_type not in QDQ_OPS and n.op_type not in QUANT_OPS
            and any(i in dq for i in n.input)
            and all(i in owned for i in n.input if i in dq)}


def _types(g: Any) -> Dict[str, int]:
    """Element types of the initializers and Constant outputs (where zero points live)."""
    types = {t.name: t.data_type for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    types[n.output[0]] = a.t.data_type
    return types


def qdq_precision(model_or_graph: Any) -> Optional[str]:
    """The precision a Q/DQ graph computes in: "fp8" when any Q/DQ node is float8 (its
    narrowest range decides), "int8" for integer ones only, None without Q/DQ."""
    dts = _qdq_dtypes(model_or_graph)
    if not dts:
        return None
    return "fp8" if any(dt in FP8_TYPES for dt in dts) else "int8"


def qdq_precisions(model_or_graph: Any) -> List[str]:
    """The precisions of a graph's Q/DQ nodes, in order of appearance: "int8" for integer ones,
    "fp8" for float8 ones. A node's type is its zero point's (initializer or Constant), else
    its `output_dtype` attribute (opset 21), else what ONNX assumes without either: uint8."""
    out: List[str] = []
    for dt in _qdq_dtypes(model_or_graph):
        p = "fp8" if dt in FP8_TYPES else "int8"
        if p not in out:
            out.append(p)
    return out


def _qdq_dtypes(model_or_graph: Any) -> List[Optional[int]]:
    """The element type of each Q/DQ node of a graph, in order (None: not stated, uint8)."""
    g = _graph(model_or_graph)
    types = _types(g)
    out: List[Optional[int]] = []
    for n in g.node:
        if n.op_type not in QDQ_OPS:
            continue
        dt = next((a.i for a in n.attribute if a.name == "output_dtype" and a.i), None)
        if dt is None and len(n.input) > 2 and n.input[2]:
            dt = types.get(n.input[2])
        if dt is None and n.op_type == "DequantizeLinear":
            dt = types.get(n.input[0])  # a quantized initializer read directly
        out.append(dt)
    return out


# ops that compute nothing of their own: a Q/DQ model quantizes their inputs and their output
# (as their readers' input) and they pass the values on, so excluding one keeps nothing in
# float: its readers' exclusion does
PASS_THROUGH_OPS = frozenset({
    "Concat", "Split", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice",
    "Gather", "MaxPool", "Pad", "Identity", "Expand", "Tile", "DepthToSpace", "SpaceToDepth",
})


def requantized_readers(model_or_graph: Any) -> Dict[str, List[str]]:
    """For each pass-through node (PASS_THROUGH_OPS) whose output a Q/DQ model quantizes
    again, the nodes reading that quantized output: where an exclusion keeps the tensor in
    float. Names as `quantized_nodes` gives them."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(_graph(model_or_graph))
    nodes = gi.nodes

    def key(n: Any) -> str:
        return n.name or f"{n.op_type}:{n.output[0] if n.output else ''}"

    def readers(t: str) -> List[Any]:
        return [nodes[i] for i in gi.consumers_of(t)]

    out: Dict[str, List[str]] = {}
    for n in nodes:
        if n.op_type not in PASS_THROUGH_OPS:
            continue
        found = [key(r) for o in n.output for q in readers(o) if q.op_type == "QuantizeLinear"
                 for dq in readers(q.output[0]) if dq.op_type == "DequantizeLinear"
                 for r in readers(dq.output[0]) if r.op_type not in QDQ_OPS]
        if found:
            out[key(n)] = list(dict.fromkeys(found))
    return out
