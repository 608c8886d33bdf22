"""One index of an ONNX graph that every capability reads: read once, cached on the Model.

`GraphIndex` is the read-only counterpart of onnx-graphsurgeon's IR (nodes and tensors linked
both ways, subgraphs that see their outer graph's tensors) over the protobuf, without copying it
and without importing `onnx` (the CLI's `inspect` start-up stays light). It holds:

- nodes: stable ids (`stable_node_ids`: the ids the graph view, inspect and the support report
  use), names, op types, domains, attributes; node lookup with ONE semantics (`node_index`);
- tensors: `producer` (first node writing each tensor; `duplicate_producers` lists all of them
  when there are several), `consumers` (one entry per input slot, as graphsurgeon's
  `Tensor.outputs`), `outer_readers` (nodes whose If/Loop/Scan bodies read the tensor);
- name scopes with one rule (`scope_of`);
- value dtypes/shapes (graph inputs, value_info, outputs, initializers), constants, opsets;
- subgraphs (If/Loop/Scan bodies) as child indexes whose `parent` resolves outer-scope names
  (`outer_refs`, graphsurgeon's "foreign tensors"), and model-local functions.

Built from a `Model` (`model.index`, cached) or a bare ModelProto/GraphProto/FunctionProto
(`GraphIndex.of(proto)`, for recipes and precision working on in-memory copies). Everything
but ids and names is computed on first use. The index reflects the proto when it was built:
code that edits a graph builds a new index of the result.
"""
from __future__ import annotations

from functools import cached_property
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

from workbench.core.errors import WorkbenchError

# onnx.AttributeProto.AttributeType values (no `onnx` import here: see the module docstring)
_ATTR_GRAPH, _ATTR_GRAPHS = 5, 10
DEFAULT_DOMAINS = ("", "ai.onnx")


def scope_of(name: str) -> Tuple[str, ...]:
    """THE name-scope rule: split a node name on '/', drop empty parts; every part but the last
    is a scope level, the last is the node's own name.

    '/layer1/layer1.0/conv1/Conv' -> ('layer1', 'layer1.0', 'conv1') (torch exports);
    'gpu_0/conv1' -> ('gpu_0',) (Caffe2/TF style, no leading '/');
    'Conv_0', '/Conv', '' (unnamed) -> () (the root)."""
    if "/" not in name:
        return ()
    parts = [p for p in name.split("/") if p]
    return tuple(parts[:-1])


def scope_path_of(name: str) -> str:
    """A node's scope as one string, by the same rule: the scope parts joined by '/', with a
    leading '/' when the name has one ('/a/b/Conv' -> '/a/b', 'gpu_0/relu' -> 'gpu_0'), ''
    at the root. This is the scope id the graph view, `workbench graph --expand` and inspect's
    node detail use."""
    cut = name.rfind("/")
    if cut <= 0:
        return ""
    if "//" not in name and not name.endswith("/"):  # the usual name: no empty parts
        return name[:cut]
    parts = scope_of(name)
    if not parts:
        return ""
    return ("/" if name.startswith("/") else "") + "/".join(parts)


def leaf_name(name: str) -> str:
    """A node name without its scope: '/layer1/conv1/Conv' -> 'Conv' (the name itself when it
    has no non-empty part)."""
    tail = name[name.rfind("/") + 1:]  # the usual name: its last part is not empty
    if tail:
        return tail
    parts = [p for p in name.split("/") if p]
    return parts[-1] if parts else name


def scope_parts(path: str) -> Tuple[str, ...]:
    """'/encoder/layer.0' (or 'encoder/layer.0') -> ('encoder', 'layer.0')."""
    return tuple(p for p in path.split("/") if p)


def parent_scope(path: str) -> str:
    """'/a/b' -> '/a'; '/a' and 'a' -> '' (the root)."""
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else ""


def stable_node_ids(graph: Any) -> List[str]:
    """One unique id per node, stable across saves: the node name when it is unique and
    non-empty, otherwise ``<name or op>#<k>`` with k counting earlier nodes that wanted the same
    id (skipping any k whose id is already some other node's name)."""
    counts: Dict[str, int] = {}
    for node in graph.node:
        counts[node.name] = counts.get(node.name, 0) + 1
    taken = {n for n, c in counts.items() if n and c == 1}
    seen: Dict[str, int] = {}
    ids = []
    for node in graph.node:
        if node.name and counts[node.name] == 1:
            ids.append(node.name)
            continue
        base = node.name if node.name else node.op_type
        k = seen.get(base, 0)
        while f"{base}#{k}" in taken:
            k += 1
        seen[base] = k + 1
        ids.append(f"{base}#{k}")
        taken.add(ids[-1])
    return ids


class ValueType(NamedTuple):
    """What the model declares about a tensor: ONNX elem_type (0 unknown) and shape (a tuple of
    int | str (symbolic) | None per axis; None when the rank is unknown)."""

    dtype: int
    shape: Optional[Tuple[Any, ...]]

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)


def _value_type(vi: Any) -> Optional[ValueType]:
    t = vi.type
    if not t.HasField("tensor_type"):
        return None
    tt = t.tensor_type
    shape = None
    if tt.HasField("shape"):  # most dims are positive values: one attribute read each
        shape = tuple([d.dim_value or _dim(d) for d in tt.shape.dim])
    return ValueType(tt.elem_type, shape)


def _dim(d: Any) -> Any:
    """A dim without a positive value: 0 when set to 0, its symbolic name, or None."""
    return 0 if d.HasField("dim_value") else (d.dim_param or None)


def _subgraphs_of(node: Any) -> List[Tuple[str, Any]]:
    out: List[Tuple[str, Any]] = []
    for a in node.attribute:
        if a.type == _ATTR_GRAPH:
            out.append((a.name, a.g))
        elif a.type == _ATTR_GRAPHS:
            out.extend((a.name, g) for g in a.graphs)
    return out


def walk_graphs(graph: Any) -> Iterator[Any]:
    """`graph` and every subgraph inside it (If branches, Loop and Scan bodies, nested),
    depth first: what a question about the whole model (its types, its casts) must read."""
    todo = [graph]
    while todo:
        g = todo.pop()
        yield g
        for n in g.node:
            todo.extend(sub for _, sub in _subgraphs_of(n))


def computed_types(graph: Any) -> Set[int]:
    """The element types a model computes in, subgraphs included: its initializers', its
    value infos', its Casts' targets, and its subgraphs' inputs and outputs (the top graph's
    own inputs and outputs are left out: an FP32 interface says nothing of the inside)."""
    types: Set[int] = set()
    for g in walk_graphs(graph):
        types |= {t.data_type for t in g.initializer}
        vis = list(g.value_info) + (list(g.input) + list(g.output) if g is not graph else [])
        types |= {vi.type.tensor_type.elem_type for vi in vis}
        for n in g.node:
            if n.op_type == "Cast":
                types |= {a.i for a in n.attribute if a.name == "to"}
    return types


class GraphIndex:
    """Nodes and tensors of one graph (or subgraph/function body), linked both ways."""

    def __init__(self, graph: Any, *, opsets: Optional[Dict[str, int]] = None,
                 functions: Optional[Sequence[Any]] = None, parent: Optional["GraphIndex"] = None,
                 path: str = "", label: str = "") -> None:
        self.graph = graph
        self.parent = parent
        self.path = path                      # '' for the main graph, '<node id>/<attr>/' below
        self.label = label                    # the model file, for error messages
        self.nodes: List[Any] = list(graph.node)
        self.ids: List[str] = stable_node_ids(graph)
        self.names: List[str] = [n.name for n in self.nodes]
        self.opsets: Dict[str, int] = dict(opsets or {})
        self._function_protos = list(functions or [])
        self._producer: Optional[Dict[str, int]] = None
        self._dups: Dict[str, List[int]] = {}
        self._node_inputs: Optional[List[List[str]]] = None
        self._subgraphs: Dict[int, List[Tuple[str, "GraphIndex"]]] = {}
        self._defined: Optional[set] = None

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def of(cls, obj: Any, label: str = "") -> "GraphIndex":
        """The index of a Model (its cached one), ModelProto, GraphProto or FunctionProto."""
        idx = getattr(obj, "index", None)
        if isinstance(idx, GraphIndex):
            return idx
        if hasattr(obj, "opset_import") and hasattr(obj, "graph"):  # ModelProto
            return cls(obj.graph, opsets={o.domain: int(o.version) for o in obj.opset_import},
                       functions=list(obj.functions), label=label)
        if hasattr(obj, "opset_import"):  # FunctionProto
            return cls(obj, opsets={o.domain: int(o.version) for o in obj.opset_import},
                       label=label)
        return cls(obj, label=label)

    # -- nodes ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def ops(self) -> List[str]:
        return [n.op_type for n in self.nodes]

    def op(self, i: int) -> str:
        return self.nodes[i].op_type

    def domain(self, i: int) -> str:
        return self.nodes[i].domain or ""

    def key(self, i: int) -> str:
        """The node's name, or its id when unnamed (what TensorRT reports and maps by)."""
        return self.names[i] or self.ids[i]

    def attributes(self, i: int) -> Dict[str, Any]:
        """name -> AttributeProto of node i."""
        return {a.name: a for a in self.nodes[i].attribute}

    def attribute(self, i: int, name: str) -> Optional[Any]:
        for a in self.nodes[i].attribute:
            if a.name == name:
                return a
        return None

    @cached_property
    def position(self) -> Dict[str, int]:
        """Stable id -> node index."""
        return {nid: i for i, nid in enumerate(self.ids)}

    @cached_property
    def by_name(self) -> Dict[str, List[int]]:
        """Node name -> indices of the nodes with that name (unnamed nodes left out)."""
        out: Dict[str, List[int]] = {}
        for i, nm in enumerate(self.names):
            if nm:
                out.setdefault(nm, []).append(i)
        return out

    def find(self, key: str) -> List[int]:
        """Indices of the nodes `key` names: the node with that stable id, else every node with
        that name (empty when none). Never raises."""
        i = self.position.get(key)
        if i is not None:
            return [i]
        return list(self.by_name.get(key, ()))

    def node_index(self, key: str) -> int:
        """THE node lookup: the index of the node with stable id `key`, or of the only node named
        `key`. An ambiguous or unknown name is a WorkbenchError naming the candidates."""
        hits = self.find(key)
        if len(hits) == 1:
            return hits[0]
        where = self.label or None
        if hits:
            raise WorkbenchError(
                f"node name '{key}' is used by {len(hits)} nodes", file=where, node=key,
                field="node", hint="use one of their ids: "
                + ", ".join(self.ids[i] for i in hits[:8]))
        close = [nid for nid in self.ids if key.lower() in nid.lower()][:5]
        raise WorkbenchError(f"no node named '{key}' (no node with id or name '{key}')",
                             file=where, node=key,
                             field="node", hint=("did you mean: " + ", ".join(close)) if close
                             else "list node names with `workbench inspect MODEL --json`")

    def node(self, key: str) -> Any:
        return self.nodes[self.node_index(key)]

    # -- tensors --------------------------------------------------------------------------
    def _edges(self) -> None:
        """Producers (and each node's input list); consumers come later, on first use."""
        producer: Dict[str, int] = {}
        dups: Dict[str, List[int]] = {}
        self._node_inputs = [list(n.input) for n in self.nodes]
        for i, n in enumerate(self.nodes):
            for t in n.output:
                if not t:
                    continue
                prev = producer.get(t)
                if prev is None:
                    producer[t] = i
                else:
                    dups.setdefault(t, [prev]).append(i)
        self._producer, self._dups = producer, dups

    @property
    def producer(self) -> Dict[str, int]:
        """Tensor name -> index of the (first) node producing it."""
        if self._producer is None:
            self._edges()
        return self._producer  # type: ignore[return-value]

    @property
    def duplicate_producers(self) -> Dict[str, List[int]]:
        """Tensors written by more than one node -> all their producers, in graph order."""
        if self._producer is None:
            self._edges()
        return self._dups

    @cached_property
    def consumers(self) -> Dict[str, List[int]]:
        """Tensor name -> indices of the nodes reading it, one entry per input slot."""
        consumers: Dict[str, List[int]] = {}
        for i, ins in enumerate(self.node_inputs):
            for t in ins:
                if t:
                    c = consumers.get(t)
                    if c is None:
                        consumers[t] = [i]
                    else:
                        c.append(i)
        return consumers

    @property
    def node_inputs(self) -> List[List[str]]:
        """Per node, its input names as a list (read once from the protobuf)."""
        if self._node_inputs is None:
            self._edges()
        return self._node_inputs  # type: ignore[return-value]

    def producer_of(self, tensor: str) -> Optional[int]:
        return self.producer.get(tensor)

    def consumers_of(self, tensor: str) -> List[int]:
        """Distinct nodes reading `tensor` directly, in graph order."""
        return list(dict.fromkeys(self.consumers.get(tensor, ())))

    @property
    def initializers(self) -> Dict[str, Any]:
        return {t.name: t for t in getattr(self.graph, "initializer", [])}

    @property
    def inputs(self) -> List[str]:
        """Graph input names (initializers listed as inputs by old exporters included)."""
        return [getattr(v, "name", v) for v in self.graph.input]

    @property
    def runtime_inputs(self) -> List[str]:
        """Graph inputs that are not initializers (what a caller feeds)."""
        inits = {t.name for t in getattr(self.graph, "initializer", [])}
        return [n for n in self.inputs if n not in inits]

    @property
    def outputs(self) -> List[str]:
        return [getattr(v, "name", v) for v in self.graph.output]

    @cached_property
    def values(self) -> Dict[str, ValueType]:
        """Declared dtype/shape per tensor: graph inputs, value_info, outputs, then initializers
        (a later declaration wins)."""
        out: Dict[str, ValueType] = {}
        g = self.graph
        for vis in (g.input, getattr(g, "value_info", ()), g.output):
            for vi in vis:
                if isinstance(vi, str):  # a FunctionProto's inputs are plain names
                    break
                vt = _value_type(vi)
                if vt is not None:
                    out[vi.name] = vt
        for t in getattr(g, "initializer", ()):
            out[t.name] = ValueType(t.data_type, tuple(t.dims))
        return out

    def value(self, tensor: str) -> Optional[ValueType]:
        """The declared type of `tensor`, looking through outer graphs for subgraph bodies."""
        g: Optional[GraphIndex] = self
        while g is not None:
            vt = g.values.get(tensor)
            if vt is not None:
                return vt
            g = g.parent
        return None

    def constant_names(self) -> List[str]:
        """Initializers and Constant-node outputs of this graph."""
        out = [t.name for t in getattr(self.graph, "initializer", [])]
        out += [n.output[0] for n in self.nodes
                if n.op_type == "Constant" and n.domain in DEFAULT_DOMAINS and n.output]
        return out

    def defines(self, tensor: str) -> bool:
        """Whether this graph itself defines `tensor` (input, initializer or node output)."""
        if self._defined is None:
            self._defined = set(self.inputs) | {t.name for t in
                                                getattr(self.graph, "initializer", [])}
        return tensor in self.producer or tensor in self._defined

    # -- scopes ---------------------------------------------------------------------------
    @cached_property
    def scopes(self) -> List[Tuple[str, ...]]:
        """Per node, its scope parts by `scope_of` (the one rule)."""
        return [scope_parts(p) if p else () for p in self.scope_paths]

    @cached_property
    def scope_paths(self) -> List[str]:
        """Per node, its scope as a string (`scope_path_of`)."""
        return [scope_path_of(nm) for nm in self.names]

    def scope(self, i: int) -> str:
        """Scope path of node i ('/encoder/layer.0'), '' at the root."""
        return self.scope_paths[i]

    # -- subgraphs ------------------------------------------------------------------------
    def subgraphs(self, i: int) -> List[Tuple[str, "GraphIndex"]]:
        """(attribute name, index) of node i's bodies (If then/else, Loop/Scan body)."""
        got = self._subgraphs.get(i)
        if got is None:
            got = [(name, GraphIndex(g, opsets=self.opsets, parent=self, label=self.label,
                                     path=f"{self.path}{self.ids[i]}/{name}/"))
                   for name, g in _subgraphs_of(self.nodes[i])]
            self._subgraphs[i] = got
        return got

    def has_subgraphs(self, i: int) -> bool:
        for a in self.nodes[i].attribute:
            t = a.type
            if t == _ATTR_GRAPH or t == _ATTR_GRAPHS:
                return True
        return False

    @cached_property
    def outer_refs(self) -> List[str]:
        """Tensors this graph (or a body nested in it) reads but does not define: they come
        from an enclosing graph (graphsurgeon's foreign tensors). In order of first use."""
        used: List[str] = []
        for i, n in enumerate(self.nodes):
            used.extend(t for t in n.input if t)
            if self.has_subgraphs(i):
                for _, sub in self.subgraphs(i):
                    used.extend(sub.outer_refs)
        return [t for t in dict.fromkeys(used) if not self.defines(t)]

    def implicit_inputs(self, i: int) -> List[str]:
        """Tensors of this graph's scope (or further out) that node i's bodies read."""
        if not self.has_subgraphs(i):
            return []
        used: List[str] = []
        for _, sub in self.subgraphs(i):
            used.extend(sub.outer_refs)
        return list(dict.fromkeys(used))

    @cached_property
    def outer_readers(self) -> Dict[str, List[int]]:
        """Tensor name -> nodes of this graph whose bodies read it (implicit inputs)."""
        out: Dict[str, List[int]] = {}
        for i in range(len(self.nodes)):
            for t in self.implicit_inputs(i):
                out.setdefault(t, []).append(i)
        return out

    def walk(self) -> Iterator["GraphIndex"]:
        """This graph and every body below it, depth first."""
        yield self
        for i in range(len(self.nodes)):
            if self.has_subgraphs(i):
                for _, sub in self.subgraphs(i):
                    yield from sub.walk()

    # -- model-level ----------------------------------------------------------------------
    def opset(self, domain: str = "") -> int:
        """The imported opset version of a domain ('' and 'ai.onnx' are the same); 0 if none."""
        for d in ((domain, "ai.onnx") if domain == "" else (domain,)):
            if d in self.opsets:
                return self.opsets[d]
        if domain == "ai.onnx":
            return self.opsets.get("", 0)
        return 0

    @cached_property
    def functions(self) -> Dict[Tuple[str, str], "GraphIndex"]:
        """(domain, name) -> index of each model-local function body."""
        return {(f.domain, f.name): GraphIndex.of(f, self.label) for f in self._function_protos}


__all__ = ["GraphIndex", "ValueType", "scope_of", "leaf_name", "scope_path_of", "scope_parts", "parent_scope",
           "stable_node_ids", "DEFAULT_DOMAINS"]
