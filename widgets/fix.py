"""The Fix panel: failing nodes with proposed recipes, a diff preview (highlighted on the graph
view when it is available), apply / undo / redo / auto-fix, and the verification verdict.

    from widgets import FixPanel
    FixPanel("model.onnx")          # every kept change is a version in the model's history

All work is plain `workbench.surgery.changes` / `workbench.surgery.history` calls; the panel only shows state.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import ipywidgets as W

from workbench.errors import WorkbenchError
from workbench.surgery.history import History
from workbench.surgery.changes import (Change, Proposal, _report_dict, _supported, _unsupported,
                               apply_recipe, auto_fix, default_checker, propose)

ADDED, REMOVED, CHANGED = "#2ca02c", "#d62728", "#ff7f0e"


def _esc(x: Any) -> str:
    return html.escape(str(x))


class FixPanel(W.VBox):
    """Fix what TensorRT cannot parse, one verified, undoable recipe at a time."""

    def __init__(self, model_or_path: Any, *, backend: str = "tensorrt-rtx",
                 check: Optional[Callable[[Any], Any]] = None, graph: bool = True,
                 check_on_open: bool = True) -> None:
        path = getattr(model_or_path, "path", None) or model_or_path
        if not isinstance(path, (str, Path)):
            raise WorkbenchError("FixPanel needs a model file (path or opened Model with a path)",
                                 hint="save the ModelProto with workbench.model.save_model first")
        self.history = History(path)
        self.backend = backend
        self._check = check or default_checker(backend)
        self.report: Any = None
        self.proposals: List[Proposal] = []
        self.pending: Optional[Change] = None
        self.last_change: Optional[Change] = None
        self.auto_result: Any = None
        self.graph: Any = None
        self._want_graph = graph

        self.header = W.HTML()
        self.failing = W.HTML()
        self.proposal_list = W.Select(options=[], rows=6, layout=W.Layout(width="100%"))
        self.check_btn = W.Button(description="Check", icon="check", tooltip=f"ask {backend}'s parser")
        self.preview_btn = W.Button(description="Preview", icon="eye")
        self.apply_btn = W.Button(description="Apply", icon="wrench", button_style="primary")
        self.auto_btn = W.Button(description="Auto-fix", icon="magic")
        self.undo_btn = W.Button(description="Undo", icon="undo")
        self.redo_btn = W.Button(description="Redo", icon="repeat")
        self.force = W.Checkbox(value=False, description="keep even if outputs differ (force)",
                                indent=False)
        self.diff_html = W.HTML()
        self.verification_html = W.HTML()
        self.status = W.HTML()
        self.versions = W.HTML()
        self.graph_box = W.Box(layout=W.Layout(width="100%"))
        self.check_btn.on_click(lambda _: self._guard(self.run_check))
        self.preview_btn.on_click(lambda _: self._guard(self.preview))
        self.apply_btn.on_click(lambda _: self._guard(self.apply))
        self.auto_btn.on_click(lambda _: self._guard(self.auto_fix))
        self.undo_btn.on_click(lambda _: self._guard(self.undo))
        self.redo_btn.on_click(lambda _: self._guard(self.redo))
        super().__init__([
            self.header,
            W.HBox([self.check_btn, self.auto_btn, self.undo_btn, self.redo_btn]),
            self.failing,
            W.HTML("<b>Proposed recipes</b>"), self.proposal_list,
            W.HBox([self.preview_btn, self.apply_btn, self.force]),
            self.status, self.verification_html, self.diff_html, self.graph_box, self.versions])
        self._new_graph()
        if check_on_open:
            self._guard(self.run_check)
        self._sync()

    # ------------------------------------------------------------------ actions (plain calls)
    def run_check(self) -> Any:
        """Ask the real parser about the current version and refresh the proposals."""
        self.report = self._check(self.history.current_path())
        self.proposals = propose(self.report, self.history.current_proto()) \
            if not _supported(self.report) else []
        self.pending = None
        self._sync()
        return self.report

    def selected_proposal(self) -> Optional[Proposal]:
        i = self.proposal_list.index
        if i is None:
            return self.proposals[0] if self.proposals else None
        return self.proposals[i] if i < len(self.proposals) else None

    def preview(self, proposal: Optional[Proposal] = None) -> Change:
        """Compute (not keep) the change a proposal makes: diff, verification, graph colours."""
        p = proposal or self.selected_proposal()
        if p is None:
            raise WorkbenchError("no proposal selected", hint="run Check first")
        self.pending = apply_recipe(self.history.current_proto(), p.recipe, p.params,
                                    force=self.force.value)
        self.pending_proposal = p
        self._show_change(self.pending, preview=True)
        if self.graph is not None:
            d = self.pending.diff
            colours = {n: REMOVED for n in d["nodes_removed"]}
            colours.update({n: CHANGED for n in d["nodes_changed"] if n not in colours})
            if colours:
                self.graph.color_by(colours, legend=[("removed", REMOVED), ("changed", CHANGED)])
            self.graph.highlight(list(colours))
        return self.pending

    def apply(self, proposal: Optional[Proposal] = None) -> Change:
        """Apply (and keep, when verified) the selected proposal; re-check with the parser."""
        p = proposal or self.selected_proposal()
        if p is None:
            raise WorkbenchError("no proposal selected", hint="run Check first")
        change = self.history.apply(p.recipe, p.params, force=self.force.value)
        self.last_change = change
        if change.kept:
            self._new_graph(added=change.diff["nodes_added"], changed=change.diff["nodes_changed"])
            self.run_check()
        self._show_change(change, preview=False)
        self._sync()
        return change

    def auto_fix(self) -> Any:
        res = auto_fix(self.history.model, history=self.history, check=self._check,
                       force=self.force.value)
        self.auto_result = res
        self.report = None
        added = [n for s in res.steps if s.get("kept") for n in s["diff"]["nodes_added"]]
        self._new_graph(added=added)
        self.run_check()
        v = res.verification
        self.status.value = (f"<b>auto-fix</b>: {len(res.steps)} step(s), stopped: "
                             f"{_esc(res.stop_reason)}; supported: <b>{res.supported}</b>")
        if v is not None:
            self.verification_html.value = self._verification_html(v.to_dict(), "end to end")
        return res

    def undo(self) -> str:
        vid = self.history.undo()
        self._after_move()
        return vid

    def redo(self) -> str:
        vid = self.history.redo()
        self._after_move()
        return vid

    # ------------------------------------------------------------------ display
    def _after_move(self) -> None:
        self.pending = None
        self.diff_html.value = ""
        self.verification_html.value = ""
        self._new_graph()
        self.run_check()

    def _guard(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except WorkbenchError as e:
            self.status.value = f"<span style='color:{REMOVED}'>{_esc(e.one_line())}</span>"
        self._sync()

    def _new_graph(self, added: Optional[List[str]] = None,
                   changed: Optional[List[str]] = None) -> None:
        if not self._want_graph:
            return
        try:
            from widgets.graphview import GraphView
        except ImportError:  # the graph view is optional here
            self.graph = None
            return
        self.graph = GraphView(self.history.current_model(), height=420)
        colours = {n: ADDED for n in (added or [])}
        colours.update({n: CHANGED for n in (changed or []) if n not in colours})
        if colours:
            try:
                self.graph.color_by(colours, legend=[("added", ADDED), ("changed", CHANGED)])
            except WorkbenchError:
                pass  # ids of an earlier version (e.g. auto-fix steps) may be gone again
            self.graph.highlight(list(colours))
        self.graph_box.children = (self.graph,)

    def _verification_html(self, v: Optional[Dict[str, Any]], what: str) -> str:
        if not v:
            return f"<i>{what}: not verified</i>"
        colour = {"equivalent": ADDED, "different": REMOVED}.get(v["status"], CHANGED)
        txt = v["status"]
        if v.get("max_abs_diff") is not None:
            txt += f", max abs diff {v['max_abs_diff']:.3g} (tolerance {v['tolerance']:g})"
        if v.get("reason"):
            txt += f": {_esc(v['reason'])}"
        return f"<b>{what}</b>: <span style='color:{colour}'>{txt}</span>"

    def _show_change(self, ch: Change, preview: bool) -> None:
        d = ch.diff
        rows = []
        for key, label, col in (("nodes_added", "added", ADDED), ("nodes_removed", "removed", REMOVED),
                                ("nodes_changed", "changed", CHANGED)):
            if d[key]:
                rows.append(f"<li style='color:{col}'>{label}: {_esc(', '.join(d[key][:12]))}"
                            f"{' ...' if len(d[key]) > 12 else ''}</li>")
        for t in d["tensors_changed"][:8]:
            rows.append(f"<li>tensor {_esc(t['tensor'])}: {_esc(t['before'])} -> {_esc(t['after'])}</li>")
        self.diff_html.value = (f"<b>{'preview' if preview else 'applied'}: {_esc(ch.recipe)}</b> "
                                f"({_esc(d['summary'])})<ul>{''.join(rows)}</ul>")
        self.verification_html.value = self._verification_html(
            ch.verification.to_dict() if ch.verification else None, "verification")
        kept = "would be kept" if preview else "kept"
        if not ch.kept:
            kept = "would NOT be kept" if preview else "NOT kept"
        self.status.value = f"{_esc(ch.recipe)}: {kept}" + (f" ({_esc(ch.note)})" if ch.note else "")

    def _sync(self) -> None:
        h = self.history
        vers = h.versions()
        cur = h.current
        sup = "unknown" if self.report is None else ("supported" if _supported(self.report)
                                                     else "NOT supported")
        self.header.value = (f"<b>{_esc(h.model.name)}</b> &middot; version {cur} "
                             f"({len(h.lineage()) - 1} change(s) from the original) &middot; "
                             f"{_esc(self.backend)}: <b>{sup}</b>")
        items = _unsupported(self.report) if self.report is not None else []
        self.failing.value = ("<b>Failing nodes</b><ul>" + "".join(
            f"<li><code>{_esc(u['node'] or '(graph)')}</code> ({_esc(u['op'] or '-')}): "
            f"{_esc(u['reason'])}</li>" for u in items) + "</ul>") if items else ""
        opts = [f"{p.recipe} on {p.node}{'' if p.auto else ' (manual)'}" for p in self.proposals]
        if list(self.proposal_list.options) != opts:
            self.proposal_list.options = opts
            self.proposal_list.index = 0 if opts else None
        self.preview_btn.disabled = self.apply_btn.disabled = not self.proposals
        self.undo_btn.disabled = not h.can_undo()
        self.redo_btn.disabled = not h.can_redo()
        self.versions.value = "<b>History</b><ol start='0'>" + "".join(
            f"<li>{'<b>' if v['version'] == cur else ''}{_esc(v['recipe'])} {_esc(v['params'] or '')}"
            f" [{v['version']}]{'</b>' if v['version'] == cur else ''}</li>" for v in vers) + "</ol>"

    @property
    def failing_nodes(self) -> List[str]:
        return [u["node"] for u in _unsupported(self.report)] if self.report is not None else []

    def report_dict(self) -> Optional[Dict[str, Any]]:
        return _report_dict(self.report) if self.report is not None else None
