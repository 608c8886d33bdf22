"""The Timing panel: where the time goes in an engine, mapped onto the ONNX graph.

    from widgets import TimingPanel, GraphView
    view = GraphView("model.onnx")
    panel = TimingPanel("fp16.layers.json", "fp16.profile.json", onnx="model.onnx",
                        vs=("fp32.layers.json", "fp32.profile.json"), graph_view=view)
    panel.heatmap()            # colour the graph view by time
    panel.select_layer(name)   # what a click on a bar does
    TimingPanel("analyze-data.json")  # NVIDIA trt-perf-analysis output: its layers, times, issues

Tabs: per-layer bars (colour by type or precision; click = select the layer and its ONNX nodes in
the graph view), a treemap by ONNX name scope, engine vs engine, latency, findings, and, when the
panel knows the ONNX model and no graph view is given, Graph: the ONNX | engine split view
(`widgets.splitview.SplitView`, built when the tab is first opened). `graph_view` may itself be
a SplitView: bar clicks then select the layer on the engine side and its nodes on the ONNX
side, clicks on either side light up the bars, and the heat map colours both sides (ONNX nodes
by their time, engine layers by theirs). Figures are plotly FigureWidgets updated in place (no
new figure per change).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import ipywidgets as W

from workbench.core.errors import WorkbenchError
from workbench.timing import LayerTable, compare, lint, node_comparison, summarize
from workbench.core.graphindex import scope_parts
from workbench.render import timing_figures as figures

from widgets.base import FindingsList, esc, fit, short_label
from widgets.figure import Figure

HEAT_COLORS = ["#fff5d6", "#fdd49e", "#fc8d59", "#e34a33", "#b30000"]
NO_TIME_COLOR = "#d9d9d9"
LayersArg = Union[str, Any, LayerTable]
LABEL_CHARS = figures.LABEL_CHARS  # layer names on the bar chart's axis (hover, detail: whole)


def fitted(fig: Any) -> Any:
    """A figure that takes its tab's width (plotly's default is a fixed 700 px)."""
    fig.update_layout(autosize=True)
    return fig


def fitted_bars(fig: Any) -> Any:
    """The per-layer bars at the tab's width. Their axis already names the layers cut in the
    middle (`timing_figures.layer_bars`, 11-px labels, one 18-px row each): fused-layer names
    run to 100+ characters, which left the bars a 90-px strip beside 400 px of labels."""
    names = list(fig.layout.yaxis.categoryarray or [])
    if list(fig.layout.yaxis.tickvals or []) != names:  # a figure made elsewhere
        fig.update_yaxes(tickmode="array", tickvals=names,
                         ticktext=[short_label(n, LABEL_CHARS) for n in names])
    return fitted(fig)


def _as_table(layers: Any, profile: Any, onnx: Any) -> LayerTable:
    if isinstance(layers, LayerTable):
        return layers
    if isinstance(layers, (tuple, list)):
        layers, profile = layers[0], (layers[1] if len(layers) > 1 else profile)
    return LayerTable.build(layers, profile, onnx=onnx)


def heat_mapping(t: LayerTable, bins: int = 5) -> Tuple[Dict[str, str], List[Tuple[str, str]]]:
    """node id -> colour by per-node time (log-spaced bins), and the legend."""
    nt = t.node_times(include_attributed=True)
    nt = nt[nt["time_ms"] > 0]
    if nt.empty:
        return {}, []
    lo, hi = float(nt["time_ms"].min()), float(nt["time_ms"].max())
    colors = HEAT_COLORS[:bins]
    if hi <= lo:
        edges = [lo, hi]
        colors = colors[-1:]
    else:
        a, b = math.log10(lo), math.log10(hi)
        edges = [10 ** (a + (b - a) * k / len(colors)) for k in range(len(colors) + 1)]
    mapping: Dict[str, str] = {}
    for nid, ms in zip(nt["node_id"], nt["time_ms"]):
        k = 0
        while k < len(colors) - 1 and ms > edges[k + 1]:
            k += 1
        mapping[str(nid)] = colors[k]
    legend = [(f"{edges[k]:.4f}-{edges[k + 1]:.4f} ms", colors[k]) for k in range(len(colors))][::-1]
    if t.index is not None:
        for nid in t.index.ids:
            mapping.setdefault(nid, NO_TIME_COLOR)
        legend.append(("no time", NO_TIME_COLOR))
    return mapping, legend


class TimingPanel(W.VBox):
    """Per-layer timing of an engine with its ONNX mapping (see module docstring)."""

    def __init__(self, layers: LayersArg, profile: Any = None, onnx: Any = None, vs: Any = None,
                 graph_view: Any = None, *, vs_profile: Any = None,
                 names: Sequence[str] = ("engine", "baseline"), top: int = 60,
                 vs_torch: Optional[Dict[str, Any]] = None) -> None:
        from widgets.splitview import SplitView

        self.table = _as_table(layers, profile, onnx)
        self.vs_table = None if vs is None else _as_table(vs, vs_profile, onnx)
        self.split: Optional[SplitView] = graph_view if isinstance(graph_view, SplitView) else None
        if self.split is not None:
            graph_view = self.split.onnx  # the ONNX side is the graph view; the engine side follows
        self.graph_view = graph_view
        self._onnx = onnx if onnx is not None else (self.table.index.path or None
                                                    if self.table.index is not None else None)
        self.names = (str(names[0]), str(names[1]))
        self.selected_layer: Optional[str] = None
        self.selected_nodes: List[str] = []
        self.selected_scope: Optional[str] = None
        self._syncing = False
        self.graph_layers: List[str] = []
        self.summary_data = summarize(self.table)
        # the lint's findings, plus the issues an NVIDIA analyze-data.json brought with it
        self.findings = lint(self.table) + [w for w in self.table.warnings
                                            if w.source == "trt-perf-analysis"]
        self.comparison = (None if self.vs_table is None
                           else compare(self.vs_table, self.table, (self.names[1], self.names[0])))

        self.color_by = W.ToggleButtons(options=["type", "precision"], value="type",
                                        description="colour by")
        self.top = W.BoundedIntText(value=top, min=5, max=max(5, len(self.table)), description="layers")
        self.header = W.HTML(self._header_html())
        self.detail = W.HTML("<i>click a bar to see the layer and its ONNX nodes</i>")
        self.bars = Figure(fitted_bars(figures.layer_bars(self.table, "type", top)))
        self._wire_clicks()
        self.treemap = (Figure(fitted(figures.scope_treemap(self.table)))
                        if self.table.has_times else None)
        if self.treemap is not None:
            self.treemap.data[0].on_click(self._on_treemap_click)
        if graph_view is not None and hasattr(graph_view, "observe"):
            graph_view.observe(self._on_graph_select, names="selected")
        self.graph_box: Optional[W.Box] = None  # the Graph tab (split view), filled when opened
        if graph_view is None and self._onnx is not None and self.table.index is not None:
            self.graph_box = W.VBox([W.HTML("<i>opening the ONNX | engine split view ...</i>")])
        self.heat_btn = W.Button(description="heat map on graph", icon="fire",
                                 disabled=graph_view is None, layout=fit())  # enabled when a graph shows
        self.heat_btn.on_click(lambda _b: self.heatmap())
        self.compare_fig = self.nodes_fig = None
        if self.comparison is not None and self.table.has_times and self.vs_table.has_times:
            self.compare_fig = Figure(fitted(figures.compare_types(self.comparison)))
            nc = node_comparison(self.vs_table, self.table, (self.names[1], self.names[0]))
            self.nodes_fig = Figure(fitted(figures.compare_nodes(
                nc, (self.names[1], self.names[0]))))
        prof = self.table.profile
        self.latency_fig = None
        if prof is not None and prof.latency_ms is not None and len(prof.latency_ms):
            self.latency_fig = Figure(fitted(figures.latency_figure(prof.latency_ms,
                                                                             prof.throughput)))
        self.findings_html = FindingsList()
        self.findings_html.show(self.findings, empty="no lint findings", limit=None)
        self.color_by.observe(lambda ch: self.refresh(), names="value")
        self.top.observe(lambda ch: self.refresh(), names="value")

        pages: List[Tuple[str, Any]] = [("Layers", W.VBox([W.HBox([self.color_by, self.top]),
                                                           self.bars, self.detail]))]
        if self.treemap is not None:
            pages.append(("Scopes", W.VBox([self.heat_btn, self.treemap])))
        if self.compare_fig is not None:
            pages.append(("Compare", W.VBox([self.compare_fig, self.nodes_fig])))
        if self.latency_fig is not None:
            pages.append(("Latency", self.latency_fig))
        pages.append(("Findings", self.findings_html))
        self.vs_torch_html = W.HTML()
        self.show_vs_torch(vs_torch)
        pages.append(("vs PyTorch", self.vs_torch_html))
        if self.graph_box is not None:
            pages.append(("Graph", self.graph_box))
        self.tabs = W.Tab(children=[p for _, p in pages])
        for i, (title, _) in enumerate(pages):
            self.tabs.set_title(i, title)
        self.tab_titles = [t for t, _ in pages]
        if self.graph_box is not None:
            self.tabs.observe(self._on_tab, names="selected_index")
        super().__init__([self.header, self.tabs])

    def _on_tab(self, change: Dict[str, Any]) -> None:
        if change["new"] is not None and self.tab_titles[change["new"]] == "Graph":
            self.split_view()

    def split_view(self) -> Any:
        """The ONNX | engine split view of this engine (the Graph tab's; built once), wired to
        the bars: a click on either side lights up its layers, a bar click selects there."""
        from widgets.splitview import SplitView

        if self.split is None:
            if self._onnx is None or self.table.index is None:
                raise WorkbenchError("the split view needs the ONNX model the engine was built from",
                                     field="onnx", hint="pass onnx=PATH to the Timing panel")
            self.split = SplitView(self.table, self._onnx)
            self.graph_view = self.split.onnx
            self.graph_view.observe(self._on_graph_select, names="selected")
            self.heat_btn.disabled = False
            if self.graph_box is not None:
                self.graph_box.children = [self.split]
            if self.selected_layer is not None:
                self.select_layer(self.selected_layer)
        return self.split

    # -- views -------------------------------------------------------------------------------
    def show_vs_torch(self, cmp: Optional[Dict[str, Any]]) -> None:
        """The engine beside PyTorch eager / torch.compile (a `timing.vs_torch.compare`
        result, as `timing-capture --vs torch --json` writes under "vs_torch"), each row with
        where its number came from; without one, why there is none."""
        from workbench.timing.vs_torch import torch_available

        if not cmp:
            why = torch_available()
            self.vs_torch_html.value = (
                "<i>no PyTorch comparison: " + esc(why) + "</i>" if why else
                "<i>no PyTorch comparison yet: run <code>workbench timing-capture ENGINE --vs "
                "torch --torch-model pkg.module:factory</code> (or pass its result as "
                "vs_torch=...)</i>")
            return
        rows = []
        for r in cmp.get("rows", []):
            p = r.get("p50_ms")
            fig = f"{p:.4f}" if isinstance(p, (int, float)) else esc(f"not timed: {r.get('reason')}")
            ratio = f"{r['vs_torch_compile']:.2f}x" if "vs_torch_compile" in r else ""
            src = r.get("source") or {}
            where = ", ".join(esc(f"{k} {src[k]}") for k in (
                "host", "gpu", "clocks", "torch", "cuda", "backend", "backend_version",
                "compute_capability", "timer") if src.get(k))
            rows.append(f"<tr><td>{esc(r.get('what', ''))}</td><td style='text-align:right'>"
                        f"{fig}</td><td style='text-align:right'>{ratio}</td>"
                        f"<td style='font-size:90%'>{where}</td></tr>")
        note = "" if cmp.get("available") else \
            f"<p><i>torch not timed: {esc(cmp.get('reason', ''))}</i></p>"
        shapes = esc(", ".join(f"{k} {v}" for k, v in (cmp.get("shapes") or {}).items()))
        self.vs_torch_html.value = (
            f"<p>P50 latency at {shapes}, same process and run</p><table><tr><th>what</th>"
            "<th>P50 ms</th><th>vs torch.compile</th><th>where it came from</th></tr>" +
            "".join(rows) + "</table>" + note)

    def _header_html(self) -> str:
        s = self.summary_data
        cov = s["onnx_mapping"]
        total = "no profile" if s["total_ms"] is None else f"{s['total_ms']:.4f} ms ({s['statistic']})"
        parts = [f"<b>{esc(self.table.source.rsplit('/', 1)[-1])}</b>: {s['layers']} layers, {total}"]
        if cov["mapped_pct"] is not None:
            parts.append(f"{cov['mapped_pct']:.1f}% of time mapped to ONNX nodes")
        if s.get("latency"):
            la = s["latency"]
            parts.append(f"P50 {la['p50_ms']:.3f} / P90 {la['p90_ms']:.3f} / P99 {la['p99_ms']:.3f} ms")
        if self.comparison and self.comparison.get("speedup"):
            parts.append(f"x{self.comparison['speedup']:.2f} vs {esc(self.names[1])}")
        return " &middot; ".join(parts)

    def _wire_clicks(self) -> None:
        for tr in self.bars.data:
            tr.on_click(self._on_bar_click)

    def _on_bar_click(self, trace: Any, points: Any, _state: Any = None) -> None:
        if not points.point_inds:
            return
        name = trace.customdata[points.point_inds[0]]
        self.select_layer(str(name))

    def refresh(self) -> None:
        """Redraw the bars for the current colour-by and layer count, in place."""
        fig = fitted_bars(figures.layer_bars(self.table, self.color_by.value, int(self.top.value)))
        with self.bars.batch_update():
            self.bars.data = ()
            self.bars.add_traces(list(fig.data))
            self.bars.layout = fig.layout
        self._wire_clicks()

    # -- actions -----------------------------------------------------------------------------
    def select_layer(self, name: str) -> List[str]:
        """Select a layer: show its details and select/highlight its ONNX nodes in the graph
        view. Returns the node ids selected."""
        row = self.table.row(name)
        ids = self.table.node_ids_of(name)
        self.selected_layer, self.selected_nodes = name, ids
        how = row["mapping"] or "not mapped"
        if row["mapping"] == "reformat-for":
            how += f" (reformat serving '{row['attributed_to']}')"
        time_txt = "n/a" if row["time_ms"] != row["time_ms"] else f"{row['time_ms']:.4f} ms ({row['pct']:.1f}%)"
        nodes = ", ".join(esc(n) for n in row["onnx_nodes"][:20])
        if len(row["onnx_nodes"]) > 20:
            nodes += f" ... ({len(row['onnx_nodes'])} nodes)"
        # (kernel names have no spaces: they wrap anywhere rather than widen the panel)
        self.detail.value = (
            f"<div style='overflow-wrap:anywhere'><b>{esc(name)}</b><br>type {esc(row['type'])} &middot; precision "
            f"{esc(row['precision'] or '?')} &middot; {time_txt}<br>tactic {esc(row['tactic'])}<br>"
            f"in {esc(row['input_shapes'])} &rarr; out {esc(row['output_shapes'])}<br>"
            f"ONNX ({esc(how)}): {nodes or '<i>none</i>'}</div>")
        for tr in self.bars.data:
            names = list(tr.customdata) if tr.customdata is not None else []
            tr.selectedpoints = [names.index(name)] if name in names else []
        self._show_in_graph(ids, reveal=True)
        if self.split is not None:  # the layer itself on the engine side (its nodes stay selected)
            self._syncing = True
            try:
                self.split.select_layers([name])
            finally:
                self._syncing = False
        return ids

    def _show_in_graph(self, ids: List[str], reveal: bool = False) -> None:
        """Highlight and select `ids` in the graph view without echoing back into this panel;
        `reveal`: open their scopes and zoom to them (one layer's nodes, not a whole scope)."""
        gv = self.graph_view
        if gv is not None and ids:
            self._syncing = True
            try:
                if reveal and hasattr(gv, "reveal"):
                    gv.reveal(ids)
                else:
                    gv.selected = gv.highlight(ids)
            finally:
                self._syncing = False

    def _on_treemap_click(self, trace: Any, points: Any, _state: Any = None) -> None:
        if points.point_inds:
            self.select_scope(str(trace.ids[points.point_inds[0]]))

    def select_scope(self, scope_id: str) -> List[str]:
        """Select every ONNX node under a treemap box ('/layer1/layer1.0', 'node:<name>') and
        highlight them in the graph view. Returns their node ids."""
        nt = self.table.node_times()
        if scope_id.startswith("node:"):
            hit = nt[nt["node"] == scope_id[5:]]
        elif scope_id == "all":
            hit = nt
        else:  # the nodes whose scope (the one rule, graphindex.scope_of) lies below it
            parts = list(scope_parts(scope_id))
            hit = nt[[list(sc[:len(parts)]) == parts for sc in nt["scope"]]]
        ids = [str(i) for i in hit["node_id"]]
        self.selected_scope, self.selected_nodes = scope_id, ids
        ms = float(hit["time_ms"].sum())
        self.detail.value = (f"<b>{esc(scope_id)}</b>: {len(ids)} ONNX node(s), {ms:.4f} ms "
                             f"({ms / self.table.total_ms * 100 if self.table.total_ms else 0:.1f}%)")
        self._show_in_graph(ids)
        return ids

    def _on_graph_select(self, change: Dict[str, Any]) -> None:
        """A selection made in the graph view lights up the layers covering those nodes."""
        if self._syncing:
            return
        nodes = [n for n in (change.get("new") or []) if not str(n).startswith("scope:")]
        layers: List[str] = []
        for n in nodes:  # mapped nodes are keyed by stable id (= the name when unique)
            for lay in self.table.layers_of_node(n):
                if lay not in layers:
                    layers.append(lay)
        for tr in self.bars.data:
            names = list(tr.customdata) if tr.customdata is not None else []
            tr.selectedpoints = [i for i, nm in enumerate(names) if nm in layers]
        self.graph_layers = layers
        if layers:
            self.detail.value = ("<b>selected in the graph</b>: " + ", ".join(esc(x) for x in nodes[:5])
                                 + "<br>engine layer(s): " + "<br>".join(esc(x) for x in layers[:10]))

    def heatmap(self, levels: Optional[int] = None) -> Dict[str, str]:
        """Colour the graph view by per-node time (log bins). Returns node id -> colour.
        levels=N: a continuous log colour scale of N steps with a gradient legend instead
        (`GraphView.color_by_values`; nodes without time stay white and outlined)."""
        if self.split is None and self.graph_box is not None:
            self.split_view()
        if self.split is not None:
            self._heat_engine(levels or 16)
        if levels and self.graph_view is not None and hasattr(self.graph_view, "color_by_values"):
            nt = self.table.node_times(include_attributed=True)
            nt = nt[nt["time_ms"] > 0]
            if not nt.empty:
                return self.graph_view.color_by_values(
                    dict(zip(nt["node_id"].astype(str), nt["time_ms"])), title="time",
                    unit="ms", levels=int(levels))
        mapping, legend = heat_mapping(self.table)
        if not mapping:
            raise WorkbenchError("no per-layer times to draw", file=self.table.source,
                                 field="profile", hint="pass the engine's profile JSON")
        if self.graph_view is not None:
            self.graph_view.color_by(mapping, legend=legend)
        return mapping

    def _heat_engine(self, levels: int) -> None:
        """The split view's engine side coloured by each layer's own time (a continuous log scale)."""
        assert self.split is not None
        times = {}
        for eid, k in self.split.layer_of.items():
            if eid in self.split.graph.member_of:  # a group: its members share the layer's time
                continue
            ms = float(self.table.df["time_ms"].iloc[k])
            if ms == ms and ms > 0:
                times[eid] = ms
        for k, eid in enumerate(self.split.graph.element_of_layer):
            ms = float(self.table.df["time_ms"].iloc[k])
            if eid.startswith("scope:") and ms == ms and ms > 0:
                times[eid] = ms
        if times:
            self.split.engine.color_by_values(times, title="layer time", unit="ms", levels=int(levels))
