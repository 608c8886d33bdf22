"""The Inspector panel: what is in a model and what TensorRT will refuse.

    from widgets import Inspector
    Inspector("model.onnx")

Summary cards, an op histogram (one plotly FigureWidget, updated in place), the inputs/outputs
table with dynamic dims highlighted, and the support report (static rules on open; the real
parser on "Check with TensorRT", run in a thread that only assigns widget values). Failing nodes
open their detail (op, attributes, tensors with shapes) in `detail_pane`. `graph_slot` is the
container where the graph view is mounted. All facts come from `workbench.graphs.inspect` and
`workbench.support.checker`; a bad file shows its one-line error in the panel instead of raising.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import ipywidgets as W
import plotly.graph_objects as go

from workbench.core.errors import WorkbenchError
from workbench.graphs.inspect import (NodeDetail, Summary, TensorInfo, format_bytes, node_details,
                               summarize)
from workbench.core.model import Model, as_model

from widgets.base import (MUTED_COLOUR, OK_COLOUR, SEVERITY_COLOURS, TABLE_CSS, BackgroundTask,
                          FindingsList, PanelBase, StatusLine, error_text, esc, fill,
                          findings_html, fit, steps_html)
from widgets.figure import Figure

DYN_STYLE = "background:#fff3cd;color:#7a5b00;border-radius:3px;padding:0 3px;font-weight:600"
CARD_STYLE = ("border:1px solid #ddd;border-radius:6px;padding:6px 10px;margin:2px 6px 2px 0;"
              "min-width:110px")
HIST_WIDTH = 400
BACKENDS = ["tensorrt-rtx", "tensorrt", "auto", "static"]


def _advise(report: Any, model: Any) -> Any:
    """Next steps that name a graph-surgery recipe (e.g. decompose) join the report's hints."""
    if report.unsupported:
        from workbench.surgery.propose import advise

        advise(report, model)
    return report


def shape_html(t: TensorInfo) -> str:
    """A shape with its dynamic dims highlighted (class `wb-dyn`)."""
    if t.shape is None:
        return f'<span class="wb-dyn" style="{DYN_STYLE}">unknown rank</span>'
    def dim(d: Any) -> str:
        if isinstance(d, int):
            return str(d)
        if re.fullmatch(r"unk__\d+", str(d)):  # the exporter's name for a size it cannot name
            return (f'<span class="wb-dyn" style="{DYN_STYLE}" title="a dynamic size the '
                    f'exporter left unnamed ({esc(d)})">?</span>')
        return f'<span class="wb-dyn" style="{DYN_STYLE}" title="dynamic dim">{esc(d)}</span>'
    return "[" + ", ".join(dim(d) for d in t.shape) + "]"


class Inspector(PanelBase, W.VBox):
    """Inspect a model: summary, op histogram, I/O, support report, node detail."""

    def __init__(self, model_or_path: Union[str, Path, Model], *, backend: str = "tensorrt-rtx",
                 static_check: bool = True, client: Any = None, timeout: float = 600.0) -> None:
        self.model: Optional[Model] = None
        self.summary: Optional[Summary] = None
        self.report: Any = None  # workbench.support.checker.SupportReport
        self.error: Optional[str] = None
        self.check_error: Optional[str] = None
        self.io_rows: List[Dict[str, Any]] = []
        self.details: Dict[str, NodeDetail] = {}
        self._client = client
        self._timeout = timeout
        self._init_base()  # self.status: the panel's error line

        self.title = W.HTML()
        self.cards = W.HBox(layout=W.Layout(flex_flow="row wrap"))
        self.op_figure = Figure(
            data=[go.Bar(x=[], y=[], orientation="h", marker_color="#4c78a8",
                         hovertemplate="%{y}: %{x}<extra></extra>")],
            # a set width: plotly's default (700 px, kept when the widget is laid out before
            # its column has a size) was clipped by a 424-px column, so Add (23), Constant (18)
            # and MatMul (17) looked the same
            layout=go.Layout(title="Op histogram", height=300, width=HIST_WIDTH,
                             margin=dict(l=10, r=10, t=40, b=30),
                             yaxis=dict(autorange="reversed", automargin=True),
                             xaxis=dict(title="nodes", rangemode="tozero")))
        self.io_table = W.HTML()
        self.warnings_html = FindingsList()
        self.backend_dd = W.Dropdown(options=BACKENDS, value=backend if backend in BACKENDS
                                     else "tensorrt-rtx", description="backend",
                                     layout=W.Layout(width="230px"))
        self.check_button = W.Button(description="Check with TensorRT", icon="search",
                                     button_style="primary", layout=fit())
        self.check_button.on_click(lambda _: self.run_check())
        self.backend_dd.observe(self._on_backend, names="value")
        self.check_status = StatusLine()
        self.task = BackgroundTask(self.check_status)  # the real-parser check, off the kernel
        self.support_html = W.HTML()
        self.failing_select = W.Select(options=[], rows=6, description="failing",
                                       layout=fill())
        self.failing_select.layout.display = "none"  # shown when a check names failing nodes
        self.failing_select.observe(self._on_failing, names="value")
        self.node_picker = W.Combobox(placeholder="node name or id", description="node",
                                      ensure_option=True, layout=fill())
        self.node_picker.observe(self._on_pick, names="value")
        self.detail_pane = W.VBox([W.HTML("<i>select a node to see its detail</i>")])
        self.graph_slot = W.VBox(layout=fill())

        support_box = W.VBox([W.HTML("<b>TensorRT support</b>"),
                              W.HBox([self.backend_dd, self.check_button, self.check_status],
                                     layout=W.Layout(flex_flow="row wrap")),
                              self.support_html, self.failing_select])
        self.body = W.VBox([
            self.cards,
            # histogram and I/O table side by side where both fit, else one above the other
            W.HBox([W.VBox([self.op_figure], layout=W.Layout(flex="0 0 auto")),
                    W.VBox([self.io_table], layout=W.Layout(flex="1 1 auto"))],
                   layout=W.Layout(flex_flow="row wrap")),
            self.warnings_html,
            support_box, self.graph_slot,
            W.VBox([self.node_picker, self.detail_pane])])
        super().__init__([self.title, self.status, self.body])
        self.load(model_or_path, static_check=static_check)

    # ------------------------------------------------------------------ loading
    def load(self, model_or_path: Union[str, Path, Model], *, static_check: bool = True) -> None:
        """(Re)load a model into the panel; errors are shown, not raised."""
        self.model = self.summary = self.report = None
        self.error = self.check_error = None
        self.details = {}
        label = getattr(model_or_path, "path", None) or model_or_path
        self.title.value = f"<h3 style='margin:4px 0'>Inspector: {esc(Path(str(label)).name)}</h3>"
        try:
            model = as_model(model_or_path)
            summary = summarize(model)
        except WorkbenchError as e:
            self._show_error(str(e))
            return
        except Exception as e:  # a bug of ours: still a message in the panel
            self._show_error(f"internal error: {type(e).__name__}: {e}")
            return
        self.model, self.summary = model, summary
        self.details = {d.id: d for d in node_details(model, summary.shapes)}
        self.status.value = ""
        self.body.layout.display = None
        self.check_button.disabled = False
        self._render_cards()
        self._render_ops()
        self._render_io()
        self._render_warnings()
        self.node_picker.options = tuple(self.details)
        self._mount_graph(model)
        self.support_html.value = ""
        self.failing_select.options = []
        self.failing_select.layout.display = "none"
        if static_check:
            self._static_check()

    def _show_error(self, msg: str) -> None:
        self.error = msg
        self.status.value = (f"<div class='wb-error' style='color:{SEVERITY_COLOURS['error']};"
                             f"border:1px solid #e99;"
                             f"padding:6px;border-radius:4px'><b>Cannot inspect:</b> "
                             f"{esc(msg)}</div>")
        self.body.layout.display = "none"
        self.graph_slot.children = []
        self.check_button.disabled = True
        with self.op_figure.batch_update():
            self.op_figure.data[0].x, self.op_figure.data[0].y = [], []

    # ------------------------------------------------------------------ rendering
    def _card(self, title: str, value: str, sub: str = "") -> W.HTML:
        return W.HTML(f"<div style='{CARD_STYLE}'><div style='color:#666;font-size:11px'>"
                      f"{esc(title)}</div><div style='font-size:18px;font-weight:600'>"
                      f"{esc(value)}</div><div style='color:#888;font-size:11px'>{esc(sub)}"
                      "</div></div>")

    def _render_cards(self) -> None:
        s = self.summary
        assert s is not None
        opsets = ", ".join(f"{k} {v}" for k, v in s.opsets.items())
        weights = "external, missing" if not s.weights_available else (
            "external" if s.external_data_bytes else "embedded")
        self.cards.children = [
            self._card("nodes", f"{s.node_count:,}", f"{len(s.ops)} op types"
                       + (f", +{s.subgraph_node_count} in subgraphs" if s.subgraph_node_count
                          else "")),
            self._card("parameters", f"{s.parameter_count:,}",
                       f"{format_bytes(s.parameter_bytes)}, weights {weights}"),
            self._card("opset", str(s.opset if s.opset is not None else "?"), opsets),
            self._card("IR version", str(s.ir_version), s.producer or ""),
            self._card("inputs / outputs", f"{len(s.inputs)} / {len(s.outputs)}",
                       f"{len(s.dynamic_inputs)} with dynamic dims"),
            self._card("file", format_bytes(s.size_bytes),
                       f"+ {format_bytes(s.external_data_bytes)} data"
                       if s.external_data_bytes else ""),
        ]

    def _render_ops(self) -> None:
        s = self.summary
        assert s is not None
        ops = list(s.ops.items())
        with self.op_figure.batch_update():
            bar = self.op_figure.data[0]
            bar.y = [k for k, _ in ops]
            bar.x = [v for _, v in ops]
            self.op_figure.layout.height = max(220, 60 + 20 * len(ops))
            # node counts are whole numbers: no 0.5 ticks when the largest is small
            top = max((v for _, v in ops), default=1)
            self.op_figure.layout.xaxis.dtick = None if top > 8 else 1

    def _render_io(self) -> None:
        s = self.summary
        assert s is not None
        self.io_rows = [{"kind": kind, "name": t.name, "dtype": t.dtype, "shape": t.shape,
                         "dynamic": t.dynamic_dims, "unknown_rank": t.shape is None}
                        for kind, ts in (("input", s.inputs), ("output", s.outputs)) for t in ts]
        rows = "".join(
            f"<tr><td>{r['kind']}</td><td><code>{esc(r['name'])}</code></td>"
            f"<td>{esc(r['dtype'])}</td><td>{shape_html(t)}</td></tr>"
            for r, t in zip(self.io_rows, list(s.inputs) + list(s.outputs)))
        self.io_table.value = (TABLE_CSS + "<table class='wb-io wb-t' "
                               "style='border-collapse:collapse'>"
                               "<tr><th align=left>kind</th><th align=left>name</th>"
                               "<th align=left>dtype</th><th align=left>shape</th></tr>"
                               f"{rows}</table>")

    def _render_warnings(self) -> None:
        s = self.summary
        assert s is not None
        items = [w for w in s.warnings if w.severity != "info"]
        self.warnings_html.value = findings_html(items) if items else ""

    def _bound(self, steps: Any) -> List[Any]:
        """Next steps with {model} as the inspected file (a short line each; the command in
        the tooltip runs as pasted)."""
        from workbench.core.findings import NextStep

        path = getattr(self.model, "path", None) if self.model is not None else None
        return [NextStep.from_dict(s).bound(model=str(path) if path else None) for s in steps]

    def _render_report(self, report: Any) -> None:
        """Show a SupportReport (assigns widget values only: safe from a thread)."""
        head = f"<div class='wb-support'>{self._support_heading(report)}: "
        if report.supported:
            head += f"<span style='color:{OK_COLOUR}'>every node is supported</span>"
        else:
            head += (f"<span style='color:{SEVERITY_COLOURS['error']}'>"
                     f"{esc(refused_summary(report.unsupported))}</span>")
        # names, ops and the source keep one line; the reason wraps at words, the next step
        # (commands with long paths) anywhere: the table stays inside the panel
        keep, words, anywhere = ("white-space:nowrap;vertical-align:top;padding-right:8px",
                                 "vertical-align:top;padding-right:8px",
                                 "vertical-align:top;overflow-wrap:anywhere")
        rows = "".join(
            f"<tr><td style='{keep}'><code>{esc(u.get('node') or '(graph)')}</code></td>"
            f"<td style='{keep}'>{esc(u.get('op') or '')}</td>"
            f"<td style='{words}'>{esc(u.get('reason') or '')}</td>"
            f"<td style='{keep}'>{esc(u.get('source') or '')}</td>"
            f"<td style='{anywhere}'>{esc(u.get('hint') or '')}"
            f"{'<br>' if u.get('hint') and u.get('next_steps') else ''}"
            f"{steps_html(self._bound(u.get('next_steps') or []))}</td></tr>"
            for u in report.unsupported)
        table = (TABLE_CSS + "<table class='wb-unsupported wb-t' "
                 "style='width:100%;border-collapse:collapse'>"
                 "<tr><th align=left>node</th><th align=left>op</th><th align=left>reason</th>"
                 "<th align=left>source</th><th align=left>next step</th></tr>"
                 f"{rows}</table>") if rows else ""
        notes = "".join(f"<div style='color:#666'>{esc(n)}</div>"
                        for n in getattr(report, "notes", []) or [])
        self.support_html.value = head + self._next_check(report) + "</div>" + table + notes
        opts = []
        for u in report.unsupported:
            nid = self._node_id(u.get("node"))
            if nid is not None:
                opts.append((f"{u.get('node')}  ({u.get('op')})", nid))
        self.failing_select.options = opts
        self.failing_select.layout.display = None if opts else "none"
        if getattr(self, "graph_view", None) is not None:
            # support findings plus the graph's own (cycles, dangling inputs, duplicate names)
            self.graph_view.color_by_findings(list(report.findings) + self.graph_view.findings)

    def _support_heading(self, report: Any) -> str:
        """Who answered: the static rules and the backend they are for (no parser ran yet; the
        note under the table says what they were compiled from), or the parser and its version."""
        if report.backend == "static":
            rules = getattr(report, "rules", None)
            return "<b>static rules</b>" + (f" <b>for {esc(rules)}</b>" if rules else "")
        version = f" {report.backend_version}" if report.backend_version else ""
        mode = getattr(report, "mode", "") or ""
        return (f"<b>{esc(report.backend)}{esc(version)}</b>"
                + (f" ({esc(mode)})" if mode and mode != report.backend else ""))

    def _next_check(self, report: Any) -> str:
        """After the static rules, say which parser the button asks (the dropdown's choice)."""
        if report.backend != "static" or self.backend_dd.value == "static":
            return ""
        return (f"<div class='wb-next' style='color:{MUTED_COLOUR}'>not checked by a parser yet: "
                f"<b>Check with TensorRT</b> asks {esc(self.backend_dd.value)}</div>")

    def _static_rules(self) -> str:
        """The rule table for the dropdown's backend: its own where it has one, else the
        published matrix's (`auto` may end up on either parser, `static` asks none)."""
        value = self.backend_dd.value
        return value if value in ("tensorrt", "tensorrt-rtx") else "tensorrt"

    def _on_backend(self, change: Dict[str, Any]) -> None:
        if self.report is not None and self.report.backend == "static":
            if getattr(self.report, "rules", None) != self._static_rules():
                self._static_check()  # the rules of the backend now chosen (cheap: no parser)
            else:
                self._render_report(self.report)

    # ------------------------------------------------------------------ support
    def _static_check(self) -> None:
        try:
            from workbench.support.checker import check
        except ImportError as e:
            self.support_html.value = f"<i>support check not available: {esc(e)}</i>"
            return
        try:
            self.report = _advise(check(self.model, backend="static", rules=self._static_rules()),
                                  self.model)
        except WorkbenchError as e:
            self.check_error = str(e)
            self.support_html.value = (f"<span class='wb-error' style='color:"
                                       f"{SEVERITY_COLOURS['error']}'>{esc(e)}</span>")
            return
        self._render_report(self.report)

    def run_check(self, backend: Optional[str] = None, *, wait: bool = False) -> None:
        """Ask the real parser (in the worker) in a BackgroundTask, off the kernel thread;
        `wait=True` blocks until done."""
        if self.model is None or self.busy:
            return
        backend = backend or self.backend_dd.value
        self.check_button.disabled = True
        self.check_error = None
        model, client, timeout = self.model, self._client, self._timeout

        def work() -> Any:
            from workbench.support.checker import check

            return _advise(check(model, backend=backend, client=client, timeout=timeout), model)

        self.task.start(work, done=self._check_done, failed=self._check_failed,
                        busy=f"checking with {backend}...")
        if wait:
            self.wait()

    def _check_done(self, report: Any) -> None:  # in the task's thread: assigns traits only
        self.report = report
        self._render_report(report)
        self.check_status.ok("done")
        self.check_button.disabled = False

    def _check_failed(self, e: BaseException) -> None:
        self.check_error = str(e) if isinstance(e, WorkbenchError) else \
            f"internal error: {error_text(e)}"
        self.check_status.error(self.check_error)
        self.check_button.disabled = False

    # ------------------------------------------------------------------ node detail
    def _node_id(self, name_or_id: Optional[str]) -> Optional[str]:
        """The stable id of a node given by id or by a name only it has (None otherwise:
        a shared name stands for no single node)."""
        if not name_or_id or self.model is None:
            return None
        if name_or_id in self.details:
            return name_or_id
        hits = self.model.index.find(name_or_id)
        return self.model.index.ids[hits[0]] if len(hits) == 1 else None

    # ------------------------------------------------------------------ graph view
    def _mount_graph(self, model: Model) -> None:
        """The graph view in `graph_slot`; clicking a node there shows it in `detail_pane`."""
        from widgets.graphview import GraphView

        self.graph_view = None
        try:
            view = GraphView(model, height=520)
        except WorkbenchError as e:
            self.graph_slot.children = [W.HTML(
                f"<span class='wb-error' style='color:{SEVERITY_COLOURS['error']}'>"
                f"graph view unavailable: {esc(e)}</span>")]
            return
        view.observe(self._on_graph_select, names="selected")
        self.graph_view = view
        self.graph_slot.children = [view]

    def _on_graph_select(self, change: Dict[str, Any]) -> None:
        sel = list(change["new"])
        if not sel:
            return
        nid = sel[-1]
        if nid in self.details:
            self.show_node(nid)
            return
        kind, _, tensor = nid.partition(":")
        if kind in ("input", "output") and self.summary is not None:
            infos = self.summary.inputs if kind == "input" else self.summary.outputs
            t = next((x for x in infos if x.name == tensor), None)
            if t is not None:
                self.detail_pane.children = [W.HTML(
                    f"<div class='wb-node'><b>graph {kind}</b> <code>{esc(t.name)}</code> "
                    f"&middot; {esc(t.dtype)} {shape_html(t)}</div>")]
                return
        view = self.graph_view
        members = view.selected_nodes() if view is not None else []
        self.detail_pane.children = [W.HTML(
            f"<div class='wb-node'><b>{esc(nid)}</b> &middot; {len(members)} node(s): "
            + ", ".join(f"<code>{esc(m)}</code>" for m in members[:20])
            + (" ..." if len(members) > 20 else "") + "</div>")]

    def _on_failing(self, change: Dict[str, Any]) -> None:
        if change["new"]:
            self._show_and_reveal(change["new"])

    def _on_pick(self, change: Dict[str, Any]) -> None:
        if change["new"] in self.details:
            self._show_and_reveal(change["new"])

    def _show_and_reveal(self, node: str) -> None:
        """A node picked by name (or from the failing list): its detail, and in the graph
        its scope opened, the node selected and zoomed to."""
        self.show_node(node)
        nid = self._node_id(node)
        if nid is not None and getattr(self, "graph_view", None) is not None:
            self.graph_view.reveal([nid])

    def show_node(self, node: str) -> Optional[NodeDetail]:
        """Show one node's detail (by id or name) in `detail_pane`."""
        nid = self._node_id(node)
        if nid is None:
            try:  # says which nodes share the name, or that there is none
                if self.model is not None:
                    self.model.index.node_index(node)
                msg = f"no node '{node}'"
            except WorkbenchError as e:
                msg = e.one_line()
            self.detail_pane.children = [W.HTML(f"<i>{esc(msg)}</i>")]
            return None
        d = self.details[nid]

        def tensors(names: List[str], infos: List[Optional[TensorInfo]]) -> str:
            return "".join(
                f"<tr><td><code>{esc(n or '(none)')}</code></td>"
                f"<td>{esc(t.dtype) if t else '?'}</td>"
                f"<td>{shape_html(t) if t else '?'}</td></tr>" for n, t in zip(names, infos))

        attrs = "".join(f"<tr><td>{esc(k)}</td><td><code>{esc(json.dumps(v))}</code></td></tr>"
                        for k, v in d.attributes.items())
        problems = [u for u in (self.report.unsupported if self.report else [])
                    if self._node_id(u.get("node")) == nid]
        why = "".join(f"<div style='color:{SEVERITY_COLOURS['error']}'>{esc(u.get('source'))}: "
                      f"{esc(u.get('reason'))}</div>" for u in problems)
        self.detail_pane.children = [W.HTML(
            f"<div class='wb-node'><b>{esc(d.name or d.id)}</b> &middot; {esc(d.op)} "
            f"<span style='color:#666'>({esc(d.domain)})</span> &middot; id <code>{esc(d.id)}"
            f"</code>{' &middot; scope ' + esc(d.scope) if d.scope else ''}{why}"
            f"{TABLE_CSS}<table class='wb-t'><tr><th align=left>input</th><th>dtype</th>"
            f"<th>shape</th></tr>"
            f"{tensors(d.inputs, d.input_info)}"
            f"<tr><th align=left>output</th><th>dtype</th><th>shape</th></tr>"
            f"{tensors(d.outputs, d.output_info)}</table>"
            + (f"<table class='wb-t'><tr><th align=left>attribute</th><th align=left>value</th>"
               f"</tr>{attrs}"
               "</table>" if attrs else "") + "</div>")]
        return d


def refused_summary(unsupported: List[Dict[str, Any]]) -> str:
    """What was refused, counted as the graph colours it: the nodes (each once, however many
    messages it got), then problems of the model as a whole, which colour no node."""
    nodes = list(dict.fromkeys(u["node"] for u in unsupported if u.get("node")))
    whole = sum(1 for u in unsupported if not u.get("node"))
    parts = [f"{len(nodes)} node(s) refused"] if nodes or not whole else []
    if whole:
        parts.append(f"{whole} problem(s) of the model as a whole (no node named)")
    return ", ".join(parts)
