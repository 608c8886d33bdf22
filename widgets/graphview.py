"""GraphView: the interactive ONNX graph as one anywidget (boxes on a 2D canvas, widgets/js).

Python owns the state: the layout (`workbench.graphs.layout`), which scopes are open, search matches,
colours and highlights; the front end (widgets/js, bundled to widgets/static/graphview.js) draws
it and reports clicks. Traits: `selected` (visible element ids, two-way), `search` (two-way),
`highlighted`, `colors`/`legend` (aligned with the drawn elements), `scale` (a continuous colour
scale, `color_by_values`), `first_paint_ms` (reported by the browser). Boxes carry the op type,
folded weights ('W <64x3x7x7>') and Constant inputs; edges bend through the layout's dummy ranks.

    view = GraphView("model.onnx")
    view.color_by_op()
    view.highlight(["/encoder/layer.0/attention/self/Softmax"])
"""
from __future__ import annotations

import colorsys
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import anywidget
import numpy as np
import traitlets

from workbench.core.errors import Finding, WorkbenchError
from workbench.graphs.layout import (GROUP, GROUP_PREFIX, GraphData, GraphStructure,
                             ModelLike, shared_bends)

from widgets.base import OK_COLOUR, SEVERITY_COLOURS

_BUNDLE = Path(__file__).parent / "static" / "graphview.js"
_STYLE = _BUNDLE.with_suffix(".css")  # built beside it from widgets/js/src/graphview.css
SEVERITY_COLORS = SEVERITY_COLOURS  # the one colour map (widgets.base); old names kept
OK_COLOR = OK_COLOUR
OTHER_COLOR = "#9e9e9e"
MIXED_COLOR = "#8e6bb8"  # the group colour of the front end


def _bundle() -> Tuple[str, str]:
    """The front end as built by esbuild: (the JavaScript module, its stylesheet)."""
    for part in (_BUNDLE, _STYLE):
        if not part.exists():
            raise WorkbenchError("the graph view's front-end bundle is missing", file=str(part),
                                 hint="run `npm ci && npm run build` in widgets/js "
                                      "(scripts/setup.sh does)")
    return _BUNDLE.read_text(encoding="utf-8"), _STYLE.read_text(encoding="utf-8")


def palette(n: int) -> List[str]:
    """n distinguishable colours (golden-angle hues, two lightness levels)."""
    out = []
    for i in range(n):
        h = (i * 0.618033988749895) % 1.0
        light = 0.45 if i % 2 == 0 else 0.6
        r, g, b = colorsys.hls_to_rgb(h, light, 0.65)
        out.append("#%02x%02x%02x" % (int(r * 255), int(g * 255), int(b * 255)))
    return out


# a perceptual ramp (viridis-like: dark blue -> green -> yellow), many visibly distinct steps
_RAMP = ["#30123b", "#4145ab", "#4675ed", "#39a2fc", "#1bcfd4", "#24eca6", "#61fc6c",
         "#a4fc3b", "#d1e834", "#f3c63a", "#fe9b2d", "#f36315", "#d93806", "#b11901", "#7a0403"]


def heat_ramp(n: int) -> List[str]:
    """n colours along the heat ramp (cold -> hot), interpolated in RGB."""
    rgb = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in _RAMP], dtype=np.float64)
    t = np.linspace(0, len(_RAMP) - 1, max(n, 1))
    lo = np.floor(t).astype(int)
    hi = np.minimum(lo + 1, len(_RAMP) - 1)
    f = (t - lo)[:, None]
    out = rgb[lo] * (1 - f) + rgb[hi] * f
    return ["#%02x%02x%02x" % tuple(int(round(v)) for v in row) for row in out]


SEP = "\x1f"  # joins id/label strings on the wire (ASCII unit separator)


def wire_payload(data: GraphData, focus: Sequence[str] = ()) -> Dict[str, Any]:
    """GraphData as the front end receives it: numeric arrays as little-endian binary buffers
    (sent beside the JSON, not inside it) and string arrays joined by SEP."""
    le = lambda a, t: np.ascontiguousarray(a, dtype=t).tobytes()  # noqa: E731

    def strings(xs: List[str]) -> Union[str, List[str]]:
        joined = SEP.join(xs)
        # a name holding the separator itself (never seen, but legal ONNX) travels as a list
        return joined if joined.count(SEP) == max(0, len(xs) - 1) else list(xs)

    return {
        "n": len(data), "ids": strings(data.ids), "labels": strings(data.labels),
        "ops": data.ops, "op": le(data.op, "<i4"), "kind": le(data.kind, "u1"),
        "x": le(data.x, "<f4"), "y": le(data.y, "<f4"), "size": le(data.size, "<i4"),
        "flags": le(data.flags, "<i4"), "scope": le(data.scope, "<i4"),
        "edges": le(data.edges.reshape(-1), "<i4"), "scopes": strings(data.scopes),
        "scope_parent": le(data.scope_parent, "<i4"),
        "width": le(data.width if data.width is not None else np.ones(len(data)), "<f4"),
        "info": strings(data.info), "edge_labels": strings(data.edge_labels),
        **_wire_bends(data, le),
        "expanded": data.expanded, "total_nodes": data.total_nodes,
        "findings": [f.to_dict() for f in data.findings], "focus": list(focus),
    }


def _wire_bends(data: GraphData, le: Any) -> Dict[str, bytes]:
    """Edge e bends at bend_x[bend_start[e]:bend_start[e] + bend_count[e]]; the long edges of
    one element share their trunk's bends (`shared_bends`), so a mask read by every layer is
    sent once, not once per layer."""
    n_e = data.edges.shape[0]
    if data.bend_ptr is None or data.bend_x is None:
        z = np.zeros(n_e)
        return {"bend_start": le(z, "<i4"), "bend_count": le(z, "<i4"), "bend_x": b""}
    start, count, xs = shared_bends(data.rank, data.edges, data.bend_ptr, data.bend_x)
    return {"bend_start": le(start, "<i4"), "bend_count": le(count, "<i4"),
            "bend_x": le(xs, "<f4")}


class GraphView(anywidget.AnyWidget):
    """Interactive graph of an ONNX model (or of a prepared `GraphStructure`).

    Scopes start collapsed so that about `max_visible` elements show (default: a tenth of the
    nodes, 60 to 1500; `expanded` names the open
    scopes instead; `expand_all` shows every node). Click a group to open it.
    """

    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)
    graph = traitlets.Dict().tag(sync=True)
    colors = traitlets.List().tag(sync=True)
    legend = traitlets.List().tag(sync=True)
    scale = traitlets.Dict().tag(sync=True)  # a continuous colour scale: title, stops, ticks
    highlighted = traitlets.List(traitlets.Unicode()).tag(sync=True)
    selected = traitlets.List(traitlets.Unicode()).tag(sync=True)
    search = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(600).tag(sync=True)
    first_paint_ms = traitlets.Float(None, allow_none=True)

    def __init__(self, model_or_graph: Union[ModelLike, GraphStructure], *,
                 max_visible: Optional[int] = None, expanded: Optional[Iterable[str]] = None,
                 expand_all: bool = False, height: int = 600, **kwargs: Any):
        esm, css = _bundle()
        self.structure = (model_or_graph if isinstance(model_or_graph, GraphStructure)
                          else GraphStructure(model_or_graph))
        self.max_visible = max_visible
        self.fold_constants = not expand_all  # expand_all shows every node, constants too
        self.in_place = True  # a click on a group opens it where it stands (Reset lays out anew)
        if expand_all:
            self._expanded = set(self.structure.scopes)
        elif expanded is not None:
            self._expanded = set(expanded)
        else:
            self._expanded = self.structure.default_expanded(max_visible)
        self._color_map: Optional[Dict[int, str]] = None  # structure element -> colour
        self._color_priority: List[str] = []
        self._mixed_color: Optional[str] = None
        self._highlight_elems: List[int] = []
        self.data: GraphData = self.structure.view(self._expanded, fold_constants=self.fold_constants)
        super().__init__(_esm=esm, _css=css, height=height, graph=self._payload([]), **kwargs)
        self.on_msg(self._on_front_msg)

    # -- state ------------------------------------------------------------------------------
    @property
    def findings(self) -> List[Finding]:
        """Structural problems found while laying out (cycles, dangling inputs, duplicates)."""
        return list(self.structure.findings)

    @property
    def expanded(self) -> List[str]:
        return sorted(self._expanded)

    def _payload(self, focus: Sequence[str]) -> Dict[str, Any]:
        return wire_payload(self.data, focus)

    def _relayout(self, focus: Sequence[str] = (), in_place: Optional[str] = None) -> None:
        """Lay out the current state; in_place=scope opens that group where it stands
        (`GraphStructure.expand_in_place`: the rest keeps its place) instead."""
        if in_place is not None and self.in_place:
            self.data = self.structure.expand_in_place(
                self.data, in_place, self._expanded, fold_constants=self.fold_constants)
        else:
            self.data = self.structure.view(self._expanded, fold_constants=self.fold_constants)
        visible = set(self.data.ids)
        with self.hold_sync():
            self.graph = self._payload(focus)
            self.colors = self._visible_colors()
            self.highlighted = self._visible_ids(self._highlight_elems)
            self.selected = [s for s in self.selected if s in visible]

    def expand(self, scope: str) -> None:
        """Open a scope (path like '/encoder/layer.0' or its group id 'scope:/encoder/layer.0'),
        in place; a lone child scope inside it opens with it."""
        path = scope[len(GROUP_PREFIX):] if scope.startswith(GROUP_PREFIX) else scope
        if path not in self.structure.scope_index:
            raise WorkbenchError(f"no scope '{path}' in this graph", field="scope",
                                 hint="group ids are listed in view.data.ids (prefix 'scope:')")
        before = set(self._expanded)
        k = self.structure.scope_index[path]
        while k >= 0:  # opening a scope opens its parents too
            self._expanded.add(self.structure.scopes[k])
            k = int(self.structure.scope_parent[k])
        inner = self.structure.sole_child_scope(path)
        while inner is not None:  # and a chain of lone child scopes (no group showing one group)
            self._expanded.add(inner)
            inner = self.structure.sole_child_scope(inner)
        old = set(self.data.ids)
        try:
            self._relayout(in_place=path)
        except Exception:
            self._expanded = before  # the view still draws `path` collapsed: say so
            raise
        new = [i for i in self.data.ids if i not in old]
        self.graph = self._payload(new)

    def collapse(self, scope: str) -> None:
        """Close a scope: its members are drawn as one group node again."""
        path = scope[len(GROUP_PREFIX):] if scope.startswith(GROUP_PREFIX) else scope
        self._expanded.discard(path)
        self._relayout([GROUP_PREFIX + path])

    def show(self, model_or_graph: Union[ModelLike, GraphStructure]) -> None:
        """Show another model in this view (default collapse, no colours or highlight). Only
        assigns traits, so a panel may call it from its background task."""
        self.structure = (model_or_graph if isinstance(model_or_graph, GraphStructure)
                          else GraphStructure(model_or_graph))
        self._expanded = self.structure.default_expanded(self.max_visible)
        self.fold_constants = True
        self._color_map, self._color_priority, self._mixed_color = None, [], None
        self._highlight_elems = []
        with self.hold_sync():
            self.legend = []
            self._relayout()

    def reset(self) -> None:
        """Back to the default collapsed view."""
        self._expanded = self.structure.default_expanded(self.max_visible)
        self.fold_constants = True
        self._relayout()

    def expand_all(self) -> None:
        """Show every node (scopes open, constants drawn as their own boxes)."""
        self._expanded = set(self.structure.scopes)
        self.fold_constants = False
        self._relayout()

    # -- colours, highlight, selection -------------------------------------------------------
    def _elements(self, ids: Iterable[str]) -> List[int]:
        out = []
        for i in ids:
            ks = self.structure.element_indices(i)
            if ks:
                out.extend(ks)
            elif i.startswith(GROUP_PREFIX) and i[len(GROUP_PREFIX):] in self.structure.scope_index:
                out.extend(self.structure.element_index(m) for m in self.structure.members(i[len(GROUP_PREFIX):]))
        return out

    def _visible_ids(self, elems: Sequence[int]) -> List[str]:
        vis = self.data.visible_of
        return sorted({self.data.ids[int(vis[k])] for k in elems})

    def _visible_colors(self) -> List[Optional[str]]:
        if self._color_map is None:
            return []
        vis = self.data.visible_of
        per: List[List[str]] = [[] for _ in self.data.ids]
        for k, c in self._color_map.items():
            per[int(vis[k])].append(c)
        rank = {c: i for i, c in enumerate(self._color_priority)}
        own = {}  # a node box drawing folded constants: its own node's colour
        for k in range(min(len(vis), self.structure.n)):
            c = self._color_map.get(k)
            if c is not None and self.data.ids[int(vis[k])] == self.structure.ids[k]:
                own[int(vis[k])] = c
        out: List[Optional[str]] = []
        for i, cs in enumerate(per):
            if not cs:
                out.append(None)
            elif len(set(cs)) == 1:
                out.append(cs[0])
            elif self.data.kind[i] != GROUP:
                # its own colour, unless a folded constant's ranks higher (an error on it)
                mine = own.get(i, cs[0])
                top = min(cs, key=lambda c: rank.get(c, len(rank))) if rank else mine
                out.append(mine if self._mixed_color is not None or
                           rank.get(mine, len(rank)) <= rank.get(top, len(rank)) else top)
            elif self._mixed_color is not None:
                out.append(self._mixed_color)
            elif rank:  # a group shows its most important member colour (legend order)
                out.append(min(cs, key=lambda c: rank.get(c, len(rank))))
            else:
                out.append(Counter(cs).most_common(1)[0][0])
        return out

    def color_by(self, mapping: Mapping[str, str], legend: Union[Mapping[str, str], Sequence, None] = None,
                 *, mixed: Optional[str] = None) -> None:
        """Colour nodes: `mapping` node id (or name, or 'scope:<path>') -> CSS colour. `legend`
        (label -> colour, in priority order) is drawn in a corner. A collapsed group whose
        members differ takes `mixed` when given, else the colour of its member that comes first
        in the legend (else the most common)."""
        cmap: Dict[int, str] = {}
        unknown = []
        for key, col in mapping.items():
            ks = self._elements([key])
            if not ks:
                unknown.append(key)
            for k in ks:
                cmap[k] = str(col)
        if unknown and len(unknown) == len(mapping) and mapping:
            raise WorkbenchError(f"none of the {len(mapping)} ids in the colour mapping is in this graph "
                                 f"(first: '{unknown[0]}')", field="mapping",
                                 hint="use node ids from view.structure.ids or node names")
        items = list(legend.items()) if isinstance(legend, Mapping) else [tuple(x) for x in (legend or [])]
        self._color_map = cmap
        self._mixed_color = mixed
        self._color_priority = [c for _, c in items]
        self.unknown_color_ids = unknown
        with self.hold_sync():
            self.scale = {}
            self.legend = [[str(lbl), str(c)] for lbl, c in items]
            self.colors = self._visible_colors()

    def clear_colors(self) -> None:
        self._color_map = None
        with self.hold_sync():
            self.legend = []
            self.scale = {}
            self.colors = []

    def color_by_values(self, values: Mapping[str, float], *, title: str = "value",
                        log: bool = True, unit: str = "", levels: int = 16) -> Dict[str, str]:
        """Colour nodes by a number each (time, error): a continuous colour scale (`levels`
        steps of a perceptual ramp, log-spaced when `log`) with a gradient legend; nodes
        without a value stay white with their outline. A collapsed group shows its largest
        member value. Returns node id -> colour."""
        vals = {k: float(v) for k, v in values.items() if v is not None and np.isfinite(float(v))
                and (not log or float(v) > 0)}
        if not vals:
            raise WorkbenchError("no values to colour by", field="values",
                                 hint="pass node id -> number (positive for a log scale)")
        arr = np.array(list(vals.values()))
        lo, hi = float(arr.min()), float(arr.max())
        f = (lambda v: np.log10(v)) if log else (lambda v: v)  # noqa: E731
        a, b = f(lo), f(hi)
        ramp = heat_ramp(levels)
        mapping = {}
        order = {}
        for k, v in vals.items():
            t = 0.0 if b <= a else (f(v) - a) / (b - a)
            j = int(min(levels - 1, max(0, round(t * (levels - 1)))))
            mapping[k] = ramp[j]
            order[ramp[j]] = j
        legend = [(f"{title} level {j + 1}/{levels}", c) for j, c in reversed(list(enumerate(ramp)))]
        ticks = [lo, 10 ** ((a + b) / 2) if log else (lo + hi) / 2, hi]
        self.color_by(mapping, legend=legend)
        self.scale = {"title": f"{title}{' (' + unit + ')' if unit else ''}" + (" · log" if log else ""),
                      "stops": [[j / max(1, levels - 1), c] for j, c in enumerate(ramp)],
                      "ticks": [f"{t:.3g}" for t in ticks], "no_data": "no data (white, outlined)"}
        return mapping

    def color_by_op(self, max_legend: int = 12) -> Dict[str, str]:
        """Colour by op type (the most frequent ops get their own colour, the rest grey)."""
        s = self.structure
        counts = Counter(s.ops[o] for o in s.op[: s.n_nodes].tolist())
        top = [op for op, _ in counts.most_common(max_legend)]
        colours = dict(zip(top, palette(len(top))))
        mapping = {s.ids[i]: colours.get(s.ops[o], OTHER_COLOR) for i, o in enumerate(s.op.tolist())
                   if i < s.n_nodes}
        legend = [(f"{op} ({counts[op]})", colours[op]) for op in top]
        if len(counts) > len(top):
            legend.append(("other", OTHER_COLOR))
        legend.append(("scope of mixed ops", MIXED_COLOR))
        self.color_by(mapping, legend=legend, mixed=MIXED_COLOR)
        return colours

    def color_by_findings(self, findings: Iterable[Union[Finding, Mapping[str, Any]]],
                          ok_color: str = OK_COLOR) -> None:
        """Colour by the worst Finding severity on each node (nodes without one: `ok_color`)."""
        worst: Dict[str, str] = {}
        order = {"error": 0, "warning": 1, "info": 2}
        for f in findings:
            f = Finding.from_dict(dict(f)) if isinstance(f, Mapping) else f
            for n in f.nodes:
                if n not in worst or order[f.severity] < order[worst[n]]:
                    worst[n] = f.severity
        s = self.structure
        mapping = {s.ids[i]: ok_color for i in range(s.n_nodes)}
        for n, sev in worst.items():
            mapping[n] = SEVERITY_COLORS[sev]
        counts = Counter(worst.values())
        legend = [(f"{sev} ({counts[sev]})", SEVERITY_COLORS[sev]) for sev in ("error", "warning", "info")]
        legend.append(("no finding", ok_color))
        self.color_by(mapping, legend=legend)

    def highlight(self, node_ids: Iterable[str]) -> List[str]:
        """Highlight nodes (hidden ones light up their group); returns the visible ids lit."""
        self._highlight_elems = self._elements(list(node_ids))
        self.highlighted = self._visible_ids(self._highlight_elems)
        return list(self.highlighted)

    def select(self, node_ids: Iterable[str]) -> None:
        self.selected = self._visible_ids(self._elements(list(node_ids)))

    def reveal(self, node_ids: Iterable[str], *, max_scopes: int = 8) -> List[str]:
        """Show these nodes as themselves: open the scopes that hold them (at most
        `max_scopes`; more stay as their groups), select and highlight them, and zoom to them,
        on the first paint too (the layout's focus). Returns the visible ids selected."""
        elems = self._elements(list(node_ids))
        st = self.structure
        scopes = {int(st.node_scope[k]) for k in elems if k < len(st.node_scope)}
        scopes.discard(-1)
        opened = False
        for sc in sorted(scopes)[:max_scopes]:
            k = sc
            while k >= 0 and st.scopes[k] not in self._expanded:
                self._expanded.add(st.scopes[k])
                k = int(st.scope_parent[k])
                opened = True
        self._highlight_elems = elems
        with self.hold_sync():
            if opened:
                self._relayout()  # (colours and highlight follow the new view)
            ids = self._visible_ids(elems)
            self.graph = self._payload(ids)  # the focus: zoom to them
            self.highlighted = self.selected = ids
        return ids

    def fit(self, node_ids: Optional[Iterable[str]] = None) -> None:
        """Zoom to these nodes (default: the selection; empty: the whole graph)."""
        ids = list(self.selected if node_ids is None else self._visible_ids(self._elements(list(node_ids))))
        self.send({"type": "fit", "ids": ids})

    def matches(self, query: str) -> List[int]:
        """Structure elements whose id, name or op contains `query` (case-insensitive)."""
        q = query.strip().lower()
        if not q:
            return []
        s = self.structure
        ops = [o.lower() for o in s.ops]
        return [i for i, (e, o) in enumerate(zip(s.ids, s.op.tolist())) if q in e.lower() or q == ops[o]
                or (q in ops[o] and len(q) >= 3)]

    @traitlets.observe("search")
    def _on_search(self, change: Dict[str, Any]) -> None:
        self._highlight_elems = self.matches(change["new"])
        self.highlighted = self._visible_ids(self._highlight_elems)

    def _on_front_msg(self, _widget: Any, content: Dict[str, Any], _buffers: Any) -> None:
        kind = content.get("type")
        if kind == "toggle":
            gid = str(content.get("id", ""))
            if gid.startswith(GROUP_PREFIX):
                self.expand(gid)
        elif kind == "collapse":
            for i in content.get("ids", []):
                k = self.structure.element_index(i)
                if k is not None:
                    sc = int(self.structure.node_scope[k])
                    if sc >= 0:
                        self.collapse(self.structure.scopes[sc])
                elif i.startswith(GROUP_PREFIX):
                    k = self.structure.scope_index.get(i[len(GROUP_PREFIX):])
                    if k is not None and self.structure.scope_parent[k] >= 0:
                        self.collapse(self.structure.scopes[int(self.structure.scope_parent[k])])
        elif kind == "collapse_scope":  # a breadcrumb: close that scope
            path = str(content.get("scope", ""))
            if path in self.structure.scope_index:
                self.collapse(path)
        elif kind == "reset":
            self.reset()
        elif kind == "painted":
            self.first_paint_ms = float(content.get("ms", 0.0))

    # -- details --------------------------------------------------------------------------------
    def selected_nodes(self) -> List[str]:
        """The ONNX node ids selected (members of selected groups included)."""
        out: List[str] = []
        s = self.structure
        for k in self._elements(self.selected):
            if k < s.n_nodes:
                out.append(s.ids[k])
        return list(dict.fromkeys(out))
