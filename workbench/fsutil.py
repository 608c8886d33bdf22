"""Atomic file writes (temp file in the same folder + fsync + rename): a crash or a kill never
leaves a half-written model, engine or history behind, and never touches the original."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write `data` to `path` via a temp file + rename, with ordinary (umask) permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: PathLike, obj: Any, *, indent: Optional[int] = 2) -> Path:
    """JSON, indented for people by default; indent=None writes one compact line with json's
    C encoder (the indented form takes its pure-Python path: ~10x slower on a build's meta)."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=True, default=str)
                             + "\n")


def append_jsonl(path: PathLike, record: Any) -> None:
    """Append one JSON line and fsync. A torn last line (kill mid-write) is skipped by readers."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True, default=str) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: PathLike) -> list:
    """Read JSON lines, skipping a torn (incomplete) trailing line."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
