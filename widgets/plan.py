"""The Plan panel: give samples, a budget and a metric, run the precision planner
(`workbench.planner.plan`) off the kernel thread, read the plan (ONNX nodes per precision, the
commands that make it) and its front (accuracy loss against predicted latency).

    from widgets import PlanPanel
    panel = PlanPanel("model.onnx", data="samples.npz", budget="1%", metric="top1",
                      latency_profiles="profiles/")
    panel                      # click Plan, or panel.run(); panel.wait()

With `graph_view=` (a `widgets.GraphView` of the same model), clicking a point of the front
colours that candidate in the graph: each region's nodes in the precision the candidate gives
them (FP32 kept, the target elsewhere), the plan's own candidate shown when the plan arrives.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import ipywidgets as W

from widgets.base import PanelBase, esc, fill, fit
from workbench.core.errors import WorkbenchError
from workbench.precision import table
from widgets.figure import Figure
from workbench.planner.search import Plan, plan
from workbench.render.plan_figures import front_figure
from workbench.timing.colours import precision_colour


class PlanPanel(PanelBase, W.VBox):
    """Run the planner and show its answer (see the module docstring)."""

    def __init__(self, model: Any, *, data: Any, budget: Any = "1%", metric: Any = None,
                 target: str = "fp16", latency_profiles: Any = None, max_builds: int = 40,
                 output: Any = None, graph_view: Any = None,
                 fallback: Optional[str] = None) -> None:
        self.model, self.data, self.metric = str(model), data, metric
        self.graph_view = graph_view
        self.shown: Optional[int] = None  # the front point the graph view shows
        self.target, self.latency_profiles = target, latency_profiles
        self.fallback = fallback  # (INT8 where quantized, this float precision elsewhere)
        self.max_builds, self.output = max_builds, output
        self.result: Optional[Plan] = None
        self._init_base()
        self.header = W.HTML(f"<b>Precision plan</b> {esc(self.model.rsplit('/', 1)[-1])}")
        self.budget = W.Text(value=str(budget), description="budget", layout=fit())
        self.run_btn = W.Button(description="Plan", icon="sliders", button_style="primary",
                                layout=fit())
        self.nodes_html = W.HTML("", layout=W.Layout(width="auto", overflow="auto"))
        self.figure = Figure(layout=dict(autosize=True, height=420, template="plotly_white"))
        self.shown_html = W.HTML("<i>click a point of the front to see its precisions"
                                 + (" in the graph view" if graph_view is not None else "")
                                 + "</i>")
        self.run_btn.on_click(lambda _: self.run())
        super().__init__([self.header, W.HBox([self.budget, self.run_btn]), self.status,
                          self.nodes_html, self.figure, self.shown_html], layout=fill())

    def run(self) -> None:
        """Plan in the background; `wait()` returns the Plan."""
        def work() -> Plan:
            return plan(self.model, self.data, budget=self.budget.value, metric=self.metric,
                        target=self.target, latency_profiles=self.latency_profiles,
                        max_builds=self.max_builds, output=self.output,
                        on_step=self.status.busy, fallback=self.fallback)

        self.run_btn.disabled = True
        self.task.start(work, done=self._done, failed=self._failed, busy="planning ...")

    def wait(self, timeout: Optional[float] = None) -> Optional[Plan]:
        self.task.wait(timeout)
        return self.result

    def _failed(self, e: BaseException) -> None:
        self.run_btn.disabled = False
        self.status.error(e)

    def _done(self, p: Plan) -> None:
        self.result = p
        self.run_btn.disabled = False
        held = len(p.samples["held_back"])
        lat = (f"latency {p.latency_ms:.3f} ms (predicted)" if p.latency_ms is not None
               else p.latency_note)
        text = (f"{p.target.upper()} with {len(p.kept_regions)} of {len(p.regions)} region(s) "
                f"in FP32: {p.metric} loss {p.held_loss:.4g} on {held} held-back sample(s), "
                f"budget {p.budget:g}; {lat}; {p.evaluations} evaluation(s)")
        (self.status.ok if p.passed else self.status.warn)(
            ("within budget: " if p.passed else "NOT within budget: ") + text)
        rows = "".join(f"<tr><td><b>{esc(k)}</b></td><td><code>{esc(v)}</code></td></tr>"
                       for k, v in [(f"{p.target} nodes", ", ".join(p.low_nodes) or "(none)"),
                                    *([(f"{p.fallback} nodes (fallback)",
                                        ", ".join(p.fallback_nodes) or "(none)")]
                                      if p.fallback else []),
                                    ("fp32 nodes", ", ".join(p.fp32_nodes) or "(none)"),
                                    *p.commands.items()])
        notes = "".join(f"<li>{esc(n)}</li>" for n in p.notes)
        self.nodes_html.value = f"<table>{rows}</table>" + (f"<ul>{notes}</ul>" if notes else "")
        fig = front_figure(p)
        with self.figure.batch_update():
            self.figure.data = []
            for trace in fig.data:
                self.figure.add_trace(trace)
            self.figure.layout.update(fig.layout)
        for trace in self.figure.data:
            trace.on_click(self._on_point)
        if p.chosen is not None and self.graph_view is not None:
            self.show_candidate(p.chosen)

    def _on_point(self, trace: Any, points: Any, _state: Any = None) -> None:
        if points.point_inds:
            self.show_candidate(int(trace.customdata[points.point_inds[0]]))

    def precisions_of(self, index: int) -> Dict[str, str]:
        """{ONNX node: precision} of the front's candidate `index` (regions it keeps: FP32)."""
        p = self.result
        if p is None:
            raise WorkbenchError("no plan yet", hint="run the planner first (panel.run())")
        if not 0 <= index < len(p.front):
            raise WorkbenchError(f"no candidate {index} in the front ({len(p.front)} points)",
                                 field="index")
        kept = set(p.front[index].kept)
        return {n: p.precision_of(n, i in kept) for i, r in enumerate(p.regions) for n in r}

    def show_candidate(self, index: int) -> List[str]:
        """Colour the graph view by the precisions of the front's candidate `index` (a click on
        its point does this); returns the nodes it keeps in FP32."""
        prec = self.precisions_of(index)
        fp32 = [n for n, q in prec.items() if table.is_base(q)]
        self.shown = index
        if self.graph_view is not None:
            names = sorted(set(prec.values()), key=lambda q: not table.is_base(q))
            legend = {q.upper(): precision_colour(q) for q in names}
            self.graph_view.color_by({n: precision_colour(q) for n, q in prec.items()}, legend)
        assert self.result is not None  # (precisions_of checked it)
        c = self.result.front[index]
        self.shown_html.value = (
            f"candidate {index} ({esc(c.step)}): {len(fp32)} node(s) in FP32, "
            f"{len(prec) - len(fp32)} in {esc(self.result.target.upper())}"
            + (f" / {esc(self.result.fallback.upper())}" if self.result.fallback else "")
            + ("" if self.graph_view is not None else
               " (PlanPanel(..., graph_view=GraphView(model)) colours them in the graph)"))
        return fp32
