"""What is in an ONNX model: summary, op histogram, I/O with symbolic dims, shapes, node detail,
name-scope tree.

Everything here works on the weightless graph (`workbench.core.model.open_model`): parameter counts
and bytes come from tensor dims and data types, never from weight bytes, and shape inference runs
on a copy whose large or external initializers are replaced by typed graph inputs, so a model
whose external-data file is missing (or is 2 GB) is inspected as fast as a small one.
All results are plain dataclasses with `to_dict()` (JSON-able: non-finite floats become strings).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Union

from workbench.core.errors import Finding
from workbench.core.findings import step
from workbench.core.graphindex import scope_of, scope_parts
from workbench.core.model import Model, ModelLike, as_model, external_location, model_skeleton
from workbench.core.onnx_light import has_schema, onnx_proto
from workbench.core.onnx_light import declared_conflicts
from workbench.core.onnx_light import infer_shapes as _onnx_infer_shapes

if TYPE_CHECKING:  # pragma: no cover
    import onnx

Dim = Union[int, str]
UNKNOWN_DIM = "?"

# bits per element for each TensorProto data type (strings have no fixed size)
_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 8: 0, 9: 8, 10: 16, 11: 64, 12: 32,
         13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4,
         24: 8, 25: 2, 26: 2, 27: 6, 28: 6}
_DTYPE_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
                17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
                21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0", 25: "uint2",
                26: "int2", 27: "float6e2m3", 28: "float6e3m2"}
# initializers at most this big keep their values for shape inference (Reshape shapes etc.)
_KEEP_FOR_INFERENCE_BYTES = 4096
_MAX_LIST = 32  # attribute lists longer than this are summarised


def dtype_name(data_type: int) -> str:
    """'float32', 'int64', ... for a TensorProto data type (unknown ids: 'dtype<N>')."""
    if data_type == 0:
        return "undefined"
    return _DTYPE_NAMES.get(data_type, f"dtype<{data_type}>")


@dataclass
class TensorInfo:
    """A tensor's name, element type and shape (ints, symbolic dims as strings, '?' unknown;
    shape None when even the rank is unknown)."""

    name: str
    dtype: str
    shape: Optional[List[Dim]] = None

    @property
    def dynamic_dims(self) -> List[int]:
        """Indices of dims that are not fixed numbers."""
        return [i for i, d in enumerate(self.shape or []) if not isinstance(d, int)]

    @property
    def is_dynamic(self) -> bool:
        return self.shape is None or bool(self.dynamic_dims)

    def shape_str(self) -> str:
        if self.shape is None:
            return "(unknown rank)"
        return "[" + ", ".join(str(d) for d in self.shape) + "]"

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape}


@dataclass
class NodeDetail:
    """One node: stable id, name, op, domain, rendered attributes, and its tensors."""

    id: str
    index: int
    name: str
    op: str
    domain: str
    inputs: List[str]
    outputs: List[str]
    attributes: Dict[str, Any] = field(default_factory=dict)
    input_info: List[Optional[TensorInfo]] = field(default_factory=list)
    output_info: List[Optional[TensorInfo]] = field(default_factory=list)
    scope: str = ""
    doc: str = ""

    def to_dict(self, *, tensors: bool = True) -> Dict[str, Any]:
        d = {"id": self.id, "index": self.index, "name": self.name, "op": self.op,
             "domain": self.domain, "scope": self.scope, "inputs": list(self.inputs),
             "outputs": list(self.outputs), "attributes": self.attributes}
        if tensors:
            d["input_info"] = [t.to_dict() if t else None for t in self.input_info]
            d["output_info"] = [t.to_dict() if t else None for t in self.output_info]
        return d


@dataclass
class ScopeNode:
    """One level of the name-scope tree (`/encoder/layer.0/attention`)."""

    name: str
    path: str
    nodes: List[str] = field(default_factory=list)  # node ids directly in this scope
    children: List["ScopeNode"] = field(default_factory=list)
    node_count: int = 0  # all nodes at or below this scope
    ops: Dict[str, int] = field(default_factory=dict)  # histogram at or below
    _by_name: Dict[str, "ScopeNode"] = field(default_factory=dict, repr=False, compare=False)

    def child(self, name: str) -> "ScopeNode":
        c = self._by_name.get(name)
        if c is None:
            c = ScopeNode(name=name, path=f"{self.path.rstrip('/')}/{name}")
            self.children.append(c)
            self._by_name[name] = c
        return c

    def find(self, path: str) -> Optional["ScopeNode"]:
        node = self
        for part in scope_parts(path):
            node = node._by_name.get(part)
            if node is None:
                return None
        return node

    def walk(self) -> Iterable["ScopeNode"]:
        yield self
        for c in self.children:
            yield from c.walk()

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "path": self.path, "node_count": self.node_count,
                "ops": dict(self.ops), "nodes": list(self.nodes),
                "children": [c.to_dict() for c in self.children]}


@dataclass
class Summary:
    """Everything `workbench inspect` reports about a model."""

    path: Optional[str]
    size_bytes: int
    external_data_bytes: int
    ir_version: int
    producer: str
    producer_version: str
    opsets: Dict[str, int]
    graph_name: str
    node_count: int
    subgraph_node_count: int
    initializer_count: int
    parameter_count: int
    parameter_bytes: int
    ops: Dict[str, int]
    inputs: List[TensorInfo]
    outputs: List[TensorInfo]
    shapes: Dict[str, TensorInfo] = field(default_factory=dict)  # every tensor with a type
    shape_inference: str = "not run"  # "ok" | "failed: ..." | "skipped"
    weights_available: bool = True
    local_functions: List[str] = field(default_factory=list)
    warnings: List[Finding] = field(default_factory=list)

    @property
    def opset(self) -> Optional[int]:
        """The default-domain (ai.onnx) opset."""
        return self.opsets.get("ai.onnx", self.opsets.get(""))

    @property
    def dynamic_inputs(self) -> List[str]:
        return [t.name for t in self.inputs if t.is_dynamic]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "model": {"path": self.path, "opset": self.opset, "opsets": dict(self.opsets),
                      "ir_version": self.ir_version, "producer": self.producer,
                      "producer_version": self.producer_version, "graph_name": self.graph_name,
                      "size_bytes": self.size_bytes,
                      "external_data_bytes": self.external_data_bytes,
                      "weights_available": self.weights_available},
            "counts": {"nodes": self.node_count, "subgraph_nodes": self.subgraph_node_count,
                       "initializers": self.initializer_count,
                       "local_functions": len(self.local_functions)},
            "parameters": {"count": self.parameter_count, "bytes": self.parameter_bytes},
            "ops": dict(self.ops),
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "shape_inference": self.shape_inference,
            "local_functions": list(self.local_functions),
            "warnings": [w.to_dict() for w in self.warnings],
        }


# ---------------------------------------------------------------------------------------------
# types and shapes


def _tensor_type_info(name: str, type_proto: "onnx.TypeProto") -> TensorInfo:
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(type_proto, kind)
        shape: Optional[List[Dim]] = None
        if tt.HasField("shape"):
            shape = []
            for d in tt.shape.dim:
                w = d.WhichOneof("value")
                shape.append(d.dim_value if w == "dim_value" else
                             (d.dim_param or UNKNOWN_DIM) if w == "dim_param" else UNKNOWN_DIM)
        dt = dtype_name(tt.elem_type)
        return TensorInfo(name, dt if kind == "tensor_type" else f"sparse({dt})", shape)
    if kind == "sequence_type":
        inner = _tensor_type_info(name, type_proto.sequence_type.elem_type)
        return TensorInfo(name, f"seq({inner.dtype})", inner.shape)
    if kind == "optional_type":
        inner = _tensor_type_info(name, type_proto.optional_type.elem_type)
        return TensorInfo(name, f"optional({inner.dtype})", inner.shape)
    if kind == "map_type":
        val = _tensor_type_info(name, type_proto.map_type.value_type)
        return TensorInfo(name, f"map({dtype_name(type_proto.map_type.key_type)},{val.dtype})")
    return TensorInfo(name, "unknown", None)


def value_info(vi: "onnx.ValueInfoProto") -> TensorInfo:
    """TensorInfo of a graph input/output/value_info entry."""
    return _tensor_type_info(vi.name, vi.type)


def _tensor_elements(t: "onnx.TensorProto") -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def tensor_nbytes(t: "onnx.TensorProto") -> int:
    """Bytes the tensor's values take, from dims and data type (no data read)."""
    bits = _BITS.get(t.data_type, 0)
    if bits == 0:  # strings: what is in memory, if anything
        return sum(len(s) for s in t.string_data)
    return (_tensor_elements(t) * bits + 7) // 8


def _has_inline_data(t: "onnx.TensorProto") -> bool:
    return t.data_location != onnx_proto().TensorProto.EXTERNAL


def _tensor_value_info(name: str, elem_type: int, dims: List[int]) -> "onnx.ValueInfoProto":
    vi = onnx_proto().ValueInfoProto(name=name)
    tt = vi.type.tensor_type
    tt.elem_type = elem_type
    tt.shape.SetInParent()
    for d in dims:
        tt.shape.dim.add().dim_value = int(d)
    return vi


def _inference_copy(proto: "onnx.ModelProto") -> "onnx.ModelProto":
    """A light copy for shape inference: big or external initializers become typed inputs."""
    m = model_skeleton(proto)
    src, g = proto.graph, m.graph
    declared = {i.name for i in src.input}
    for t in src.initializer:
        if _has_inline_data(t) and tensor_nbytes(t) <= _KEEP_FOR_INFERENCE_BYTES:
            g.initializer.append(t)
        elif t.name not in declared:
            g.input.append(_tensor_value_info(t.name, t.data_type, list(t.dims)))
    g.sparse_initializer.extend(src.sparse_initializer)
    return m


def infer_shapes(model: Model) -> "tuple[Dict[str, TensorInfo], str]":
    """Run ONNX shape inference on the weightless graph. Returns (tensor name -> info, status)."""
    known, status, _ = _infer(model)
    return known, status


def _infer(model: Model) -> "tuple[Dict[str, TensorInfo], str, List[tuple]]":
    """infer_shapes, plus (node, op, what differs) for every node whose inferred output
    contradicts the file's declared value_info. Strict inference runs first: on a consistent
    graph it is the only run; only where it fails does the lenient run follow."""
    proto = model.proto
    known: Dict[str, TensorInfo] = {}
    for vi in list(proto.graph.input) + list(proto.graph.output) + list(proto.graph.value_info):
        known[vi.name] = value_info(vi)
    for t in proto.graph.initializer:
        known[t.name] = TensorInfo(t.name, dtype_name(t.data_type), [int(d) for d in t.dims])
    copy = _inference_copy(proto)
    conflicts: List[tuple] = []
    try:
        inferred = _onnx_infer_shapes(copy, data_prop=True, strict=True)
    except Exception as strict_error:  # (an op without a schema, a stale value_info, ...)
        conflicts = declared_conflicts(strict_error)
        try:
            inferred = _onnx_infer_shapes(copy, data_prop=True)
        except Exception as e:  # inference is a bonus: report, keep the declared shapes
            return known, "failed: " + " ".join(f"{type(e).__name__}: {e}".split())[:300], \
                conflicts
    for vi in inferred.graph.value_info:
        info = value_info(vi)
        old = known.get(vi.name)
        if old is None or old.shape is None or (info.shape is not None and
                                                len(info.dynamic_dims) < len(old.dynamic_dims)):
            known[vi.name] = info
    for vi in inferred.graph.output:
        info = value_info(vi)
        old = known.get(vi.name)
        if old is None or old.shape is None or old.dtype == "undefined":
            known[vi.name] = info
    return known, "ok", conflicts


# ---------------------------------------------------------------------------------------------
# attributes


def _num(v: float) -> Union[float, str]:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(f"{v:.7g}")


def _text(b: bytes, limit: int = 200) -> str:
    s = b.decode("utf-8", errors="replace")
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


def _short_list(values: List[Any]) -> Any:
    if len(values) <= _MAX_LIST:
        return values
    return {"first": values[:_MAX_LIST], "count": len(values)}


def summarize_tensor(t: "onnx.TensorProto", small: int = 16) -> Dict[str, Any]:
    """A tensor attribute/initializer as {dtype, shape[, value]}: values only when small and
    inline (never dumps weights, never reads external data)."""
    d: Dict[str, Any] = {"dtype": dtype_name(t.data_type), "shape": [int(x) for x in t.dims]}
    if t.name:
        d["name"] = t.name
    if not _has_inline_data(t):
        d["external"] = external_location(t)
        return d
    if t.data_type == 8:
        if _tensor_elements(t) <= small:
            d["value"] = [_text(x, 60) for x in t.string_data]
    elif _tensor_elements(t) <= small:
        vals = _small_values(t)
        if vals is not None:
            d["value"] = vals
    return d


# struct formats of the types whose few values are worth showing (others: shape only)
_STRUCT = {1: "f", 2: "B", 3: "b", 4: "H", 5: "h", 6: "i", 7: "q", 9: "?", 10: "e", 11: "d",
           12: "I", 13: "Q"}


def _small_values(t: "onnx.TensorProto") -> Optional[List[Any]]:
    """Values of a small inline tensor, decoded without numpy (None for exotic types)."""
    import struct

    n = _tensor_elements(t)
    dt = t.data_type
    try:
        if t.raw_data:
            if dt == 16:  # bfloat16: the top half of a float32
                raw = t.raw_data
                vals = [struct.unpack("<f", b"\x00\x00" + raw[2 * i:2 * i + 2])[0]
                        for i in range(n)]
            elif dt in _STRUCT:
                vals = list(struct.unpack(f"<{n}{_STRUCT[dt]}", t.raw_data[:n * struct.calcsize(
                    _STRUCT[dt])]))
            else:
                return None
        elif dt in (1,):
            vals = list(t.float_data)
        elif dt == 11:
            vals = list(t.double_data)
        elif dt == 7:
            vals = list(t.int64_data)
        elif dt in (12, 13):
            vals = list(t.uint64_data)
        elif dt in (2, 3, 4, 5, 6):
            vals = list(t.int32_data)
        elif dt == 9:
            vals = [bool(v) for v in t.int32_data]
        elif dt == 10:  # float16 bit patterns in int32_data
            vals = [struct.unpack("<e", struct.pack("<H", v & 0xFFFF))[0] for v in t.int32_data]
        else:
            return None
    except struct.error:
        return None
    return [_num(v) if isinstance(v, float) else v for v in vals]


def render_attribute(attr: "onnx.AttributeProto") -> Any:
    """A JSON-able rendering of one attribute: tensors and graphs summarised, long lists cut."""
    A = onnx_proto().AttributeProto
    t = attr.type
    if attr.ref_attr_name:
        return {"ref": attr.ref_attr_name}
    if t == A.INT:
        return int(attr.i)
    if t == A.FLOAT:
        return _num(attr.f)
    if t == A.STRING:
        return _text(attr.s)
    if t == A.INTS:
        return _short_list([int(v) for v in attr.ints])
    if t == A.FLOATS:
        return _short_list([_num(v) for v in attr.floats])
    if t == A.STRINGS:
        return _short_list([_text(s, 60) for s in attr.strings])
    if t == A.TENSOR:
        return {"tensor": summarize_tensor(attr.t)}
    if t == A.TENSORS:
        return {"tensors": _short_list([summarize_tensor(x) for x in attr.tensors])}
    if t == A.GRAPH:
        return {"graph": attr.g.name, "nodes": len(attr.g.node)}
    if t == A.GRAPHS:
        return {"graphs": [{"graph": g.name, "nodes": len(g.node)} for g in attr.graphs]}
    if t == A.SPARSE_TENSOR:
        return {"sparse_tensor": {"shape": [int(x) for x in attr.sparse_tensor.dims]}}
    if t == A.TYPE_PROTO:
        return {"type": _tensor_type_info("", attr.tp).dtype}
    if t == A.TYPE_PROTOS:
        return {"types": len(attr.type_protos)}
    return None


# ---------------------------------------------------------------------------------------------
# nodes and scopes


def node_scope(name: str) -> List[str]:
    """Scope parts of a node name by the one rule (`workbench.core.graphindex.scope_of`):
    '/encoder/layer.0/attention/self/MatMul' -> ['encoder', 'layer.0', 'attention', 'self']."""
    return list(scope_of(name))


def node_details(model: Model, shapes: Optional[Dict[str, TensorInfo]] = None,
                 ) -> List[NodeDetail]:
    """Detail of every main-graph node, in graph order, with tensor shapes where known."""
    shapes = shapes or {}
    gi = model.index
    out = []
    for i, (nid, n) in enumerate(zip(gi.ids, gi.nodes)):
        out.append(NodeDetail(
            id=nid, index=i, name=n.name, op=n.op_type, domain=n.domain or "ai.onnx",
            inputs=list(n.input), outputs=list(n.output),
            attributes={a.name: render_attribute(a) for a in n.attribute},
            input_info=[shapes.get(x) if x else None for x in n.input],
            output_info=[shapes.get(x) if x else None for x in n.output],
            scope=gi.scope(i),
            doc=_text(n.doc_string.encode(), 300) if n.doc_string else ""))
    return out


def node_detail(model: Model, node_id: str, shapes: Optional[Dict[str, TensorInfo]] = None,
                ) -> NodeDetail:
    """Detail of one node by stable id or unique name (WorkbenchError if absent)."""
    idx = model.node_index(node_id)  # raises a clear error
    if shapes is None:
        shapes, _ = infer_shapes(model)
    return node_details(model, shapes)[idx]


def scope_tree(model: Model) -> ScopeNode:
    """The name-scope tree of the main graph (nodes without scopes sit at the root)."""
    root = ScopeNode(name="", path="/")
    gi = model.index
    for nid, n, parts in zip(gi.ids, gi.nodes, gi.scopes):
        chain = [root]
        for part in parts:
            chain.append(chain[-1].child(part))
        chain[-1].nodes.append(nid)
        for s in chain:
            s.node_count += 1
            s.ops[n.op_type] = s.ops.get(n.op_type, 0) + 1
    return root


# ---------------------------------------------------------------------------------------------
# the summary


def _subgraph_nodes(graph: "onnx.GraphProto") -> int:
    onnx = onnx_proto()
    count = 0
    for n in graph.node:
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else (
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else [])
            for g in subs:
                count += len(g.node) + _subgraph_nodes(g)
    return count


def _all_initializers(graph: "onnx.GraphProto") -> Iterable["onnx.TensorProto"]:
    from workbench.core.model import _iter_graphs

    for g in _iter_graphs(graph):
        yield from g.initializer


def _lint(model: Model, ops: Dict[str, int], inputs: List[TensorInfo],
          shape_status: str) -> List[Finding]:
    found: List[Finding] = []
    g = model.graph
    by_name = model.index.by_name
    dups = sorted(n for n, idx in by_name.items() if len(idx) > 1)
    if dups:
        found.append(Finding("info", "duplicate-node-names",
                             f"{len(dups)} node name(s) are used more than once "
                             f"(e.g. '{dups[0]}'); nodes get ids like '{dups[0]}#0'",
                             nodes=dups[:20], source="inspect"))
    unnamed = [i for i, n in enumerate(model.index.names) if not n]
    if unnamed:
        found.append(Finding("info", "unnamed-nodes",
                             f"{len(unnamed)} node(s) have no name; they get ids like "
                             f"'{model.node_ids[unnamed[0]]}'",
                             hint="TensorRT errors and layer names will be harder to map back",
                             source="inspect"))
    for t in inputs:
        if t.shape is None:
            found.append(Finding("warning", "input-rank-unknown",
                                 f"input '{t.name}' has no shape (unknown rank)",
                                 tensors=[t.name], source="inspect",
                                 hint="give it a shape before building (TensorRT needs the rank)"))
        elif t.dynamic_dims:
            dims = ", ".join(f"{i}:{t.shape[i]}" for i in t.dynamic_dims)
            found.append(Finding("info", "dynamic-input",
                                 f"input '{t.name}' has dynamic dims ({dims}); a TensorRT build "
                                 "needs an optimization profile (min/opt/max) for it",
                                 tensors=[t.name], source="inspect"))
    local = {f.name for f in model.proto.functions}
    unknown = [(mid, n.op_type) for mid, n in zip(model.node_ids, g.node)
               if n.domain in ("", "ai.onnx") and n.op_type not in local
               and not has_schema(n.op_type)]
    if unknown:
        kinds = sorted({op for _, op in unknown})
        found.append(Finding("warning", "unknown-ops",
                             f"op(s) not in the ONNX standard domain: {', '.join(kinds[:10])}",
                             nodes=[i for i, _ in unknown], source="inspect",
                             hint="a custom op in the default domain: it needs a TensorRT "
                             "plugin or a decomposition",
                             next_steps=[step("check", "{model}", why="whether TensorRT takes "
                                              "them, and the recipes that replace them")]))
    outside = [(mid, f"{n.domain}::{n.op_type}") for mid, n in zip(model.node_ids, g.node)
               if n.domain not in ("", "ai.onnx", "ai.onnx.ml") and n.op_type not in local]
    custom = sorted({op for _, op in outside})
    if custom:
        found.append(Finding("warning", "custom-domain-ops",
                             f"ops outside the ONNX standard: {', '.join(custom[:10])}",
                             nodes=[i for i, _ in outside], source="inspect",
                             hint="they need a TensorRT plugin or a decomposition",
                             next_steps=[step("check", "{model}", why="whether TensorRT takes "
                                              "them, and the recipes that replace them")]))
    if shape_status.startswith("failed"):
        found.append(Finding("warning", "shape-inference-failed",
                             f"ONNX shape inference {shape_status}", source="inspect",
                             hint="shapes shown are the ones declared in the file"))
    return found


def summarize(model_or_path: ModelLike, *, shapes: bool = True) -> Summary:
    """The inspection summary of a model (path or opened Model); no weight bytes are read."""
    model = as_model(model_or_path)
    proto, g = model.proto, model.graph
    init_names = set()
    params = nbytes = n_init = 0
    for t in _all_initializers(g):
        n_init += 1
        init_names.add(t.name)
        params += _tensor_elements(t)
        nbytes += tensor_nbytes(t)
    for t in g.sparse_initializer:
        n_init += 1
        params += _tensor_elements(t.values)
        nbytes += tensor_nbytes(t.values)
    main_inits = {t.name for t in g.initializer}
    inputs = [value_info(vi) for vi in g.input if vi.name not in main_inits]
    outputs = [value_info(vi) for vi in g.output]
    ops = dict(Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                       for n in g.node).most_common())
    if shapes:
        known, status, conflicts = _infer(model)
        outputs = [_better(o, known.get(o.name)) for o in outputs]
    else:
        known, status, conflicts = {}, "skipped", []
    ext = 0
    for f in model.external_files:
        try:
            ext += f.stat().st_size
        except OSError:
            pass
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in proto.opset_import}
    warnings = list(model.warnings) + _lint(model, ops, inputs, status) + \
        _conflict_findings(model, conflicts)
    return Summary(
        path=str(model.path) if model.path else None, size_bytes=model.size_bytes,
        external_data_bytes=ext, ir_version=int(proto.ir_version),
        producer=proto.producer_name, producer_version=proto.producer_version, opsets=opsets,
        graph_name=g.name, node_count=len(g.node), subgraph_node_count=_subgraph_nodes(g),
        initializer_count=n_init, parameter_count=params, parameter_bytes=nbytes, ops=ops,
        inputs=inputs, outputs=outputs, shapes=known, shape_inference=status,
        weights_available=model.weights_available,
        local_functions=[f"{f.domain}::{f.name}" for f in proto.functions], warnings=warnings)


def _conflict_findings(model: Model, conflicts: List[tuple]) -> List[Finding]:
    """One warning per node whose inferred output contradicts the declared value_info (a stale
    file: the graph was edited and its shapes were not): the shapes shown there are the file's,
    not the real ones."""
    return [Finding("warning", "declared-shape-conflict",
                    f"node '{node}' ({op}): the shape the file declares for a tensor here "
                    f"contradicts ONNX shape inference ({what}); shapes shown for it are the "
                    "file's, which may be stale", nodes=[node] if node else [], op=op or None,
                    source="inspect",
                    hint="re-infer the shapes (replaces the stale value_info), or re-export the "
                    "model", next_steps=[step("fix", "{model}", recipe="infer_shapes",
                                              o="{fixed}", why="re-infers the shapes, "
                                              "replacing the stale value_info")])
            for node, op, what in conflicts]


def _better(declared: TensorInfo, inferred: Optional[TensorInfo]) -> TensorInfo:
    """Prefer the declared output type; fill it from inference when the file leaves it out."""
    if inferred is None:
        return declared
    if declared.dtype == "undefined" or declared.shape is None:
        return TensorInfo(declared.name,
                          inferred.dtype if declared.dtype == "undefined" else declared.dtype,
                          declared.shape if declared.shape is not None else inferred.shape)
    return declared


def inspect_model(model_or_path: ModelLike) -> Dict[str, Any]:
    """The full JSON report (`workbench inspect --json`): summary, nodes, tensors, scopes."""
    model = as_model(model_or_path)
    s = summarize(model)
    d = s.to_dict()
    d["nodes"] = [n.to_dict(tensors=False) for n in node_details(model, s.shapes)]
    d["tensors"] = {k: {"dtype": v.dtype, "shape": v.shape} for k, v in s.shapes.items()}
    d["scopes"] = scope_tree(model).to_dict()
    return d


def format_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def format_summary(s: Summary, top_ops: int = 15) -> str:
    """A human-readable summary (what `workbench inspect` prints without --json)."""
    lines = [f"model      {s.path or '<in-memory>'}  ({format_bytes(s.size_bytes)}"
             + (f" + {format_bytes(s.external_data_bytes)} external data" if
                s.external_data_bytes else "") + ")",
             f"producer   {s.producer or '?'} {s.producer_version}".rstrip(),
             f"ir/opsets  IR {s.ir_version}; " + ", ".join(f"{k} {v}" for k, v in s.opsets.items()),
             f"graph      {s.node_count} nodes"
             + (f" (+{s.subgraph_node_count} in subgraphs)" if s.subgraph_node_count else "")
             + f", {s.initializer_count} initializers, {s.parameter_count:,} parameters "
               f"({format_bytes(s.parameter_bytes)})"
             + ("" if s.weights_available else "  [weights missing]"),
             "inputs"]
    for t in s.inputs:
        dyn = f"  dynamic: {', '.join(str(t.shape[i]) for i in t.dynamic_dims)}" \
            if t.shape and t.dynamic_dims else ""
        lines.append(f"  {t.name:<28} {t.dtype:<9} {t.shape_str()}{dyn}")
    lines.append("outputs")
    for t in s.outputs:
        lines.append(f"  {t.name:<28} {t.dtype:<9} {t.shape_str()}")
    lines.append(f"ops        ({len(s.ops)} kinds)")
    items = list(s.ops.items())
    for op, c in items[:top_ops]:
        lines.append(f"  {op:<28} {c}")
    if len(items) > top_ops:
        lines.append(f"  ... {len(items) - top_ops} more")
    lines.append(f"shapes     inference {s.shape_inference}; {len(s.shapes)} tensors typed")
    for w in s.warnings:  # every one the JSON has: info ones (unnamed nodes...) as notes
        label = "note" if w.severity == "info" else w.severity
        lines.append(f"{label:<10} {w.message}" + (f" ({w.hint})" if w.hint else ""))
    return "\n".join(lines)


__all__ = ["TensorInfo", "NodeDetail", "ScopeNode", "Summary", "summarize", "infer_shapes",
           "node_details", "node_detail", "scope_tree", "inspect_model", "format_summary",
           "render_attribute", "summarize_tensor", "dtype_name", "value_info", "tensor_nbytes"]
