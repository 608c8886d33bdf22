"""Layered layout of an ONNX graph for the graph view, with nodes collapsed by name scope.

`layout(model)` turns a `Model` (no weights needed) into `GraphData`: plain arrays of visible
element ids, positions, box widths, weight lines ('W <64x3x7x7>'), edge dtype/shape labels and
edge bends that the front end draws as-is. Layout is a Sugiyama-style pass (`_sugiyama`):
longest-path ranks (two rankings tried: every element, or only those writing as many edges as
they read, pulled down next to their consumers), long edges routed through one dummy per rank
(the long edges of one source share a trunk), crossing reduction like dot's `mincross`
(`_mincross`: three starts — barycentre sweeps, breadth first from the sources, from the sinks —
each followed by weighted-median sweeps rank after rank and vectorised transpositions that may
also swap ties; the two rankings race, the better one is swept further), then x coordinates
that keep each rank's order and boxes apart while pulling neighbours (and dummy chains) straight.
`benchmarks/graph_layout.py` compares crossings and edge length with Graphviz dot.

PyTorch-style names (`/encoder/layer.3/attention/self/MatMul`) define a scope tree; a collapsed
scope is drawn as one group node and `GraphStructure.view(expanded=...)` lays out any
expand/collapse state without re-reading the model. Broken graphs (cycles, dangling inputs,
duplicate node names, tensors produced twice) are laid out anyway: back-edges are reversed and
the offending nodes carry flags and `Finding`s instead of raising.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Set, Tuple, Union

import numpy as np

from workbench.core.errors import Finding
from workbench.core.graphindex import leaf_name, parent_scope
from workbench.core.model import ModelLike, as_model  # noqa: F401 (ModelLike re-exported)

if TYPE_CHECKING:  # pragma: no cover

    pass

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
    small models keep their scopes collapsed, big ones show ~1-2k elements (the 2D canvas draws them smoothly)."""
    return int(min(MAX_BUDGET, max(MIN_BUDGET, n_nodes // 10)))

MIN_VISIBLE = 8       # a default view this small is opened further, up to HARD_MAX_VISIBLE
HARD_MAX_VISIBLE = 2000



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
    width: Optional[np.ndarray] = None       # box width in x units (1 unit = 100 px)
    info: List[str] = field(default_factory=list)         # weight lines per element ('W <64x3>')
    edge_labels: List[str] = field(default_factory=list)  # dtype and shape per edge
    bend_ptr: Optional[np.ndarray] = None    # edge e bends at bend_x[bend_ptr[e]:bend_ptr[e+1]]
    bend_x: Optional[np.ndarray] = None      # one x per rank between the edge's ends, downwards
    crossings: int = 0                       # edge crossings of this drawing (-1: not counted,
                                             # as for one spliced by expand_in_place)
    layout_s: float = 0.0                    # seconds spent placing (ranks, order, x, bends)

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
            "width": [] if self.width is None else np.round(self.width, 3).tolist(),
            "info": self.info, "edge_labels": self.edge_labels,
            **self._bends_dict(),
        }

    def _bends_dict(self) -> Dict[str, Any]:
        """Bends as `shared_bends` stores them: edge e bends at
        bend_x[bend_start[e]:bend_start[e] + bend_count[e]] (trunks stored once)."""
        if self.bend_ptr is None or self.bend_x is None:
            return {"bend_start": [], "bend_count": [], "bend_x": []}
        start, count, xs = shared_bends(self.rank, self.edges, self.bend_ptr, self.bend_x)
        return {"bend_start": start.tolist(), "bend_count": count.tolist(),
                "bend_x": np.round(xs, 2).tolist()}


def shared_bends(rank: np.ndarray, edges: np.ndarray, bend_ptr: np.ndarray,
                 bend_x: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bends of a drawing stored once per trunk: (start, count, xs), edge e bending at
    xs[start[e]:start[e] + count[e]], the same values as bend_x[bend_ptr[e]:bend_ptr[e + 1]].

    Long edges from one element share their dummy chain (a mask read by every layer runs
    down one trunk), so most of their bends repeat the longest one's: an edge whose bends are
    a prefix of the longest edge's from the same upper element points into that edge's
    bends instead of holding a copy. On a 20k-node encoder this stores 32k bends, not 2.4M."""
    e_ = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    n_e = e_.shape[0]
    ptr = np.asarray(bend_ptr, dtype=np.int64)
    bx = np.asarray(bend_x)
    if n_e == 0 or ptr.size != n_e + 1:
        return np.zeros(n_e, dtype=np.int64), np.zeros(n_e, dtype=np.int64), bx[:0]
    cnt = np.diff(ptr)
    r = np.asarray(rank)
    up = np.where(r[e_[:, 0]] <= r[e_[:, 1]], e_[:, 0], e_[:, 1])
    # the edge with most bends of each upper element: its trunk owner
    by = np.lexsort((-cnt, up))
    head = np.ones(n_e, dtype=bool)
    head[1:] = up[by][1:] != up[by][:-1]
    owner = np.empty(n_e, dtype=np.int64)
    owner[by] = by[head][np.cumsum(head) - 1]
    # an edge shares when every one of its bends equals the owner's at the same rank (bend j
    # of edge e is bx[ptr[e] + j], the owner's bx[ptr[owner] + j]): one gather over all bends,
    # the mismatching edges found by where their bends lie
    total = int(ptr[-1])
    same = np.ones(n_e, dtype=bool)
    if total:
        theirs = np.arange(total, dtype=np.int64)
        theirs += np.repeat(ptr[owner] - ptr[:-1], cnt)
        bad = np.nonzero(bx[:total] != bx[theirs])[0]
        if bad.size:
            same[np.searchsorted(ptr, bad, side="right") - 1] = False
    own = (owner == np.arange(n_e)) | ~same | (cnt == 0)
    kc = np.where(own, cnt, 0)
    start = np.concatenate([[0], np.cumsum(kc)[:-1]]).astype(np.int64)
    xs = bx[:total][np.repeat(own, cnt)]  # the owners' bends (and unshared ones'), in edge order
    start[~own] = start[owner[~own]]
    return start, cnt.astype(np.int64), xs


def _spliced_bends(prev: "GraphData", e: np.ndarray, old_idx: np.ndarray, keep: np.ndarray,
                   x: np.ndarray, rank: np.ndarray, r_g: int, x_g: float, grow_w: float,
                   grow_r: int) -> Tuple[np.ndarray, np.ndarray]:
    """Bends (ptr, xs) of a view where the group at rank `r_g`, x `x_g` opened in place
    (`GraphStructure.expand_in_place`): one bend per rank between an edge's ends. An edge
    between kept elements that `prev` drew keeps its bends, moved sideways like the elements
    (by `grow_w` / 2 away from the group) and, on the `grow_r` rows the group gained, at its
    place on the group's rank; any other edge runs straight between its ends."""
    n_e = e.shape[0]
    a, b = e[:, 0], e[:, 1]
    upper = rank[a] <= rank[b]
    up, dn = np.where(upper, a, b), np.where(upper, b, a)
    cnt = np.maximum(rank[dn] - rank[up] - 1, 0).astype(np.int64)
    ptr = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int64)
    of = np.repeat(np.arange(n_e), cnt)
    j = np.arange(int(ptr[-1])) - ptr[:-1][of]
    # straight: evenly between the ends
    t = (j + 1) / (cnt[of] + 1)
    xs = x[up[of]] * (1 - t) + x[dn[of]] * t
    # kept: the edge `prev` drew between the same two elements, same direction
    old = np.full(n_e, -1, dtype=np.int64)
    both = keep[a] & keep[b]
    if prev.bend_ptr is not None and prev.edges.shape[0] and both.any():
        m_old = max(len(prev), 1)
        pe = prev.edges.astype(np.int64)
        codes = pe[:, 0] * m_old + pe[:, 1]
        by = np.argsort(codes, kind="stable")
        want = old_idx[a[both]] * m_old + old_idx[b[both]]
        at = np.minimum(np.searchsorted(codes[by], want), by.size - 1)
        old[both] = np.where(codes[by][at] == want, by[at], -1)
    has = old[of] >= 0
    if has.any():
        k = old[of][has]
        oa, ob = old_idx[a[of][has]], old_idx[b[of][has]]
        o_up = np.minimum(prev.rank[oa], prev.rank[ob]).astype(np.int64)
        nr = rank[up[of][has]].astype(np.int64) + 1 + j[has]  # the bend's rank in this view
        orr = np.where(nr <= r_g, nr, np.maximum(r_g, nr - grow_r))  # ... and in `prev`
        oj = orr - o_up - 1
        # the old bend where `prev` had one at that rank (only there: an edge after the last
        # bent one has bend_ptr[k] == len(bend_x)); at the gained rows above the edge's old
        # first bend, the upper end's x; straight where `prev` had none (no such rank)
        vals = xs[has].copy()
        old_n = (prev.bend_ptr[k + 1] - prev.bend_ptr[k]).astype(np.int64)
        inside = (oj >= 0) & (oj < old_n)
        src = prev.bend_x[prev.bend_ptr[k[inside]] + oj[inside]].astype(np.float64)
        vals[inside] = src + np.sign(src - x_g) * grow_w / 2
        vals[oj < 0] = x[up[of][has]][oj < 0]
        xs[has] = vals
    return ptr, xs


class GraphStructure:
    """The graph's topology and scope tree, read once from a model; lays out any view of it.

    Elements 0..n_nodes-1 are ONNX nodes (aligned with `model.node_ids`), then one element per
    graph input (not an initializer), then one per graph output.
    """

    def __init__(self, model: ModelLike):
        m = as_model(model)
        self.model = m
        gi = m.index  # its node list, ids and names, read from the protobuf once
        self.init_names = {t.name for t in m.graph.initializer}
        graph_inputs, graph_outputs = self._read_elements(gi)
        dangling, dup_out = self._read_edges(gi, graph_inputs, graph_outputs)
        self._weights: Optional[List[str]] = None
        self._edge_labels: Dict[str, str] = {}
        self._values: Optional[Dict[str, Any]] = None
        self._flag_problems(gi, dangling, dup_out)
        self._order_topologically()
        self._read_scopes(gi, len(graph_inputs) + len(graph_outputs))
        self._index: Optional[Dict[str, int]] = None
        # titles for collapsed groups instead of '<scope> (N)' (the split view's engine layers)
        self.group_labels: Dict[str, str] = {}

    def _read_elements(self, gi: Any) -> Tuple[List[str], List[str]]:
        """The elements (nodes, then graph inputs that are not initializers, then graph
        outputs): ids, names, op codes and kinds; returns (graph inputs, graph outputs)."""
        g = self.model.graph
        n = len(gi.nodes)
        graph_inputs = [v.name for v in g.input if v.name not in self.init_names]
        graph_outputs = [v.name for v in g.output]
        n_in, n_out = len(graph_inputs), len(graph_outputs)
        self.n_nodes = n
        self.n = n + n_in + n_out
        self.ids = list(gi.ids) + [f"input:{t}" for t in graph_inputs] + \
            [f"output:{t}" for t in graph_outputs]
        self.names = list(gi.names) + graph_inputs + graph_outputs
        op_list = [nd.op_type for nd in gi.nodes] + ["Input"] * n_in + ["Output"] * n_out
        self.ops = sorted(set(op_list))  # (np.unique's order, without sorting 20k objects)
        op_pos = {o: k for k, o in enumerate(self.ops)}
        self.op = np.fromiter(map(op_pos.__getitem__, op_list), dtype=np.int32, count=len(op_list))
        self.kind = np.array([NODE] * n + [INPUT] * n_in + [OUTPUT] * n_out, dtype=np.int8)
        self.flags = np.zeros(self.n, dtype=np.int32)
        self.findings: List[Finding] = []
        return graph_inputs, graph_outputs

    def _read_edges(self, gi: Any, graph_inputs: List[str], graph_outputs: List[str]
                    ) -> Tuple[Dict[str, List[int]], Dict[str, List[int]]]:
        """The edges (src, dst, the tensor each carries) from the model's graph index, graph
        inputs producing their tensor; returns (tensors read but never produced -> readers,
        tensors with several producers -> producers)."""
        n, n_in = self.n_nodes, len(graph_inputs)
        producer: Dict[str, int] = dict(gi.producer)
        dup_out: Dict[str, List[int]] = {t: list(v) for t, v in gi.duplicate_producers.items()}
        for k, t in enumerate(graph_inputs):
            if t in gi.producer:  # a node writes a graph input
                dup_out[t] = [n + k] + gi.duplicate_producers.get(t, [gi.producer[t]])
            producer[t] = n + k
        src: List[int] = []
        dst: List[int] = []
        tens: List[str] = []  # the tensor each edge carries
        dangling: Dict[str, List[int]] = {}
        # every node's inputs (and its bodies' implicit inputs) as one flat list, looked up in
        # one pass: the same edges, in the same order, as a loop per node and input
        ins_of = list(gi.node_inputs)
        for i, nd in enumerate(gi.nodes):
            if nd.attribute and gi.has_subgraphs(i):
                ins_of[i] = ins_of[i] + gi.implicit_inputs(i)
        flat = list(chain.from_iterable(ins_of))
        reader = np.repeat(np.arange(n), np.fromiter(map(len, ins_of), dtype=np.int64, count=n)).tolist()
        for t, p, i in zip(flat, map(producer.get, flat), reader):
            if p is not None:
                if t:
                    src.append(p)
                    dst.append(i)
                    tens.append(t)
            elif t and t not in self.init_names:
                dangling.setdefault(t, []).append(i)
        for k, t in enumerate(graph_outputs):
            p = producer.get(t)
            if p is not None:
                src.append(p)
                dst.append(n + n_in + k)
                tens.append(t)
            elif t not in self.init_names:
                dangling.setdefault(t, []).append(n + n_in + k)
        self.src = np.array(src, dtype=np.int64)
        self.dst = np.array(dst, dtype=np.int64)
        self.edge_tensor = tens
        return dangling, dup_out

    def _flag_problems(self, gi: Any, dangling: Dict[str, List[int]],
                       dup_out: Dict[str, List[int]]) -> None:
        """Flag and report dangling inputs, duplicate node names and tensors with several
        producers (the graph still draws; the findings say what to fix)."""
        for t, consumers in dangling.items():
            self.flags[consumers] |= FLAG_DANGLING
            self.findings.append(Finding(
                "error", "dangling-input",
                f"tensor '{t}' is read but no node produces it and it is neither a graph input "
                "nor an initializer", nodes=[self.ids[c] for c in consumers], tensors=[t],
                hint="add it as a graph input or initializer, or reconnect the consumer "
                     "(a graphsurgeon recipe can do it)", source="graph"))
        node_ids = list(gi.ids)
        counts: Dict[str, List[int]] = {}
        for i, nm in enumerate(gi.names):
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

    def _order_topologically(self) -> None:
        """A topological order and each element's place in it; cycles are broken by reversing
        back-edges, and their members flagged and reported."""
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

    def _read_scopes(self, gi: Any, n_io: int) -> None:
        """The scope tree (every prefix of every node's scope): each scope's parent and depth,
        each element's leaf scope, and how many elements lie anywhere below each scope."""
        scope_str = list(gi.scope_paths) + [""] * n_io
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

    def sole_child_scope(self, scope: str) -> Optional[str]:
        """The one child scope of `scope` when nothing else is drawn in it (no direct member but
        constant sources, which fold into their readers): opening it alone would show one group."""
        k = self.scope_index[scope]
        kids = np.nonzero(self.scope_parent == k)[0]
        if kids.size != 1 or np.any((self.node_scope == k) & ~self._trivial_sources()):
            return None
        return self.scopes[int(kids[0])]

    def _ancestors_open(self, k: int, expanded: np.ndarray) -> bool:
        p = self.scope_parent[k]
        while p >= 0:
            if not expanded[p]:
                return False
            p = self.scope_parent[p]
        return True

    def _visible_count(self, expanded: np.ndarray) -> int:
        """Visible elements, not counting constant sources (Constant nodes and Identity
        copies of weights at the root): a model wrapped in one scope beside its constants
        still opens."""
        rep = self._representatives(expanded)
        return int(np.unique(rep[~self._trivial_sources()]).size)

    def _fold_constants(self, rep: np.ndarray) -> np.ndarray:
        """rep with every trivial source whose consumers share one representative mapped to
        that representative (it is drawn inside its reader's box)."""
        triv = self._trivial_sources()
        e = triv[self.src]
        if not e.any():
            return rep
        s, d = self.src[e], rep[self.dst[e]]
        lo = np.full(self.n, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(self.n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, s, d)
        np.maximum.at(hi, s, d)
        fold = triv & (lo == hi)
        out = rep.copy()
        out[fold] = lo[fold]
        return out

    def _leaf_labels(self) -> List[str]:
        """Per element, its label drawn as a node: the leaf of its name (of its id when unnamed
        or when its name is shared: 'dup#1' tells same-named nodes apart); made once."""
        if getattr(self, "_leaf", None) is None:
            dup = (self.flags & FLAG_DUPLICATE_NAME).astype(bool).tolist()
            self._leaf = [leaf_name(i if not nm or d else nm)
                          for i, nm, d in zip(self.ids, self.names, dup)]
        return self._leaf

    def _trivial_sources(self) -> np.ndarray:
        if getattr(self, "_trivial", None) is None:
            has_in = np.zeros(self.n, dtype=bool)
            has_in[self.dst] = True
            trivial_ops = np.array([o in ("Constant", "Identity") for o in self.ops], dtype=bool)
            t = ~has_in & (trivial_ops[self.op] if len(self.ops) else False)
            t[self.n_nodes:] = False
            self._trivial = t
        return self._trivial

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
             max_visible: Optional[int] = None, sweeps: int = 4,
             fold_constants: bool = True, laid_out: bool = True) -> GraphData:
        """Lay out the graph with the given scopes open (None: `default_expanded`).
        fold_constants: a Constant node (or an Identity copy of a weight) whose readers are all
        drawn as one element is folded into that element's box, like an initializer.
        laid_out=False: the visible elements and edges only, every coordinate 0 and no bends
        (for a caller that places them itself, as `expand_in_place`)."""
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
        if fold_constants:
            rep = self._fold_constants(rep)
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
        leaf = self._leaf_labels()
        for k, sk in zip(keys.tolist(), scope_k.tolist()):
            if k >= 0:
                ids.append(self.ids[k])
                labels.append(leaf[k])
            else:
                path = self.scopes[sk]
                ids.append(GROUP_PREFIX + path)
                labels.append(self.group_labels.get(path) or
                              f"{group_names[path]} ({int(self.scope_members[sk])})")
        enclosing = np.where(elem, self.node_scope[np.where(elem, keys, 0)],
                             self.scope_parent[np.maximum(scope_k, 0)]) if len(self.scopes) else \
            np.full(m, -1, dtype=np.int64)
        # visible edges, de-duplicated, without self-loops
        vs, vd = vis[self.src], vis[self.dst]
        keep = vs != vd
        code, first = np.unique(vs[keep] * m + vd[keep], return_index=True)
        es, ed = code // m, code % m
        edge_first = np.nonzero(keep)[0][first]  # a structure edge behind each visible edge
        # topological position of a visible element: earliest member
        vpos = np.full(m, self.n, dtype=np.int64)
        np.minimum.at(vpos, vis, self.pos)
        weights = self.weights()
        info = [weights[k] if 0 <= k < self.n_nodes else "" for k in keys.tolist()]
        titles = [self.ops[o] if kd == NODE else lb for o, kd, lb in
                  zip(op.tolist(), kind.tolist(), labels)]
        width = box_widths(titles, info, kind)
        t_lay = time.perf_counter()
        if laid_out:
            lay = _sugiyama(m, es, ed, vpos, sweeps=sweeps, width=width)
        else:
            lay = Layered(np.zeros(m), np.zeros(m, dtype=np.int64),
                          np.zeros(es.size + 1, dtype=np.int64), np.zeros(0), crossings=-1)
        t_lay = time.perf_counter() - t_lay
        x, rank = lay.x, lay.rank
        y = rank.astype(np.float64)
        return GraphData(
            ids=ids, labels=labels, ops=self.ops + ["Group"], op=op, kind=kind,
            x=x.astype(np.float32), y=y.astype(np.float32), rank=rank.astype(np.int32),
            size=size, flags=flags, scope=enclosing.astype(np.int32),
            edges=np.stack([es, ed], axis=1).astype(np.int32).reshape(-1, 2),
            scopes=self.scopes, scope_parent=self.scope_parent.astype(np.int32),
            expanded=sorted(exp_set & set(self.scopes)), findings=list(self.findings),
            total_nodes=self.n_nodes, visible_of=vis, width=width.astype(np.float32),
            info=info, edge_labels=self.edge_labels(edge_first.tolist()),
            bend_ptr=lay.bend_ptr.astype(np.int32), bend_x=lay.bend_x.astype(np.float32),
            crossings=lay.crossings, layout_s=t_lay)

    def expand_in_place(self, prev: GraphData, scope: str, expanded: Iterable[str], *,
                        fold_constants: bool = True) -> GraphData:
        """The view with `scope` (a collapsed group of `prev`) opened where it stands: its
        members are laid out on their own and spliced in at the group's place; everything
        else keeps its order, moving sideways by half the growth in width and down by the
        ranks the group gained (nothing else is laid out again). A full `view` when the group
        is not drawn in `prev`."""
        gid = GROUP_PREFIX + scope
        if gid not in prev.ids or prev.width is None:
            return self.view(expanded, fold_constants=fold_constants)
        # the visible graph without a layout: the members get their own below, the rest
        # keeps `prev`'s places (a full layout here would be thrown away)
        new = self.view(expanded, fold_constants=fold_constants, laid_out=False)
        gi = prev.ids.index(gid)
        r_g, x_g, w_g = int(prev.rank[gi]), float(prev.x[gi]), float(prev.width[gi])
        old_of = {e: i for i, e in enumerate(prev.ids)}
        m = len(new)
        old_idx = np.array([old_of.get(e, -1) for e in new.ids], dtype=np.int64)
        member = old_idx < 0
        if not member.any():  # nothing new is drawn: lay the view out as a whole
            return self.view(expanded, fold_constants=fold_constants)
        mem = np.nonzero(member)[0]
        local = np.full(m, -1, dtype=np.int64)
        local[mem] = np.arange(mem.size)
        e = new.edges.astype(np.int64)
        inner = member[e[:, 0]] & member[e[:, 1]]
        t_lay = time.perf_counter()
        sub = _sugiyama(mem.size, local[e[inner, 0]], local[e[inner, 1]], np.arange(mem.size),
                        width=new.width[mem])
        new.layout_s = time.perf_counter() - t_lay
        lo = float(np.min(sub.x - new.width[mem] / 2))
        hi = float(np.max(sub.x + new.width[mem] / 2))
        sub_x = sub.x - (lo + hi) / 2
        grow_w = max(0.0, (hi - lo) - w_g)
        grow_r = int(sub.rank.max())
        x = np.empty(m, dtype=np.float64)
        rank = np.empty(m, dtype=np.int64)
        keep = ~member
        ox = prev.x[old_idx[keep]].astype(np.float64)
        orank = prev.rank[old_idx[keep]].astype(np.int64)
        x[keep] = ox + np.sign(ox - x_g) * grow_w / 2
        rank[keep] = orank + np.where(orank > r_g, grow_r, 0)
        x[mem] = x_g + sub_x
        rank[mem] = r_g + sub.rank
        # bends: kept (shifted like the elements) for edges between kept elements, the rows
        # the group gained repeating the edge's place at the group's rank; straight for edges
        # of members (and edges new to this view)
        ptr, bx = _spliced_bends(prev, e, old_idx, keep, x, rank, r_g, x_g, grow_w, grow_r)
        new.x = x.astype(np.float32)
        new.rank = rank.astype(np.int32)
        new.y = rank.astype(np.float32)
        new.bend_ptr = ptr.astype(np.int32)
        new.bend_x = bx.astype(np.float32)
        new.crossings = -1  # not counted for a spliced drawing
        return new

    def weights(self) -> List[str]:
        """Per node: its initializer inputs folded into its box, one line each, as Netron
        writes them ('W <64x3x7x7>', the input's name from the op schema), at most
        MAX_WEIGHT_LINES (then '+N more')."""
        if self._weights is None:
            gi = self.model.index
            vals = gi.values  # the index's initializer shapes (edge labels read it too)
            inits = {t: vals[t].shape for t in self.init_names}
            triv = self._trivial_sources()
            consumers = np.bincount(self.src, minlength=self.n)
            fmt = lambda dims: f"<{'x'.join(str(d) for d in dims) or 'scalar'}>"  # noqa: E731
            const_of_node: Dict[int, str] = {}  # a folded constant node -> its shape text
            for j in np.nonzero(triv & (consumers == 1))[0].tolist():
                nd = self.model.graph.node[j]
                if nd.op_type == "Constant":
                    val = next((a.t for a in nd.attribute if a.name == "value"), None)
                    dims = tuple(int(x) for x in val.dims) if val is not None else ()
                else:  # an Identity copy of a weight
                    dims = inits.get(nd.input[0]) if nd.input else None
                if dims is not None:
                    const_of_node[j] = fmt(dims)
            init_text = {t: fmt(dims) for t, dims in inits.items()}
            producer = gi.producer
            out = []
            node_inputs = gi.node_inputs
            op_names = [self.ops[o] for o in self.op[: self.n_nodes].tolist()]
            if const_of_node:  # a folded constant's output reads like an initializer
                graph_nodes = self.model.graph.node
                const_text = {t: text for j, text in const_of_node.items()
                              for t in graph_nodes[j].output if producer.get(t) == j}
                init_text = {**const_text, **init_text}
            is_init = init_text.__contains__
            for i in range(self.n_nodes):
                ins = node_inputs[i]
                if not any(map(is_init, ins)):
                    out.append("")
                    continue
                hits = [(k, t) for k, t in enumerate(ins) if t in init_text]
                lines = [f"{_input_name(op_names[i], gi.domain(i), k, t)} {init_text[t]}"
                         for k, t in hits]
                if len(lines) > MAX_WEIGHT_LINES:
                    lines = lines[:MAX_WEIGHT_LINES - 1] + [f"+{len(lines) - MAX_WEIGHT_LINES + 1} more"]
                out.append("\n".join(lines))
            del gi
            self._weights = out
        return self._weights

    def edge_label(self, e: int) -> str:
        """dtype and shape of the tensor on structure edge e ('float32 1x64x56x56'), as far
        as the model declares them ('' when it does not)."""
        return self.edge_labels([e])[0]

    def edge_labels(self, edges: Iterable[int]) -> List[str]:
        """`edge_label` of each structure edge (one label per tensor, made once)."""
        if self._values is None:
            self._values = self.model.index.values
        vals, cache, tens = self._values, self._edge_labels, self.edge_tensor
        out = []
        for e in edges:
            t = tens[e] if e < len(tens) else ""
            label = cache.get(t)
            if label is None:
                vt = vals.get(t) if t else None
                if vt is None:
                    label = ""
                else:
                    dt = _DTYPE_NAMES.get(vt.dtype, "") if vt.dtype else ""
                    if vt.shape is None:
                        label = dt
                    elif vt.shape == ():
                        label = f"{dt} scalar".strip()
                    else:
                        shape = "x".join(["?" if d is None else str(d) for d in vt.shape])
                        label = f"{dt} {shape}" if dt else shape
                cache[t] = label
            out.append(label)
        return out

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


MAX_WEIGHT_LINES = 4
CHAR_PX, TITLE_CHAR_PX, BOX_PAD_PX, UNIT_PX = 6.2, 7.0, 16.0, 100.0
MIN_WIDTH, MAX_WIDTH = 0.8, 2.6
_DTYPE_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64",
                12: "uint32", 13: "uint64", 16: "bfloat16", 17: "float8e4m3fn",
                19: "float8e5m2", 21: "uint4", 22: "int4"}
_SCHEMA_INPUTS: Dict[Tuple[str, str], Optional[List[Tuple[str, bool]]]] = {}


_INPUT_NAMES: Dict[Tuple[str, str, int], Optional[str]] = {}


def _input_name(op: str, domain: str, k: int, tensor: str) -> str:
    """The op schema's name of input k ('W', 'B'), else the tensor's last name part."""
    got = _INPUT_NAMES.get((op, domain, k), "")
    if got != "":
        return got if got is not None else (leaf_name(tensor)[-16:] or tensor[-16:])
    got = _schema_input_name(op, domain, k)
    _INPUT_NAMES[(op, domain, k)] = got
    return got if got is not None else (leaf_name(tensor)[-16:] or tensor[-16:])


def _schema_input_name(op: str, domain: str, k: int) -> Optional[str]:
    key = (op, domain)
    if key not in _SCHEMA_INPUTS:
        try:
            import onnx.defs

            sch = onnx.defs.get_schema(op, domain=domain)
            _SCHEMA_INPUTS[key] = [(i.name, i.option == i.option.Variadic) for i in sch.inputs]
        except Exception:  # unknown op or domain: fall back to the tensor name
            _SCHEMA_INPUTS[key] = None
    names = _SCHEMA_INPUTS[key]
    if names:
        if k < len(names):
            return names[k][0]
        if names[-1][1]:
            return names[-1][0]
    return None


def box_widths(titles: List[str], info: List[str], kind: np.ndarray) -> np.ndarray:
    """Box width per element in x units (100 px), wide enough for its title and weight
    lines in the front end's fonts (within MIN_WIDTH..MAX_WIDTH; longer text is cut)."""
    tl = np.fromiter((len(t) for t in titles), dtype=np.float64, count=len(titles))
    il = np.fromiter((max((len(x) for x in s.split("\n")), default=0) if s else 0
                      for s in info), dtype=np.float64, count=len(info))
    px = np.maximum(tl * TITLE_CHAR_PX, il * CHAR_PX) + BOX_PAD_PX
    w = np.clip(px / UNIT_PX, MIN_WIDTH, MAX_WIDTH)
    return np.where(kind == GROUP, np.maximum(w, 1.2), w)


def layout(model: ModelLike, collapse: bool = True, *, expanded: Optional[Iterable[str]] = None,
           max_visible: Optional[int] = None) -> GraphData:
    """Layered layout of a model. collapse=True opens scopes only while about `max_visible`
    (default: `default_budget`) elements are visible; collapse=False shows every node; `expanded` names the open scopes."""
    gs = GraphStructure(model)
    if expanded is not None:
        return gs.view(expanded)
    if not collapse:
        return gs.view(gs.scopes, fold_constants=False)
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


@dataclass
class Layered:
    """A layered drawing: x and rank per element; every edge (in the caller's order) as a
    polyline through `bend_x[bend_ptr[e]:bend_ptr[e + 1]]`, one x per rank strictly between its
    ends, from the upper end down."""

    x: np.ndarray
    rank: np.ndarray
    bend_ptr: np.ndarray
    bend_x: np.ndarray
    crossings: int = 0


DUMMY_WIDTH = 0.2   # a bend point's width in x units (a node box is 1 unit = 100 px wide)
GAP = 0.25          # free space between neighbours of a rank


def _ranks(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *, pull_all: bool = True
           ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Longest-path ranks with elements pulled down next to their consumers (every element,
    or with pull_all=False only those writing at least as many edges as they read, which
    shortens the total edge length without moving a chain's links apart); returns rank, the
    edges oriented downwards (a -> b) and the topological position used for ties."""
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
    limit = [0] * m
    if pull_all:
        movable = [True] * m
    else:
        movable = (np.bincount(a, minlength=m) >= np.bincount(b, minlength=m)).tolist()
    cur = -1
    for s, d in zip(a_o, b_o):
        if s != cur:
            if cur >= 0 and movable[cur] and limit[cur] - 1 > latest[cur]:
                latest[cur] = limit[cur] - 1
            cur = s
            limit[s] = latest[d]
        elif latest[d] < limit[s]:
            limit[s] = latest[d]
    if cur >= 0 and movable[cur] and limit[cur] - 1 > latest[cur]:
        latest[cur] = limit[cur] - 1
    return np.array(latest, dtype=np.int64), a, b, vpos


def _inversions(v: np.ndarray, group: Optional[np.ndarray] = None, n_groups: int = 0
                ) -> Union[int, np.ndarray]:
    """Pairs i < j with v[i] > v[j] (bottom-up merge sort, each level one vectorised
    searchsorted); with `group` (per element): the count per group of the later element."""
    n = int(v.size)
    if n < 2:
        return 0 if group is None else np.zeros(n_groups, dtype=np.int64)
    _, s = np.unique(v, return_inverse=True)
    s = s.astype(np.int64).reshape(-1)
    big = int(s.max()) + 2
    idx = np.arange(n)
    total = 0
    per = None if group is None else np.zeros(n_groups, dtype=np.float64)
    grp = group
    size = 1
    while size < n:
        blk = idx // size
        pair = blk // 2
        right = (blk % 2) == 1
        key = pair * big + s
        left_keys = key[~right]  # sorted: blocks are sorted and pairs increase
        rk = key[right]
        rp = pair[right]
        hi = np.searchsorted(left_keys, rp * big + big, side="left")
        lo = np.searchsorted(left_keys, rk, side="right")
        if per is None:
            total += int((hi - lo).sum())
        else:
            per += np.bincount(grp[right], weights=hi - lo, minlength=n_groups)
        o = np.argsort(key, kind="stable")
        s = s[o]
        if grp is not None:
            grp = grp[o]
        size *= 2
    return total if per is None else per.astype(np.int64)


def _segment_crossings(pos: np.ndarray, rank: np.ndarray, ss: np.ndarray, sd: np.ndarray) -> int:
    """Crossings of segments between consecutive ranks (ss upper end, sd lower end): pairs of
    one rank gap compared directly while they are few (about 60 per segment), else a
    merge-sort count of inversions."""
    if ss.size < 2:
        return 0
    return int(_gap_crossings(pos, rank, ss, sd, 0, total=True))


def _gap_crossings(pos: np.ndarray, rank: np.ndarray, ss: np.ndarray, sd: np.ndarray,
                   n_gaps: int, total: bool = False) -> Union[int, np.ndarray]:
    """Crossings per rank gap (gap r: between ranks r and r + 1), or their sum (total)."""
    if ss.size < 2:
        return 0 if total else np.zeros(n_gaps, dtype=np.int64)
    g, pu, pl = rank[ss], pos[ss], pos[sd]
    cnt = np.bincount(g)
    n_gaps = max(n_gaps, cnt.size)
    if int((cnt.astype(np.int64) ** 2).sum()) > 60 * ss.size:  # then a merge-sort count is faster
        o = np.lexsort((pl, pu, g))
        big = int(pl.max()) + 1
        go = g[o]
        if total:
            return _inversions(go * big + pl[o])
        return _inversions(go * big + pl[o], go, n_gaps)
    o = np.argsort(g, kind="stable")
    gu, u, lo = g[o], pu[o], pl[o]
    end = (np.cumsum(cnt))[gu]
    partners = end - np.arange(gu.size) - 1
    tot = int(partners.sum())
    if tot == 0:
        return 0 if total else np.zeros(n_gaps, dtype=np.int64)
    i = np.repeat(np.arange(gu.size), partners)
    j = i + 1 + (np.arange(tot) - (np.cumsum(partners) - partners)[i])
    crossing = (u[i] - u[j]) * (lo[i] - lo[j]) < 0
    if total:
        return int(np.count_nonzero(crossing))
    return np.bincount(gu[i[crossing]], minlength=n_gaps)


def layer_crossings(x: np.ndarray, rank: np.ndarray, edges: np.ndarray,
                    bend_ptr: Optional[np.ndarray] = None,
                    bend_x: Optional[np.ndarray] = None, *, drawn: bool = True) -> int:
    """Edge crossings of a layered drawing: every edge a polyline with one point per rank
    (bends given, or straight lines sampled at each rank); points compared by x per rank.
    drawn=True counts drawn lines (segments shared by several edges once), False every
    pair of edges."""
    r = np.asarray(rank, dtype=np.int64)
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    up = np.where(r[e[:, 0]] <= r[e[:, 1]], e[:, 0], e[:, 1])
    lo = np.where(r[e[:, 0]] <= r[e[:, 1]], e[:, 1], e[:, 0])
    span = r[lo] - r[up]
    keep = span > 0
    up, lo, span = up[keep], lo[keep], span[keep]
    k = span - 1
    eidx = np.repeat(np.arange(up.size), k)
    step = np.arange(int(k.sum())) - (np.cumsum(k) - k)[eidx]
    if bend_x is not None:
        bp = np.asarray(bend_ptr)[:-1][keep]
        bx = np.asarray(bend_x, dtype=np.float64)[bp[eidx] + step]
    else:
        t = (step + 1) / span[eidx]
        bx = x[up][eidx] * (1 - t) + x[lo][eidx] * t
    n = x.size
    X = np.concatenate([np.asarray(x, dtype=np.float64), bx])
    R = np.concatenate([r, r[up][eidx] + 1 + step])
    ss, sd = _chain_segments(n, up, lo, span, k)
    _, px = np.unique(np.round(X, 6) + R * (np.abs(X).max() * 4 + 8), return_inverse=True)
    px = px.reshape(-1)
    if drawn:  # a segment several edges share (a bundled trunk) is one drawn line
        _, first = np.unique(px[ss] * (px.max() + 1) + px[sd], return_index=True)
        ss, sd = ss[first], sd[first]
    return _segment_crossings(px, R, ss, sd)


def _chain_segments(m: int, a: np.ndarray, b: np.ndarray, span: np.ndarray, k: np.ndarray
                    ) -> Tuple[np.ndarray, np.ndarray]:
    """Segments of every edge a -> b routed through its dummies (m + offset ...)."""
    seg_e = np.repeat(np.arange(a.size), span)
    first = np.cumsum(span) - span
    j = np.arange(int(span.sum())) - first[seg_e]
    off = (np.cumsum(k) - k)[seg_e]
    ss = np.where(j == 0, a[seg_e], m + off + j - 1)
    sd = np.where(j == span[seg_e] - 1, b[seg_e], m + off + j)
    return ss.astype(np.int64), sd.astype(np.int64)


def _order_ranks(m: int, r: np.ndarray, a: np.ndarray, b: np.ndarray, vpos: np.ndarray,
                 w: np.ndarray, sweeps: int, final: bool = True,
                 tries: Tuple[int, ...] = (0, 1, 2)) -> Dict[str, Any]:
    """Dummies for the long edges of a ranking, then the order of every rank (crossing
    reduction; final=False: the `tries` of `_mincross` only, `_more_starts` and `_refine`
    go on);
    returns what `_sugiyama` places."""
    span = r[b] - r[a]
    k = np.maximum(span - 1, 0)
    # long edges of one source share a trunk of dummies (one per rank down to the deepest
    # consumer), so an input read by every layer costs its depth, not depth x readers
    trunk_len = np.zeros(m, dtype=np.int64)
    np.maximum.at(trunk_len, a, k)
    d_n = int(trunk_len.sum())
    n = m + d_n
    trunk_off = np.cumsum(trunk_len) - trunk_len
    owner = np.repeat(np.arange(m), trunk_len)
    step = np.arange(d_n) - trunk_off[owner]
    R = np.concatenate([r, r[owner] + 1 + step])
    has = trunk_len > 0
    t_src = np.concatenate([np.nonzero(has)[0], m + np.nonzero(
        np.concatenate([[False], owner[1:] == owner[:-1]]))[0] - 1])
    t_dst = np.concatenate([m + trunk_off[has], m + np.nonzero(
        np.concatenate([[False], owner[1:] == owner[:-1]]))[0]])
    last = np.where(k > 0, m + trunk_off[a] + k - 1, a)
    ss = np.concatenate([t_src, last]).astype(np.int64)
    sd = np.concatenate([t_dst, b]).astype(np.int64)
    # an edge's bends: the first k dummies of its source's trunk
    eidx = np.repeat(np.arange(a.size), k)
    estep = np.arange(int(k.sum())) - (np.cumsum(k) - k)[eidx]
    bend_idx = m + trunk_off[a[eidx]] + estep
    W = np.concatenate([w, np.full(d_n, DUMMY_WIDTH)])
    prio = np.concatenate([vpos.astype(np.float64), vpos[owner] + 0.5])

    n_ranks = int(R.max()) + 1
    counts = np.bincount(R, minlength=n_ranks)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.empty(n, dtype=np.int64)

    def place(order: np.ndarray) -> None:
        pos[order] = np.arange(n) - starts[R[order]]

    order = np.lexsort((prio, R))
    place(order)
    deg_in = np.bincount(sd, minlength=n).astype(np.float64)
    deg_out = np.bincount(ss, minlength=n).astype(np.float64)
    best = _segment_crossings(pos, R, ss, sd)
    best_order = order
    idle = 0
    for it in range(max(sweeps, 0) * 3):
        p = pos.astype(np.float64)
        if it % 2 == 0:
            key = np.where(deg_in > 0, np.bincount(sd, weights=p[ss], minlength=n)
                           / np.maximum(deg_in, 1), p)
        else:
            key = np.where(deg_out > 0, np.bincount(ss, weights=p[sd], minlength=n)
                           / np.maximum(deg_out, 1), p)
        order = np.lexsort((p, key, R))
        place(order)
        c = _segment_crossings(pos, R, ss, sd)
        if c < best:
            best, best_order, idle = c, order, 0
        else:
            idle += 1
        if best == 0 or idle >= 4:  # two down and up sweeps without a gain
            break
    order = best_order
    place(order)
    if sweeps > 0 and best > 0:
        if n <= RANK_SWEEP_LIMIT:  # dot's mincross: rank after rank, transposed, best kept
            full = n <= FULL_SWEEPS_LIMIT
            if full:
                order, best = _mincross(order, R, starts, counts, ss, sd, n, prio, best,
                                        max_iter=sweeps * 6 if final else 0, tries=tries)
            else:  # big: the given start, one down and one up sweep, no flips (time)
                order, best = _mincross(order, R, starts, counts, ss, sd, n, prio, best,
                                        max_iter=0, tries=(0,), start_iters=2, rounds=2,
                                        flip=False)
        else:
            order, best = _transpose(order, pos, R, starts, ss, sd, n, best)
    return {"order": order, "best": int(best), "R": R, "n": n, "W": W, "starts": starts,
            "counts": counts, "ss": ss, "sd": sd, "k": k, "r": r, "bend_idx": bend_idx,
            "prio": prio, "full": sweeps > 0 and n <= FULL_SWEEPS_LIMIT,
            "n_ranks": n_ranks}


def _refine(lay: Dict[str, Any], sweeps: int) -> Dict[str, Any]:
    """The last stage of `_mincross` (more sweeps from the best order) on an ordered ranking
    of `_order_ranks(..., final=False)`."""
    if lay["full"] and lay["best"] > 0:
        lay["order"], lay["best"] = _mincross(
            lay["order"], lay["R"], lay["starts"], lay["counts"], lay["ss"], lay["sd"],
            lay["n"], lay["prio"], lay["best"], max_iter=sweeps * 6, tries=(0,))
    return lay


def _more_starts(lay: Dict[str, Any], tries: Tuple[int, ...] = (1, 2)) -> Dict[str, Any]:
    """More starts of `_mincross` (no last stage) on an ordered ranking: the best order
    found by any start is kept."""
    if lay["full"] and lay["best"] > 0:
        lay["order"], lay["best"] = _mincross(
            lay["order"], lay["R"], lay["starts"], lay["counts"], lay["ss"], lay["sd"],
            lay["n"], lay["prio"], lay["best"], max_iter=0, tries=tries)
    return lay


RACE_MARGIN = 1.5  # a ranking drawn with this many times the other's crossings is dropped


def _load_native() -> Any:
    """The compiled layout (`workbench/graphs/_layout.c`, built by `pip install`), or None where it
    was not built (no C compiler) or `WORKBENCH_LAYOUT=python` asks for the reference."""
    if os.environ.get("WORKBENCH_LAYOUT", "").lower() == "python":
        return None
    try:
        import workbench.graphs._layout as _layout
    except ImportError:
        return None
    return _layout


_native = _load_native()
#: which implementation lays graphs out: "c" (compiled, `workbench/graphs/_layout.c`) or "python"
LAYOUT_BACKEND = "c" if _native is not None else "python"
_warned_python = False


def _sugiyama(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *, sweeps: int = 4,
              width: Optional[np.ndarray] = None) -> Layered:
    """The layered layout of `_sugiyama_py`, computed by the compiled module when it is built
    (the same drawing to the bit, 10-30x faster: tests/test_graph_layout_native.py), else by
    the Python reference, with a warning saying how to build the compiled one."""
    global _warned_python
    if _native is not None and m > 0 and not np.any(np.asarray(es) == np.asarray(ed)):
        return _sugiyama_native(m, es, ed, vpos, sweeps=sweeps, width=width)
    if _native is None and not _warned_python and m > 0:
        _warned_python = True
        if os.environ.get("WORKBENCH_LAYOUT", "").lower() != "python":
            import warnings

            warnings.warn(
                "the compiled graph layout (workbench.graphs._layout) is not built, so graphs are laid "
                "out in Python, 10-30x slower: install a C compiler and the Python headers "
                "(Debian: apt-get install gcc python3-dev), then run `pip install -e .` again",
                RuntimeWarning, stacklevel=3)
    return _sugiyama_py(m, es, ed, vpos, sweeps=sweeps, width=width)


def _sugiyama_native(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *,
                     sweeps: int = 4, width: Optional[np.ndarray] = None) -> Layered:
    """`_sugiyama_py` computed by `workbench/graphs/_layout.c` (no self-loops; m > 0)."""
    w = np.ones(m) if width is None else width
    x, rank, ptr, bx, crossings = _native.sugiyama(
        int(m), np.ascontiguousarray(es, dtype=np.int64), np.ascontiguousarray(ed, dtype=np.int64),
        np.ascontiguousarray(vpos, dtype=np.int64), np.ascontiguousarray(w, dtype=np.float64),
        int(sweeps))
    # bytearray: writable arrays, as the Python reference returns
    return Layered(x=np.frombuffer(bytearray(x), dtype=np.float64),
                   rank=np.frombuffer(bytearray(rank), dtype=np.int64),
                   bend_ptr=np.frombuffer(bytearray(ptr), dtype=np.int64),
                   bend_x=np.frombuffer(bytearray(bx), dtype=np.float64), crossings=int(crossings))


def _sugiyama_py(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *, sweeps: int = 4,
                 width: Optional[np.ndarray] = None) -> Layered:
    """Sugiyama-style layout: ranks (two rankings tried), long edges through dummy
    elements, crossing reduction (barycentre sweeps over all ranks at once, then dot's
    mincross from three starts, `_mincross`, keeping the best order), and x coordinates
    pulled towards neighbours while keeping each
    rank's order and the boxes' widths apart (dummy chains weigh more, so long edges run
    straight)."""
    if m == 0:
        z = np.zeros(0)
        return Layered(z, np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), z)
    w = np.ones(m) if width is None else np.asarray(width, dtype=np.float64)

    # two rankings (every element as late as its consumers allow; or only those writing as
    # many edges as they read), each ordered from the barycentre start; a ranking drawn with
    # RACE_MARGIN times the other's crossings is dropped, the rest get the breadth-first
    # starts; the one drawn with fewer crossings is kept and swept further
    r, a, b, vp = _ranks(m, es, ed, vpos)
    lays = [_order_ranks(m, r, a, b, vp, w, sweeps, final=False, tries=(0,))]
    if sweeps > 0 and lays[0]["best"] > 0:
        r2, a2, b2, vp2 = _ranks(m, es, ed, vpos, pull_all=False)
        if not np.array_equal(r2, r):
            lays.append(_order_ranks(m, r2, a2, b2, vp2, w, sweeps, final=False, tries=(0,)))
    low = min(x["best"] for x in lays)
    lays = [_more_starts(x) for x in lays if x["best"] <= RACE_MARGIN * low]
    lay = _refine(min(lays, key=lambda x: x["best"]), sweeps)
    order, best, R, n, W = lay["order"], lay["best"], lay["R"], lay["n"], lay["W"]
    starts, counts, ss, sd, k, r = lay["starts"], lay["counts"], lay["ss"], lay["sd"], lay["k"], lay["r"]
    bend_idx, n_ranks = lay["bend_idx"], lay["n_ranks"]
    # coordinates
    ro = R[order]
    same = np.concatenate([[False], ro[1:] == ro[:-1]])
    sep = np.where(same, (W[order] + np.roll(W[order], 1)) / 2.0 + GAP, 0.0)
    cum = np.cumsum(sep)
    c = cum - cum[starts[ro]]  # offset within the rank
    xs = np.empty(n, dtype=np.float64)
    xs[order] = c - (c[np.minimum(starts[ro] + counts[ro] - 1, n - 1)]) / 2.0
    dummy = np.arange(n) >= m
    wseg = np.where(dummy[ss] & dummy[sd], 8.0, np.where(dummy[ss] | dummy[sd], 2.0, 1.0))
    wdeg = np.bincount(ss, weights=wseg, minlength=n) + np.bincount(sd, weights=wseg, minlength=n)
    c_rev = (c[np.minimum(starts[ro] + counts[ro] - 1, n - 1)] - c)[::-1]
    for _ in range(8):
        tot = (np.bincount(ss, weights=wseg * xs[sd], minlength=n)
               + np.bincount(sd, weights=wseg * xs[ss], minlength=n))
        want = np.where(wdeg > 0, tot / np.maximum(wdeg, 1e-9), xs)[order]
        span_x = float(np.abs(want).max() + cum[-1] + 1)
        big = 4.0 * span_x
        off = ro * big
        left = np.maximum.accumulate(want - c + off) - off + c
        wr = -want[::-1]
        offr = (n_ranks - 1 - ro[::-1]) * big
        right = -(np.maximum.accumulate(wr - c_rev + offr) - offr + c_rev)[::-1]
        xs[order] = (left + right) / 2.0
    bend_ptr = np.concatenate([[0], np.cumsum(k)]).astype(np.int64)
    return Layered(x=xs[:m], rank=r, bend_ptr=bend_ptr, bend_x=xs[bend_idx], crossings=int(best))


RANK_SWEEP_LIMIT = 80000  # elements + dummies up to which ranks are swept one after another
FULL_SWEEPS_LIMIT = 12000  # above: one down and one up rank sweep (time), below: up to 2 x sweeps


def _bfs_order(n: int, R: List[int], n_ranks: int, by_prio: List[int], first: List[List[int]],
               nxt: List[List[int]]) -> List[List[int]]:
    """dot's initial order: breadth first from every element without neighbours on one side
    (`first` empty), taken in priority order, each rank filled in visiting order."""
    from collections import deque

    mark = [False] * n
    ranks: List[List[int]] = [[] for _ in range(n_ranks)]
    for v in by_prio:
        if first[v] or mark[v]:
            continue
        mark[v] = True
        q = deque([v])
        while q:
            u = q.popleft()
            ranks[R[u]].append(u)
            for w in nxt[u]:
                if not mark[w]:
                    mark[w] = True
                    q.append(w)
    for v in by_prio:  # not reachable that way (only with cycles): in priority order
        if not mark[v]:
            ranks[R[v]].append(v)
    return ranks


def _median_step(ranks: List[List[int]], p: List[int], nbl: List[List[int]], seq: Iterable[int],
                 reverse: bool) -> None:
    """One weighted-median sweep (dot's `medians` + `reorder`): each rank of `seq`, in turn,
    sorted by the weighted median position of its neighbours on the rank just placed;
    elements without neighbours there keep their place; ties keep their order (`reverse`:
    flip it). Updates `ranks` and positions `p` in place."""
    for r in seq:
        layer = ranks[r]
        mv = []
        fixed = False
        for v in layer:
            ns = nbl[v]
            d = len(ns)
            if d == 1:
                mv.append(p[ns[0]])
            elif d == 2:
                mv.append((p[ns[0]] + p[ns[1]]) * 0.5)
            elif d == 0:
                mv.append(-1.0)
                fixed = True
            else:
                q = sorted([p[w] for w in ns])
                h = d // 2
                if d % 2:
                    mv.append(q[h])
                else:  # weighted median: towards the denser side
                    wl, wr = q[h - 1] - q[0], q[-1] - q[h]
                    mv.append((q[h - 1] * wr + q[h] * wl) / (wl + wr) if wl != wr
                              else (q[h - 1] + q[h]) * 0.5)
        if fixed:
            slots = [j for j, x in enumerate(mv) if x >= 0]
        else:
            slots = list(range(len(layer)))
        moved = sorted(slots[::-1] if reverse else slots, key=mv.__getitem__)
        if moved == slots:
            continue
        new = list(layer)
        for s, j in zip(slots, moved):
            v = layer[j]
            new[s] = v
            p[v] = s
        ranks[r] = new


def _mincross(order: np.ndarray, R: np.ndarray, starts: np.ndarray, counts: np.ndarray,
              ss: np.ndarray, sd: np.ndarray, n: int, prio: np.ndarray, best: int,
              max_iter: int = 24, min_quit: int = 8, tries: Tuple[int, ...] = (0, 1, 2),
              start_iters: int = 4, rounds: int = 8, flip: bool = True
              ) -> Tuple[np.ndarray, int]:
    """dot's crossing minimisation (Gansner et al. 1993, Graphviz `mincross`): from each
    of `tries` (0: the given order, 1: breadth first from the sources, 2: from the sinks)
    `start_iters` weighted-median sweeps, each followed by transpositions (`rounds` of
    `_transpose`); then up to `max_iter` more from the best order found, stopping after
    `min_quit` sweeps without a 0.5% gain; with `flip`, alternate pairs of sweeps flip ties
    and swap tied pairs (dot's `reverse`). Keeps the order with fewest crossings."""
    csr = _adjacency(n, ss, sd)
    up_ptr, up_nb, _, dn_ptr, dn_nb, _ = csr
    ul, dl, up_p, dn_p = up_nb.tolist(), dn_nb.tolist(), up_ptr.tolist(), dn_ptr.tolist()
    up_l = [ul[i:j] for i, j in zip(up_p[:-1], up_p[1:])]
    dn_l = [dl[i:j] for i, j in zip(dn_p[:-1], dn_p[1:])]
    st, ct = starts.tolist(), counts.tolist()
    n_r = len(st)
    Rl = R.tolist()
    slots = _transpose_slots(R, starts, n)

    def split(flat: List[int]) -> List[List[int]]:
        return [flat[s:s + c] for s, c in zip(st, ct)]

    def positions(ranks: List[List[int]]) -> List[int]:
        p = [0] * n
        for layer in ranks:
            for j, v in enumerate(layer):
                p[v] = j
        return p

    def settle(ranks: List[List[int]], p: List[int], ties: bool) -> Tuple[List[List[int]], List[int], int]:
        pa = np.array(p, dtype=np.int64)
        gaps = _gap_crossings(pa, R, ss, sd, n_r)
        c = int(gaps.sum())
        if c == 0:
            return ranks, p, 0
        flat = np.array(list(chain.from_iterable(ranks)), dtype=np.int64)
        flat, c = _transpose(flat, pa, R, starts, ss, sd, n, c, rounds=rounds, csr=csr,
                             ties=ties, slots=slots, gaps=gaps)
        return split(flat.tolist()), pa.tolist(), c

    down_seq = [r for r in range(1, n_r) if ct[r] > 1]
    up_seq = [r for r in range(n_r - 2, -1, -1) if ct[r] > 1]
    by_prio = np.argsort(prio, kind="stable").tolist()
    best_ranks = split(order.tolist())
    best_c = best
    inits = [lambda: split(order.tolist()),
             lambda: _bfs_order(n, Rl, n_r, by_prio, up_l, dn_l),
             lambda: _bfs_order(n, Rl, n_r, by_prio, dn_l, up_l)]
    inits = [inits[k] for k in tries]
    for stage in range(len(inits) + 1):
        if stage < len(inits):
            ranks = inits[stage]()
            ranks, p, cur = settle(ranks, positions(ranks), False)
            if cur <= best_c:
                best_ranks, best_c = [list(x) for x in ranks], cur
            iters = start_iters
        else:
            ranks = [list(x) for x in best_ranks]
            p, cur = positions(ranks), best_c
            iters = max_iter
        trying = 0
        for it in range(iters):
            if trying >= min_quit or cur == 0:
                break
            trying += 1
            reverse = flip and it % 4 < 2
            down = it % 2 == 0
            _median_step(ranks, p, up_l if down else dn_l, down_seq if down else up_seq, reverse)
            ranks, p, cur = settle(ranks, p, flip and not reverse)
            if cur <= best_c:
                if cur < 0.995 * best_c:
                    trying = 0
                best_ranks, best_c = [list(x) for x in ranks], cur
        if best_c == 0:
            break
    return np.array(list(chain.from_iterable(best_ranks)), dtype=np.int64), int(best_c)


def _adjacency(n: int, ss: np.ndarray, sd: np.ndarray) -> Tuple[np.ndarray, ...]:
    """CSR neighbours above and below each element, with degrees:
    (up_ptr, up_nb, deg_up, dn_ptr, dn_nb, deg_dn)."""
    up_ptr, up_nb = _csr(n, sd, ss)
    dn_ptr, dn_nb = _csr(n, ss, sd)
    return up_ptr, up_nb, np.diff(up_ptr), dn_ptr, dn_nb, np.diff(dn_ptr)


def _transpose_slots(R: np.ndarray, starts: np.ndarray, n: int
                     ) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Left slots (in the rank-grouped flat order) of the pairs `_transpose` compares, and
    their ranks, per batch: slot parity within the rank and rank parity (0,0), (1,0), (0,1),
    (1,1)."""
    ro = np.sort(R)
    within = np.arange(n) - starts[ro]
    same = ro[:-1] == ro[1:]
    out = []
    for b in range(4):
        left = np.nonzero(same & (within[:-1] % 2 == b % 2) & (ro[:-1] % 2 == (b // 2) % 2))[0]
        out.append((left, ro[left]))
    return out


def _transpose(order: np.ndarray, pos: np.ndarray, R: np.ndarray, starts: np.ndarray,
               ss: np.ndarray, sd: np.ndarray, n: int, best: int, rounds: int = 8,
               csr: Optional[Tuple[np.ndarray, ...]] = None, ties: bool = False,
               slots: Optional[List[Tuple[np.ndarray, np.ndarray]]] = None,
               gaps: Optional[np.ndarray] = None) -> Tuple[np.ndarray, int]:
    """Swap neighbours of a rank where that removes crossings with the ranks above and
    below (dot's transpose, vectorised). One batch swaps every disjoint pair of one parity on
    the ranks of one parity: those swaps do not interact (a pair's gain depends only on the
    ranks beside it), so each batch removes exactly the crossings its gains count.
    ties: also swap pairs that cross as often either way (no gain, a new neighbourhood).
    gaps (crossings per rank gap): only ranks beside a gap with crossings, or beside a rank
    swapped since, are tried (a pair elsewhere neither gains nor crosses: the same swaps)."""
    up_ptr, up_nb, deg_up, dn_ptr, dn_nb, deg_dn = csr if csr is not None else _adjacency(n, ss, sd)
    if slots is None:
        slots = _transpose_slots(R, starts, n)
    busy = None
    if gaps is not None:
        hot = np.asarray(gaps) > 0
        n_r = int(R.max()) + 1 if R.size else 0
        busy = np.zeros(max(n_r, hot.size + 1) + 1, dtype=bool)
        busy[:hot.size] |= hot
        busy[1:hot.size + 1] |= hot  # rank r sits between gaps r - 1 and r
    # both sides in one list per element: neighbours below lifted by n, so a pair of
    # neighbours on different sides always compares the same way (corrected below)
    owner = np.concatenate([np.repeat(np.arange(n), deg_up), np.repeat(np.arange(n), deg_dn)])
    o = np.argsort(owner, kind="stable")
    nb_all = np.concatenate([up_nb, dn_nb])[o]
    lift = np.concatenate([np.zeros(up_nb.size, dtype=np.int64),
                           np.full(dn_nb.size, n, dtype=np.int64)])[o]
    deg = deg_up + deg_dn
    ptr = np.concatenate([[0], np.cumsum(deg)])
    order = order.copy()
    idle = 0
    for rnd in range(rounds * 4):
        left, rk = slots[rnd % 4]
        if busy is not None:
            on = busy[rk]
            left, rk = left[on], rk[on]
        if left.size == 0:
            idle += 1
            if idle >= 4:
                break
            continue
        u, v = order[left], order[left + 1]
        dv = deg[v]
        cnt = deg[u] * dv
        huge = cnt > 8192  # such pairs are left as they are
        cnt[huge] = 0
        tot = int(cnt.sum())
        mixed = deg_dn[u] * deg_up[v]
        gain = (deg_up[u] * deg_dn[v] - mixed).astype(np.float64)
        now = -mixed.astype(np.float64)  # crossings the pair makes as it stands
        if tot:
            pk = np.repeat(np.arange(left.size), cnt)
            t = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            dvk = dv[pk]
            a = ptr[u][pk] + t // dvk
            b = ptr[v][pk] + t % dvk
            p = pos[nb_all[a]] + lift[a]
            q = pos[nb_all[b]] + lift[b]
            gt = np.bincount(pk, weights=p > q, minlength=left.size)
            gain += gt - np.bincount(pk, weights=p < q, minlength=left.size)
            now += gt
        gain[huge] = 0
        now[huge] = 0
        ok = gain > 0
        if ok.any():
            idle = 0
        else:
            idle += 1
            if idle >= 4:  # a full cycle of parities without a gain: converged
                break
            if not ties:
                continue
        if ties:  # dot's transpose(reverse): also swap pairs that cross as much either way
            ok |= (gain == 0) & (now > 0)
            if not ok.any():
                continue
        swap = left[ok]
        if busy is not None:  # the gaps beside a swapped rank may cross now
            sr = rk[ok]
            busy[sr] = True
            busy[sr + 1] = True
            busy[np.maximum(sr - 1, 0)] = True
        a, b = order[swap], order[swap + 1]
        order[swap], order[swap + 1] = b, a
        pos[a] += 1
        pos[b] -= 1
        best -= int(gain[ok].sum())
    return order, best


def _layered_layout(m: int, es: np.ndarray, ed: np.ndarray, vpos: np.ndarray, *,
                    sweeps: int = 4) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, y, rank for m elements (unit widths; see `_sugiyama` for bends). `vpos` orders
    ties; edges that close a cycle (collapsing scopes can create them) are reversed for
    ranking."""
    lay = _sugiyama(m, es, ed, vpos, sweeps=sweeps)
    return lay.x, lay.rank.astype(np.float64), lay.rank


def _distinct_scope_labels(paths: List[str]) -> Dict[str, str]:
    """Labels for collapsed groups: the scope's last part, extended with as many parent parts
    as it takes to tell groups of the same name apart ('layer.0/attention/self' and
    'layer.1/attention/self', not two 'self')."""
    from workbench.core.graphindex import scope_parts

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
