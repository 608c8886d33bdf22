"""`Finding`: one record per thing worth telling the user about a node or tensor (the non-fatal
counterpart of `workbench.errors.WorkbenchError`; also importable from there)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

SEVERITIES = ("error", "warning", "info")


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
    # whose fault, where known (`workbench.blame.CATEGORIES`): structure, weights, inputs,
    # machine, tool
    category: Optional[str] = None

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
