"""Which recipe fixes which finding: route a support report's problems to the recipes that
declare their codes, and add the recipes' next steps to the report's hints.

    proposals = propose(report, model)     # report: workbench.support.checker.SupportReport
    report = advise(report)                # hints name `workbench fix ... --recipe ...`

Routing uses only the Finding's code, node and op (and the model): each recipe says what it
fixes (`Recipe.fixes`/`ops`) and proposes itself (`Recipe.propose`). Recipes are asked in
priority order; the first one with an applicable (auto) proposal ends the search for that
finding, manual proposals (plugins, set shapes first) are listed along the way.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.core.findings import NextStep
from workbench.core.model import ModelLike, as_model
from workbench.support.checker import SupportReport
from workbench.surgery.recipes import Proposal, ProposeContext, all_recipes

__all__ = ["propose", "advise"]


def _report(report: Any) -> SupportReport:
    if not isinstance(report, SupportReport):
        raise WorkbenchError(f"propose needs a SupportReport, not a {type(report).__name__}",
                             hint="use workbench.support.checker.check(...), or "
                             "SupportReport.from_dict(d) for a JSON report")
    return report


def propose(report: SupportReport, model: ModelLike) -> List[Proposal]:
    """Recipes for each problem of a support report, most specific first; only proposals
    whose precondition applies are `auto` (manual ones, like plugins, have auto=False)."""
    report = _report(report)
    ctx = ProposeContext(as_model(model).with_weights())
    recipes = all_recipes()
    out: List[Proposal] = []
    seen = set()
    for finding in report.problems:
        for recipe in recipes:
            if not recipe.can_fix(finding, ctx):
                continue
            props = recipe.propose(finding, ctx)
            for p in props:
                if (p.key, p.node) not in seen:
                    seen.add((p.key, p.node))
                    out.append(p)
            if any(p.auto for p in props):
                break
    return out


def advise(report: SupportReport, model: Optional[Any] = None) -> SupportReport:
    """Put the recipes' next steps first in the hints of the problems they can fix (e.g.
    "`workbench fix M --recipe decompose:node=N` replaces it with standard ops; or ...").
    Changes `report` in place and returns it; applying it twice adds nothing."""
    report = _report(report)
    source = model if model is not None else report.model
    if not report.unsupported or source is None or (
            model is None and not os.path.isfile(str(source))):
        return report  # an in-memory model: no file to point a command at
    ctx = ProposeContext(as_model(source).proto)  # op types and names: no weights needed
    path = str(report.model) if report.model and os.path.isfile(str(report.model)) else None
    recipes = all_recipes()
    problems = report.problems
    errors = [f for f in report.findings if f.severity == "error"]
    for entry, finding in zip(report.unsupported, problems):
        before = entry.get("hint")
        hint, steps = _advised(finding, ctx, recipes, path, before)
        known = [NextStep.from_dict(s) for s in entry.get("next_steps") or []]
        steps = [s for s in steps if s not in known]
        if hint == before and not steps:
            continue
        entry["hint"] = hint
        entry["next_steps"] = [s.to_dict() for s in steps + known]
        for f in errors:  # the Finding made from this entry carries the same hint and steps
            if f.code == finding.code and f.nodes == finding.nodes and f.hint == before:
                f.hint = entry["hint"]
                f.next_steps = steps + [s for s in f.next_steps if s not in steps]
                break
    for f in report.findings:  # warnings (static rules past the parser's first error) too
        if f.severity != "error" and f.nodes and f.hint:
            f.hint = _advised(f, ctx, recipes, path, f.hint, steps=False)[0]
    return report


def _advised(finding: Any, ctx: ProposeContext, recipes: List[Any], path: Optional[str],
             hint: Optional[str], steps: bool = True) -> Tuple[Optional[str], List[NextStep]]:
    """(`hint` with the recipes' words first and the words of rewrites that do not apply to
    the finding's node replaced by why not, the recipes' next steps as records with {model}
    as `path` where the model is a file). Unless `steps` (a warning keeps its own hint), no
    recipe step is added."""
    fixers = [r for r in recipes if r.can_fix(finding, ctx)]
    said = [s for s in (r.next_step(finding, ctx) for r in fixers) if s] if steps else []
    records = [s.bound(model=path) for s in said if isinstance(s, NextStep)]
    nexts = [s for s in said if isinstance(s, str)]  # (words: a step no command can take)
    before = hint
    why_not: List[str] = []
    for words, why in filter(None, (r.retracts(finding, ctx) for r in fixers)):
        if hint and words in hint:  # a rewrite that fails when run is no next step
            hint = _without(hint, words)
            if why:
                why_not.append(why)
    new = [s for s in nexts if not hint or s not in hint]
    if not new and not why_not and hint == before:
        return before, records
    text = "; or ".join(new + ([hint] if hint else []))
    return "; ".join(([text] if text else []) + why_not) or None, records


def _without(hint: str, words: str) -> str:
    """`hint` without `words` and the '; or ' that joined them to the rest."""
    for joined in (f"; or {words}", f"{words}; or ", f"{words}, or ", f"or {words}", words):
        if joined in hint:
            return hint.replace(joined, "", 1).strip(" ;")
    return hint
