"""The Precision & Profiles panel: target (and a quantized target's float fallback),
per-node / per-op exclusions (from a table or the graph view's selection), calibration source
with its validation, a profile editor with live validation and the advisor's proposal, and
Convert with the error report (a fallback's nodes per precision, coloured in the graph view).

    from widgets import PrecisionPanel
    PrecisionPanel("model.onnx", calibration="calib.npz", graph_view=view)

All work is plain `workbench.precision.transform` / `workbench.precision.calibration` /
`workbench.precision.profiles` calls; the targets are the precision table's, and what the panel
holds is one `PrecisionSpec` (`precision_spec()`, which the Build panel reads). Conversion runs
in the panel's BackgroundTask (widgets.base).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import ipywidgets as W

from widgets.base import OK_COLOUR, SEVERITY_COLOURS, TABLE_CSS, PanelBase, esc, fill, fit, grow
from widgets.base import findings_html as _findings_table
from widgets.fallback import fallback_dropdown, fallback_value, follow_target
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model, ModelLike, as_model
from workbench.precision import table
from workbench.precision.calibration import describe, load_calibration
from workbench.precision.profiles import (Profile, advise, parse_profiles, run_at_profiles,
                                          validate_profiles, wide_findings)
from workbench.precision.spec import PrecisionSpec, excludable_ops
from workbench.precision.transform import PrecisionResult, auto_exclusions, convert
from workbench.core.workspace import workspace_for

GROUP_PREFIX = "scope:"
_ERR = SEVERITY_COLOURS["error"]


def findings_html(findings: List[Finding]) -> str:
    """The shared findings table (widgets.base), nothing when there are none."""
    return _findings_table(findings) if findings else ""


def error_table_html(errors: Optional[Dict[str, Dict[str, Any]]], title: str) -> str:
    """The measured figures per output (`workbench.runtime.comparison`'s, as the Compare panel shows)."""
    if not errors:
        return ""
    import math

    from workbench.runtime.comparison import class_scores

    def fmt(x: Any) -> str:
        return f"{x:.3g}" if isinstance(x, (int, float)) and math.isfinite(x) else str(x)

    def top1(name: str, v: Dict[str, Any]) -> str:  # only where it is a class verdict
        t = v.get("top1_agreement")
        return f"{t:.3f}" if t is not None and class_scores(v.get("shape") or (), name) else "–"

    def verdict(v: Dict[str, Any]) -> str:  # the verdict compare gives (by output kind)
        d = v.get("verdict")
        if not d:
            return "–"
        return f"<span title='{esc(d.get('rule', ''))}'>{'PASS' if d.get('passed') else 'FAIL'}: " \
            f"{esc(d.get('words', ''))}</span>"

    head = ("<tr><th>output</th><th>max abs</th><th>mean abs</th><th>rel</th><th>cosine</th>"
            "<th>top-1</th><th>verdict</th><th>at atol/rtol</th></tr>")
    rows = "".join(
        f"<tr><td>{esc(k)}</td><td>{fmt(v['max_abs_err'])}</td><td>{fmt(v['mean_abs_err'])}</td>"
        f"<td>{fmt(v['rel_err'])}</td><td>{v['cosine']:.6f}</td>"
        f"<td>{top1(k, v)}</td><td>{verdict(v)}</td>"
        f"<td>{'PASS' if v.get('passed') else 'FAIL'} ({v.get('atol', 0):g}/{v.get('rtol', 0):g})"
        "</td></tr>"
        for k, v in errors.items())
    return f"{TABLE_CSS}<b>{esc(title)}</b><table class='wb-t'>{head}{rows}</table>"


def needs_profile(model: ModelLike) -> List[str]:
    """The inputs a build needs an optimization profile for, as the build decides it
    (`workbench.engines.engine`): dynamic dims, or a shape-tensor input (its VALUES need a range)."""
    from workbench.core.inputs import model_inputs
    from workbench.precision.profiles import shape_tensor_inputs

    shape_inputs = set(shape_tensor_inputs(model))
    return [s.name for s in model_inputs(model) if s.dynamic_axes or s.name in shape_inputs]


def _and(items: List[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def missing_profile_note(model_or_names: Any) -> str:
    """What the empty profile editor says (plain text): which inputs need a profile, the line
    to type for each (the CLI's --profile syntax, with the build's default as the example where
    the model is given), and what the build does without one. Takes a model (or path) or the
    names of its dynamic inputs."""
    example = ""
    if isinstance(model_or_names, (list, tuple)):
        names = [str(n) for n in model_or_names]
    else:
        names = needs_profile(model_or_names)
        try:
            from workbench.precision.profiles import default_profile

            prof, _ = default_profile(model_or_names)
            if names and all(n in prof for n in names):
                example = ",".join(prof.arg_strings())
        except WorkbenchError:  # shape-tensor inputs: no default can be made
            pass
    if not names:
        return "no optimization profile needed: every input has a fixed shape"
    one = len(names) == 1
    quoted = _and([f"'{n}'" for n in names])
    lines = _and([f"{n}:MIN:OPT:MAX" for n in names])
    return (f"no optimization profile: dynamic input{'' if one else 's'} {quoted} "
            f"need{'s' if one else ''} a min/opt/max shape range to build. Type {lines} above"
            + (" (the --profile syntax" if one else
               ", one per line or comma-separated (the --profile syntax")
            + (f", e.g. {example}" if example else ", shapes like 1x3x224x224")
            + "), or press 'Propose from data' once calibration data is set. Left empty, the build "
            "picks a default range and warns (BuildPanel(strict_profiles=True) or "
            "--strict-profiles refuses instead).")


class PrecisionPanel(PanelBase, W.VBox):
    """Choose precision, exclusions, calibration and profiles; convert and see the errors."""

    def __init__(self, model_or_path: Any, *, graph_view: Any = None, calibration: Any = None,
                 output: Optional[str] = None) -> None:
        self.model: Model = as_model(model_or_path)
        self.graph_view = graph_view
        self.result: Optional[PrecisionResult] = None
        self.output_path: Optional[Path] = None
        self.profiles: List[Profile] = []
        self.batches: Optional[List[Dict[str, Any]]] = None
        self._init_base()
        names = [n.name or nid for n, nid in zip(self.model.graph.node, self.model.node_ids)]
        self._ops = {nm: n.op_type for nm, n in zip(names, self.model.graph.node)}

        self.header = W.HTML(f"<b>Precision &amp; profiles</b> &mdash; {esc(self.model.name)}")
        self.target = W.ToggleButtons(options=list(table.names()), value="fp16",
                                      description="Target",
                                      style=W.ToggleButtonsStyle(button_width="auto"))
        self.keep_io = W.Checkbox(value=True, description="keep inputs/outputs FP32", indent=False)
        # a quantized target's precision for the nodes without Q/DQ (hidden for the others)
        self.fallback = fallback_dropdown(self.target.value)
        self.node_filter = W.Text(placeholder="filter nodes (name or op)", description="Nodes")
        self.node_table = W.SelectMultiple(options=self._node_options(""), rows=8, layout=fill())
        self.op_table = W.SelectMultiple(options=excludable_ops(self._ops.values(),
                                                                self.target.value),
                                         rows=5, description="Exclude ops")
        self.from_graph_btn = W.Button(description="Add graph selection", icon="mouse-pointer",
                                       disabled=graph_view is None, layout=fit())
        self.suggest_btn = W.Button(description="Suggest (overflow)", icon="magic",
                                    tooltip="nodes whose FP32 activations exceed FP16's range",
                                    layout=fit())
        self.clear_btn = W.Button(description="Clear", icon="times", layout=fit())
        self.excluded_html = W.HTML()
        self.calib_path = W.Text(value="" if calibration is None or not isinstance(
            calibration, (str, Path)) else str(calibration), placeholder=".npz / .npy / folder",
            description="Calibration", layout=grow())
        self._calib_obj = calibration if calibration is not None and not isinstance(
            calibration, (str, Path)) else None
        self.calib_method = W.Dropdown(options=list(table.CALIBRATE_METHODS),
                                       value="entropy", description="Method",
                                       layout=W.Layout(width="220px"))
        self.allow_random = W.Checkbox(value=False, description="allow random data (warns)",
                                       indent=False)
        self.validate_btn = W.Button(description="Validate", icon="check", layout=fit())
        self.calib_status = W.HTML()
        self.profile_text = W.Textarea(placeholder="input:MIN:OPT:MAX, one per line; a line "
                                       "starting with + begins another profile",
                                       layout=W.Layout(width="auto", height="70px"))
        self.propose_btn = W.Button(description="Propose from data", icon="lightbulb-o",
                                    layout=fit())
        self.run_profiles_btn = W.Button(
            description="Run at min/opt/max", icon="play-circle", layout=fit(),
            tooltip="run the model on onnxruntime at every shape of the profiles: a size the "
                    "export fixed (a Reshape to a traced constant) fails here, not in the build")
        self.profile_status = W.HTML()
        self.profile_run_html = W.HTML()
        # the default output goes to the model's workspace (outputs/), never beside the
        # user's model (a repository stays clean); typing a path saves elsewhere
        stem = self.model.path.stem if self.model.path else self.model.name or "model"
        self._named = self._suffix()  # the output name's precision part, while it follows
        default_out = workspace_for(self.model).output_path(f"{stem}.{self._named}.onnx")
        self.output = W.Text(value=str(output or default_out), description="Output",
                             tooltip="where Convert writes the model (default: the model's "
                                     "workspace); type a path to save elsewhere",
                             layout=grow())
        self.convert_btn = W.Button(description="Convert", icon="play", button_style="primary",
                                    layout=fit())
        self.progress = W.HTML()
        self.report_html = W.HTML()

        self.node_filter.observe(lambda c: self._refresh_nodes(), "value")
        self.node_table.observe(lambda c: self._show_excluded(), "value")
        self.op_table.observe(lambda c: self._show_excluded(), "value")
        self.target.observe(self._on_target, "value")
        self.fallback.observe(lambda c: self._rename_output(), "value")
        self.profile_text.observe(lambda c: self.validate_profile_text(), "value")
        self.from_graph_btn.on_click(lambda _: self._guard(self.add_graph_selection))
        self.suggest_btn.on_click(lambda _: self._guard(self.suggest_exclusions))
        self.clear_btn.on_click(lambda _: self._guard(self.clear_exclusions))
        self.validate_btn.on_click(lambda _: self._guard(self.validate_calibration))
        self.propose_btn.on_click(lambda _: self._guard(self.propose_profile))
        self.run_profiles_btn.on_click(lambda _: self._guard(lambda: self.run_profiles(block=False)))
        self.convert_btn.on_click(lambda _: self._guard(lambda: self.convert(block=False)))

        super().__init__([
            self.header, W.HBox([self.target, self.keep_io]), self.fallback,
            W.HTML("<b>Keep in FP32</b>"), self.node_filter, self.node_table,
            W.HBox([self.from_graph_btn, self.suggest_btn, self.clear_btn]), self.op_table,
            self.excluded_html,
            W.HTML("<b>Calibration</b>"),
            W.HBox([self.calib_path, self.calib_method, self.validate_btn]), self.allow_random,
            self.calib_status,
            W.HTML("<b>Shape profiles</b>"), self.profile_text,
            W.HBox([self.propose_btn, self.run_profiles_btn]), self.profile_status,
            self.profile_run_html,
            W.HBox([self.output, self.convert_btn]), self.progress, self.status, self.report_html])
        self._show_excluded()
        self.validate_profile_text()

    # -- helpers -----------------------------------------------------------------------------
    def _guard(self, fn: Any) -> None:
        try:
            fn()
        except WorkbenchError as e:
            self.status.error(e)

    def _node_options(self, query: str) -> List[Any]:
        """The nodes whose exclusion changes the current target (not Identity, Shape, ... for
        FP16; the quantized ops for INT8), filtered by `query` (name or op)."""
        q = query.strip().lower()
        target = self.target.value if hasattr(self, "target") else "fp16"
        ops = set(excludable_ops(self._ops.values(), target))
        return [(f"{n}  ({op})", n) for n, op in self._ops.items()
                if op in ops and (not q or q in n.lower() or q in op.lower())]

    def _refresh_nodes(self) -> None:
        keep = set(self.node_table.value)
        opts = self._node_options(self.node_filter.value)
        values = {v for _, v in opts}
        extra = [(f"{n}  ({self._ops[n]})", n) for n in keep if n not in values]
        self.node_table.options = extra + opts
        self.node_table.value = tuple(n for n in keep)

    def _on_target(self, change: Dict[str, Any]) -> None:
        # only the op types whose exclusion changes this target (INT8: the quantized ones)
        ops = excludable_ops(self._ops.values(), change["new"])
        kept = tuple(o for o in self.op_table.value if o in ops)
        self.op_table.options = ops
        self.op_table.value = kept
        self._refresh_nodes()  # (the nodes already chosen stay listed)
        follow_target(self.fallback, change["new"])
        self._rename_output()

    def _suffix(self) -> str:
        """The precision part of the default output name: model.int8.onnx,
        model.int8-fp16.onnx with a fallback (one conversion does not overwrite the other)."""
        fb = fallback_value(self.fallback)
        return self.target.value + (f"-{fb}" if fb else "")

    def _rename_output(self) -> None:
        """The output name follows the target and fallback while it has the name they gave."""
        new = self._suffix()
        out, old = Path(self.output.value), self._named
        if new != old and out.name.endswith(f".{old}.onnx"):
            self.output.value = str(out.with_name(out.name[:-len(f".{old}.onnx")]
                                                  + f".{new}.onnx"))
        self._named = new

    @property
    def excluded_nodes(self) -> List[str]:
        return list(self.node_table.value)

    @property
    def excluded_ops(self) -> List[str]:
        return list(self.op_table.value)

    def set_exclusions(self, nodes: List[str]) -> None:
        unknown = [n for n in nodes if n not in self._ops]
        if unknown:
            raise WorkbenchError(f"no node named '{unknown[0]}'", node=unknown[0])
        self.node_filter.value = ""
        self.node_table.value = tuple(dict.fromkeys(list(self.node_table.value) + list(nodes)))

    def _show_excluded(self) -> None:
        n, o = self.excluded_nodes, self.excluded_ops
        self.excluded_html.value = (f"{len(n)} node(s) and {len(o)} op type(s) kept in FP32"
                                    + (": " + esc(", ".join(n[:10])) if n else ""))

    # -- actions ------------------------------------------------------------------------------
    def add_graph_selection(self) -> List[str]:
        """Exclude the nodes selected in the graph view (a collapsed group = all its nodes)."""
        if self.graph_view is None:
            raise WorkbenchError("no graph view attached", hint="PrecisionPanel(m, graph_view=v)")
        picked: List[str] = []
        for sid in list(getattr(self.graph_view, "selected", []) or []):
            if sid.startswith(GROUP_PREFIX):
                scope = sid[len(GROUP_PREFIX):].rstrip("/") + "/"
                picked += [n for n in self._ops if n.startswith(scope)]
            elif sid in self._ops:
                picked.append(sid)
        if not picked:
            self.status.warn("nothing selected in the graph view")
            return []
        self.set_exclusions(picked)
        self.status.ok(f"added {len(picked)} node(s) from the graph selection")
        return picked

    def clear_exclusions(self) -> None:
        self.node_table.value = ()
        self.op_table.value = ()

    def _calibration_source(self) -> Any:
        if self._calib_obj is not None:
            return self._calib_obj
        return self.calib_path.value.strip() or None

    def precision_spec(self) -> PrecisionSpec:
        """What the panel holds, as one JSON-able spec (raises WorkbenchError if the
        calibration source is in-memory data rather than a file or folder)."""
        calib = self._calibration_source()
        if calib is not None and not isinstance(calib, (str, bytes)) and not hasattr(
                calib, "__fspath__"):
            raise WorkbenchError("a precision spec needs calibration data as a file or folder "
                                 "path (it is JSON)", field="calibration",
                                 hint="save the batches with workbench.precision.calibration."
                                      "write_batches and pass the folder")
        return self._spec(str(calib) if calib is not None else None)

    def _spec(self, calibration: Optional[str]) -> PrecisionSpec:
        return PrecisionSpec(target=self.target.value, exclude_nodes=self.excluded_nodes,
                             exclude_ops=self.excluded_ops, keep_io_types=self.keep_io.value,
                             calibration=calibration, calibrate_method=self.calib_method.value,
                             allow_random=self.allow_random.value,
                             fallback=fallback_value(self.fallback))

    def validated_profiles(self) -> List[Dict[str, List[List[int]]]]:
        """The profile editor's profiles after validation (none while the text is invalid)."""
        self.validate_profile_text()
        return [p.to_dict() for p in self.profiles]

    def validate_calibration(self) -> Optional[List[Dict[str, Any]]]:
        src = self._calibration_source()
        if src is None:
            self.batches = None
            self.calib_status.value = ("no calibration data" + (" (random data will be used, "
                                       "with a warning)" if self.allow_random.value else ""))
            return None
        try:
            prof = self.profiles[0] if self.profiles else None
            self.batches = load_calibration(src, self.model, profile=prof)
        except WorkbenchError as e:
            self.batches = None
            self.calib_status.value = f"<span style='color:{_ERR}'>&#10007; {esc(e.one_line())}</span>"
            return None
        info = describe(self.batches)
        parts = [f"{esc(k)} {v['dtype']} {v['shapes'][0]}" for k, v in info["inputs"].items()]
        self.calib_status.value = (f"<span style='color:{OK_COLOUR}'>&#10003;</span> {info['batches']} "
                                   f"batch(es): " + "; ".join(parts))
        return self.batches

    def suggest_exclusions(self) -> List[str]:
        src = self._calibration_source()
        nodes, findings = auto_exclusions(self.model, src, allow_random=self.allow_random.value)
        if nodes:
            self.set_exclusions(nodes)
        self.status.ok(f"suggested {len(nodes)} node(s) to keep in FP32"
                       if nodes else "no FP32 activation exceeds the FP16 range")
        self.report_html.value = findings_html(findings)
        return nodes

    def validate_profile_text(self) -> bool:
        lines = [ln.strip() for ln in self.profile_text.value.splitlines() if ln.strip()]
        try:
            profs = parse_profiles(lines)
            self.profiles = validate_profiles(self.model, profs) if profs else []
        except WorkbenchError as e:
            self.profiles = []
            self.profile_status.value = f"<span style='color:{_ERR}'>&#10007; {esc(e.one_line())}</span>"
            return False
        if not lines:
            self.profile_status.value = esc(missing_profile_note(self.model))
            return True
        self.profile_status.value = (f"<span style='color:{OK_COLOUR}'>&#10003;</span> "
                                     f"{len(self.profiles)} valid profile(s)"
                                     + findings_html(wide_findings(self.profiles)))
        return True

    def run_profiles(self, block: bool = True) -> Optional[List[Any]]:
        """Run the model on onnxruntime at each min/opt/max shape of the editor's profiles
        (`workbench.precision.profiles.run_at_profiles`, as `workbench profiles` does); the
        findings show under the editor. In the background task when block=False."""
        if not self.validate_profile_text():
            raise WorkbenchError("the profile text is not valid", field="profiles",
                                 hint="fix the line the editor marks first")
        if not self.profiles:
            raise WorkbenchError("no profile to run", field="profiles",
                                 hint="type a profile, or 'Propose from data'")
        if self.busy:
            raise WorkbenchError("a conversion or check is already running")
        profs = list(self.profiles)
        self.run_profiles_btn.disabled = True
        self.profile_run_html.value = "running the model at the profiles' shapes..."
        found: List[Any] = []

        def work() -> None:
            try:
                findings, runs = run_at_profiles(self.model, profs)
                found.extend(findings)
                bad = [f for f in findings if f.severity == "error"]
                head = (f"<span style='color:{_ERR}'>&#10007;</span> {len(bad)} of {runs} "
                        "shape(s) cannot run" if bad else
                        f"<span style='color:{OK_COLOUR}'>&#10003;</span> ran at {runs} "
                        "shape(s) on onnxruntime" if runs else "not run")
                self.profile_run_html.value = head + findings_html(findings)
                nodes = [n for f in bad for n in f.nodes]
                if nodes and self.graph_view is not None and hasattr(self.graph_view, "reveal"):
                    try:
                        self.graph_view.reveal(nodes)
                    except WorkbenchError:
                        pass
            except WorkbenchError as e:
                self.profile_run_html.value = ""
                self.status.error(e)
            finally:
                self.run_profiles_btn.disabled = False

        if block:
            work()
            return found
        self.task.start(work)
        return None

    def propose_profile(self) -> List[Profile]:
        src = self._calibration_source()
        if src is None:
            raise WorkbenchError("the advisor needs calibration data", field="calibration",
                                 hint="set the calibration source first")
        batches = load_calibration(src, self.model)  # the data decides, not the old profile
        profs, findings = advise(self.model, batches)
        lines: List[str] = []
        for i, p in enumerate(profs):
            args = p.arg_strings()
            lines += (["+" + args[0]] + args[1:]) if i else args
        self.profile_text.value = "\n".join(lines)
        self.profile_status.value += findings_html(findings)
        return profs

    def convert(self, block: bool = True) -> Optional[PrecisionResult]:
        """Run the conversion (in the background task when block=False, as the button does)."""
        if self.busy:
            raise WorkbenchError("a conversion is already running")
        calib = self._calibration_source()
        spec = self._spec(None)
        kwargs = spec.convert_kwargs()
        kwargs["calibration"] = calib  # a path, or batches held in memory
        out = Path(self.output.value)
        self.convert_btn.disabled = True
        self.progress.value = f"converting to {esc(spec.target)}" + (
            f" with the {esc(spec.fallback)} fallback..." if spec.fallback else "...")
        self.status.clear()

        def work() -> None:
            try:
                res = convert(self.model, spec.target, **kwargs)
                path = res.save(out, source=self.model.path)
                self.result, self.output_path = res, path
                self._show_result(res, path)
            except WorkbenchError as e:
                self.status.error(e)
            finally:
                self.progress.value = ""
                self.convert_btn.disabled = False

        if block:
            work()
            return self.result
        self.task.start(work)
        return None

    def _show_result(self, res: PrecisionResult, path: Path) -> None:
        r = res.report
        bad = [f for f in res.findings if f.severity == "error"]
        failing = [n for n, e in (r.get("error") or {}).items()  # (by the verdict)
                   if (e.get("verdict") or {}).get("passed", e.get("passed")) is False]
        icon = "&#10007;" if bad else "&#9888;" if failing else "&#10003;"
        self.status.value = (
            f"{icon} wrote <code>{esc(path)}</code> ({res.target}): "
            f"{r['casts_inserted']} Cast(s), {r['qdq_pairs']} Q/DQ pair(s)"
            + precision_counts_text(r)
            + (f"; {len(failing)} output(s) beyond budget vs FP32 ("
               + ", ".join(esc(n) for n in failing[:3]) + "): see below" if failing else ""))
        self.report_html.value = (
            error_table_html(r.get("error"), "vs FP32 on onnxruntime CPU")
            + error_table_html(r.get("error_reference"),
                               f"vs FP32 in {res.target.upper()} storage, as on a GPU")
            + findings_html(res.findings))
        self._colour_precisions(r)
        if self.graph_view is not None and hasattr(self.graph_view, "highlight"):
            over = [n for f in res.findings if f.code.endswith("-overflow") for n in f.nodes]
            try:
                self.graph_view.highlight(over or self.excluded_nodes)
            except WorkbenchError:
                pass

    def _colour_precisions(self, report: Dict[str, Any]) -> None:
        """A conversion that counts its nodes per precision (a fallback: INT8, FP16, FP32)
        colours them so in the graph view, with a legend of the counts."""
        nodes = report.get("nodes_by_precision")
        if not nodes or self.graph_view is None or not hasattr(self.graph_view, "color_by"):
            return
        from workbench.timing.colours import precision_colour

        legend = {f"{p.upper()} ({len(v)})": precision_colour(p) for p, v in nodes.items()}
        try:
            self.graph_view.color_by({n: precision_colour(p) for p, v in nodes.items()
                                      for n in v}, legend)
        except WorkbenchError:
            pass


def precision_counts_text(report: Dict[str, Any]) -> str:
    """'; nodes: 12 INT8, 30 FP16 (fallback), 2 FP32' for a conversion that counts its nodes
    per precision (a fallback), nothing otherwise."""
    counts = report.get("precisions")
    if not counts:
        return ""
    fb = report.get("fallback")
    return "; nodes: " + ", ".join(
        f"{n} {esc(p.upper())}" + (" (fallback)" if p == fb else "") for p, n in counts.items())
