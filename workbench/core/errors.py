"""The two shared nouns for telling users things: `WorkbenchError` and `Finding`.

Every failure a user can cause (bad file, bad node, bad field) is raised as a WorkbenchError that
names *where* (file / node / field) and *what to do next*. The CLI prints `str(err)` on one line
and exits 2; widgets show it in their status area. Findings are the non-fatal equivalent: one
record per thing worth telling the user about a node or tensor. Stdlib only (the worker imports
nothing from here, but keep it cheap anyway). `Finding` lives in `workbench.core.findings` and is
loaded on first use: a CLI that only needs WorkbenchError (to start its TensorRT worker as early
as it can) does not pay for dataclasses.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional


class WorkbenchError(Exception):
    """An error the user can act on: what went wrong, where, and what to do next."""

    def __init__(
        self,
        message: str,
        *,
        file: Optional[str] = None,
        node: Optional[str] = None,
        field: Optional[str] = None,
        hint: Optional[str] = None,
        category: Optional[str] = None,
        next_steps: Optional[List[Any]] = None,
    ) -> None:
        self.message = message
        # whose fault (`workbench.core.blame.CATEGORIES`: structure, weights, inputs, machine, tool)
        self.category = category
        # what to run next: `workbench.core.findings.NextStep` records (rendered by the CLI as
        # commands, by the panels as buttons), never command text in `hint`
        self.next_steps = list(next_steps or [])
        self.file = None if file is None else str(file)
        self.node = node
        self.field = field
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.node:
            where.append(f"node '{self.node}'")
        if self.field:
            where.append(f"field '{self.field}'")
        text = (": ".join([", ".join(where), self.message]) if where else self.message)
        if self.hint:
            text += f" ({self.hint})"
        return " ".join(text.split())  # always a single line

    def to_dict(self) -> Dict[str, Any]:
        return {"error": self.message, "file": self.file, "node": self.node,
                "field": self.field, "hint": self.hint, "category": self.category,
                "next_steps": [s.to_dict() if hasattr(s, "to_dict") else dict(s)
                               for s in self.next_steps]}


def __getattr__(name: str) -> Any:
    """`Finding` and `SEVERITIES` from `workbench.core.findings`, imported on first use."""
    if name in ("Finding", "SEVERITIES", "NextStep", "step"):
        from workbench.core import findings

        return getattr(findings, name)
    raise AttributeError(f"module 'workbench.core.errors' has no attribute {name!r}")
