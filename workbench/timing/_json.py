"""Reading the JSON files TensorRT and trtexec write, with errors that name the file and field."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

from workbench.errors import WorkbenchError

PathLike = Union[str, "os.PathLike[str]"]


def read_json(path: PathLike, what: str) -> Any:
    """Parse `path` (strict=False: TensorRT writes raw \\x1e/\\x1f inside Metadata strings)."""
    p = Path(path)
    if not p.exists():
        raise WorkbenchError("file not found", file=str(p), hint=f"pass the {what} JSON file")
    if p.is_dir():
        raise WorkbenchError("is a folder, not a JSON file", file=str(p))
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise WorkbenchError(f"cannot read: {e.strerror}", file=str(p)) from None
    if not raw.strip():
        raise WorkbenchError("file is empty", file=str(p),
                             hint=f"re-export the {what}; the write may have failed")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError as e:
        truncated = e.pos >= len(text.rstrip()) - 1
        kind = "truncated JSON (ends early)" if truncated else "not valid JSON"
        raise WorkbenchError(f"{kind} at line {e.lineno} column {e.colno}: {e.msg}", file=str(p),
                             hint=f"re-export the {what}; the file is incomplete or not JSON") from None
