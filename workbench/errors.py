"""The two shared nouns for telling users things: `WorkbenchError` and `Finding`.

Every failure a user can cause (bad file, bad node, bad field) is raised as a WorkbenchError that
names *where* (file / node / field) and *what to do next*. The CLI prints `str(err)` on one line
and exits 2; widgets show it in their status area. Findings are the non-fatal equivalent: one
record per thing worth telling the user about a node or tensor. Stdlib only (the worker imports
nothing from here, but keep it cheap anyway).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

SEVERITIES = ("error", "warning", "info")


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
    ) -> None:
        self.message = message
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
                "field": self.field, "hint": self.hint}


@dataclass
class Finding:
    """Anything worth telling the user about a node or tensor.

    severity: "error" | "warning" | "info"; code: a stable machine-readable id such as
    "unsupported-op" or "fp16-overflow"; source: who said it ("static", "parser", "build-log", ...).
    """

    severity: str
    code: str
    message: str
    nodes: List[str] = field(default_factory=list)
    tensors: List[str] = field(default_factory=list)
    hint: Optional[str] = None
    source: str = ""
    op: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Finding":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)

    def __str__(self) -> str:
        where = f" [{', '.join(self.nodes)}]" if self.nodes else ""
        nxt = f" -> {self.hint}" if self.hint else ""
        return f"{self.severity.upper()} {self.code}{where}: {self.message}{nxt}"
