"""The Fix panel: failing nodes with proposed recipes, a diff preview (highlighted on the graph
view when it is available), apply / undo / redo / auto-fix, and the verification verdict.

    from widgets import FixPanel
    panel = FixPanel("model.onnx")   # every kept change is a version in the model's history
    panel.wait()                     # (notebooks and tests) until the parser has answered
    panel.export()                   # the current version -> model.fixed.onnx (or a path)

Commands the panel suggests (the failing nodes' next steps, "Next steps") name your files: the
model you opened, or for a fixed version the file you exported it to, else the suggested
`<name>.fixed.onnx` in the model's workspace (`outputs/`: nothing is written beside your model
unless you type a path in "save as") with the `panel.export(...)` call that writes it; never
the workspace's internal version copies.

All work is one `workbench.surgery.session.FixSession`; it runs in the panel's background task,
so the kernel keeps answering (other cells, button clicks) while the parser, onnxruntime or
auto-fix work. Actions return at once; `panel.wait()` joins and returns the action's result.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import ipywidgets as W

from widgets.base import (OK_COLOUR, SEVERITY_COLOURS, FindingsList, PanelBase, esc, fill,
                          grow)
from workbench.core.errors import WorkbenchError
from workbench.support.checker import SupportReport
from workbench.surgery.changes import Change
from workbench.surgery.history import earlier_offer
from workbench.surgery.recipes import Proposal, recipe_cost
from workbench.surgery.session import AutoFixResult, Checker, FixSession

ADDED, REMOVED, CHANGED = OK_COLOUR, SEVERITY_COLOURS["error"], SEVERITY_COLOURS["warning"]


class FixPanel(PanelBase, W.VBox):
    """Fix what TensorRT cannot parse, one verified, undoable recipe at a time."""

    def __init__(self, model_or_path: Any, *, backend: str = "tensorrt-rtx",
                 check: Optional[Checker] = None, graph: bool = True,
                 check_on_open: bool = True, client: Any = None,
                 start: str = "original") -> None:
        """`start`: "original" (default) opens the file as it is and, when an earlier session
        (a notebook before a kernel restart, `workbench fix`, a copy of the same file) left
        changes, offers them ("3 earlier changes of this model exist", *Open them*, or
        `panel.resume()`); "latest" continues from them at once."""
        path = getattr(model_or_path, "path", None) or model_or_path
        if not isinstance(path, (str, Path)):
            raise WorkbenchError("FixPanel needs a model file (path or opened Model with a path)",
                                 hint="save the ModelProto with workbench.core.model.save_model first")
        self._init_base()
        self.session = FixSession(path, backend=backend, check=check, client=client,
                                  start=start)
        self.history = self.session.history
        self.backend = backend
        self.proposals: List[Proposal] = []
        self.pending: Optional[Change] = None
        self.pending_proposal: Optional[Proposal] = None
        self.last_change: Optional[Change] = None
        self.last_split: Optional[Dict[str, str]] = None  # the files Apply wrote for a split
        self.auto_result: Optional[AutoFixResult] = None
        self.graph: Any = None
        self._want_graph = graph
        self._working = False
        self.history_view: Dict[str, Any] = {}

        self.header = W.HTML()
        self.failing = FindingsList()
        self.proposal_list = W.Select(options=[], rows=6, layout=fill())
        self.check_btn = W.Button(description="Check", icon="check",
                                  tooltip=f"ask {backend}'s parser")
        self.preview_btn = W.Button(description="Preview", icon="eye")
        self.apply_btn = W.Button(description="Apply", icon="wrench", button_style="primary")
        self.auto_btn = W.Button(description="Auto-fix", icon="magic")
        self.undo_btn = W.Button(description="Undo", icon="undo")
        self.redo_btn = W.Button(description="Redo", icon="repeat")
        suggested = self.session.output or self.history.suggested_output()
        self.export_path = W.Text(value=str(suggested or ""), description="save as",
                                  placeholder="model.fixed.onnx", layout=grow())
        self.export_btn = W.Button(description="Export", icon="download",
                                   tooltip="write the current version to this file (never "
                                   "over the model you opened)")
        self.next_html = W.HTML()
        self.earlier_html = W.HTML()
        self.resume_btn = W.Button(description="Open them", icon="history",
                                   tooltip="continue from the changes an earlier session left "
                                   "(the file itself is never written)")
        self.earlier_row = W.HBox([self.earlier_html, self.resume_btn])
        self.proposals_head = W.HTML("<b>Proposed recipes</b>")
        self.force = W.Checkbox(value=False, description="keep even if outputs differ (force)",
                                indent=False)
        self.diff_html = W.HTML()
        self.verification_html = W.HTML()
        self.versions = W.HTML()
        self.graph_box = W.Box(layout=fill())
        self.apply_row = W.HBox([self.preview_btn, self.apply_btn, self.force])
        self.check_btn.on_click(lambda _: self.run_check())
        self.preview_btn.on_click(lambda _: self.preview())
        self.apply_btn.on_click(lambda _: self.apply())
        self.auto_btn.on_click(lambda _: self.auto_fix())
        self.undo_btn.on_click(lambda _: self.undo())
        self.redo_btn.on_click(lambda _: self.redo())
        self.export_btn.on_click(lambda _: self._export_clicked())
        self.resume_btn.on_click(lambda _: self.resume())
        super().__init__([
            self.header, self.earlier_row,
            W.HBox([self.check_btn, self.auto_btn, self.undo_btn, self.redo_btn]),
            self.failing, self.next_html, W.HBox([self.export_path, self.export_btn]),
            self.proposals_head, self.proposal_list, self.apply_row,
            self.status, self.verification_html, self.diff_html, self.graph_box, self.versions])
        if self._want_graph:  # widgets are made here, on the kernel thread; the task updates it
            try:
                from widgets.graphview import GraphView
            except ImportError:  # the graph view is optional here
                self._want_graph = False
            else:
                self.graph = GraphView(self.history.current_model(), height=420)
                self.graph_box.children = (self.graph,)
        self._sync()
        if check_on_open:
            self.run_check()

    # ------------------------------------------------------------------ state
    @property
    def report(self) -> Optional[SupportReport]:
        """The parser's answer about the current version (None before the first check)."""
        return self.session.report

    @property
    def failing_nodes(self) -> List[str]:
        return [u.get("node") or "" for u in self.report.unsupported] if self.report else []

    def selected_proposal(self) -> Optional[Proposal]:
        i = self.proposal_list.index
        if i is None:
            return self.proposals[0] if self.proposals else None
        return self.proposals[i] if i < len(self.proposals) else None

    def _select(self, proposal: Optional[Proposal]) -> None:
        """Highlight `proposal` in the list (a proposal passed in code, not clicked)."""
        if proposal is None:
            return
        k = next((i for i, q in enumerate(self.proposals) if q is proposal), None)
        if k is None:
            k = next((i for i, q in enumerate(self.proposals)
                      if (q.recipe, q.node, q.params) == (proposal.recipe, proposal.node,
                                                           proposal.params)), None)
        if k is not None and self.proposal_list.index != k:
            self.proposal_list.index = k

    # ------------------------------------------------------------------ actions (background)
    def _start(self, work: Callable[[], Any], busy: str) -> Any:
        """Run `work` in the background task; the view is redrawn when it ends."""
        if self.task.running:
            self.status.warn("still working on the previous request ...")
            return None
        self._working = True
        self._sync()

        def done(result: Any) -> None:
            self._working = False
            self._sync()

        def failed(e: BaseException) -> None:
            self._working = False
            self.status.error(e)
            self._sync()

        return self.task.start(work, done=done, failed=failed, busy=busy)

    def run_check(self) -> Any:
        """Ask the real parser about the current version and refresh the proposals; the graph
        opens, selects and zooms to the nodes it refuses."""
        def work() -> Optional[SupportReport]:
            rep = self._check_now()
            failing = [n for n in self.failing_nodes if n]
            if self.graph is not None and failing:
                try:
                    self.graph.reveal(failing)
                except WorkbenchError:
                    pass  # (a name the graph does not know: the table still lists it)
            return rep

        return self._start(work, f"asking {self.backend}'s parser ...")

    def preview(self, proposal: Optional[Proposal] = None) -> Any:
        """Compute (not keep) the change a proposal makes: diff, verification, graph colours;
        `wait()` returns the Change."""
        p = proposal or self.selected_proposal()
        self._select(p)  # the list shows the proposal being previewed
        return self._start(lambda: self._preview_now(p), "computing and verifying the change ...")

    def apply(self, proposal: Optional[Proposal] = None) -> Any:
        """Apply (and keep, when verified) the proposal; re-check with the parser; `wait()`
        returns the Change."""
        p = proposal or self.selected_proposal()
        self._select(p)
        return self._start(lambda: self._apply_now(p), "applying, verifying, re-checking ...")

    def auto_fix(self) -> Any:
        """Propose, apply, re-check until supported or out of proposals; `wait()` returns the
        AutoFixResult."""
        return self._start(self._auto_fix_now, "auto-fix: proposing, applying, re-checking ...")

    def undo(self) -> Any:
        return self._start(lambda: self._move(self.session.undo), "undo, re-checking ...")

    def redo(self) -> Any:
        return self._start(lambda: self._move(self.session.redo), "redo, re-checking ...")

    def resume(self) -> Any:
        """Continue from the changes an earlier session left (what *Open them* does): the
        graph and the parser's answer follow; `wait()` returns the version."""
        return self._start(lambda: self._move(self.session.resume),
                           "opening the earlier changes, re-checking ...")

    def export(self, path: Any = None) -> Path:
        """Write the current version to `path` (default: the "save as" field, the suggested
        `<name>.fixed.onnx` in the model's workspace), atomically and never over the model you opened;
        from then on the suggested commands name that file. Runs at once (not in the
        background), so the file is there when the call returns."""
        if self.task.running:
            raise WorkbenchError("still working on the previous request",
                                 hint="panel.wait() first, then export")
        target = path if path is not None else (self.export_path.value.strip() or None)
        out = self.session.export(target)
        self.export_path.value = str(out)
        self._sync()
        self.status.ok(f"wrote version {self.history.current} to {out}")
        return out

    def next_steps(self) -> List[str]:
        """The "Next steps" lines (plain text; commands in backticks)."""
        return self.session.next_steps("panel")

    # ------------------------------------------------------------------ the work (in the task)
    def _check_now(self) -> Optional[SupportReport]:
        self.session.check()
        self.proposals = self.session.proposals
        self.pending = None
        self.status.clear()
        return self.report

    def _preview_now(self, p: Optional[Proposal]) -> Change:
        if p is None:
            raise WorkbenchError("no proposal selected", hint="run Check first")
        if p.recipe == "split":  # two models, no diff of one: say what Apply will write
            self.status.ok(f"split at {p.node}: {p.reason}; Apply writes them to "
                           f"{self.split_folder()}")
            if self.graph is not None:
                self.graph.reveal([p.node])
            return None  # type: ignore[return-value]
        self.session.force = self.force.value
        change = self.session.preview(p)
        self.pending, self.pending_proposal = change, p
        self._show_change(change, preview=True)
        if self.graph is not None:
            d = change.diff
            colours = {n: REMOVED for n in d["nodes_removed"]}
            colours.update({n: CHANGED for n in d["nodes_changed"] if n not in colours})
            if colours:
                self.graph.color_by(colours, legend=[("removed", REMOVED), ("changed", CHANGED)])
                self.graph.reveal(list(colours))  # opened, selected and zoomed to
            else:
                self.graph.highlight([])
        return change

    def split_folder(self) -> Path:
        """Where Apply writes a split: `<name>.split/` in the model's workspace (`outputs/`;
        `.split2/`, ... when that exists: an earlier split is never overwritten)."""
        h = self.history
        name = Path(h.model.path).name if h.model.path is not None else f"{h.model.name}.onnx"
        base = h.ws.output_path(name)
        for k in range(1, 1000):
            folder = base.with_name(f"{base.stem}.split{'' if k == 1 else k}")
            if not folder.exists():
                return folder
        raise WorkbenchError("no free folder name for the split", file=str(base))

    def _split_now(self, p: Proposal) -> Dict[str, str]:
        """A split is two models (the engine's prefix and an ONNX tail), not a version of one:
        cut the current version as `workbench fix MODEL --split -o FOLDER` does, verified
        against onnxruntime, and write both and the chain manifest."""
        from workbench.surgery.split import split_model

        res = split_model(self.history.current_path(), backend=self.backend)
        folder = self.split_folder()
        paths = res.save(folder)
        man = res.manifest
        tail = man.get("tail") or {}
        v = res.verification
        said = ("verified: prefix then tail compute the original outputs" if v is not None
                and v.equivalent else f"not verified ({v.reason})" if v is not None
                else "not verified")
        self.status.ok(f"split at {p.node}: {paths['prefix']} (the engine, "
                       f"{len(res.prefix.graph.node)} nodes)"
                       + (f" + {paths['tail']} (onnxruntime, {len(tail.get('nodes', []))} "
                          "nodes)" if "tail" in paths else "")
                       + f", manifest {paths['manifest']}; {said}. Build the prefix: "
                       f"workbench build {paths['prefix']} -o ENGINE")
        self.last_split = paths
        return paths

    def _apply_now(self, p: Optional[Proposal]) -> Change:
        if p is None:
            raise WorkbenchError("no proposal selected", hint="run Check first")
        if p.recipe == "split":
            return self._split_now(p)  # type: ignore[return-value]
        self.session.force = self.force.value
        change = self.session.apply(p, recheck=False)
        self.last_change = change
        if change.kept:
            self._new_graph(added=change.diff["nodes_added"], changed=change.diff["nodes_changed"])
            self._check_now()
        self._show_change(change, preview=False)
        return change

    def _auto_fix_now(self) -> AutoFixResult:
        self.session.force = self.force.value
        res = self.session.auto_fix(cancel=self.task.cancel)
        self.auto_result = res
        self.proposals = self.session.proposals
        self.pending = None
        added = [n for s in res.steps if s.get("kept") for n in s["diff"]["nodes_added"]]
        self._new_graph(added=added)
        costs = dict.fromkeys(c for c in (recipe_cost(s["proposal"]["recipe"])
                                          for s in res.steps if s.get("kept")) if c)
        self.status.value = (f"<b>auto-fix</b>: {len(res.steps)} step(s), stopped: "
                             f"{esc(res.stop_reason)}; supported: <b>{res.supported}</b>"
                             + "".join(f"<br>{esc(c)}" for c in costs))
        v = res.verification
        if v is not None:
            self.verification_html.value = self._verification_html(v.to_dict(), "end to end")
        return res

    def _export_clicked(self) -> None:
        try:
            self.export()
        except WorkbenchError as e:
            self.status.error(e)

    def _move(self, step: Callable[[], str]) -> str:
        vid = step()
        self.pending = None
        self.diff_html.value = ""
        self.verification_html.value = ""
        self._new_graph()
        self._check_now()
        return vid

    # ------------------------------------------------------------------ display
    def _new_graph(self, added: Optional[List[str]] = None,
                   changed: Optional[List[str]] = None) -> None:
        if self.graph is None:
            return
        self.graph.show(self.history.current_model())
        colours = {n: ADDED for n in (added or [])}
        colours.update({n: CHANGED for n in (changed or []) if n not in colours})
        if colours:
            try:
                self.graph.color_by(colours, legend=[("added", ADDED), ("changed", CHANGED)])
            except WorkbenchError:
                pass  # ids of an earlier version (e.g. auto-fix steps) may be gone again
            self.graph.reveal(list(colours))  # the new nodes: opened, selected, zoomed to

    def _verification_html(self, v: Optional[Dict[str, Any]], what: str) -> str:
        if not v:
            return f"<i>{esc(what)}: not verified</i>"
        colour = {"equivalent": ADDED, "different": REMOVED}.get(v["status"], CHANGED)
        txt = esc(v["status"])
        if v.get("max_abs_diff") is not None:
            txt += f", max abs diff {v['max_abs_diff']:.3g} (tolerance {v['tolerance']:g})"
        if v.get("reason"):
            txt += f": {esc(v['reason'])}"
        return f"<b>{esc(what)}</b>: <span style='color:{colour}'>{txt}</span>"

    def _show_change(self, ch: Change, preview: bool) -> None:
        d = ch.diff
        rows = []
        for key, label, col in (("nodes_added", "added", ADDED),
                                ("nodes_removed", "removed", REMOVED),
                                ("nodes_changed", "changed", CHANGED)):
            if d[key]:
                rows.append(f"<li style='color:{col}'>{label}: {esc(', '.join(d[key][:12]))}"
                            f"{' ...' if len(d[key]) > 12 else ''}</li>")
        for t in d["tensors_changed"][:8]:
            rows.append(f"<li>tensor {esc(t['tensor'])}: {esc(t['before'])} -> "
                        f"{esc(t['after'])}</li>")
        self.diff_html.value = (f"<b>{'preview' if preview else 'applied'}: {esc(ch.recipe)}</b> "
                                f"({esc(d['summary'])})<ul>{''.join(rows)}</ul>")
        self.verification_html.value = self._verification_html(
            ch.verification.to_dict() if ch.verification else None, "verification")
        kept = "would be kept" if preview else "kept"
        if not ch.kept:
            kept = "would NOT be kept" if preview else "NOT kept"
        text = f"{ch.recipe}: {kept}" + (f" ({ch.note})" if ch.note else "")
        (self.status.ok if ch.kept else self.status.warn)(text)

    def _sync(self) -> None:
        h = self.history
        view = self.history_view = h.view()
        cur = h.current
        rep = self.report if self.session.fresh else None
        sup = "unknown" if rep is None else ("supported" if rep.supported else "NOT supported")
        inherited = [st for st in view["steps"][1:] if not st.get("mine")]
        resumed = (f"<br><span style='color:{CHANGED}'>continued from {len(inherited)} "
                   "change(s) an earlier session made to this model (same content: a kernel "
                   "before a restart, <code>workbench fix</code>, or a copy of the file): "
                   "Undo goes back to the file, and <code>FixPanel(path)</code> opens it as "
                   "it is</span>" if inherited else "")
        self.header.value = (f"<b>{esc(h.model.name)}</b> &middot; version {esc(cur)} "
                             f"({view['changes']} change(s) from the original) &middot; "
                             f"{esc(self.backend)}: <b>{sup}</b>{resumed}")
        if rep is None or rep.supported:
            self.failing.value = ""
        else:
            self.failing.show(rep.problems, empty="no failing nodes")
        opts = [f"{p.recipe} on {p.node}{'' if p.auto else ' (manual)'}" for p in self.proposals]
        if list(self.proposal_list.options) != opts:
            self.proposal_list.options = opts
            self.proposal_list.index = 0 if opts else None
        self._show_proposals(rep)
        working = self._working
        self.check_btn.disabled = self.auto_btn.disabled = working
        self.preview_btn.disabled = self.apply_btn.disabled = working or not self.proposals
        self.undo_btn.disabled = working or not h.can_undo()
        self.redo_btn.disabled = working or not h.can_redo()
        # (the original is not exported: a copy of it is easily taken for a fixed model)
        self.export_btn.disabled = working or h.current == h.original
        offer = earlier_offer(self.session.earlier())
        self.earlier_html.value = (f"<span style='color:{CHANGED}'>{esc(offer)}: the panel "
                                   "shows the file as it is</span>" if offer else "")
        self.earlier_row.layout.display = None if offer else "none"
        self.resume_btn.disabled = working
        self.next_html.value = next_steps_html(self.next_steps())
        self.versions.value = history_html(view)


    def _show_proposals(self, rep: Optional[SupportReport]) -> None:
        """The proposal list and its Preview/Apply row only when there is a recipe to apply;
        with none, one line says so (the findings' next steps say what to do instead)."""
        empty = not self.proposals and rep is not None
        display = "none" if empty else None
        self.proposal_list.layout.display = self.apply_row.layout.display = display
        if not empty:
            self.proposals_head.value = "<b>Proposed recipes</b>"
        elif rep.supported:
            self.proposals_head.value = "<b>Proposed recipes</b>: none needed (supported)"
        else:
            self.proposals_head.value = (
                "<b>Proposed recipes</b>: none for these findings, nothing to apply here: "
                "follow the next step beside each finding (e.g. a split build that runs the "
                "refused nodes on onnxruntime)")


def next_steps_html(lines: List[str]) -> str:
    """Next-step lines as a list; `command` spans become <code>."""
    if not lines:
        return ""
    items = []
    for line in lines:
        parts = esc(line).split("`")
        items.append("<li>" + "".join(f"<code>{p}</code>" if k % 2 else p
                                      for k, p in enumerate(parts)) + "</li>")
    return f"<b>Next steps</b><ul>{''.join(items)}</ul>"


def history_html(view: Dict[str, Any]) -> str:
    """This session's lineage (the current version in bold; steps another session made say
    which), then the other sessions folded in a closed <details> labelled with their count."""
    from workbench.surgery.history import earlier_label, session_label, step_label, step_origin

    last = len(view["steps"]) - 1
    items = []
    for k, v in enumerate(view["steps"]):
        who = f" <i>({esc(step_origin(v))})</i>" if k and step_origin(v) else ""
        text = esc(step_label(v))
        items.append(f"<li>{'<b>' + text + '</b>' if k == last else text}{who}</li>")
    out = (f"<b>History</b> &middot; this {esc(session_label(view['session']))}: "
           f"{view['changes']} change(s) from the original<ol start='0'>{''.join(items)}</ol>")
    if view["redo"]:
        out += f"<div>undone (redo): {esc(', '.join(view['redo']))}</div>"
    if view["earlier"]:
        groups = "".join(
            f"<div>{esc(session_label(s))}</div><ul>"
            + "".join(f"<li>{esc(step_label(v))}</li>" for v in s["entries"]) + "</ul>"
            for s in view["earlier"])
        out += (f"<details class='wb-earlier-sessions'><summary>{esc(earlier_label(view))}: "
                f"show</summary>{groups}</details>")
    return out
