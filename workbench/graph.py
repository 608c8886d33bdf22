"""Layered layout of an ONNX graph for the graph view, with nodes collapsed by name scope.

`layout(model)` turns a `Model` (no weights needed) into `GraphData`: plain arrays of visible
element ids, positions, labels, ops, kinds and edges that the front end draws as-is. Layout is a
vectorised Sugiyama-style pass: longest-path ranks (sources pulled down next to their consumers),
a few barycentre sweeps to reduce crossings, then order-preserving x coordinates.

PyTorch-style names (`/encoder/layer.3/attention/self/MatMul`) define a scope tree; a collapsed
scope is drawn as one group node and `GraphStructure.view(expanded=...)` lays out any
expand/collapse state without re-reading the model. Broken graphs (cycles, dangling inputs,
duplicate node names, tensors produced twice) are laid out anyway: back-edges are reversed and
the offending nodes carry flags and `Finding`s instead of raising.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set, Tuple, Union

import numpy as np

from workbench.errors import Finding
from workbench.graphindex import leaf_name, parent_scope

if TYPE_CHECKING:  # pragma: no cover
    import onnx

    from workbench.model import Model

# element kinds
NODE, GROUP, INPUT, OUTPUT = 0, 1, 2, 3
KIND_NAMES = ("node", "group", "input", "output")
# per-node problem flags (bit mask); groups carry the OR of their members
FLAG_CYCLE, FLAG_DANGLING, FLAG_DUPLICATE_NAME, FLAG_DUPLICATE_OUTPUT = 1, 2, 4, 8
FLAG_NAMES = {FLAG_CYCLE: "graph-cycle", FLAG_DANGLING: "dangling-input",
              FLAG_DUPLICATE_NAME: "duplicate-node-name",
              FLAG_DUPLICATE_OUTPUT: "duplicate-tensor-producer"}
GROUP_PREFIX = "scope:"
MIN_BUDGET, MAX_BUDGET = 60, 1500  # default view: about a tenth of the nodes, within these


def default_budget(n_nodes: int) -> int:
    """How many elements the default (collapsed) view aims to show for a graph of n nodes:
    small models keep their scopes collapsed, big ones show ~1-2k elements (WebGL copes)."""
    return int(min(MAX_BUDGET, max(MIN_BUDGET, n_nodes // 10)))

MIN_VISIBLE = 8       # a default view this small is opened further, up to HARD_MAX_VISIBLE
HARD_MAX_VISIBLE = 2000

ModelLike = Union["Model", "onnx.ModelProto", str, "os.PathLike[str]"]


@dataclass
class GraphData:
    """What the front end draws: one entry per visible element, edges as index pairs.

    Arrays are aligned: ids[i], labels[i], op[i] (index into `ops`), kind[i] (NODE/GROUP/INPUT/
    OUTPUT), x[i], y[i] (y grows downwards with the rank), rank[i], size[i] (member count; 1 for a
    node), flags[i] (FLAG_* bit mask), scope[i] (index into `scopes` of the enclosing scope, -1 at
    the root). `edges` is an (E, 2) int32 array of element indices. `scopes` lists every scope
    path, `scope_parent` their parent scope index, `expanded` the scope paths shown open.
    """

    ids: List[str]
    labels: List[str]
    ops: List[str]
    op: np.ndarray
    kind: np.ndarray
    x: np.ndarray
    y: np.ndarray
    rank: np.ndarray
    size: np.ndarray
    flags: np.ndarray
    scope: np.ndarray
    edges: np.ndarray
    scopes: List[str]
    scope_parent: np.ndarray
    expanded: List[str]
    findings: List[Finding] = field(default_factory=list)
    total_nodes: int = 0
    visible_of: Optional[np.ndarray] = None  # per structure element: its visible index

    def visible_index(self, element_ids: Iterable[str], structure: "GraphStructure") -> List[int]:
        """Visible indices showing the given node/input/output ids (a group when hidden)."""
        out = set()
        where = None
        for e in element_ids:
            ks = structure.element_indices(e)
            if ks and self.visible_of is not None:
                out.update(int(self.visible_of[k]) for k in ks)
                continue
            if where is None:
                where = {i: n for n, i in enumerate(self.ids)}
            if e in where:  # a group id
                out.add(where[e])
        return sorted(out)

    def __len__(self) -> int:
        return len(self.ids)

    def index(self, element_id: str) -> int:
        """Index of a visible element by id (ValueError when it is not visible)."""
        return self.ids.index(element_id)

    def to_dict(self) -> Dict[str, Any]:
        """A compact JSON-able form: flat lists, coordinates rounded to 0.01."""
        return {
            "ids": self.ids, "labels": self.labels, "ops": self.ops,
            "op": self.op.tolist(), "kind": self.kind.tolist(),
            "x": np.round(self.x, 2).tolist(), "y": np.round(self.y, 2).tolist(),
            "rank": self.rank.tolist(), "size": self.size.tolist(), "flags": self.flags.tolist(),
            "scope": self.scope.tolist(), "edges": self.edges.reshape(-1).tolist(),
            "scopes": self.scopes, "scope_parent": self.scope_parent.tolist(),
            "expanded": self.expanded, "findings": [f.to_dict() for f in self.findings],
            "total_nodes": self.total_nodes,
        }


def _as_model(model: ModelLike) -> "Model":
    from workbench.model import Model, model_from_proto, open_model

    if isinstance(model, Model):
        return model
    if isinstance(model, (str, Path, os.PathLike)):
        return open_model(model)
    return model_from_proto(model)


class GraphStructure:
    """The graph's topology and scope tree, read once from a model; lays out any view of it.

    Elements 0..n_nodes-1 are ONNX nodes (aligned with `model.node_ids`), then one element per
    graph input (not an initializer), then one per graph output.
    """

    def __init__(self, model: ModelLike):
        m = _as_model(model)
        self.model = m
        g = m.graph
        nodes = list(g.node)
        n = len(nodes)
        node_ids = list(m.node_ids)
        names = [nd.name for nd in nodes]
        ops = [nd.op_type for nd in nodes]
        init_names = {t.name for t in g.initializer}
        graph_inputs = [v.name for v in g.input if v.name not in init_names]
        graph_outputs = [v.name for v in g.output]
        n_in, n_out = len(graph_inputs), len(graph_outputs)
        self.n_nodes = n
        self.n = n + n_in + n_out
        self.ids = node_ids + [f"input:{t}" for t in graph_inputs] + [f"output:{t}" for t in graph_outputs]
        self.names = names + graph_inputs + graph_outputs
        op_list = ops + ["Input"] * n_in + ["Output"] * n_out
        self.ops, op_idx = np.unique(np.array(op_list, dtype=object), return_inverse=True) \
            if op_list else (np.array([], dtype=object), np.zeros(0, dtype=np.int64))
        self.ops = [str(o) for o in self.ops]
        self.op = op_idx.astype(np.int32)
        self.kind = np.array([NODE] * n + [INPUT] * n_in + [OUTPUT] * n_out, dtype=np.int8)
        self.flags = np.zeros(self.n, dtype=np.int32)
        self.findings: List[Finding] = []
        flag_nodes: Dict[int, List[int]] = {}

        # edges from the model's graph index; graph inputs produce their tensor
        gi = m.index
        producer: Dict[str, int] = dict(gi.producer)
        dup_out: Dict[str, List[int]] = {t: list(v) for t, v in gi.duplicate_producers.items()}
        for k, t in enumerate(graph_inputs):
            if t in gi.producer:  # a node writes a graph input
                dup_out[t] = [n + k] + gi.duplicate_producers.get(t, [gi.producer[t]])
            producer[t] = n + k
        src: List[int] = []
        dst: List[int] = []
        dangling: Dict[str, List[int]] = {}
        node_inputs = gi.node_inputs
        for i in range(n):
            ins = node_inputs[i]
            if gi.has_subgraphs(i):
                ins = ins + gi.implicit_inputs(i)
            for t in ins:
                if not t:
                    continue
                p = producer.get(t)
                if p is not None:
                    src.append(p)
                    dst.append(i)
                elif t not in init_names:
                    dangling.setdefault(t, []).append(i)
        for k, t in enumerate(graph_outputs):
            p = producer.get(t)
            if p is not None:
                src.append(p)
                dst.append(n + n_in + k)
            elif t not in init_names:
                dangling.setdefault(t, []).append(n + n_in + k)
        self.src = np.array(src, dtype=np.int64)
        self.dst = np.array(dst, dtype=np.int64)

        for t, consumers in dangling.items():
            self.flags[consumers] |= FLAG_DANGLING
            self.findings.append(Finding(
                "error", "dangling-input",
                f"tensor '{t}' is read but no node produces it and it is neither a graph input "
                "nor an initializer", nodes=[self.ids[c] for c in consumers], tensors=[t],
                hint="add it as a graph input or initializer, or reconnect the consumer "
                     "(a graphsurgeon recipe can do it)", source="graph"))
        counts: Dict[str, List[int]] = {}
        for i, nm in enumerate(names):
            if nm:
                counts.setdefault(nm, []).append(i)
        for nm, idx in counts.items():
            if len(idx) > 1:
                self.flags[idx] |= FLAG_DUPLICATE_NAME
                self.findings.append(Finding(
                    "warning", "duplicate-node-name",
                    f"{len(idx)} nodes are named '{nm}'; they are shown as "
                    + ", ".join(node_ids[i] for i in idx),
                    nodes=[node_ids[i] for i in idx], hint="give every node a unique name "
                    "(TensorRT reports and maps layers by node name)", source="graph"))
        for t, idx in dup_out.items():
            self.flags[idx] |= FLAG_DUPLICATE_OUTPUT
            self.findings.append(Finding(
                "error", "duplicate-tensor-producer", f"tensor '{t}' is produced by "
                f"{len(idx)} nodes", nodes=[self.ids[i] for i in idx], tensors=[t],
                hint="rename one of the outputs; ONNX tensors must have a single producer",
                source="graph"))

        # a topological order; cycles are broken by reversing back-edges (and flagged)
        self.order, back = _topological_order(self.n, self.src, self.dst)
        if back.size:
            cyc = _cycle_members(self.n, self.src, self.dst)
            self.flags[cyc] |= FLAG_CYCLE
            self.findings.append(Finding(
                "error", "graph-cycle", f"the graph has a cycle through {len(cyc)} node(s); "
                "ONNX graphs must be acyclic", nodes=[self.ids[i] for i in cyc],
                hint="find the edge that feeds a later node's output back into an earlier node "
                     "and remove or reroute it", source="graph"))
        self.pos = np.empty(self.n, dtype=np.int64)
        self.pos[self.order] = np.arange(self.n)

        # scope tree: every prefix of every node's scope
        scope_str = list(gi.scope_paths) + [""] * (n_in + n_out)
        uniq: Dict[str, int] = {}
        node_scope = np.empty(self.n, dtype=np.int64)
        for i, s in enumerate(scope_str):
            k = uniq.get(s)
            if k is None:
                k = uniq[s] = len(uniq)
            node_scope[i] = k
        paths: Dict[str, int] = {}
        parent: List[int] = []
        depth: List[int] = []

        def add(path: str) -> int:
            k = paths.get(path)
            if k is not None:
                return k
            up = parent_scope(path)
            par = add(up) if up else -1
            k = paths[path] = len(paths)
            parent.append(par)
            depth.append(0 if par < 0 else depth[par] + 1)
            return k

        leaf_of_uniq = np.array([add(s) if s else -1 for s in uniq], dtype=np.int64)
        self.scopes = list(paths)
        self.scope_parent = np.array(parent, dtype=np.int64)
        self.scope_depth = np.array(depth, dtype=np.int64)
        self.node_scope = leaf_of_uniq[node_scope] if len(uniq) else np.full(self.n, -1)
        ns = len(self.scopes)
        # members per scope (nodes anywhere below it)
        members = np.zeros(ns, dtype=np.int64)
        direct = np.bincount(self.node_scope[self.node_scope >= 0], minlength=ns) if ns else members
        members += direct
        for k in np.argsort(-self.scope_depth, kind="stable"):
            p = self.scope_parent[k]
            if p >= 0:
                members[p] += members[k]
        self.scope_members = members
        self.scope_index = paths
        self._index: Optional[Dict[str, int]] = None

    # -- expand/collapse -------------------------------------------------------------------
    def default_expanded(self, max_visible: Optional[int] = None) -> Set[str]:
        """Open scopes level by level while the whole level fits in `max_visible` elements
        (default: `default_budget(n_nodes)`)
        (or while fewer than MIN_VISIBLE show, up to HARD_MAX_VISIBLE: one scope wrapping the
        whole model is opened); scopes whose expansion adds nothing are always opened."""
        if max_visible is None:
            max_visible = default_budget(self.n_nodes)
        ns = len(self.scopes)
        expanded = np.zeros(ns, dtype=bool)
        if ns == 0:
            return set()
        # child count (direct nodes + child scopes) per scope
        children = np.bincount(self.node_scope[self.node_scope >= 0], minlength=ns)
        has_par = self.scope_parent >= 0
        children = children + np.bincount(self.scope_parent[has_par], minlength=ns)
        visible = self._visible_count(expanded)
        for d in range(int(self.scope_depth.max()) + 1):
            level = np.nonzero(self.scope_depth == d)[0]
            # a scope is only visible if all its ancestors are open
            level = level[[self._ancestors_open(k, expanded) for k in level]]
            if level.size == 0:
                break
            free = level[children[level] <= 1]
            expanded[free] = True
            rest = level[children[level] > 1]
            extra = int((children[rest] - 1).sum())
            if visible + extra <= max_visible or (
                    visible < MIN_VISIBLE and visible + extra <= HARD_MAX_VISIBLE):
                expanded[rest] = True
                visible += extra
            else:
                break
        return {self.scopes[k] for k in np.nonzero(expanded)[0]}

    def _ancestors_open(self, k: int, expanded: np.ndarray) -> bool:
        p = self.scope_parent[k]
        while p >= 0:
            if not expanded[p]:
                return False
            p = self.scope_parent[p]
        return True

    def _visible_count(self, expanded: np.ndarray) -> int:
        rep = self._representatives(expanded)
        return int(np.unique(rep).size)

    def _representatives(self, expanded: np.ndarray) -> np.ndarray:
        """For every element: itself (>= 0) or -(1 + s) for the outermost collapsed scope s."""
        ns = len(self.scopes)
        top = np.full(ns, -1, dtype=np.int64)  # outermost collapsed scope on the path (or -1)
        for k in np.argsort(self.scope_depth, kind="stable"):
            p = self.scope_parent[k]
            inherited = top[p] if p >= 0 else -1
            top[k] = inherited if inherited >= 0 else (-1 if expanded[k] else k)
        rep = np.arange(self.n, dtype=np.int64)
        has = self.node_scope >= 0
        if ns:
            t = np.full(self.n, -1, dtype=np.int64)
            t[has] = top[self.node_scope[has]]
            grouped = t >= 0
            rep[grouped] = -(1 + t[grouped])
        return rep

    def view(self, expanded: Optional[Iterable[str]] = None, *,
             max_visible: Optional[int] = None, sweeps: int = 4) -> GraphData:
        """Lay out the graph with the given scopes open (None: `default_expanded`)."""
        if expanded is None:
            exp_set = self.default_expanded(max_visible)
        else:
            exp_set = set(expanded)
        exp = np.zeros(len(self.scopes), dtype=bool)
        for s in exp_set:
            k = self.scope_index.get(s)
            if k is not None:
                exp[k] = True
        rep = self._representatives(exp)
        # visible elements: ungrouped elements in element order, then groups by scope index
        keys, inv = np.unique(rep, return_inverse=True)
        # np.unique sorts: groups (negative) first; reorder to elements then groups
        is_group = keys < 0
        new_order = np.concatenate([np.nonzero(~is_group)[0], np.nonzero(is_group)[0][::-1]])
        remap = np.empty(keys.size, dtype=np.int64)
        remap[new_order] = np.arange(keys.size)
        keys = keys[new_order]
        vis = remap[inv]  # element -> visible index
        m = keys.size
        elem = keys >= 0
        scope_k = np.where(elem, -1, -(keys + 1))
        # attributes of visible elements
        kind = np.where(elem, self.kind[np.where(elem, keys, 0)], GROUP).astype(np.int8)
        size = np.bincount(vis, minlength=m).astype(np.int32)
        flags = np.zeros(m, dtype=np.int32)
        np.bitwise_or.at(flags, vis, self.flags)
        group_op = len(self.ops)
        op = np.where(elem, self.op[np.where(elem, keys, 0)], group_op).astype(np.int32)
        ids: List[str] = []
        labels: List[str] = []
        group_names = _distinct_scope_labels([self.scopes[sk] for k, sk in
                                              zip(keys.tolist(), scope_k.tolist()) if k < 0])
        for k, sk in zip(keys.tolist(), scope_k.tolist()):
            if k >= 0:
                ids.append(self.ids[k])
                nm = self.names[k]
                if not nm or self.flags[k] & FLAG_DUPLICATE_NAME:
                    nm = self.ids[k]  # 'dup#1': tell same-named nodes apart
                labels.append(leaf_name(nm))
            else:
                path = self.scopes[sk]
                ids.append(GROUP_PREFIX + path)
                labels.append(f"{group_names[path]} ({int(self.scope_members[sk])})")
        enclosing = np.where(elem, self.node_scope[np.where(elem, keys, 0)],
                             self.scope_parent[np.maximum(scope_k, 0)]) if len(self.scopes) else \
            np.full(m, -1, dtype=np.int64)
        # visible edges, de-duplicated, without self-loops
        vs, vd = vis[self.src], vis[self.dst]
        keep = vs != vd
        code = np.unique(vs[keep] * m + vd[keep])
        es, ed = code // m, code % m
        # topological position of a visible element: earliest member
        vpos = np.full(m, self.n, dtype=np.int64)
        np.minimum.at(vpos, vis, self.pos)
        x, y, rank = _layered_layout(m, es, ed, vpos, sweeps=sweeps)
        return GraphData(
            ids=ids, labels=labels, ops=self.ops + ["Group"], op=op, kind=kind,
            x=x.astype(np.float32), y=y.astype(np.float32), rank=rank.astype(np.int32),
            size=size, flags=flags, scope=enclosing.astype(np.int32),
            edges=np.stack([es, ed], axis=1).astype(np.int32).reshape(-1, 2),
            scopes=self.scopes, scope_parent=self.scope_parent.astype(np.int32),
            expanded=sorted(exp_set & set(self.scopes)), findings=list(self.findings),
            total_nodes=self.n_nodes, visible_of=vis)

    def element_index(self, element_id: str) -> Optional[int]:
        """Element of a node/input/output id, or of the only node with that name (None when
        unknown; an ambiguous name raises, naming the candidates: `GraphIndex.node_index`)."""
        if self._index is None:
            self._index = {e: i for i, e in enumerate(self.ids)}
        k = self._index.get(element_id)
        if k is not None:
            return k
        hits = self.model.index.find(element_id)
        if len(hits) > 1:
            self.model.index.node_index(element_id)  # raises with the candidates
        return hits[0] if hits else None

    def element_indices(self, element_id: str) -> List[int]:
        """Every element an id or node name stands for (all nodes sharing a name)."""
        if self._index is None:
            self._index = {e: i for i, e in enumerate(self.ids)}
        k = self._index.get(element_id)
        return [k] if k is not None else self.model.index.find(element_id)

    def members(self, scope: str) -> List[str]:
        """Ids of the elements inside a scope (any depth)."""
        k = self.scope_index[scope]
        inside = np.zeros(len(self.scopes), dtype=bool)
        inside[k] = True
        for j in np.argsort(self.scope_depth, kind="stable"):
            p = self.scope_parent[j]
            if p >= 0 and inside[p]:
                inside[j] = True
        has = self.node_scope >= 0
        sel = np.zeros(self.n, dtype=bool)
        sel[has] = inside[self.node_scope[has]]
        return [self.ids[i] for i in np.nonzero(sel)[0]]

    def scope_path_of(self, element_id: str) -> List[str]:
        """The scopes enclosing an element, outermost first."""
        i = self.ids.index(element_id)
        k = int(self.node_scope[i])
        out = []
        while k >= 0:
            out.append(self.scopes[k])
            k = int(self.scope_parent[k])
        return out[::-1]


def layout(model: ModelLike, collapse: bool = True, *, expanded: Optional[Iterable[str]] = None,
           max_visible: Optional[int] = None) -> GraphData:
    """Layered layout of a model. collapse=True opens scopes only while about `max_visible`
    (default: `default_budget`) elements are visible; collapse=False shows every node; `expanded` names the open scopes."""
    gs = GraphStructure(model)
    if expanded is not None:
        return gs.view(expanded)
    if not collapse:
        return gs.view(gs.scopes)
    return gs.view(None, max_visible=max_visible)


# -- the layout core ---------------------------------------------------------------------------
def _csr(n: int, a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Adjacency of a -> b as (indptr, targets)."""
    o = np.argsort(a, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(a, minlength=n), out=indptr[1:])
    return indptr, b[o]


def _topological_order(n: int, src: np.ndarray, dst: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A topological order (element index order when that already is one, as in most ONNX
    files) and the indices of edges that had to be treated as back-edges to break cycles."""
    if src.size == 0 or bool(np.all(src < dst)):
        return np.arange(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    indptr, tgt = _csr(n, src, dst)
    indeg = np.bincount(dst, minlength=n)
    order = _kahn(n, indptr.tolist(), tgt.tolist(), indeg.tolist())
    if len(order) == n:
        return np.array(order, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # cycle: drop edges that go backwards in element order among the unordered elements
    done = np.zeros(n, dtype=bool)
    done[order] = True
    back = np.nonzero(~done[src] & ~done[dst] & (src >= dst))[0]
    keep = np.ones(src.size, dtype=bool)
    keep[back] = False
    s2, d2 = src[keep], dst[keep]
    indptr, tgt = _csr(n, s2, d2)
    order = _kahn(n, indptr.tolist(), tgt.tolist(), np.bincount(d2, minlength=n).tolist())
    return np.array(order, dtype=np.int64), back


def _kahn(n: int, indptr: List[int], tgt: List[int], indeg: List[int]) -> List[int]:
    """Kahn's algorithm, smallest element index first among ready elements (stable)."""
    import heapq

    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in tgt[indptr[v]:indptr[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(ready, w)
    return order


def _cycle_members(n: int, src: np.ndarray, dst: np.ndarray) -> List[int]:
    """Elements on a cycle: members of strongly connected components of size > 1 or with a
    self-loop (iterative Tarjan)."""
    indptr, tgt = _csr(n, src, dst)
    ip, tg = indptr.tolist(), tgt.tolist()
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: List[int] = []
    out: List[int] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, ip[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, e = work[-1]
            if e < ip[v + 1]:
                work[-1] = (v, e + 1)
                w = tg[e]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, ip[w]))
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in tg[ip[v]:ip[v + 1]]:
                    out.extend(comp)
    return sorted(out)


def _order_breaking_cycles(m: int, a: np.ndarray, b: np.ndarray, prio: np.ndarray) -> np.ndarray:
    """Position of each element in a topological order preferring low `prio`; when only
    elements on cycles remain, the lowest-`prio` one is taken anyway (its in-edges become
    back-edges)."""
    import heapq

    if a.size == 0 or bool(np.all(prio[a] < prio[b])):
        pos = np.empty(m, dtype=np.int64)
        pos[np.argsort(prio, kind="stable")] = np.arange(m)
        return pos
    indptr, tgt = _csr(m, a, b)
    ip, tg = indptr.tolist(), tgt.tolist()
    indeg = np.bincount(b, minlength=m).tolist()
    pr = prio.tolist()
    by_prio = np.argsort(prio, kind="stable").tolist()
    done = [False] * m
    ready = [(pr[i], i) for i in range(m) if indeg[i] == 0]
    heapq.heapify(ready)
    pos = [0] * m
    k = 0
    cursor = 0
    while k < m:
        if ready:
            v = heapq.heappop(ready)[1]
            if done[v]:
                continue
        else:  # only cycles left: break at the lowest-priority remaining element
            while done[by_prio[cursor]]:
                cursor += 1
            v = by_prio[cursor]
        done[v] = True
        pos[v] = k
        k += 1
        for w in tg[ip[v]:ip[v + 1]]:
            indeg[w] -= 1
            if indeg[w] == 0 and not done[w]:
                heapq.heappush(ready, (pr[w], w))
    return np.array(pos, dtype=np.int64)


def _layered_layout(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *,
                    sweeps: int = 4) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, y, rank for m elements. `vpos` orders ties; edges that close a cycle (collapsing
    scopes can create them) are reversed for ranking."""
    if m == 0:
        z = np.zeros(0)
        return z, z, np.zeros(0, dtype=np.int64)
    vpos = _order_breaking_cycles(m, es, ed, vpos)
    fwd = vpos[es] < vpos[ed]
    a = np.where(fwd, es, ed)
    b = np.where(fwd, ed, es)
    # longest path from the sources: one pass over edges sorted by their target's position
    o = np.argsort(vpos[b], kind="stable")
    rank = [0] * m
    for s, d in zip(a[o].tolist(), b[o].tolist()):
        r = rank[s] + 1
        if r > rank[d]:
            rank[d] = r
    # pull elements down next to their consumers (as late as possible, never above ASAP):
    # one pass over edges sorted by their source's position, latest first
    o = np.argsort(-vpos[a], kind="stable")
    a_o, b_o = a[o].tolist(), b[o].tolist()
    latest = list(rank)
    has_succ = [False] * m
    limit = [0] * m
    cur = -1
    for s, d in zip(a_o, b_o):
        if s != cur:
            if cur >= 0 and limit[cur] - 1 > latest[cur]:
                latest[cur] = limit[cur] - 1
            cur = s
            limit[s] = latest[d]
            has_succ[s] = True
        elif latest[d] < limit[s]:
            limit[s] = latest[d]
    if cur >= 0 and limit[cur] - 1 > latest[cur]:
        latest[cur] = limit[cur] - 1
    r = np.array(latest, dtype=np.int64)
    # x order within ranks: barycentre sweeps (all ranks at once), down then up
    n_ranks = int(r.max()) + 1
    counts = np.bincount(r, minlength=n_ranks)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    order = np.lexsort((vpos, r))
    xs = np.empty(m, dtype=np.float64)

    def place(order: np.ndarray) -> None:
        ro = r[order]
        xs[order] = np.arange(m) - starts[ro] - (counts[ro] - 1) / 2.0

    place(order)
    deg_in = np.bincount(b, minlength=m).astype(np.float64)
    deg_out = np.bincount(a, minlength=m).astype(np.float64)
    for it in range(sweeps):
        if it % 2 == 0:
            tot = np.bincount(b, weights=xs[a], minlength=m)
            key = np.where(deg_in > 0, tot / np.maximum(deg_in, 1), xs)
        else:
            tot = np.bincount(a, weights=xs[b], minlength=m)
            key = np.where(deg_out > 0, tot / np.maximum(deg_out, 1), xs)
        order = np.lexsort((xs, key, r))
        place(order)
    # coordinates: move towards the barycentre of all neighbours keeping order and spacing 1
    ro = r[order]
    j = np.arange(m) - starts[ro]
    deg = deg_in + deg_out
    for _ in range(2):
        tot = np.bincount(b, weights=xs[a], minlength=m) + np.bincount(a, weights=xs[b], minlength=m)
        want = np.where(deg > 0, tot / np.maximum(deg, 1), xs)[order]
        span = float(np.abs(want).max() + m + 1)
        big = 4.0 * span
        off = ro * big
        left = np.maximum.accumulate(want - j + off) - off + j
        # right-to-left pass: the same on the mirrored sequence
        wr = -want[::-1]
        jrr = (counts[ro] - 1 - j)[::-1]
        offr = (n_ranks - 1 - ro[::-1]) * big
        right = -(np.maximum.accumulate(wr - jrr + offr) - offr + jrr)[::-1]
        xs[order] = (left + right) / 2.0
    y = r.astype(np.float64)
    return xs, y, r


def _distinct_scope_labels(paths: List[str]) -> Dict[str, str]:
    """Labels for collapsed groups: the scope's last part, extended with as many parent parts
    as it takes to tell groups of the same name apart ('layer.0/attention/self' and
    'layer.1/attention/self', not two 'self')."""
    from workbench.graphindex import scope_parts

    parts = {p: scope_parts(p) or [p] for p in paths}
    depth = {p: 1 for p in paths}
    while True:
        label = {p: "/".join(parts[p][-depth[p]:]) for p in paths}
        seen: Dict[str, List[str]] = {}
        for p, lb in label.items():
            seen.setdefault(lb, []).append(p)
        grow = [p for group in seen.values() if len(group) > 1 for p in group
                if depth[p] < len(parts[p])]
        if not grow:
            return label
        for p in grow:
            depth[p] += 1
