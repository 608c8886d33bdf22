"""The ILogger (the build log findings are made from, errors and warnings streamed to the
client, the node the parser is on) and the IProgressMonitor (progress phases, cancel)."""
from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional

from workbench.worker.registry import Context

LEVELS = ("error", "warning", "info", "verbose")

# Phases recognised in the log when the TensorRT has no IProgressMonitor (8.x).
_LOG_PHASES = (
    (re.compile(r"Graph optimization time|Applying generic optimizations|Graph construction"),
     "optimizing graph", 0.2),
    (re.compile(r"Starting Calibration|Calibrated batch|Post Processing Calibration"),
     "calibrating", 0.3),
    (re.compile(r"Total Activation Memory|Total Host Persistent Memory|Detected \d+ inputs"),
     "selecting tactics", 0.6),
    (re.compile(r"Engine generation completed|Total Weights Memory"), "serializing", 0.9),
)


# the parser's verbose line as it starts on a node (onnx-tensorrt's ModelImporter, 8.6 to
# TensorRT-RTX; 8.6 prefixes its source location)
_PARSING_NODE = re.compile(r"(?:^|: )Parsing node: (.*) \[([\w.:]+)\]\s*$")


def make_logger(trt: Any, ctx: Optional[Context] = None, keep: str = "warning",
                phases_from_log: bool = False, nodes: Optional[Context] = None) -> Any:
    """The ILogger: keeps messages down to level `keep` in `.messages` (the build log that
    findings are made from), streams errors and warnings to the client as log events, and
    (8.x, no IProgressMonitor) turns known log lines into progress phases.

    TensorRT calls it for every message, verbose ones included (thousands per build), so the
    common case, a message below `keep`, returns after one int() of the severity."""
    sev = trt.ILogger.Severity
    names = {int(sev.INTERNAL_ERROR): "error", int(sev.ERROR): "error",
             int(sev.WARNING): "warning", int(sev.INFO): "info", int(sev.VERBOSE): "verbose"}
    keep_rank = LEVELS.index(keep.lower()) if keep.lower() in LEVELS else 1
    kept = {v for v, name in names.items() if LEVELS.index(name) <= keep_rank}
    streamed = {v for v, name in names.items() if name in ("error", "warning")}
    verbose = int(sev.VERBOSE)
    tracker = nodes if nodes is not None else ctx

    class _Logger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Dict[str, str]] = []
            self.phases_from_log = phases_from_log
            self.tracker = tracker  # told each node the parser starts (a crash names it)
            self.parsing = 0  # nodes the parser started on, this parse

        def parsed(self) -> None:
            """The parser is done with nodes (a later crash is not one of theirs)."""
            self.parsing = 0
            if self.tracker is not None:
                self.tracker.working_on("parse", None)

        def log(self, severity: Any, msg: str) -> None:  # noqa: A003
            v = int(severity)
            if v == verbose and self.tracker is not None and "Parsing node: " in msg:
                hit = _PARSING_NODE.search(msg)
                if hit:
                    self.tracker.working_on("parse", hit.group(1), hit.group(2), self.parsing)
                    self.parsing += 1
            if v == verbose and v not in kept and \
                    msg[:40].lstrip().startswith("List of affected weights"):
                # (TensorRT 8.6-10 names the weights a conversion warning counts only here)
                self.messages.append({"level": "verbose", "message": msg})
            if v in kept:
                level = names[v]
                self.messages.append({"level": level, "message": msg})
                if ctx is not None and v in streamed:
                    ctx.log(level, msg)
            if self.phases_from_log and ctx is not None:
                for rx, phase, frac in _LOG_PHASES:
                    if rx.search(msg):
                        ctx.progress(phase, frac, msg[:200])
                        break

        def errors(self) -> List[str]:
            """The error messages; TensorRT-RTX's 'CUDA driver version is insufficient'
            (it probes CUDA while reporting a parse error on a machine without a GPU) is left
            out when other errors say what failed, kept when it is the only one."""
            errs = [m["message"] for m in self.messages if m["level"] == "error"]
            noise = [m for m in errs if "CUDA driver version is insufficient" in m]
            return [m for m in errs if m not in noise] if noise and len(noise) < len(errs) \
                else errs

    return _Logger()


def make_progress_monitor(trt: Any, ctx: Context, step_delay: float = 0.0) -> Any:
    """IProgressMonitor: nested phases -> one overall fraction; returns False to cancel."""

    class _Monitor(trt.IProgressMonitor):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.stack: List[List[Any]] = []  # [name, num_steps, completed]
            self.last_sent = 0.0
            self.cancelled = False
            self.best = 0.0  # TensorRT's nested phases can step back: never show that

        def _fraction(self) -> float:
            frac, scale = 0.0, 1.0
            for _name, n, done in self.stack:
                n = max(int(n), 1)
                frac += scale * min(done, n) / n
                scale /= n
            return min(frac, 1.0)

        def _send(self, force: bool = False) -> None:
            now = time.monotonic()
            if force or now - self.last_sent > 0.05:
                self.last_sent = now
                names = " / ".join(s[0] for s in self.stack)
                self.best = max(self.best, self._fraction())
                ctx.progress("building", round(self.best, 4), names)

        def phase_start(self, phase_name: str, parent_phase: Optional[str],
                        num_steps: int) -> None:
            try:
                self.stack.append([phase_name, num_steps, 0])
                self._send()
            except Exception:  # never let an exception cross into TensorRT
                pass

        def step_complete(self, phase_name: str, step: int) -> bool:
            try:
                for entry in reversed(self.stack):
                    if entry[0] == phase_name:
                        entry[2] = int(step) + 1
                        break
                if step_delay:
                    time.sleep(step_delay)
                self._send()
                if ctx.cancelled:
                    self.cancelled = True
                    return False
                return True
            except Exception:
                return True

        def phase_finish(self, phase_name: str) -> None:
            try:
                for i in range(len(self.stack) - 1, -1, -1):
                    if self.stack[i][0] == phase_name:
                        del self.stack[i:]
                        break
                if self.stack:
                    self._send()
            except Exception:
                pass

    return _Monitor()
