"""The Build panel: build an engine with progress, cancel and a time limit, then see the log,
the findings TensorRT's log gave, the equivalent trtexec / polygraphy commands and script, and
the engine card.

    from widgets import BuildPanel
    panel = BuildPanel("model.onnx", BuildConfig(precision="fp16", target="sm89", profiles=[...]))
    panel                      # click Build, or panel.start(); panel.wait()

The blocking work (`workbench.build.engine.build_engine`, which talks to the worker process) runs in a
thread that only assigns trait values; nothing is printed or displayed from it.
"""
from __future__ import annotations

import html
import threading
import time
from typing import Any, Dict, List, Optional

import ipywidgets as W

from workbench.build.engine import (BuildCancelled, BuildConfig, BuildFailed, BuildResult,
                             BuildTimeout, build_engine)
from workbench.errors import WorkbenchError

SEVERITY_COLOURS = {"error": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
LOG_LINES = 300


def _esc(x: Any) -> str:
    return html.escape(str(x))


class BuildPanel(W.VBox):
    """Build a TensorRT engine from a notebook: progress, cancel, log, findings, export."""

    def __init__(self, model_or_path: Any, config: Optional[BuildConfig] = None, *,
                 timeout: Optional[float] = None, client: Any = None) -> None:
        self.model = model_or_path
        self.config = config or BuildConfig()
        self.client = client
        self.result: Optional[BuildResult] = None
        self.error: Optional[BaseException] = None
        self.state = "idle"   # idle | running | done | failed | cancelled | timeout
        self.events: List[Dict[str, Any]] = []
        self._cancel = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._log_lines: List[str] = []

        name = getattr(model_or_path, "name", None) or str(model_or_path).rsplit("/", 1)[-1]
        self.header = W.HTML(f"<b>Build</b> {_esc(name)}")
        self.precision = W.Dropdown(options=["fp32", "fp16", "bf16", "int8", "fp8"],
                                    value=self.config.precision, description="precision")
        self.target = W.Text(value=self.config.target or "", description="target",
                             placeholder="sm89 (TensorRT-RTX AOT)")
        self.opt_level = W.BoundedIntText(
            value=3 if self.config.builder_optimization_level is None
            else self.config.builder_optimization_level, min=0, max=5, description="opt level")
        self.timeout = W.BoundedFloatText(value=timeout or 0.0, min=0.0, max=86400.0,
                                          description="time limit s")
        self.build_btn = W.Button(description="Build", icon="cogs", button_style="primary")
        self.cancel_btn = W.Button(description="Cancel", icon="stop", disabled=True)
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, description="",
                                        layout=W.Layout(width="100%"))
        self.phase = W.HTML("")
        self.status = W.HTML("")
        self.log_view = W.Textarea(value="", layout=W.Layout(width="100%", height="160px"),
                              disabled=True)
        self.findings_html = W.HTML("")
        self.engine_card = W.HTML("")
        self.trtexec = W.Textarea(value="", layout=W.Layout(width="100%", height="70px"))
        self.polygraphy = W.Textarea(value="", layout=W.Layout(width="100%", height="70px"))
        self.script = W.Textarea(value="", layout=W.Layout(width="100%", height="240px"))
        exports = W.Accordion(children=[self.trtexec, self.polygraphy, self.script])
        for i, t in enumerate(("trtexec", "polygraphy convert", "Python script (modern API)")):
            exports.set_title(i, t)
        self.build_btn.on_click(lambda _: self.start())
        self.cancel_btn.on_click(lambda _: self.cancel())
        super().__init__([
            self.header,
            W.HBox([self.precision, self.target]), W.HBox([self.opt_level, self.timeout]),
            W.HBox([self.build_btn, self.cancel_btn]), self.progress, self.phase, self.status,
            self.engine_card, W.HTML("<b>Findings</b>"), self.findings_html,
            W.HTML("<b>Export</b>"), exports, W.HTML("<b>Log</b>"), self.log_view])

    @classmethod
    def from_precision_panel(cls, panel: Any, **config: Any) -> "BuildPanel":
        """A Build panel for what a PrecisionPanel holds (target, exclusions, calibration,
        validated profiles); `config` adds build settings such as target="sm89"."""
        calib = panel._calibration_source()
        if calib is not None and not isinstance(calib, (str, bytes)) and not hasattr(
                calib, "__fspath__"):
            raise WorkbenchError("the Build panel needs calibration data as a file or folder "
                                 "path (a BuildConfig is JSON)", field="calibration",
                                 hint="save the batches with workbench.precision.calibration."
                                      "write_batches and pass the folder")
        panel.validate_profile_text()
        cfg = BuildConfig(precision=panel.target.value, exclude_nodes=panel.excluded_nodes,
                          exclude_ops=panel.excluded_ops, keep_io_types=panel.keep_io.value,
                          calibration=str(calib) if calib is not None else None,
                          calibrate_method=panel.calib_method.value,
                          allow_random_calibration=panel.allow_random.value,
                          profiles=[p.to_dict() for p in panel.profiles], **config)
        return cls(panel.model, cfg)

    # -- actions --------------------------------------------------------------------------
    def current_config(self) -> BuildConfig:
        """The panel's config with the controls applied (raises WorkbenchError if invalid)."""
        return self.config.replace(precision=self.precision.value,
                                   target=self.target.value.strip() or None,
                                   builder_optimization_level=int(self.opt_level.value))

    def start(self) -> bool:
        """Start a build in the background; False (with a status message) if one is running
        or the settings are invalid."""
        if self.running:
            self.status.value = "a build is already running"
            return False
        try:
            config = self.current_config()
        except WorkbenchError as e:
            self.state = "failed"
            self.error = e
            self.status.value = f"<span style='color:#d62728'>{_esc(e)}</span>"
            return False
        self.config = config
        self._cancel = threading.Event()
        self.events = []
        self._log_lines = []
        self.result, self.error = None, None
        self.state = "running"
        self.progress.value = 0.0
        self.progress.bar_style = "info"
        self.phase.value = "starting"
        self.status.value = ""
        self.log_view.value = ""
        self.findings_html.value = ""
        self.engine_card.value = ""
        self.build_btn.disabled, self.cancel_btn.disabled = True, False
        limit = float(self.timeout.value) or None
        self._thread = threading.Thread(target=self._run, args=(config, limit), daemon=True)
        self._thread.start()
        return True

    def cancel(self) -> None:
        """Ask the running build to stop (TensorRT's progress monitor, else the worker dies)."""
        if self.running:
            self._cancel.set()
            self.phase.value = "cancelling..."

    def wait(self, timeout: Optional[float] = None) -> Optional[BuildResult]:
        """Block until the build thread ends (notebooks and tests)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the build thread: trait assignments only -------------------------------------------
    def _on_event(self, ev: Dict[str, Any]) -> None:
        self.events.append(ev)
        if ev.get("event") == "progress":
            frac = ev.get("fraction")
            if isinstance(frac, (int, float)):
                self.progress.value = max(0.0, min(1.0, float(frac)))
            msg = ev.get("message") or ""
            self.phase.value = f"{_esc(ev.get('phase', ''))} <small>{_esc(msg[:120])}</small>"
        elif ev.get("event") == "log":
            self._log_lines.append(f"[{ev.get('level')}] {ev.get('message', '')}")
            self.log_view.value = "\n".join(self._log_lines[-LOG_LINES:])

    def _run(self, config: BuildConfig, limit: Optional[float]) -> None:
        t0 = time.monotonic()
        try:
            res = build_engine(self.model, config, on_event=self._on_event, cancel=self._cancel,
                               timeout=limit, client=self.client)
        except BuildCancelled as e:
            self._fail("cancelled", e, "warning")
        except BuildTimeout as e:
            self._fail("timeout", e, "danger")
        except BuildFailed as e:
            self._fail("failed", e, "danger")
            self._show_findings(e.findings)
            self._show_log(e.log)
        except WorkbenchError as e:
            self._fail("failed", e, "danger")
        except Exception as e:  # a bug: still shown in the panel, never raised in a thread
            self._fail("failed", e, "danger")
        else:
            self.result = res
            self.state = "done"
            self.progress.value = 1.0
            self.progress.bar_style = "success"
            hit = " (from the cache)" if res.cache_hit else ""
            self.phase.value = f"done in {time.monotonic() - t0:.2f} s{hit}"
            self._show_card(res)
            self._show_findings(res.findings)
            self._show_log(res.log)
            self.trtexec.value = res.export.get("trtexec", "")
            self.polygraphy.value = res.export.get("polygraphy", "")
            self.script.value = res.export.get("script", "")
        finally:
            self.build_btn.disabled, self.cancel_btn.disabled = False, True

    def _fail(self, state: str, e: BaseException, style: str) -> None:
        self.error = e
        self.state = state
        self.progress.bar_style = style
        self.phase.value = state
        node = getattr(e, "node", None)
        where = f" at node <code>{_esc(node)}</code>" if node else ""
        self.status.value = (f"<span style='color:#d62728'><b>{_esc(state)}</b>{where}: "
                             f"{_esc(e)}</span>")

    def _show_log(self, log: List[Dict[str, str]]) -> None:
        lines = [f"[{m.get('level')}] {m.get('message', '')}" for m in log
                 if m.get("level") in ("error", "warning", "info")]
        self._log_lines = (self._log_lines + lines)[-LOG_LINES:]
        self.log_view.value = "\n".join(self._log_lines)

    def _show_findings(self, findings: List[Any]) -> None:
        if not findings:
            self.findings_html.value = "<i>no findings</i>"
            return
        rows = []
        for f in findings:
            colour = SEVERITY_COLOURS.get(f.severity, "#333")
            nodes = ", ".join(f"<code>{_esc(n)}</code>" for n in f.nodes[:5])
            if len(f.nodes) > 5:
                nodes += f" (+{len(f.nodes) - 5})"
            rows.append(f"<tr><td style='color:{colour}'>{_esc(f.severity)}</td>"
                        f"<td>{_esc(f.code)}</td><td>{nodes}</td><td>{_esc(f.message[:300])}"
                        f"{'<br><i>' + _esc(f.hint) + '</i>' if f.hint else ''}</td></tr>")
        self.findings_html.value = ("<table><tr><th>severity</th><th>code</th><th>nodes</th>"
                                    "<th>what / next step</th></tr>" + "".join(rows)
                                    + "</table>")

    def _show_card(self, r: BuildResult) -> None:
        dtypes = ", ".join(f"{k}: {v}" for k, v in sorted(r.dtype_counts().items()))
        mem = ", ".join(f"{k.replace('_bytes', '')} {v / 2**20:.1f} MiB"
                        for k, v in r.memory.items() if k in ("activation_bytes",
                                                              "weights_bytes", "scratch_bytes"))
        self.engine_card.value = (
            "<div style='border:1px solid #ccc;padding:6px'>"
            f"<b>engine</b> <code>{_esc(r.engine_path)}</code><br>"
            f"{r.size_bytes / 1e6:.2f} MB &middot; {_esc(r.backend)} {_esc(r.backend_version)}"
            f" &middot; route {_esc(r.route)} &middot; targets {_esc(', '.join(r.targets) or '-')}"
            f"<br>build {r.build_seconds:.2f} s &middot; cache "
            f"{'hit' if r.cache_hit else 'miss'} &middot; config {_esc(r.config_hash)}<br>"
            f"network tensor dtypes: {_esc(dtypes)}"
            + (f"<br>memory: {_esc(mem)}" if mem else "") + "</div>")
