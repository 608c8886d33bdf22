"""The Compare panel: where precision is lost, layer by layer, and which nodes must stay FP32.

    from widgets import ComparePanel
    ComparePanel("model.onnx", "model.fp16.onnx", inputs="data.npz")   # compare two models
    ComparePanel("model.onnx", target="fp16", inputs="data.npz")        # + "Find FP32 nodes"
                                           # (compares the model converted to fp16 at once)
    ComparePanel("model.onnx", engine=BuildConfig(precision="fp16"), inputs="data.npz")
                                           # + "Compare engine": the TensorRT engine itself

With `target=` and no candidate, the candidate is the model converted to the target as it is
(`workbench.precision.convert`, no node kept in FP32), built and compared at once; the status
then says what to press next (*Find FP32 nodes* when the outputs are beyond tolerance). A panel
with nothing to run says what to pass or press instead of staying empty.
A plain view over `workbench.compare.layer_compare`: a plotly chart of each tensor's relative error in
topological order (log scale, culprits marked), a table of the worst tensors, the findings, and,
when a GraphView is given, the graph coloured by error. The figures and the default tolerances
are `workbench.runtime.comparison`'s, the same the CLI and the Precision panel show. Work runs in a
background task (widgets/base.py); the thread only assigns widget values. `run_compare`,
`run_search` and `run_engine` are the work itself (tests and scripts may call them directly).
The engine side (`workbench.measure.enginedebug.compare_engine`: fusion-aware marking, chunks under
`memory_budget_mb`, the observer check) shows in the same chart; the status line says whether
marking changed the engine's answer. When the engine's layer information is known (`layers=`,
or captured by "Compare engine"), "ONNX | engine" shows the split view
(`widgets.splitview.SplitView`) with the error heat map on both sides: ONNX nodes by the error
of their outputs, engine layers by the worst error of the ONNX nodes they were built from.
"""
from __future__ import annotations

import math
import os
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import ipywidgets as W

from widgets.base import (OK_COLOUR, SEVERITY_COLOURS, TABLE_CSS, FindingsList, PanelBase,
                          error_text, esc, fit, short_label)
from widgets.figure import Figure
from workbench import compare
from workbench.runtime.verdict import Verdict, judge_tensors, verdict_metric
from workbench.core.errors import WorkbenchError

MAX_TICKS = 32  # name at most this many tensors on the axis (every k-th beyond): at 11 px,
# rotated, 32 keep apart across the output area
BANDS = [(1e-3, OK_COLOUR, "rel < 1e-3"), (1e-2, "#bcbd22", "1e-3 .. 1e-2"),
         (1e-1, SEVERITY_COLOURS["warning"], "1e-2 .. 1e-1"),
         (math.inf, SEVERITY_COLOURS["error"], ">= 1e-1 or inf/NaN")]


def bands_legend() -> str:
    """What the bars' fill and outline mean (the figure has one trace: no plotly legend)."""
    swatch = "display:inline-block;width:10px;height:10px;margin:0 3px 0 10px;"
    fills = "".join(f"<span style='{swatch}background:{c}'></span>{esc(label)}"
                    for _, c, label in BANDS)
    return (f"<small>bar colour: relative error {fills}<span style='{swatch}border:2px solid "
            f"{SEVERITY_COLOURS['error']}'></span>outline: elements beyond atol/rtol"
            " &middot; no bar: identical to FP32</small>")


def band_color(rel: float) -> str:
    for limit, color, _ in BANDS:
        if rel < limit:
            return color
    return BANDS[-1][1]


def log_dtick(values: Sequence[float]) -> Any:
    """Log-axis ticks the chart's height can label: within about a decade every digit ("D1"),
    up to three decades 1/2/5 ("D2": "10m 9m 8m 7m 6m" crowded into 20 px), beyond that the
    powers of ten only (1)."""
    if not values:
        return "D1"
    decades = math.log10(max(values)) - math.log10(min(values))
    return "D1" if decades < 1.0 else "D2" if decades <= 3.0 else 1


def tensor_ticks(names: List[str], limit: int = 28) -> Dict[str, Any]:
    """x-axis ticks naming the tensors (the bars sit at their topological index): a short name
    per tensor ('_output_0' dropped, long names cut in the middle), every k-th when there are
    more than MAX_TICKS."""
    step = max(1, math.ceil(len(names) / MAX_TICKS))
    vals = list(range(0, len(names), step))

    def short(n: str) -> str:
        n = n[:-len("_output_0")] if n.endswith("_output_0") else n
        return short_label(n.lstrip("/") or n, limit)

    return dict(tickmode="array", tickvals=vals, ticktext=[short(names[i]) for i in vals],
                tickangle=-50, tickfont=dict(size=11), automargin=True)  # (9 px read poorly)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "inf"


class ComparePanel(PanelBase, W.VBox):
    """Per-tensor error chart + worst-tensor table + culprits; optional exclusion search.
    atol/rtol None: the defaults of the candidate's (or the target's) precision."""

    def __init__(self, reference: Any, candidate: Any = None, *, inputs: Any = None,
                 target: Optional[str] = None, atol: Optional[float] = None,
                 rtol: Optional[float] = None, allow_random: bool = False,
                 graph_view: Any = None, run: bool = True, engine: Any = None,
                 engine_file: Optional[str] = None, mark: Any = "boundaries",
                 memory_budget_mb: Optional[float] = None, layers: Any = None) -> None:
        self._init_base()
        self.reference, self.candidate, self.inputs = reference, candidate, inputs
        self.target, self.atol, self.rtol = target, atol, rtol
        self.allow_random = allow_random
        self.graph_view = graph_view
        self.report: Optional[compare.LayerwiseReport] = None
        self.search: Optional[compare.ExclusionSearch] = None
        self.error: Optional[str] = None
        self.converted: Any = None  # with target= and no candidate: the model converted to it
        self.engine, self.engine_file = engine, engine_file  # a BuildConfig (or its dict)
        self.mark, self.memory_budget_mb = mark, memory_budget_mb
        self.layers = layers  # the engine's layer information (path, EngineLayers or LayerTable)
        self.split: Any = None  # the ONNX | engine split view, once shown
        self.split_box = W.VBox([])
        self.split_btn = W.Button(description="ONNX | engine", icon="columns",
                                  disabled=layers is None, layout=fit(),
                                  tooltip="the ONNX graph and the engine's layers side by side, "
                                          "coloured by error")
        self.split_btn.on_click(lambda _: self.split_view())

        self.engine_btn = W.Button(description="Compare engine", icon="microchip",
                                   disabled=engine is None, layout=fit())
        self.compare_btn = W.Button(description="Compare", icon="balance-scale",
                                    disabled=not self.can_compare, layout=fit(),
                                    tooltip="compare the candidate with onnxruntime FP32, tensor "
                                            "by tensor" if candidate is not None else
                                            f"compare the model converted to {target} with "
                                            "onnxruntime FP32, tensor by tensor")
        self.search_btn = W.Button(
            description=f"Find FP32 nodes ({target})" if target else "Find FP32 nodes",
            icon="search", disabled=target is None, layout=fit(),
            tooltip=f"convert to {target}, keep the worst nodes in FP32, repeat until the "
                    "outputs are within budget" if target else
                    "needs a target: ComparePanel(model, target='fp16', inputs=...) searches "
                    "the nodes to keep in FP32 (a ready candidate has no target to convert to)")
        self.figure = Figure(layout=dict(
            height=440, autosize=True, margin=dict(l=50, r=10, t=30, b=40),
            # SI labels on every tick (a log axis otherwise labels 2..9 as bare digits)
            yaxis=dict(type="log", title="relative error", tickformat="~s"),
            xaxis=dict(title="tensor (topological order)", automargin=True),
            title="error per tensor vs FP32"))
        self.figure.add_bar(x=[], y=[], marker=dict(color=[]), name="relative error",
                            hovertemplate="%{customdata}<br>rel %{y:.3g}<extra></extra>")
        self.table = W.HTML()
        self.findings_html = FindingsList()
        self.compare_btn.on_click(lambda _: self.start(self.run_compare))
        self.search_btn.on_click(lambda _: self.start(self.run_search))
        self.engine_btn.on_click(lambda _: self.start(self.run_engine))
        super().__init__([W.HBox([self.compare_btn, self.search_btn, self.engine_btn, self.split_btn]),
                          self.status, self.figure, W.HTML(bands_legend()),
                          self.table, self.findings_html, self.split_box])
        if run and self.can_compare:
            self.start(self.run_compare)
        else:
            self._what_next()

    @property
    def can_compare(self) -> bool:
        """Compare has a candidate: the one given, or the model converted to `target`."""
        return self.candidate is not None or self.target is not None

    def _what_next(self) -> None:
        """Nothing ran yet: say what to press (or pass), never an empty panel."""
        if self.can_compare:
            what = ("the candidate" if self.candidate is not None else
                    f"the model converted to {self.target}")
            text = f"press Compare to compare {what} with onnxruntime FP32, tensor by tensor"
            if self.target is not None:
                text += (f", or Find FP32 nodes ({self.target}) to search the nodes to keep "
                         "in FP32")
        elif self.engine is not None:
            text = "press Compare engine to compare the TensorRT engine with onnxruntime FP32"
        else:
            text = ("nothing to compare: pass a candidate model (ComparePanel(model, candidate, "
                    "inputs=...)) or a precision target (target='fp16')")
        self.status.value = f"<i>{esc(text)}</i>"

    # -- work ------------------------------------------------------------------------------
    def start(self, fn: Any) -> Any:
        """Run `fn` in the panel's background task (buttons, the initial compare); the panel
        shows busy before this returns."""
        if not self.task.running:
            self._busy("comparing layer by layer ..." if fn == self.run_compare else
                       "building and running the engine ..." if fn == self.run_engine else
                       f"searching the nodes to keep in FP32 for {self.target} ...")
        return self.task.start(fn)

    def _busy(self, text: str) -> None:
        self.compare_btn.disabled = self.search_btn.disabled = self.engine_btn.disabled = True
        self.status.busy(text)

    def _idle(self) -> None:
        self.compare_btn.disabled = not self.can_compare
        self.search_btn.disabled = self.target is None
        self.engine_btn.disabled = self.engine is None
        self.split_btn.disabled = self.engine_layers() is None

    def _failed(self, e: Exception) -> None:
        self.error = error_text(e)
        self.status.error(self.error)

    def _attempt(self, message: str, work: Callable[[], None]) -> None:
        """One run of the panel's work: busy state, the error shown in the status, idle after.
        Called directly (not from the panel's task) while the task runs, it waits for it first:
        the two would otherwise write the same report and status."""
        if self.task.running and threading.current_thread() is not self.task.thread:
            self.task.wait()
        self._busy(message)
        try:
            work()
            self.error = None
        except WorkbenchError as e:
            self._failed(e)
        finally:
            self._idle()

    def candidate_model(self) -> Any:
        """The candidate: the one given, or the model converted to `target` (built once, no
        node kept in FP32: the search's starting point)."""
        if self.candidate is not None:
            return self.candidate
        if self.target is None:
            raise WorkbenchError("nothing to compare", field="candidate",
                                 hint="pass a candidate model or target='fp16'")
        if self.converted is None:
            from workbench.precision.transform import convert

            self.converted = convert(self.reference, self.target, calibration=self.inputs,
                                     allow_random=self.allow_random, measure=False)
        return self.converted.proto

    def run_compare(self) -> Optional[compare.LayerwiseReport]:
        def work() -> None:
            cand = self.candidate_model()
            atol, rtol = self.atol, self.rtol
            if self.candidate is None:  # the target's tolerances, as the search judges by
                from workbench.precision.table import tolerances

                atol, rtol = tolerances(self.target, atol, rtol)
            rep = compare.layerwise(self.reference, cand, calibration=self.inputs,
                                    atol=atol, rtol=rtol, allow_random=self.allow_random)
            if self.candidate is None:  # what the conversion found (ranges, kept nodes) first
                rep.findings[:0] = list(self.converted.findings)
            self.report = rep
            origin = None if self.candidate is not None else \
                f"the model converted to {self.target.upper()} (no node kept in FP32)"
            self.show(rep, origin=origin)
            step = self._next_step(rep) if self.target is not None else ""
            if step:
                self.status.value += "<br>" + step

        self._attempt("comparing layer by layer ...", work)
        return self.report

    def run_search(self) -> Optional[compare.ExclusionSearch]:
        def work() -> None:
            self.search = compare.find_exclusions(self.reference, self.target,
                                                  calibration=self.inputs, atol=self.atol,
                                                  rtol=self.rtol, allow_random=self.allow_random)
            if self.search.final is not None:
                self.report = self.search.final
                self.show(self.search.final, origin=(
                    f"the model converted to {self.target.upper()} with "
                    f"{len(self.search.excluded)} node(s) kept in FP32"))
            verdict = "within budget" if self.search.passed else "NOT within budget"
            rule = f" ({esc(self.search.rule)})" if self.search.rule else ""
            # one unbreakable flag each: a line wraps between flags, never inside one
            flags = " ".join(f"<span style='white-space:nowrap'>--exclude {esc(n)}</span>"
                             for n in self.search.excluded)
            kept = (f": <code>{flags}</code>" if self.search.excluded else "")
            self.status.value += (f"<br><b>{esc(self.target)}: {verdict}</b>{rule} with "
                                  f"{len(self.search.excluded)} node(s) kept in FP32{kept}")
            if not self.search.passed and not self.search.hopeless:
                data = self.inputs if isinstance(self.inputs, (str, os.PathLike)) else None
                model = self.reference if isinstance(self.reference, (str, os.PathLike)) \
                    else None
                self.status.value += ("<br>" + esc(self.search.why_stopped(
                    model, str(data) if data is not None else None)))

        self._attempt(f"searching the nodes to keep in FP32 for {self.target} ...", work)
        return self.search

    def run_engine(self) -> Optional[compare.LayerwiseReport]:
        """The engine itself vs onnxruntime FP32 (workbench.measure.enginedebug.compare_engine)."""
        def work() -> None:
            from workbench.engines.spec import BuildConfig
            from workbench.measure.enginedebug import compare_engine

            cfg = self.engine if isinstance(self.engine, BuildConfig) else \
                BuildConfig.from_dict(dict(self.engine))
            feeds = compare.sample_feeds(self.reference, calibration=self.inputs,
                                         allow_random=self.allow_random)
            self.report = compare_engine(self.reference, cfg, feeds, engine=self.engine_file,
                                         mark=self.mark, memory_budget_mb=self.memory_budget_mb,
                                         atol=self.atol, rtol=self.rtol)
            self.show(self.report)

        self._attempt("building and running the engine ...", work)
        return self.report

    def verdict(self, rep: compare.LayerwiseReport) -> Verdict:
        """The outputs' verdict (`workbench.runtime.verdict`): by output kind at the candidate's
        precision; the elementwise rule when the panel was given atol / rtol."""
        return judge_tensors(rep.outputs, rep.precision or "fp32", rep.runs,
                             metric=verdict_metric(None, self.atol, self.rtol), atol=rep.atol,
                             rtol=rep.rtol)

    def _next_step(self, rep: compare.LayerwiseReport) -> str:
        """After a compare with a target: what to do next, and why ("" when nothing)."""
        t = esc(self.target)
        if self.verdict(rep).passed:
            if self.candidate is not None:
                return ""
            return (f"<span style='color:{OK_COLOUR}'>{esc(self.target.upper())} as converted is "
                    "within budget: no node needs to stay FP32</span>")
        return (f"<b>next:</b> press <i>Find FP32 nodes ({t})</i> (or <code>panel.run_search()"
                "</code>): it keeps the nodes that add the most error in FP32, one at a time, "
                "until the outputs are within budget")

    # -- view ------------------------------------------------------------------------------
    def show(self, rep: compare.LayerwiseReport, origin: Optional[str] = None) -> None:
        """Draw `rep`; `origin`: where the candidate came from (e.g. the model converted to
        FP16), named in the status line."""
        rels = [t.rel if math.isfinite(t.rel) else 1e6 for t in rep.tensors]
        with self.figure.batch_update():
            bar = self.figure.data[0]
            bar.x = list(range(len(rep.tensors)))
            # an exact zero has no place on a log axis: no bar (it read as an error of "1p"),
            # its hover says identical
            bar.y = [r if r > 0 else None for r in rels]
            bar.marker.color = [band_color(t.rel) for t in rep.tensors]
            # the verdict is elementwise: a tensor failing it is outlined in the error colour
            # whatever its relative error's band (rel 4e-4 and 17 elements beyond tolerance)
            bar.marker.line.color = [SEVERITY_COLOURS["error"] if not t.passed else
                                     "rgba(0,0,0,0)" for t in rep.tensors]
            bar.marker.line.width = 2
            bar.customdata = [f"{t.tensor} ({t.op}, node {t.node})" +
                              ("<br>identical to FP32" if t.rel == 0 and t.passed else "") +
                              ("" if t.passed else f"<br>{t.mismatches} element(s) beyond "
                               "tolerance") for t in rep.tensors]
            self.figure.layout.xaxis.update(tensor_ticks([t.tensor for t in rep.tensors]))
            self.figure.layout.yaxis.dtick = log_dtick([r for r in rels if r > 0])
        v = self.verdict(rep)
        ok = "PASS" if v.passed else "FAIL"
        colour = OK_COLOUR if v.passed else SEVERITY_COLOURS["error"]

        def said(t: Any) -> str:
            o = v.outputs.get(t.tensor)
            diag = ("elementwise pass" if t.passed else
                    f"{t.mismatches} of {t.size} beyond atol/rtol")
            return (f"{esc(t.tensor)}: max abs {_fmt(t.max_abs)}, rel {_fmt(t.rel)}, "
                    f"cos {t.cosine:.6f}" + (f" ({esc(o.kind)}: {esc(o.words)}; {diag})"
                                             if o is not None else ""))

        outs = ", ".join(said(t) for t in rep.outputs)
        self.status.value = (f"<b style='color:{colour}'>outputs {ok}</b> ({outs}); verdict: "
                             f"{esc(v.rule)}; elementwise diagnostic at atol "
                             f"{rep.atol:g} rtol {rep.rtol:g} ({esc(rep.precision)}); "
                             f"{len(rep.tensors)} tensors, {rep.samples} sample(s); candidate: "
                             + (f"{esc(origin)}, " if origin else "")
                             + esc(rep.candidate_words))
        observer = getattr(rep, "observer", None)
        if observer:
            changed = rep.marking_changed_outputs
            self.status.value += (
                f"<br>{len(rep.chunks)} marked build(s), {esc(rep.marking)} marking; observer "
                "check: " + (f"<b style='color:{SEVERITY_COLOURS['error']}'>marking changed "
                             "the engine's answer</b>" if changed else
                             "marked builds give the unmarked engine's answer"))
        worst = sorted(rep.tensors, key=lambda t: -(t.rel if math.isfinite(t.rel) else 1e300))[:10]
        rows = "".join(
            f"<tr><td>{esc(t.tensor)}</td><td>{esc(t.op)}</td>"
            f"<td>{_fmt(t.max_abs)}</td><td style='color:{band_color(t.rel)}'>{_fmt(t.rel)}</td>"
            f"<td>{_fmt(t.added)}</td><td style='color:{SEVERITY_COLOURS['error']}'>"
            f"{t.mismatches if not t.passed else ''}</td></tr>"
            for t in worst)
        self.table.value = (TABLE_CSS + "<table class='wb-t'><tr><th>tensor</th><th>op</th>"
                            "<th>max abs</th><th>rel</th>"
                            "<th>added</th><th title='elements with |error| &gt; atol and &gt; "
                            "rtol x |reference|: the elementwise rule (the outputs are judged by the verdict)'>beyond tol"
                            f"</th></tr>{rows}</table>")
        self.findings_html.show(rep.findings, model=self.reference, data=self.inputs)
        if self.graph_view is not None:
            self.color_graph(rep)
        if self.split is not None:
            self.color_split(rep)

    def error_by_node(self, rep: Optional[compare.LayerwiseReport] = None) -> Dict[str, float]:
        rep = rep or self.report
        out: Dict[str, float] = {}
        for t in (rep.tensors if rep else []):
            out[t.node] = max(out.get(t.node, 0.0), t.rel)
        return out

    def color_graph(self, rep: compare.LayerwiseReport) -> None:
        mapping = {n: band_color(r) for n, r in self.error_by_node(rep).items()}
        if mapping:
            self.graph_view.color_by(mapping, legend=[(lbl, c) for _, c, lbl in reversed(BANDS)])
            self.graph_view.highlight([t.node for t in rep.culprits()])

    def culprit_nodes(self) -> List[str]:
        return [t.node for t in self.report.culprits()] if self.report else []

    # -- the ONNX | engine split view ----------------------------------------------------------
    def engine_layers(self) -> Any:
        """The engine's layer information: `layers=` or what "Compare engine" captured."""
        if self.layers is not None:
            return self.layers
        return getattr(self.report, "layers", None)

    def split_view(self) -> Any:
        """The ONNX | engine split view, shown below the table and coloured by the current
        report's errors on both sides (built once)."""
        from widgets.splitview import SplitView
        from workbench.core.model import as_model
        from workbench.timing import LayerTable

        layers = self.engine_layers()
        if layers is None:
            raise WorkbenchError("no engine layer information to draw", field="layers",
                                 hint="pass layers=LAYERS.json (workbench timing / capture) or run "
                                      "Compare engine")
        if self.split is None:
            ref = self.reference  # a path, a Model or an in-memory ModelProto
            onnx = as_model(ref)
            table = layers if isinstance(layers, LayerTable) else LayerTable.build(layers, onnx=onnx)
            self.split = SplitView(table, onnx, height=460)
            self.split_box.children = [self.split]
        if self.report is not None:
            self.color_split(self.report)
        return self.split

    def color_split(self, rep: compare.LayerwiseReport) -> None:
        """Both sides of the split view by error (a continuous log scale): ONNX nodes by the
        worst relative error of their outputs, engine layers (and a group's members) by the
        worst of the ONNX nodes they were built from (reformat copies stay without a value).
        Non-finite errors count as 1e6."""
        err = {n: (r if math.isfinite(r) else 1e6) for n, r in self.error_by_node(rep).items()}
        err = {n: max(r, 1e-12) for n, r in err.items()}
        if not err:
            return
        onnx_ids = set(self.split.onnx.structure.ids)
        self.split.onnx.color_by_values({n: r for n, r in err.items() if n in onnx_ids},
                                        title="relative error", levels=16)
        per_layer = {}
        layers = self.split.table.layers.layers
        for eid, nodes in self.split.nodes_of.items():
            if layers[self.split.layer_of[eid]].is_reformat:
                continue  # a reformat copy only carries the nodes of the layer it serves
            vals = [err[n] for n in nodes if n in err]
            if vals:
                per_layer[eid] = max(vals)
        if per_layer:
            self.split.engine.color_by_values(per_layer, title="relative error", levels=16)
