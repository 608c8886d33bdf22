"""Reading the JSON files TensorRT and trtexec write, with errors that name the file and field."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Union

from workbench.core.errors import WorkbenchError

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
    except RecursionError:  # (json's C decoder recurses per nesting level)
        raise WorkbenchError("JSON nests too deeply to read (arrays/objects inside each other "
                             "beyond Python's recursion limit)", file=str(p),
                             hint=f"the file is corrupt or not a {what}; re-export it") from None
    except json.JSONDecodeError as e:
        truncated = e.pos >= len(text.rstrip()) - 1
        kind = "truncated JSON (ends early)" if truncated else "not valid JSON"
        raise WorkbenchError(f"{kind} at line {e.lineno} column {e.colno}: {e.msg}", file=str(p),
                             field=json_path_at(text, e.pos) or None,
                             hint=f"re-export the {what}; the file is incomplete or not JSON") from None


def json_path_at(text: str, pos: int) -> str:
    """The JSON path being read at character `pos` (e.g. 'Layers[153].Outputs[0].Name'), so
    that a truncated or broken file's error names the field where it broke."""
    stack: list = []  # entries: ["obj", key or None, expecting_key] or ["arr", index]
    i, n = 0, min(pos, len(text))
    last_str = None
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            last_str = text[i + 1:j]
            if stack and stack[-1][0] == "obj" and stack[-1][2]:
                stack[-1][1] = last_str
            i = j + 1
            continue
        if c == "{":
            stack.append(["obj", None, True])
        elif c == "[":
            stack.append(["arr", 0])
        elif c in "}]":
            if stack:
                stack.pop()
        elif c == ":":
            if stack and stack[-1][0] == "obj":
                stack[-1][2] = False
        elif c == ",":
            if stack and stack[-1][0] == "arr":
                stack[-1][1] += 1
            elif stack:
                stack[-1][2] = True
        i += 1
    out = ""
    for fr in stack:
        if fr[0] == "arr":
            out += f"[{fr[1]}]"
        elif fr[1]:
            out += ("." if out else "") + str(fr[1])
    return out
