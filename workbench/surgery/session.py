"""One fix session: check -> propose -> apply -> verify -> re-check, every kept step a version.

    session = FixSession("model.onnx", backend="tensorrt-rtx")
    report = session.check()                   # the real parser, hints with recipe commands
    session.proposals                          # recipes routed by finding code
    change = session.apply(session.proposals[0])
    result = session.auto_fix()                # until supported or out of proposals

`auto_fix(...)`, `workbench fix` and the notebook FixPanel are all this class; the history
(`workbench.surgery.history.History`) only stores and replays the versions it makes.
"""
from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from workbench.runtime.equivalence import Verification
from workbench.core.errors import WorkbenchError
from workbench.core.findings import Finding, NextStep
from workbench.core.model import ModelLike
from workbench.support.checker import SupportReport
from workbench.surgery.changes import Change, apply_in_history, apply_recipe, verify_models
from workbench.surgery.history import History
from workbench.surgery.propose import advise, propose
from workbench.surgery.recipes import Proposal

__all__ = ["FixSession", "AutoFixResult", "auto_fix", "default_checker"]

Checker = Callable[[Any], SupportReport]


@dataclass
class AutoFixResult:
    """What an auto-fix did: every step, the support verdict before/after, end-to-end check."""

    supported: bool
    steps: List[Dict[str, Any]] = field(default_factory=list)
    support_before: Optional[SupportReport] = None
    support_after: Optional[SupportReport] = None
    verification: Optional[Verification] = None
    remaining: List[Dict[str, Any]] = field(default_factory=list)
    version: Optional[str] = None
    stop_reason: str = ""
    # proposals of a recipe already applied in this run, not applied again: why it did not help
    repeats: List[Dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"supported": self.supported, "steps": self.steps, "repeats": self.repeats,
                "support_before": self.support_before.to_dict() if self.support_before else None,
                "support_after": self.support_after.to_dict() if self.support_after else None,
                "verification": self.verification.to_dict() if self.verification else None,
                "remaining": self.remaining, "version": self.version,
                "stop_reason": self.stop_reason}


def default_checker(backend: str = "tensorrt-rtx", client: Any = None) -> Checker:
    """`workbench.support.checker.check` with the real parser of `backend`."""
    def check(path: Any) -> SupportReport:
        from workbench.support.checker import check as support_check

        return support_check(path, backend=backend, client=client)
    return check


def brief(report: SupportReport) -> List[Dict[str, Any]]:
    """The failing nodes of a report as {node, op, reason, source, hint} (for logs and
    steps)."""
    return [{"node": u.get("node") or "", "op": u.get("op") or "",
             "reason": u.get("reason") or "", "source": u.get("source") or "",
             "hint": u.get("hint") or ""}
            for u in report.unsupported]


def _quote(path: Any) -> str:
    return shlex.quote(str(path)) if path is not None else "MODEL"


def _renamed(obj: Any, old: str, new: str, quoted: str, key: str = "") -> Any:
    """`obj` (strings, lists, dicts, Findings) with file name `old` replaced: by `quoted`
    (shell-quoted) inside hints, which hold commands, by `new` elsewhere."""
    if isinstance(obj, str):
        if old not in obj:
            return obj
        to = quoted if key == "hint" else new
        return obj.replace(shlex.quote(old), to).replace(old, to)
    if isinstance(obj, list):
        return [_renamed(x, old, new, quoted, key) for x in obj]
    if isinstance(obj, dict):
        return {k: _renamed(v, old, new, quoted, k) for k, v in obj.items()}
    if isinstance(obj, Finding):
        out = copy.copy(obj)
        for k in ("message", "hint", "extra"):
            setattr(out, k, _renamed(getattr(obj, k), old, new, quoted, k))
        out.next_steps = [NextStep.from_dict(_renamed(s.to_dict(), old, new, quoted))
                          for s in obj.next_steps]
        return out
    return obj


def _named(report: SupportReport, old: str, new: Optional[Path]) -> SupportReport:
    """A copy of `report` whose texts name `new` (None: "MODEL") where they named file `old`;
    `model` stays the file the parser read."""
    from workbench.core.fsutil import fixed_name

    out = copy.copy(report)
    # the `-o` of a recipe's command (`fixed_name` of the file read) first, then the file
    pairs = [(fixed_name(old), fixed_name(str(new)) if new is not None else "OUT.onnx"),
             (old, str(new) if new is not None else "MODEL")]
    if old.endswith(".onnx") and new is not None and str(new).endswith(".onnx"):
        # then the stem, which next steps' other outputs are named after (`{stem}_split`)
        pairs.append((old[:-5], str(new)[:-5]))
    for k in ("findings", "unsupported", "notes", "partition", "build"):
        v = getattr(report, k)
        for a, b in pairs:
            v = _renamed(v, a, b, _quote(b) if b not in ("MODEL", "OUT.onnx") else b)
        setattr(out, k, v)
    return out


def _failing(rep: SupportReport) -> str:
    """'/Det (Det)' / '3 nodes (/a, /b, ...)': the failing nodes, for one line."""
    names = [f"{u.get('node') or 'the graph'} ({u.get('op')})" if u.get("op") else
             (u.get("node") or "the graph") for u in rep.unsupported]
    if len(names) == 1:
        return names[0]
    return f"{len(names)} nodes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"


class FixSession:
    """Fix one model (path, Model, or an existing History) against one backend's parser.

    Each FixSession is one history session (`history.session`: id, start time, pid). It opens
    the model as it is on disk; `earlier()` says what changes an earlier session (a kernel
    before a restart, `workbench fix`, a copy of the same file) left, and `resume()` continues
    from them (`start="latest"` does so at once).

    The parser reads the workspace's copy of a version, but what the report tells the user
    (hints with `workbench fix ...` commands, reasons) names a file the user knows
    (`command_path`): the original model for the original; for a changed version the file it
    was exported to (`export`), else `output` (where the fixed model goes, e.g. the CLI's -o),
    else the suggested `<name>.fixed.onnx` in the model's workspace (`outputs/`), which
    `next_steps` says how to
    write."""

    def __init__(self, model: Any = None, *, backend: str = "tensorrt-rtx",
                 history: Optional[History] = None, check: Optional[Checker] = None,
                 client: Any = None, inputs: Optional[Dict[str, Any]] = None,
                 force: bool = False, start: str = "original", output: Any = None) -> None:
        self.history = history if history is not None else History(model, start=start)
        self.backend = backend
        self.inputs = inputs
        self.force = force
        self.output: Optional[Path] = Path(output) if output is not None else None
        self._check = check or default_checker(backend, client)
        self.report: Optional[SupportReport] = None
        self._report_version: Optional[str] = None
        self._proposals: Optional[List[Proposal]] = None
        self._advised: Optional[SupportReport] = None  # the report naming the workspace copy
        self._checked: Optional[str] = None            # ... whose path it names

    # ------------------------------------------------------------------ the user's files
    def command_path(self) -> Optional[Path]:
        """The file that commands about the current version name: the original model, the
        file the version was exported to, `output`, or `<name>.fixed.onnx` in the workspace's
        `outputs/`
        (None: a model without a file). Never the workspace copy."""
        h = self.history
        return h.user_path() or self.output or h.suggested_output()

    def export(self, path: Any = None, unchanged: bool = False) -> Path:
        """Write the current version to `path` (default: `output`, else `<name>.fixed.onnx`
        in the model's workspace, `outputs/`), atomically and never over the original; from then on commands
        about it name that file. The original itself (no change kept) is refused unless
        `unchanged`: a copy of the input is easily taken for a fixed model."""
        if self.history.current == self.history.original and not unchanged:
            raise WorkbenchError("nothing to export: no change is kept, the current version "
                                 "is the original model", field="export",
                                 hint="apply a recipe first (the proposals, or auto_fix()); "
                                      "where none makes the model parse, split it "
                                      "(fix --split, or a build, which splits by itself); "
                                      "export(path, unchanged=True) writes a copy anyway")
        target = path if path is not None else (self.output or self.history.suggested_output())
        if target is None:
            raise WorkbenchError("no path to export to: the model has no file",
                                 hint="pass one: export('model.fixed.onnx')")
        out = self.history.export(target)
        self.output = out
        self._name_report()
        return out

    def _name_report(self) -> None:
        """Point the current report's texts at `command_path` (a report about an earlier
        version keeps the names it was given)."""
        if self._advised is not None and self._checked is not None and self.fresh:
            self.report = _named(self._advised, self._checked, self.command_path())

    # ------------------------------------------------------------------ earlier sessions
    def earlier(self) -> Optional[Dict[str, Any]]:
        """The changes the model's log holds beyond the original while this session is at the
        original (`History.earlier`), else None."""
        return self.history.earlier()

    def resume(self) -> str:
        """Continue from where the model's log left off (`History.resume`); the next report
        or proposal asks the parser about that version."""
        return self.history.resume()

    # ------------------------------------------------------------------ check and propose
    def check(self) -> SupportReport:
        """Ask the parser about the current version; hints name the recipes that fix it and
        the user's file (`command_path`), not the workspace copy the parser read."""
        vid = self.history.current
        path = self.history.current_path()
        rep = self._check(path)
        if not isinstance(rep, SupportReport):
            raise WorkbenchError(f"the checker returned a {type(rep).__name__}, not a "
                                 "SupportReport", field="check",
                                 hint="pass a function that returns workbench.support.check(...)")
        self._advised, self._checked = advise(rep), str(path)
        self._report_version, self._proposals = vid, None
        self.report = self._advised
        self._name_report()
        return self.report

    def next_steps(self, obj: str = "session") -> List[str]:
        """What to do next, as lines with commands: they name the user's files only, and a
        fixed version that is not written yet comes with the call that writes it (`obj`: the
        name of the object whose `export` it calls, e.g. "panel")."""
        h = self.history
        rep = self.report if self.fresh else None
        target = self.command_path()
        src = h.model.path
        backend = f" --backend {self.backend}" if self.backend in ("tensorrt", "tensorrt-rtx") \
            else ""
        out: List[str] = []

        def build(model: Path) -> str:
            return (f"`workbench build {_quote(model)} -o {_quote(model.with_suffix('.engine'))}"
                    f"{backend}` builds the engine")

        if h.current == h.original:
            if rep is not None and rep.supported and src is not None:
                out.append(f"{Path(src).name} parses with {self.backend}: " + build(Path(src)))
            elif rep is not None and src is not None:
                # a command the user runs names its output: `<name>.fixed.onnx` beside the
                # model, as the findings' own commands do (the panels' defaults go to the
                # workspace instead)
                from workbench.core.fsutil import fixed_name

                fixed = self.output or Path(fixed_name(str(src)))
                if any(p.auto for p in self.proposals):
                    out.append(f"`workbench fix {_quote(src)} -o {_quote(fixed)} --auto` "
                               "applies the proposed fixes from the command line (your model "
                               "is never written)")
                else:  # --auto would change nothing: say so, and what the findings advise
                    out.append("no recipe fixes " + _failing(rep) + " automatically: see the "
                               "next step beside each finding (a manual proposal, a split, a "
                               "plugin)")
            return out
        if target is None:
            out.append(f"version {h.current} is only in the workspace: `{obj}.export(PATH)` "
                       "writes it to PATH")
            return out
        saved = h.user_path() is not None
        if not saved:
            out.append(f"version {h.current} is not saved yet: `{obj}.export({str(target)!r})` "
                       f"writes it to {target} (your model is never written)")
        else:
            out.append(f"version {h.current} is saved as {target}")
        if rep is not None and rep.supported:
            out.append(("" if saved else "then ") + build(target))
        elif rep is not None:
            out.append(f"the commands for the nodes still failing name {target}")
        return out

    @property
    def fresh(self) -> bool:
        """Whether `report` describes the current version."""
        return self.report is not None and self._report_version == self.history.current

    @property
    def proposals(self) -> List[Proposal]:
        """Recipes for the current report's problems (checks first when it is stale)."""
        if not self.fresh:
            self.check()
        if self._proposals is None:
            self._proposals = [] if self.report.supported else \
                propose(self.report, self.history.current_proto())
        return self._proposals

    # ------------------------------------------------------------------ changes
    def preview(self, proposal: Proposal) -> Change:
        """The change a proposal would make (diff, verification), not kept."""
        return apply_recipe(self.history.current_proto(), proposal.recipe, proposal.params,
                            force=self.force, inputs=self.inputs)

    def apply(self, what: Union[Proposal, str], params: Optional[Dict[str, Any]] = None, *,
              recheck: bool = True) -> Change:
        """Apply a proposal (or recipe by name) to the current version; a kept change is the
        new version, and the parser is asked again unless `recheck=False`."""
        name, params = (what.recipe, what.params) if isinstance(what, Proposal) else (what, params)
        change = apply_in_history(self.history, name, params, force=self.force,
                                  inputs=self.inputs)
        if change.kept and recheck:
            self.check()
        return change

    def undo(self) -> str:
        return self.history.undo()

    def redo(self) -> str:
        return self.history.redo()

    def end_to_end(self, kept: Optional[List[Dict[str, Any]]] = None) -> Optional[Verification]:
        """Original vs current version (None when they are the same version); a single kept
        step straight from the original reuses that step's verification."""
        h = self.history
        if h.current == h.original:
            return None
        if kept and len(kept) == 1 and kept[0].get("verification") and len(h.lineage()) == 2:
            return Verification.from_dict(kept[0]["verification"])
        return verify_models(h.version_path(h.original), h.current_path(), self.inputs)

    # ------------------------------------------------------------------ the loop
    def auto_fix(self, *, max_steps: int = 20,
                 on_step: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Any = None) -> AutoFixResult:
        """Propose, apply (one at a time), re-check with the real parser; stop when supported,
        out of proposals, at `max_steps`, or when `cancel` (an Event) is set."""
        report = self.check()
        result = AutoFixResult(supported=report.supported, support_before=report)
        tried: set = set()
        # proposal key -> (number of the kept step that applied it, nodes failing before it)
        applied: Dict[str, Any] = {}
        said: set = set()  # (key, node) of the repeats reported

        def kept_count() -> int:
            return sum(1 for s in result.steps if s.get("kept"))

        def repeat(p: Proposal) -> bool:
            """The same recipe (same parameters) again for a node that failed when it ran, or
            right after it with no other change between: it did not remove the refusal."""
            if p.key not in applied:
                return False
            step, failing = applied[p.key]
            return p.node in failing or kept_count() == step
        for _ in range(max_steps):
            if report.supported:
                result.stop_reason = "supported"
                break
            if cancel is not None and cancel.is_set():
                result.stop_reason = "cancelled"
                break
            props = []
            for p in self.proposals:
                if not p.auto or (p.key, p.node) in said:
                    continue
                if repeat(p):  # it ran, and the parser still refuses: not new
                    said.add((p.key, p.node))
                    rep = self._repeat(p, applied[p.key][0], report)
                    result.repeats.append(rep)
                    if on_step:
                        on_step(rep)
                    continue
                if (p.key, p.node) not in tried:
                    props.append(p)
            if not props:
                result.stop_reason = "no more proposals" + (
                    "; " + "; ".join(r["why"] for r in result.repeats) if result.repeats
                    else "")
                break
            p = props[0]
            tried.add((p.key, p.node))
            failing = {u["node"] for u in brief(report)}
            try:
                change = self.apply(p)
            except WorkbenchError as e:
                step: Dict[str, Any] = {"proposal": p.to_dict(), "kept": False,
                                        "error": e.one_line()}
            else:
                step = {"proposal": p.to_dict(), **change.to_dict()}
                if change.kept:
                    applied[p.key] = (kept_count() + 1, failing)
                    report = self.report
                    step["supported_after"] = report.supported
                    step["unsupported_after"] = brief(report)
            result.steps.append(step)
            if on_step:
                on_step(step)
        else:
            result.stop_reason = "step limit reached"
        result.supported = report.supported
        result.support_after = report
        result.remaining = brief(report)
        result.version = self.history.current
        kept = [s for s in result.steps if s.get("kept")]
        result.verification = self.end_to_end(kept) if kept else None
        return result

    @staticmethod
    def _repeat(p: Proposal, step: int, report: SupportReport) -> Dict[str, Any]:
        """A proposal of a recipe this run already applied (kept change `step`), made again
        for a node the parser still refuses: not applied again; why it did not help."""
        left = [u for u in brief(report) if u["node"] == p.node] or brief(report)[:1]
        u = left[0] if left else {"node": p.node, "op": p.op, "reason": ""}
        what = f"{u['node'] or 'the graph'}" + (f" ({u['op']})" if u.get("op") else "")
        why = (f"{p.recipe} was applied at step {step} and the parser still refuses {what}"
               + (f": {u['reason']}" if u.get("reason") else "")
               + f"; applying it again would not help (what it says of the model now: "
               f"{p.reason})")
        return {"proposal": p.to_dict(), "kept": False, "repeat_of_step": step, "why": why}


def auto_fix(model: ModelLike, *, backend: str = "tensorrt-rtx", history: Optional[History] = None,
             check: Optional[Checker] = None, max_steps: int = 20, force: bool = False,
             on_step: Optional[Callable[[Dict[str, Any]], None]] = None, client: Any = None,
             inputs: Optional[Dict[str, Any]] = None) -> AutoFixResult:
    """`FixSession(model, ...).auto_fix()`: every kept step is a new version in the model's
    history."""
    session = FixSession(model, backend=backend, history=history, check=check, client=client,
                         inputs=inputs, force=force)
    return session.auto_fix(max_steps=max_steps, on_step=on_step)
