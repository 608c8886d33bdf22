"""Atomic file writes (temp file in the same folder + fsync + rename): a crash or a kill never
leaves a half-written model, engine or history behind, and never touches the original. And one
inter-process lock (`locked`) for the few short steps that must be serial between processes
sharing a workspace."""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

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


class CorruptLineWarning(UserWarning):
    """A JSON-lines log had a line that is not JSON (skipped, reading went on)."""


def read_jsonl(path: PathLike, *, objects_only: bool = False) -> list:
    """Read JSON lines, skipping a torn (incomplete) trailing line silently (a kill or a writer
    still at work) and any other undecodable line with a CorruptLineWarning naming it; with
    `objects_only`, a line that is JSON but not an object is skipped (and warned) too."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = len(lines) - 1  # the index of the text after the last newline ('' when complete)
    out = []
    for i, raw in enumerate(lines):
        raw = raw.strip()
        if not raw:
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            if i != torn:
                warnings.warn(f"{path}: line {i + 1} is not JSON; skipped", CorruptLineWarning,
                              stacklevel=2)
            continue
        if objects_only and not isinstance(rec, dict):
            warnings.warn(f"{path}: line {i + 1} is a {type(rec).__name__}, not an object; "
                          "skipped", CorruptLineWarning, stacklevel=2)
            continue
        out.append(rec)
    return out


# ---------------------------------------------------------------------- inter-process lock
_guard = threading.Lock()
_held: Dict[str, List[Any]] = {}  # lock path -> [RLock, fd or None, depth]


def _forget_in_child() -> None:
    """A forked child holds none of its parent's locks (its copy of a locked fd must never
    unlock the parent's flock, and the parent's thread locks mean nothing there)."""
    global _guard, _held
    _guard, _held = threading.Lock(), {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _lock_fd(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:  # pragma: no cover - Windows: msvcrt locks one byte, retrying for up to ~10 s
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)


def _unlock_fd(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:  # pragma: no cover
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


@contextlib.contextmanager
def locked(path: PathLike) -> Iterator[None]:
    """Hold an exclusive lock on the lock file `path` (created if missing) across processes
    (flock: the kernel releases it when a process dies, so a crash never leaves it held) and
    threads. Re-entrant within a thread, so a locked step may call another. Keep what runs
    inside short (reads, appends, renames); never parse or build under it."""
    key = os.path.abspath(os.fspath(path))
    with _guard:
        entry = _held.setdefault(key, [threading.RLock(), None, 0])
    with entry[0]:
        if entry[2] == 0:
            os.makedirs(os.path.dirname(key), exist_ok=True)
            fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                _lock_fd(fd)
            except BaseException:
                os.close(fd)
                raise
            entry[1] = fd
        entry[2] += 1
        try:
            yield
        finally:
            entry[2] -= 1
            if entry[2] == 0:
                fd, entry[1] = entry[1], None
                try:
                    _unlock_fd(fd)
                finally:
                    os.close(fd)


class LockWaitStopped(Exception):
    """`single_flight` gave up waiting: `reason` is "cancelled" or "timeout"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _try_lock_fd(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:  # pragma: no cover - Windows
            import msvcrt

            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return True
    except OSError:
        return False


@contextlib.contextmanager
def single_flight(path: PathLike, *, cancel: Any = None, deadline: Optional[float] = None,
                  on_wait: Optional[Any] = None, poll: float = 0.2) -> Iterator[bool]:
    """Hold the lock file `path` for a long step (a build) that must run once, not twice at
    the same time: a second holder waits, polling, until the first is done (or dies: the
    kernel drops a dead process's flock), then runs, typically to find the first one's result.
    Unlike `locked` it may be held for minutes and is not re-entrant: each entry opens its own
    file description, so two threads of one process exclude each other too. `on_wait()` is
    called once when the lock is taken by someone else; waiting stops with LockWaitStopped
    when `cancel.is_set()` or `time.monotonic()` passes `deadline`. Yields whether it waited."""
    import time

    key = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(key), exist_ok=True)
    fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o666)
    waited = False
    try:
        while not _try_lock_fd(fd):
            if not waited and on_wait is not None:
                on_wait()
            waited = True
            if cancel is not None and cancel.is_set():
                raise LockWaitStopped("cancelled")
            if deadline is not None and time.monotonic() >= deadline:
                raise LockWaitStopped("timeout")
            time.sleep(poll)
        try:
            yield waited
        finally:
            _unlock_fd(fd)
    finally:
        os.close(fd)


def fixed_name(path: str) -> str:
    """Where a fix of file `path` goes by default: `<name>.fixed.onnx` beside it
    (`<name>.fixed2.onnx` for a file already named so, and so on)."""
    src = Path(path)
    m = re.fullmatch(r"(.*)\.fixed(\d*)", src.stem)
    stem = f"{m.group(1)}.fixed{int(m.group(2) or 1) + 1}" if m else f"{src.stem}.fixed"
    return str(src.with_name(stem + ".onnx"))
