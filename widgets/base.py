"""The small base every panel stands on: one severity colour map, one HTML escape, a status
line, a findings list and a background task that keeps long work off the kernel thread.

Why: ipykernel answers comms (button clicks, the next cell) only between messages, so a
panel that parses, builds or verifies on the kernel thread freezes the notebook. Work runs in
a daemon thread; the thread only assigns trait values (never `display`, `print` or tqdm from
it: ipykernel 7 routes such output to the wrong cell), and errors end up in the status line
instead of vanishing with the thread.

    class MyPanel(PanelBase, W.VBox):
        def run(self):
            self.task.start(self._work, done=self._show, busy="checking ...")
"""
from __future__ import annotations

import html
import os
import re
import sys
import threading
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Type

import ipywidgets as W

from workbench.core.model import ModelLike

SEVERITY_COLOURS = {"error": "#d62728", "warning": "#ff7f0e", "info": "#1f77b4"}
OK_COLOUR = "#2ca02c"
MUTED_COLOUR = "#777"


def fill() -> W.Layout:
    """Full width of the column box it sits in. `width: 100%` plus a widget's 2-px margins
    spills 4 px past the box (a scroll bar, or a box past the notebook's edge); `auto`
    stretches to the box, margins included."""
    return W.Layout(width="auto")


def grow(min_width: str = "12em") -> W.Layout:
    """The rest of a row (a path field beside its buttons), no narrower than `min_width`."""
    return W.Layout(width="auto", flex="1 1 auto", min_width=min_width)


def fit() -> W.Layout:
    """As wide as the label needs (buttons: ipywidgets' fixed 148 px cuts longer labels), not
    stretched across a column box."""
    return W.Layout(width="auto", min_width="fit-content", align_self="flex-start")


def short_label(name: str, limit: int = 40) -> str:
    """A long name cut in the middle ('/layer3/0/conv2/conv/Conv + ... + /layer3/0/relu/Relu'
    keeps both ends): axis labels stay readable and leave the plot its width; the hover text
    keeps the full name."""
    name = str(name)
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "\u2026" + name[len(name) - (limit - 1 - head):]


def esc(x: Any) -> str:
    """HTML-escape any value for an ipywidgets HTML trait."""
    return html.escape(str(x))


def severity_colour(severity: str) -> str:
    return SEVERITY_COLOURS.get(str(severity), "#333")


def error_text(e: BaseException) -> str:
    """One line for the user: WorkbenchError's own line (onnxruntime's refusals as the CLI
    words them, `workbench.runtime.runners.user_error`), otherwise the exception's type and text."""
    if "workbench.runtime.runners" in sys.modules:
        from workbench.runtime.runners import user_error

        e = user_error(e) or e
    one_line = getattr(e, "one_line", None)
    if callable(one_line):
        return str(one_line())
    return f"{type(e).__name__}: {e}"


class StatusLine(W.HTML):
    """One line of state: busy (italic), ok (green), warn (orange) or error (red)."""

    def busy(self, text: str) -> None:
        self.value = f"<i>{esc(text)}</i>"

    def ok(self, text: str) -> None:
        self.value = f"<span style='color:{OK_COLOUR}'>{esc(text)}</span>"

    def warn(self, text: str) -> None:
        self.value = f"<span style='color:{SEVERITY_COLOURS['warning']}'>{esc(text)}</span>"

    def error(self, e: Any) -> None:
        text = error_text(e) if isinstance(e, BaseException) else str(e)
        self.value = f"<span style='color:{SEVERITY_COLOURS['error']}'>{esc(text)}</span>"

    def clear(self) -> None:
        self.value = ""


# cell padding for the panels' HTML tables (class wb-t): without it neighbouring columns run
# together ('outputlast_hidden_statefloat32[') and headers wrap mid-word
TABLE_CSS = ("<style>.wb-t td, .wb-t th {padding: 2px 12px 2px 0; vertical-align: top}"
             " .wb-t th {white-space: nowrap}</style>")


_BREAK_AFTER = re.compile(r"([,/])")
_NAME_BREAKS = re.compile(r"([/_.,])")


def breakable(text: str) -> str:
    """`text` escaped, with line-break chances after each ',' (a `--profile` list of inputs)
    and '/' (a path), so a narrow column wraps a command between its inputs and a path between
    its folders, not inside '224x224'."""
    out = _BREAK_AFTER.sub(r"\1<wbr>", esc(text))
    return _FLAG.sub(r"<span style='white-space:nowrap'>\1</span>", out)  # not '--' | 'recipe'


_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def breakable_name(text: str) -> str:
    """A node name or path escaped, with line-break chances after its '/', '_', '.' and ','
    (`/b/b.1/Constant_1_output_0_DequantizeLinear` wraps between its scopes)."""
    return _NAME_BREAKS.sub(r"\1<wbr>", esc(text))


_FINDINGS_COLS = ("<colgroup><col style='width:5em'><col style='width:10em'>"
                  "<col style='width:30%'><col style='width:14%'><col></colgroup>"
                  "<style>.wb-findings td {overflow-wrap:break-word}"
                  " .wb-findings td code {white-space:normal}</style>")


def steps_html(steps: Iterable[Any]) -> str:
    """A finding's next steps for a panel: one short line each (the verb, what it changes,
    why; no paths), the whole command that runs when pasted in the line's tooltip."""
    from workbench.core.nextstep import command, short

    out = []
    for s in steps:
        out.append(f"<div class='wb-step' title='{esc(command(s))}'>&rarr; "
                   f"{breakable(short(s))}</div>")
    return "".join(out)


def findings_html(findings: Iterable[Any], *, empty: str = "no findings",
                  limit: Optional[int] = None) -> str:
    """Findings (objects or dicts) as one table: severity, code, message, nodes, next step."""
    rows = []
    items = list(findings)
    shown = items if limit is None else items[:limit]
    for f in shown:
        get = (lambda k, f=f: f.get(k)) if isinstance(f, dict) else (lambda k, f=f: getattr(f, k, None))
        sev = get("severity") or "info"
        nodes = get("nodes") or []
        node_text = ", ".join(map(str, nodes[:6])) + (f" (+{len(nodes) - 6})" if len(nodes) > 6 else "")
        hint = get("hint") or ""
        steps = steps_html(get("next_steps") or [])
        rows.append(
            f"<tr><td style='color:{severity_colour(sev)};white-space:nowrap'>{esc(sev)}</td>"
            f"<td><code>{esc(get('code') or '')}</code></td>"
            f"<td>{esc(get('message') or '')}</td>"
            f"<td>{breakable_name(node_text)}</td>"
            f"<td>{breakable(hint)}{'<br>' if hint and steps else ''}{steps}</td></tr>")
    if not rows:
        return f"<i style='color:{MUTED_COLOUR}'>{esc(empty)}</i>"
    more = "" if limit is None or len(items) <= limit else \
        f"<div style='color:{MUTED_COLOUR}'>... and {len(items) - limit} more</div>"
    # fixed columns: with the automatic layout a long node name or a command's path took the
    # width (the next step ran past the panel's edge) and the message wrapped a word a line
    return (TABLE_CSS + "<table class='wb-t wb-findings' style='width:100%;table-layout:fixed;"
            "border-collapse:collapse'>" + _FINDINGS_COLS +
            "<tr><th align=left>severity</th><th align=left>code</th><th align=left>message</th>"
            "<th align=left>nodes</th><th align=left>next step</th></tr>"
            + "".join(rows) + "</table>" + more)


class FindingsList(W.HTML):
    """A findings table that wraps inside its container (no overflow past the right edge)."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("layout", W.Layout(width="auto", overflow="auto"))
        super().__init__(**kw)

    def show(self, findings: Sequence[Any], *, empty: str = "no findings",
             limit: Optional[int] = 50, model: Optional[ModelLike] = None, data: Any = None) -> None:
        """`model` / `data`: the panel's paths, put for the findings' MODEL / DATA placeholders
        (as the CLI prints them), so the commands in a next step run as shown."""
        self.value = findings_html(with_paths(findings, model, data), empty=empty, limit=limit)


def with_paths(findings: Sequence[Any], model: ModelLike, data: Any) -> List[Any]:
    """The findings with MODEL / DATA in their message and hint as these paths (objects or
    dicts in, dicts out where a path was put); unchanged where `model` is not a path."""
    from workbench.core.nextstep import pasteable

    if not isinstance(model, (str, os.PathLike)):
        return list(findings)
    d = str(data) if isinstance(data, (str, os.PathLike)) else None
    from workbench.core.findings import NextStep

    out = []
    for f in findings:
        row = dict(f) if isinstance(f, dict) else (f.to_dict() if hasattr(f, "to_dict") else f)
        if isinstance(row, dict):
            for k in ("message", "hint"):
                if isinstance(row.get(k), str):
                    row[k] = pasteable(row[k], str(model), d)
            row["next_steps"] = [NextStep.from_dict(s).bound(model=str(model), data=d)
                                 for s in row.get("next_steps") or []]
        out.append(row)
    return out


class BackgroundTask:
    """Run one piece of work at a time in a daemon thread; report through callbacks.

    `done(result)` and `failed(exc)` run in the worker thread and must only assign traits.
    `cancel` is an Event the work may poll; `wait()` joins (tests and notebooks)."""

    def __init__(self, status: Optional[StatusLine] = None) -> None:
        self.status = status
        self.cancel = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None
        self.result: Any = None

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self, work: Callable[[], Any], *, done: Optional[Callable[[Any], None]] = None,
              failed: Optional[Callable[[BaseException], None]] = None,
              busy: Optional[str] = None) -> Optional[threading.Thread]:
        """Start `work` unless a task is already running (then say so and return None)."""
        if self.running:
            if self.status is not None:
                self.status.warn("still working on the previous request ...")
            return None
        self.cancel = threading.Event()
        self.error = None
        self.result = None
        if busy and self.status is not None:
            self.status.busy(busy)

        def _run() -> None:
            try:
                self.result = work()
            except BaseException as e:  # shown in the panel, never raised in a thread
                self.error = e
                if failed is not None:
                    try:
                        failed(e)
                    except Exception as e2:  # pragma: no cover - a bug in the view itself
                        if self.status is not None:
                            self.status.error(e2)
                elif self.status is not None:
                    self.status.error(e)
                return
            if done is not None:
                try:
                    done(self.result)
                except Exception as e:
                    self.error = e
                    if self.status is not None:
                        self.status.error(e)

        self.thread = threading.Thread(target=_run, daemon=True)
        self.thread.start()
        return self.thread

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Join the running task; return its result (None if it failed or none ran)."""
        if self.thread is not None:
            self.thread.join(timeout)
        return self.result


class PanelBase:
    """Mixin for panels: `self.status` (StatusLine) and `self.task` (BackgroundTask).

    Call `self._init_base()` before building the layout."""

    status: StatusLine
    task: BackgroundTask
    state: str
    error: Optional[BaseException]

    def _init_base(self) -> None:
        self.status = StatusLine()
        self.task = BackgroundTask(self.status)

    def wait(self, timeout: Optional[float] = None) -> Any:
        """Block until the panel's background work ends (notebooks and tests)."""
        return self.task.wait(timeout)

    @property
    def busy(self) -> bool:
        return self.task.running

    def _prepare_start(self, prepare: Callable[[], Any], still_running: str,
                       refused: Tuple[Type[BaseException], ...] = (Exception,)) -> Tuple[bool, Any]:
        """(True, what `prepare` returns) when new work may start. (False, None) when work is
        still running (`still_running` is said) or `prepare` raised one of `refused`: the error
        is said, the panel's `state` becomes 'failed' and `error` holds it."""
        if self.task.running:
            self.status.warn(still_running)
            return False, None
        try:
            return True, prepare()
        except refused as e:
            self.state = "failed"
            self.error = e
            self.status.error(e)
            return False, None
