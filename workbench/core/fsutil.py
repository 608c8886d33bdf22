"""Atomic file writes (temp file in the same folder + fsync + rename): a crash or a kill never
leaves a half-written model, engine or history behind, and never touches the original. And one
inter-process lock (`locked`) for the few short steps that must be serial between processes
sharing a workspace."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
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


def atomic_copy(src: PathLike, dst: PathLike) -> Path:
    """Copy the file `src` to `dst` via a temp file beside `dst` + rename: a reader of `dst`
    sees the old file or the whole new one (an engine, a model), never a part."""
    dst = Path(dst)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dst


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


_flight_fds: set = set()  # fds single_flight holds in this process


def _forget_in_child() -> None:
    """A forked child holds none of its parent's locks: its copies of the locked fds are
    closed (closing a copy never unlocks the parent's flock, which is the parent's until its
    own fd closes; but a copy kept open would hold the lock after the parent died, for as long
    as the child lives), and the parent's thread locks mean nothing there."""
    global _guard, _held, _flight_fds
    for fd in [e[1] for e in _held.values() if e[1] is not None] + list(_flight_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _guard, _held, _flight_fds = threading.Lock(), {}, set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


WAIT_NOTICE_S = 2.0  # a wait for a lock longer than this says what it waits for, and again
WAIT_REPEAT_S = 30.0  # every this many seconds


def _say(line: str) -> None:
    """Where a lock wait is told (stderr: the CLI's and the notebook's)."""
    import sys

    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _mark_holder(fd: int) -> None:
    """Write who holds the lock into the lock file: pid, since (epoch s) and the command, so
    a waiter can say whom it waits for (and notice a holder that is gone)."""
    import sys
    import time

    argv = list(sys.argv[:4]) or [""]
    if argv[0] in ("", "-c", "-m"):  # python -c / -m, a notebook's kernel: name the python
        argv.insert(0, sys.executable or "python")
    what = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv[:4]))
    data = f"{os.getpid()}\t{time.time():.0f}\t{what[:200]}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:  # (a read-only lock file: the lock still works, unnamed)
        pass


def lock_holder(path: PathLike) -> Optional[Dict[str, Any]]:
    """{pid, since, command, alive} of the process that last took the lock file `path`,
    None when it names none."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            pid_s, since_s, what = (f.readline().rstrip("\n").split("\t") + ["", "", ""])[:3]
        pid, since = int(pid_s), float(since_s)
    except (OSError, ValueError):
        return None
    return {"pid": pid, "since": since, "command": what, "alive": _alive(pid)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # (another user's process: it exists)
        return True
    try:  # a zombie holds no files: it is gone for a lock's purposes
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _openers(path: str) -> List[int]:
    """Live processes other than this one with `path` open (Linux /proc; [] elsewhere)."""
    out = []
    me = os.getpid()
    try:
        target = os.stat(path)
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        if pid == me:
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
                    out.append(pid)
                    break
        except OSError:
            continue
    return out


def _wait_lock(fd: int, key: str, *, cancel: Any = None, deadline: Optional[float] = None,
               on_wait: Optional[Any] = None, poll: float = 0.05) -> bool:
    """Take the flock on `fd` (the lock file `key`), waiting while another process holds it;
    no wait is silent: after WAIT_NOTICE_S it says whom it waits for and since when (then
    every WAIT_REPEAT_S), and a holder that has died while a process it forked keeps the
    file open is an error naming that process (the kernel would never release it). Returns
    whether it waited. `cancel` / `deadline`: LockWaitStopped."""
    import time

    if _try_lock_fd(fd):
        return False
    if on_wait is not None:
        on_wait()
    t0 = time.monotonic()
    started = time.time()
    told = None
    while not _try_lock_fd(fd):
        if cancel is not None and cancel.is_set():
            raise LockWaitStopped("cancelled")
        if deadline is not None and time.monotonic() >= deadline:
            raise LockWaitStopped("timeout")
        now = time.monotonic()
        if now - t0 >= WAIT_NOTICE_S and (told is None or now - told >= WAIT_REPEAT_S):
            told = now
            holder = lock_holder(key)
            if holder is not None and not holder["alive"]:
                others = _openers(key)
                if others and _try_lock_fd(fd):  # (released meanwhile)
                    break
                if others:
                    from workbench.core.errors import WorkbenchError

                    raise WorkbenchError(
                        f"the lock is held by pid {others[0]}, which kept it open after pid "
                        f"{holder['pid']} ({holder['command']}) that took it exited",
                        file=key, hint=f"end pid {others[0]} (kill {others[0]}) or wait for "
                        "it to exit; then run again")
            since = time.strftime("%H:%M:%S", time.localtime(started))
            who = (f"pid {holder['pid']} ({holder['command']}), holding it since "
                   f"{time.strftime('%H:%M:%S', time.localtime(holder['since']))}"
                   if holder is not None else "another process")
            _say(f"workbench: waiting since {since} for the lock {key}, held by {who}")
        time.sleep(poll)
    return True


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
                if fcntl is not None:
                    _wait_lock(fd, key)
                    _mark_holder(fd)
                else:  # pragma: no cover - Windows: msvcrt's own bounded wait
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
    when `cancel.is_set()` or `time.monotonic()` passes `deadline`. Yields whether it waited.
    A long wait says whom it waits for (see `_wait_lock`)."""
    key = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(key), exist_ok=True)
    fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o666)
    _flight_fds.add(fd)
    try:
        waited = _wait_lock(fd, key, cancel=cancel, deadline=deadline, on_wait=on_wait,
                            poll=poll)
        _mark_holder(fd)
        try:
            yield waited
        finally:
            _unlock_fd(fd)
    finally:
        _flight_fds.discard(fd)
        os.close(fd)


def fixed_name(path: str) -> str:
    """Where a fix of file `path` goes by default (`workbench.core.findings.fixed_name`, where next
    steps name it; loaded on first use)."""
    from workbench.core.findings import fixed_name as named

    return named(path)


class Subfolder:
    """A folder below the owner's `dir`, read as an attribute (`engines_dir =
    Subfolder("engines")`): the folder names of a layout stated once, beside each other."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: Any = None) -> Path:
        return Path(obj.dir) / self.name
