"""Content hashes of files, memoised by path, size and mtime (in memory and in the workbench
home's `hash-memo.json`, shared by processes), so a multi-GB model or calibration set is hashed
once. A memo entry of a model also records its external-data files' stats: any of them
changed, and the model is hashed again."""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from workbench.core.errors import WorkbenchError
from workbench.core.fsutil import atomic_write_json

_memo_lock = threading.Lock()
_hash_memo: Dict[Tuple[str, int, int], Dict[str, Any]] = {}


def _stat_key(p: Path) -> Tuple[str, int, int]:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def _memo_file() -> Path:
    from workbench.core.workspace import workbench_home

    return workbench_home() / "hash-memo.json"


def _memo_lock_path() -> Path:
    return _memo_file().with_name(".hash-memo.lock")


def memo_lookup(p: Path) -> Optional[str]:
    """The memoised hash of `p` when neither it nor its recorded external files changed."""
    key = _stat_key(p)
    with _memo_lock:
        rec = _hash_memo.get(key)
    if rec is None:
        try:
            disk = json.loads(_memo_file().read_text())
            rec = disk.get("|".join(map(str, key))) if isinstance(disk, dict) else None
        except (OSError, ValueError, RecursionError):
            rec = None
    # a memo that is not what we write (edited, corrupt, hostile) is no memo: hash again
    if not (isinstance(rec, dict) and isinstance(rec.get("hash"), str)
            and isinstance(rec.get("external", []), list)):
        return None
    for ext in rec.get("external", []):
        try:
            if list(_stat_key(Path(ext[0]))) != list(ext):
                return None
        except (OSError, TypeError, ValueError, IndexError, KeyError):
            return None
    with _memo_lock:
        _hash_memo[key] = rec
    return rec["hash"]


def memo_store(p: Path, h: str, external: Sequence[Path]) -> None:
    """Record `h` as the hash of `p` (and of the external files it was computed over)."""
    from workbench.core.fsutil import locked

    key = _stat_key(p)
    rec = {"hash": h, "external": [list(_stat_key(Path(e))) for e in external]}
    with _memo_lock:
        _hash_memo[key] = rec
        try:
            f = _memo_file()
            with locked(_memo_lock_path()):  # processes sharing the home merge, not overwrite
                try:
                    disk = json.loads(f.read_text())
                except (OSError, ValueError, RecursionError):
                    disk = {}
                if not isinstance(disk, dict):
                    disk = {}
                disk["|".join(map(str, key))] = rec
                if len(disk) > 2000:
                    disk = dict(list(disk.items())[-1000:])
                atomic_write_json(f, disk)
        except OSError:
            pass


def hash_file(h: "hashlib._Hash", path: Path) -> None:
    """Feed the file's bytes to `h`, 1 MiB at a time."""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)


def hash_if_self_contained(path: Path) -> Optional[str]:
    """sha256 of the file when it cannot hold external-data references (the protobuf key
    'location' never occurs in it), else None. The same value as `Model.content_hash`, without
    importing onnx: the CLI's cold start stays short."""
    if path.stat().st_size == 0:
        raise WorkbenchError("file is empty (0 bytes)", file=str(path),
                             hint="re-export the model; the write may have failed")
    h = hashlib.sha256()
    tail = b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            if b"location" in tail + chunk:
                return None
            tail = chunk[-8:]
    return h.hexdigest()
