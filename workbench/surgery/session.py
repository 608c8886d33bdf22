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

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from workbench.equivalence import Verification
from workbench.errors import WorkbenchError
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

    def to_dict(self) -> Dict[str, Any]:
        return {"supported": self.supported, "steps": self.steps,
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


class FixSession:
    """Fix one model (path, Model, or an existing History) against one backend's parser.

    Each FixSession is one history session (`history.session`: id, start time, pid); it
    continues from where the model's log left off, or from the original with
    `start="original"` (what `workbench fix` does)."""

    def __init__(self, model: Any = None, *, backend: str = "tensorrt-rtx",
                 history: Optional[History] = None, check: Optional[Checker] = None,
                 client: Any = None, inputs: Optional[Dict[str, Any]] = None,
                 force: bool = False, start: str = "latest") -> None:
        self.history = history if history is not None else History(model, start=start)
        self.backend = backend
        self.inputs = inputs
        self.force = force
        self._check = check or default_checker(backend, client)
        self.report: Optional[SupportReport] = None
        self._report_version: Optional[str] = None
        self._proposals: Optional[List[Proposal]] = None

    # ------------------------------------------------------------------ check and propose
    def check(self) -> SupportReport:
        """Ask the parser about the current version; hints name the recipes that fix it."""
        vid = self.history.current
        rep = self._check(self.history.current_path())
        if not isinstance(rep, SupportReport):
            raise WorkbenchError(f"the checker returned a {type(rep).__name__}, not a "
                                 "SupportReport", field="check",
                                 hint="pass a function that returns workbench.support.check(...)")
        self.report, self._report_version, self._proposals = advise(rep), vid, None
        return rep

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
        for _ in range(max_steps):
            if report.supported:
                result.stop_reason = "supported"
                break
            if cancel is not None and cancel.is_set():
                result.stop_reason = "cancelled"
                break
            props = [p for p in self.proposals if p.auto and (p.key, p.node) not in tried]
            if not props:
                result.stop_reason = "no more proposals"
                break
            p = props[0]
            tried.add((p.key, p.node))
            try:
                change = self.apply(p)
            except WorkbenchError as e:
                step: Dict[str, Any] = {"proposal": p.to_dict(), "kept": False,
                                        "error": e.one_line()}
            else:
                step = {"proposal": p.to_dict(), **change.to_dict()}
                if change.kept:
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


def auto_fix(model: Any, *, backend: str = "tensorrt-rtx", history: Optional[History] = None,
             check: Optional[Checker] = None, max_steps: int = 20, force: bool = False,
             on_step: Optional[Callable[[Dict[str, Any]], None]] = None, client: Any = None,
             inputs: Optional[Dict[str, Any]] = None) -> AutoFixResult:
    """`FixSession(model, ...).auto_fix()`: every kept step is a new version in the model's
    history."""
    session = FixSession(model, backend=backend, history=history, check=check, client=client,
                         inputs=inputs, force=force)
    return session.auto_fix(max_steps=max_steps, on_step=on_step)
