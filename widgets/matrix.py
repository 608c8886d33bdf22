"""The Matrix panel: choose precisions, targets and workers, run the variant matrix on Ray,
watch variants arrive, then read the table and the Pareto view (error against measured
latency, else latency predicted from recorded profiles, else accuracy only).

    from widgets import MatrixPanel
    panel = MatrixPanel(["resnet.onnx"], out_dir="matrix/", precisions=["fp32", "fp16"],
                        targets=["sm89", "sm120"], profiles={"p0": [{...}]})
    panel                      # click Run, or panel.start(); panel.wait()

The blocking work (`workbench.matrix.run.run_matrix`) runs in the panel's BackgroundTask
(widgets.base): results arrive in that thread and only assign trait values. Cancel stops
submitting and cancels the running Ray tasks; a later Run continues where it stopped.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import ipywidgets as W

from widgets.base import PanelBase, esc, fill, fit
from widgets.figure import Figure
from workbench.matrix.plan import plan_matrix
from workbench.matrix.run import MatrixResult, run_matrix
from workbench.matrix.table import pareto_axes, pareto_front, results_frame
from workbench.precision.spec import parse_precision, precision_items, precision_label
from workbench.render.matrix_figures import pareto_figure

TABLE_COLUMNS = ["model", "precision", "target", "profile", "status", "size_mb",
                 "build_seconds", "cache_hit", "error_rel", "accuracy_source",
                 "latency_p50_ms", "latency_predicted_ms", "latency_p99_ms", "throughput_qps",
                 "accuracy_passed"]


def _cell(v: Any) -> str:
    """A table cell: blank for missing, 4 significant digits for figures."""
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


class MatrixPanel(PanelBase, W.VBox):
    """Run a variant matrix from a notebook: progress per variant, table, Pareto view."""

    def __init__(self, models: Sequence[Any], *, out_dir: Any, precisions: Sequence[str] = (
                 "fp32", "fp16"), targets: Sequence[Optional[str]] = ("sm89",),
                 profiles: Optional[Mapping[str, Any]] = None, calibration: Any = None,
                 inputs: Any = None, workers: int = 2, ray_address: Optional[str] = None,
                 gpu: bool = False, samples: int = 8,
                 latency_profiles: Any = None) -> None:
        self.models = [str(m) for m in models]
        self.latency_profiles = latency_profiles
        self.out_dir = str(out_dir)
        self.profiles, self.calibration, self.inputs = profiles, calibration, inputs
        self.ray_address, self.gpu, self.samples = ray_address, gpu, samples
        self.result: Optional[MatrixResult] = None
        self.results: List[Dict[str, Any]] = []
        self.state = "idle"  # idle | running | done | failed | cancelled
        self.error: Optional[BaseException] = None  # why planning or the run failed
        self._init_base()
        names = ", ".join(m.rsplit("/", 1)[-1] for m in self.models)
        self.header = W.HTML(f"<b>Variant matrix</b> {esc(names)}")
        # every target of the table and each quantized one with each float fallback it may
        # have ("int8+fp16": INT8 where Q/DQ sits, FP16 elsewhere)
        chosen = {precision_label(*parse_precision(p)) for p in precisions}
        self.precision_boxes = {p: W.Checkbox(value=p in chosen, description=p,
                                              indent=False, layout=fit())
                                for p in precision_items()}
        self.targets = W.Text(value=",".join(t or "native" for t in targets),
                              description="targets", placeholder="sm89,sm120 or native")
        self.workers = W.BoundedIntText(value=int(workers), min=1, max=512,
                                        description="workers")
        self.run_btn = W.Button(description="Run matrix", icon="th", button_style="primary",
                                layout=fit())
        self.cancel_btn = W.Button(description="Cancel", icon="stop", disabled=True,
                                   layout=fit())
        self.progress = W.IntProgress(value=0, min=0, max=1, layout=fill())
        self.table_html = W.HTML("", layout=W.Layout(width="auto", overflow="auto"))
        self.note = W.HTML("")
        self.figure = Figure(layout=dict(autosize=True, height=420,
                                                  template="plotly_white"))
        self.run_btn.on_click(lambda _: self.start())
        self.cancel_btn.on_click(lambda _: self.cancel())
        super().__init__([
            self.header, W.HBox(list(self.precision_boxes.values()),
                               layout=W.Layout(flex_flow="row wrap")),  # (a box per item: they wrap)
            W.HBox([self.targets, self.workers]), W.HBox([self.run_btn, self.cancel_btn]),
            self.progress, self.status, self.table_html, self.note, self.figure],
            layout=W.Layout(width="auto"))

    # -- what to run -------------------------------------------------------------------
    def chosen_precisions(self) -> List[str]:
        return [p for p, box in self.precision_boxes.items() if box.value]

    def chosen_targets(self) -> List[Optional[str]]:
        ts = [t.strip() for t in self.targets.value.replace(";", ",").split(",") if t.strip()]
        return [None if t == "native" else t for t in ts] or [None]

    def plan(self) -> List[Any]:
        return plan_matrix(self.models, self.chosen_precisions(), self.chosen_targets(),
                           profiles=self.profiles, calibration=self.calibration)

    # -- running ---------------------------------------------------------------------
    def start(self) -> bool:
        """Plan (errors show in the status line) and run in the background."""
        ok, variants = self._prepare_start(self.plan, "the matrix is still running ...")
        if not ok:
            return False
        self.results, self.error = [], None
        self.progress.max, self.progress.value = max(len(variants), 1), 0
        self.state = "running"
        self.run_btn.disabled, self.cancel_btn.disabled = True, False

        def work() -> MatrixResult:
            return run_matrix(variants, self.out_dir, ray_address=self.ray_address,
                              workers=self.workers.value, gpu=self.gpu, inputs=self.inputs,
                              samples=self.samples, on_result=self._arrived,
                              cancel=self.task.cancel,  # (made before the thread starts)
                              latency_profiles=self.latency_profiles)

        self.task.start(work, done=self._done, failed=self._failed,
                        busy=f"running {len(variants)} variant(s) on Ray ...")
        return True

    def cancel(self) -> None:
        self.task.cancel.set()
        self.status.busy("cancelling: no new variants; running ones are stopped ...")

    def wait(self, timeout: Optional[float] = None) -> Optional[MatrixResult]:
        self.task.wait(timeout)
        return self.result

    # -- results (background thread: trait assignments only) -----------------------------
    def _arrived(self, r: Dict[str, Any]) -> None:
        self.results.append(r)
        self.progress.value = len(self.results)
        self.table_html.value = self._table(self.results)
        ok = sum(x["status"] == "ok" for x in self.results)
        self.status.busy(f"{len(self.results)}/{self.progress.max} variants done ({ok} ok)")

    def _done(self, res: MatrixResult) -> None:
        self.result = res
        self.results = list(res.results)
        self.run_btn.disabled, self.cancel_btn.disabled = False, True
        self.table_html.value = self._table(self.results)
        self._draw(self.results)
        s = res.summary
        text = (f"{s['ok']}/{s['variants']} ok: {s['built']} built, {s['cache_hits']} from the "
                f"engine cache, {s['resumed']} finished earlier; {s['failed']} failed "
                f"({res.seconds:.1f} s) -> {res.out_dir}")
        if self.task.cancel.is_set():
            self.state = "cancelled"
            self.status.warn("cancelled; " + text)
        elif s["failed"]:
            self.state = "done"
            self.status.warn(text)
        else:
            self.state = "done"
            self.status.ok(text)

    def _failed(self, e: BaseException) -> None:
        self.state, self.error = "failed", e
        self.run_btn.disabled, self.cancel_btn.disabled = False, True
        self.status.error(e)

    @staticmethod
    def _table(results: List[Dict[str, Any]]) -> str:
        df = results_frame(results)
        cols = [c for c in TABLE_COLUMNS if c in df]
        return df[cols].apply(lambda col: col.map(_cell)).to_html(index=False, border=0)

    def _draw(self, results: List[Dict[str, Any]]) -> None:
        df = results_frame(results)
        axes = pareto_axes(df)
        fig = pareto_figure(pareto_front(df, axes["x"]), axes)
        self.note.value = f"<i>{esc(axes['note'])}</i>"
        with self.figure.batch_update():  # one FigureWidget, updated in place
            self.figure.data = []
            for trace in fig.data:
                self.figure.add_trace(trace)
            self.figure.layout.update(fig.layout)
            self.figure.layout.autosize = True
