"""How a build fails: BuildFailed (TensorRT refused: the node/layer it names, the log, the
findings), BuildCancelled and BuildTimeout (stopped). Kept apart from the orchestration so
every build stage raises the same classes."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from workbench.core.errors import Finding, WorkbenchError


class BuildFailed(WorkbenchError):
    """TensorRT could not parse or build the model (CLI exit 1); names the node/layer."""

    def __init__(self, message: str, *, node: Optional[str] = None, op: Optional[str] = None,
                 hint: Optional[str] = None, code: str = "build-failed",
                 log: Optional[List[Dict[str, str]]] = None,
                 findings: Optional[List[Finding]] = None, file: Optional[str] = None,
                 next_steps: Optional[List[Any]] = None) -> None:
        super().__init__(message, node=node, hint=hint, file=file, next_steps=next_steps)
        self.op = op
        self.code = code
        self.log = log or []
        self.findings = findings or []


class BuildCancelled(BuildFailed):
    pass


class BuildTimeout(BuildFailed):
    pass
