"""The Build panel: build an engine with progress, cancel and a time limit, then see the log,
the findings TensorRT's log gave, the equivalent trtexec / polygraphy commands, script and
notes, and the engine card. Its controls are BuildConfig fields (a quantized precision's float
fallback, --max-aux-streams, I/O formats, ...): the option objects render them into the lines.

    from widgets import BuildPanel
    panel = BuildPanel("model.onnx", BuildConfig(precision="fp16", target="sm89", profiles=[...]))
    panel                      # click Build, or panel.start(); panel.wait()
    BuildPanel.from_spec("model.onnx", precision_panel.precision_spec(), target="sm89")

The blocking work (`workbench.engines.engine.build_engine`, which talks to the worker process) runs
in the panel's BackgroundTask (widgets.base): a thread that only assigns trait values. The
precision choices are the precision table's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import ipywidgets as W

from widgets.base import FindingsList, PanelBase, error_text, esc, fill, fit
from widgets.fallback import fallback_dropdown, fallback_value, follow_target
from workbench.engines.engine import BuildCancelled, BuildFailed, BuildTimeout, build_engine
from workbench.engines.options import by_field
from workbench.engines.result import BuildResult
from workbench.engines.spec import BuildConfig
from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike
from workbench.precision import table
from workbench.precision.spec import PrecisionSpec

LOG_LINES = 300


class BuildPanel(PanelBase, W.VBox):
    """Build a TensorRT engine from a notebook: progress, cancel, log, findings, export."""

    def __init__(self, model_or_path: Any, config: Optional[BuildConfig] = None, *,
                 timeout: Optional[float] = None, client: Any = None,
                 strict_profiles: bool = False, split_tail: bool = True,
                 output: Optional[Any] = None) -> None:
        self.model = model_or_path
        self.strict_profiles = strict_profiles  # True: no default profiles (as --strict-profiles)
        self.split_tail = split_tail  # False: a refused tail is an error (as --no-split)
        self.config = config or BuildConfig()
        self.client = client
        self.result: Optional[BuildResult] = None
        self.error: Optional[BaseException] = None
        self.state = "idle"   # idle | running | done | failed | cancelled | timeout
        self.events: List[Dict[str, Any]] = []
        self._log_lines: List[str] = []
        self._t0 = 0.0
        self._init_base()

        name = getattr(model_or_path, "name", None) or str(model_or_path).rsplit("/", 1)[-1]
        self.header = W.HTML(f"<b>Build</b> {esc(name)}")
        self.precision = W.Dropdown(options=list(table.names()),
                                    value=self.config.precision, description="precision")
        self.target = W.Text(value=self.config.target or "", description="target",
                             placeholder="sm89 (TensorRT-RTX AOT)")
        self.opt_level = W.BoundedIntText(
            value=3 if self.config.builder_optimization_level is None
            else self.config.builder_optimization_level, min=0, max=5, description="opt level")
        self.timeout = W.BoundedFloatText(value=timeout or 0.0, min=0.0, max=86400.0,
                                          description="time limit s")
        # a quantized precision's float precision for the layers without Q/DQ (--fallback;
        # hidden for the other precisions)
        self.fallback = fallback_dropdown(self.config.precision, self.config.fallback,
                                          description="fallback")
        # auxiliary CUDA streams (--max-aux-streams); empty: TensorRT's choice
        aux = by_field("max_aux_streams")
        streams = getattr(self.config, aux.field)
        self.max_aux_streams = W.Text(
            value="" if streams is None else str(streams),
            description="streams", placeholder="max aux streams (auto)",
            tooltip=f"{aux.flag}: {aux.help}")
        from workbench.precision.profiles import Profile

        # I/O types/formats (trtexec's grammar; the reformat finding's next step fills them)
        self.input_io = W.Text(value=self.config.input_io_formats or "", description="input I/O",
                               placeholder="e.g. fp16:hwc8 (default fp32:chw)")
        self.output_io = W.Text(value=self.config.output_io_formats or "",
                                description="output I/O", placeholder="e.g. fp16:chw")
        self.profile_text = W.Textarea(
            value="\n".join(a for p in self.config.profiles
                            for a in Profile.from_dict(p).arg_strings()),
            placeholder="input:MIN:OPT:MAX, one per line (the --profile syntax); empty: "
                        "build's default profile, said in the findings",
            layout=W.Layout(width="auto", height="48px"))
        self.calib_path = W.Text(value=str(self.config.calibration or "")
                                 if isinstance(self.config.calibration, (str, Path)) else "",
                                 description="calibration", placeholder=".npz / folder (INT8)",
                                 layout=W.Layout(width="auto"))
        # the engine file (as `build -o`); empty (the default): the workspace cache only,
        # nothing written beside the user's model unless asked
        beside = (Path(str(model_or_path)).with_name(
            Path(str(model_or_path)).stem + f".{self.config.precision}.engine")
            if isinstance(model_or_path, (str, Path)) else None)
        self.output = W.Text(value=str(output or ""), description="engine file",
                             placeholder=(f"e.g. {beside} (empty: the workspace cache only)"
                                          if beside else "path (empty: the cache only)"),
                             layout=W.Layout(width="auto"))
        self.precision.observe(self._on_precision, names="value")
        self.build_btn = W.Button(description="Build", icon="cogs", button_style="primary",
                                  layout=fit())
        self.cancel_btn = W.Button(description="Cancel", icon="stop", disabled=True, layout=fit())
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, description="",
                                        layout=fill())
        self.phase = W.HTML("")
        self.log_view = W.Textarea(value="", layout=W.Layout(width="auto", height="160px"),
                              disabled=True)
        self.findings_html = FindingsList()
        self.engine_card = W.HTML("")
        self.trtexec = W.Textarea(value="", layout=W.Layout(width="auto", height="70px"))
        self.polygraphy = W.Textarea(value="", layout=W.Layout(width="auto", height="70px"))
        self.script = W.Textarea(value="", layout=W.Layout(width="auto", height="240px"))
        # what the lines cannot say (a fallback on the strongly typed route is in the ONNX,
        # and the `workbench precision ... --fallback` line that makes it)
        self.export_notes = W.HTML("")
        exports = W.Accordion(children=[self.trtexec, self.polygraphy, self.script,
                                        self.export_notes])
        for i, t in enumerate(("trtexec", "polygraphy convert", "Python script (modern API)",
                               "notes")):
            exports.set_title(i, t)
        self.build_btn.on_click(lambda _: self.start())
        self.cancel_btn.on_click(lambda _: self.cancel())
        super().__init__([
            self.header,
            W.HBox([self.precision, self.target]), W.HBox([self.opt_level, self.timeout]),
            W.HBox([self.fallback, self.max_aux_streams]),
            W.HBox([self.input_io, self.output_io]),
            W.HTML("<b>Shape profile</b>"), self.profile_text, self.calib_path, self.output,
            W.HBox([self.build_btn, self.cancel_btn]), self.progress, self.phase, self.status,
            self.engine_card, W.HTML("<b>Findings</b>"), self.findings_html,
            W.HTML("<b>Export</b>"), exports, W.HTML("<b>Log</b>"), self.log_view])

    @classmethod
    def from_spec(cls, model_or_path: ModelLike, spec: PrecisionSpec, *,
                  profiles: Optional[List[Any]] = None, **config: Any) -> "BuildPanel":
        """A Build panel for a precision spec; `config` adds build settings (target="sm89")."""
        return cls(model_or_path, BuildConfig.from_spec(spec, profiles=list(profiles or []),
                                                        **config))

    @classmethod
    def from_precision_panel(cls, panel: Any, **config: Any) -> "BuildPanel":
        """A Build panel for what a PrecisionPanel holds: its spec (target, exclusions,
        calibration) and validated profiles, through its public API only."""
        return cls.from_spec(panel.model, panel.precision_spec(),
                             profiles=panel.validated_profiles(), **config)

    # -- actions --------------------------------------------------------------------------
    def current_config(self) -> BuildConfig:
        """The panel's config with the controls applied (raises WorkbenchError if invalid):
        the profile lines (the CLI's --profile syntax; a line starting with + begins another
        profile) and the calibration source."""
        from workbench.precision.profiles import parse_profiles, validate_profiles

        lines = [ln.strip() for ln in self.profile_text.value.splitlines() if ln.strip()]
        profiles = [p.to_dict() for p in validate_profiles(self.model, parse_profiles(lines))] \
            if lines else []
        calib = self.calib_path.value.strip()
        over: Dict[str, Any] = {"profiles": profiles}
        if calib:
            over["calibration"] = calib
        elif isinstance(self.config.calibration, (str, Path)):
            over["calibration"] = None  # (cleared in the field)
        return self.config.replace(precision=self.precision.value,
                                   fallback=fallback_value(self.fallback),
                                   target=self.target.value.strip() or None,
                                   builder_optimization_level=int(self.opt_level.value),
                                   input_io_formats=self.input_io.value.strip() or None,
                                   output_io_formats=self.output_io.value.strip() or None,
                                   max_aux_streams=self.max_aux_streams.value.strip() or None,
                                   **over)

    def apply_next_step(self, step: Dict[str, Any]) -> None:
        """Fill the controls from a finding's next step (the reformat finding's
        `extra["next_step"]`: {"build": {"input_io_formats": ..., ...}}); Build then builds
        what it proposes."""
        build = step.get("build", step) if isinstance(step, dict) else {}
        if "input_io_formats" in build:
            self.input_io.value = build["input_io_formats"] or ""
        if "output_io_formats" in build:
            self.output_io.value = build["output_io_formats"] or ""

    def start(self) -> bool:
        """Start a build in the background; False (with a status message) if one is running
        or the settings are invalid."""
        ok, config = self._prepare_start(self.current_config, "a build is already running",
                                         (WorkbenchError,))
        if not ok:
            return False
        self.config = config
        self.events = []
        self._log_lines = []
        self.result, self.error = None, None
        self.state = "running"
        self.progress.value = 0.0
        self.progress.bar_style = "info"
        self.phase.value = "starting"
        self.status.clear()
        self.log_view.value = ""
        self.findings_html.value = ""
        self.engine_card.value = ""
        self.build_btn.disabled, self.cancel_btn.disabled = True, False
        limit = float(self.timeout.value) or None
        self._t0 = time.monotonic()
        task = self.task

        output = self.output.value.strip() or None

        def work() -> BuildResult:
            return build_engine(self.model, config, on_event=self._on_event,
                                cancel=task.cancel, timeout=limit, client=self.client,
                                strict_profiles=self.strict_profiles,
                                split_tail=self.split_tail, output=output)

        return self.task.start(work, done=self._done, failed=self._failed) is not None

    def _on_precision(self, change: Dict[str, Any]) -> None:
        """The fallback control follows the precision (quantized ones only); the default
        engine name follows it too (model.fp16.engine -> .int8)."""
        follow_target(self.fallback, change["new"])
        out = self.output.value
        if out.endswith(f".{change['old']}.engine"):
            self.output.value = out[:-len(f".{change['old']}.engine")] + \
                f".{change['new']}.engine"

    def cancel(self) -> None:
        """Ask the running build to stop (TensorRT's progress monitor, else the worker dies)."""
        if self.running:
            self.task.cancel.set()
            self.phase.value = "cancelling..."

    def wait(self, timeout: Optional[float] = None) -> Optional[BuildResult]:
        """Block until the build ends (notebooks and tests)."""
        self.task.wait(timeout)
        return self.result

    @property
    def running(self) -> bool:
        return self.task.running

    # -- the build thread: trait assignments only -------------------------------------------
    def _on_event(self, ev: Dict[str, Any]) -> None:
        self.events.append(ev)
        if ev.get("event") == "progress":
            frac = ev.get("fraction")
            if isinstance(frac, (int, float)):
                self.progress.value = max(0.0, min(1.0, float(frac)))
            msg = ev.get("message") or ""
            self.phase.value = f"{esc(ev.get('phase', ''))} <small>{esc(msg[:120])}</small>"
        elif ev.get("event") in ("log", "notice"):
            self._log_lines.append(f"[{ev.get('level', 'note')}] {ev.get('message', '')}")
            self.log_view.value = "\n".join(self._log_lines[-LOG_LINES:])

    def _done(self, res: BuildResult) -> None:
        self.result = res
        self.state = "done"
        self.progress.value = 1.0
        self.progress.bar_style = "success"
        hit = " (from the cache)" if res.cache_hit else ""
        self.phase.value = f"done in {time.monotonic() - self._t0:.2f} s{hit}"
        self._show_card(res)
        self.findings_html.show(res.findings, model=self.model,
                                data=(res.config or {}).get("calibration"))
        self._show_log(res.log)
        self.trtexec.value = res.export.get("trtexec", "")
        self.polygraphy.value = res.export.get("polygraphy", "")
        self.script.value = res.export.get("script", "")
        notes = res.export.get("notes") or []
        self.export_notes.value = ("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes)
                                   + "</ul>") if notes else ""
        self.build_btn.disabled, self.cancel_btn.disabled = False, True

    def _failed(self, e: BaseException) -> None:
        """Every failure is shown in the panel (a bug too), never raised in the thread."""
        if isinstance(e, BuildCancelled):
            state, style = "cancelled", "warning"
        elif isinstance(e, BuildTimeout):
            state, style = "timeout", "danger"
        else:
            state, style = "failed", "danger"
        self.error = e
        self.state = state
        self.progress.bar_style = style
        self.phase.value = state
        node = getattr(e, "node", None)
        where = f" at node '{node}'" if node else ""
        self.status.error(f"{state}{where}: {error_text(e)}")
        if isinstance(e, BuildFailed) and not isinstance(e, (BuildCancelled, BuildTimeout)):
            self.findings_html.show(e.findings)
            self._show_log(e.log)
        self.build_btn.disabled, self.cancel_btn.disabled = False, True

    def _show_log(self, log: List[Dict[str, str]]) -> None:
        lines = [f"[{m.get('level')}] {m.get('message', '')}" for m in log
                 if m.get("level") in ("error", "warning", "info")]
        self._log_lines = (self._log_lines + lines)[-LOG_LINES:]
        self.log_view.value = "\n".join(self._log_lines)

    def _show_card(self, r: BuildResult) -> None:
        dtypes = ", ".join(f"{k}: {v}" for k, v in sorted(r.dtype_counts().items()))
        mem = ", ".join(f"{k.replace('_bytes', '')} {v / 2**20:.1f} MiB"
                        for k, v in r.memory.items() if k in ("activation_bytes",
                                                              "weights_bytes", "scratch_bytes"))
        self.engine_card.value = (
            "<div style='border:1px solid #ccc;padding:6px'>"
            f"<b>engine</b> <code>{esc(r.output_path or r.engine_path)}</code>"
            + (f" <small>(cached as <code>{esc(r.engine_path)}</code>)</small>"
               if r.output_path else "") + "<br>"
            f"{r.size_bytes / 1e6:.2f} MB &middot; {esc(r.backend)} {esc(r.backend_version)}"
            f" &middot; route {esc(r.route)} &middot; targets {esc(', '.join(r.targets) or '-')}"
            f"<br>build {r.build_seconds:.2f} s &middot; cache "
            f"{'hit' if r.cache_hit else 'miss'} &middot; config {esc(r.config_hash)}<br>"
            f"network tensor dtypes: {esc(dtypes)}"
            + (f"<br>memory: {esc(mem)}" if mem else "") + self._split_html(r) + "</div>")

    @staticmethod
    def _split_html(r: BuildResult) -> str:
        """A split build: what runs where, the files beside the engine, how to run the pair."""
        if not r.split:
            return ""
        s = r.split
        ops = sorted({x["op"] for x in s["refused"]})
        return ("<div style='margin-top:4px;padding:4px;background:#fff4e5'>"
                "<b>split build</b>: the "
                + ("builder has no kernel for" if s.get("refused_by") == "builder"
                   else "parser refused")
                + f" {len(s['refused'])} node(s) "
                f"({esc(', '.join(ops))}, first <code>{esc(s['refused'][0]['node'])}</code>); "
                f"engine {s['engine_nodes']} nodes + onnxruntime tail {s['onnxruntime_nodes']} "
                f"nodes<br>tail <code>{esc(s['tail'])}</code>, manifest "
                f"<code>{esc(s['manifest'])}</code><br>run the pair: <code>{esc(s['run'])}"
                "</code><br>chain vs original on onnxruntime: "
                f"{esc(s['verification'])}; <code>BuildPanel(..., split_tail=False)</code> "
                "makes it an error</div>")
