"""Supervising a child process: start it in its own session, keep its stderr tail, watch its
time limit, resident memory and the caller's Cancel, kill its process group, name how it ended.

The TensorRT worker's client (`workbench.worker.client`), the onnxruntime child
(`workbench.runtime.ortchild`) and the CLI's forked runs (`workbench.cli.supervise`) each talk to their
child their own way (JSON lines with one or many requests in flight, or only a wait status);
what watching a child means is the same for all three and lives here: `Watch` says when a child
must be stopped (`Stop`: past its time limit, over its memory limit, or cancelled and not
stopped within its grace), `kill_group` stops it with whatever it started, `signal_name` names
a death, `die_with_parent` ties a forked child's life to its parent. `run` puts them together
for a plain command. Stdlib only, and light (subprocess is imported when a child starts): the
CLI imports this before it forks.

    out = run([sys.executable, "-c", "import time; time.sleep(9)"], timeout=1)
    out.describe()  # 'exceeded its time limit of 1 s and was stopped'
"""
from __future__ import annotations

import collections
import os
import signal
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Deque, Dict, List, NamedTuple, Optional,
                    Sequence, Tuple)

if TYPE_CHECKING:  # pragma: no cover
    import queue
    import subprocess

PIPE, DEVNULL = -1, -3  # subprocess's values (it is imported only when a child starts)

# deaths that are a crash of the child itself (SIGKILL: the kernel's OOM killer, mostly)
CRASH_SIGNALS = frozenset(getattr(signal, n) for n in (
    "SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE", "SIGKILL") if hasattr(signal, n))


def signal_name(rc: int) -> str:
    """How a child with return code `rc` ended: 'SIGSEGV' (killed by it), 'exit status 3'."""
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def rss(pid: int) -> int:
    """Resident bytes of `pid` (0 when unknown: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def default_max_rss() -> int:
    """The default memory limit of a child: 3/4 of physical memory."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 << 30


def mib(n: float) -> str:
    """Bytes as the limit messages write them: '256 MiB'."""
    return f"{n / 2**20:.0f} MiB"


def child_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This process's environment with `extra` over it, and unbuffered Python output (a
    child's last lines reach its pipe before it dies)."""
    env = dict(os.environ)
    if extra:
        env.update(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def spawn(argv: Sequence[str], env: Dict[str, str], *, stdin: int = PIPE,
          stdout: int = PIPE) -> "subprocess.Popen[str]":
    """Start `argv` in its own session (so `kill_group` also ends what it starts) with text
    pipes; stderr is always a pipe (for `StderrTail`). Raises OSError when it cannot start."""
    import subprocess

    return subprocess.Popen(
        list(argv), stdin=stdin, stdout=stdout, stderr=PIPE, env=env,
        start_new_session=True, text=True, encoding="utf-8", errors="replace", bufsize=1)


def kill_group(proc: "subprocess.Popen | object", wait: bool = True) -> None:
    """SIGKILL the process group of `proc` (a Popen, or anything with pid/poll/kill/wait), or
    the process alone when it has no group of its own; with `wait`, reap it."""
    if proc.poll() is None:  # type: ignore[union-attr]
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        except (ProcessLookupError, PermissionError):
            proc.kill()  # type: ignore[union-attr]
    if wait:
        proc.wait(timeout=10)  # type: ignore[union-attr]


def die_with_parent(parent: int, sig: int = int(signal.SIGTERM)) -> None:
    """In a forked child: get `sig` when the parent dies (killed with SIGKILL, say); exit at
    once when it died already, before this took effect."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        pass
    if os.getppid() != parent:
        os._exit(128 + int(sig))


class StderrTail:
    """The last `lines` lines a child wrote to stderr (and whatever else is appended: stray
    stdout lines), read by a daemon thread."""

    def __init__(self, lines: int = 40) -> None:
        self._lines: Deque[str] = collections.deque(maxlen=lines)

    def follow(self, proc: "subprocess.Popen[str]") -> None:
        """Read `proc`'s stderr into the tail until it closes."""
        def _read() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self._lines.append(line.rstrip("\n"))
        threading.Thread(target=_read, daemon=True).start()

    def append(self, line: str) -> None:
        self._lines.append(line)

    def clear(self) -> None:
        self._lines.clear()

    def text(self) -> str:
        return "\n".join(self._lines)

    def last(self, n: int) -> List[str]:
        """The last `n` non-blank lines."""
        return [ln for ln in self._lines if ln.strip()][-n:]


class ChildHandle:
    """The base of a long-lived child's owner (the worker client, the onnxruntime child):
    `_proc`, its process (None before the first start and after a stop), and `_stderr`, the
    tail of what it wrote."""

    def __init__(self, env: Optional[Dict[str, str]] = None, stderr_lines: int = 40) -> None:
        import itertools
        import queue

        self.env = env  # entries over this process's environment (`child_env`)
        self._proc: Optional["subprocess.Popen[str]"] = None
        self._events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()  # its messages
        self._stderr = StderrTail(stderr_lines)
        self._ids = itertools.count(1)  # request ids

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self) -> str:
        """The child's last stderr lines (and stray stdout lines), one string."""
        return self._stderr.text()


class Stop(NamedTuple):
    """Why a child was stopped: `kind` is "time", "memory" or "cancelled"; `limit` the time
    limit or the grace (seconds) or the memory limit (bytes); `rss` the bytes it held."""
    kind: str
    limit: float
    rss: int = 0

    def limit_text(self) -> str:
        """'time limit of 0.5 s', 'memory limit of 256 MiB', 'grace of 5 s'."""
        if self.kind == "time":
            return f"time limit of {self.limit:g} s"
        if self.kind == "memory":
            return f"memory limit of {mib(self.limit)}"
        return f"grace of {self.limit:g} s"

    def describe(self) -> str:
        """What happened, after the child's name: 'exceeded its time limit of 1 s and was
        stopped', 'used 300 MiB, over its memory limit of 100 MiB, and was stopped'."""
        if self.kind == "time":
            return f"exceeded its {self.limit_text()} and was stopped"
        if self.kind == "memory":
            return f"used {mib(self.rss)}, over its {self.limit_text()}, and was stopped"
        return "was cancelled and stopped"


class Watch:
    """The limits of one child's run, checked by its waiter on each wake-up (`check`): a
    deadline (`timeout` seconds from now, or `deadline` on the monotonic clock), a memory limit
    (`max_rss` bytes of resident memory of `pid`) and a Cancel (`cancel` set: the waiter asks
    the child to stop once, `cancel_requested`, and the child is stopped `grace` s later)."""

    def __init__(self, pid: int, *, timeout: Optional[float] = None,
                 deadline: Optional[float] = None, max_rss: Optional[int] = None,
                 cancel: Optional[threading.Event] = None, grace: float = 0.0) -> None:
        self.pid = pid
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else (
            time.monotonic() + timeout if timeout else None)
        self.max_rss = max_rss
        self.cancel = cancel
        self.grace = grace
        self.cancelled_at: Optional[float] = None
        self._asked = False

    def check(self) -> Optional[Stop]:
        """The reason to stop the child now, else None (the time limit first, then an
        expired Cancel grace, then memory)."""
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return Stop("time", self.timeout or 0.0)
        if self.cancelled_at is not None and now >= self.cancelled_at + self.grace:
            return Stop("cancelled", self.grace)
        if self.cancel is not None and self.cancel.is_set() and self.cancelled_at is None:
            self.cancelled_at = now
        if self.max_rss:
            held = rss(self.pid)
            if held > self.max_rss:
                return Stop("memory", self.max_rss, held)
        return None

    def cancel_requested(self) -> bool:
        """True once, after `check` saw the Cancel: the moment to ask the child to stop."""
        if self.cancelled_at is None or self._asked:
            return False
        self._asked = True
        return True

    def wake_by(self, step: float) -> float:
        """When the waiter must look again at the latest: `step` s from now, or sooner at the
        deadline or the end of the Cancel grace."""
        at = time.monotonic() + step
        if self.deadline is not None:
            at = min(at, self.deadline)
        if self.cancelled_at is not None:
            at = min(at, self.cancelled_at + self.grace)
        return at


def open_pidfd(pid: int) -> Optional[int]:
    """A pidfd of child `pid` (readable when it ends; signals through it never reach a reused
    pid), or None where there is none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def send_signal(pid: int, sig: int, fd: Optional[int] = None) -> None:
    """Send `sig` to `pid` (through its pidfd when given); a child already gone is fine."""
    try:
        if fd is not None and hasattr(signal, "pidfd_send_signal"):
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, OSError):
        pass


def wait_pid(pid: int, watch: Watch, *, stop: Callable[[], None],
             ask: Optional[Callable[[], None]] = None, fd: Optional[int] = None,
             poll_s: float = 0.05) -> Tuple[int, Optional[Stop]]:
    """Wait for child `pid` of this process to end: (its wait status, the Stop it was stopped
    for, or None). `stop` kills it when `watch` says so (once; the wait goes on until it is
    gone); `ask` is called once on Cancel (a polite stop). Wakes at once when it ends (`fd`,
    its pidfd), else checks every `poll_s`."""
    import select

    stopped: Optional[Stop] = None
    while True:
        if fd is not None:
            select.select([fd], [], [], max(0.0, min(poll_s, watch.wake_by(poll_s)
                                                     - time.monotonic())))
        else:
            time.sleep(0.005)
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return status, stopped
        if stopped is None:
            stopped = watch.check()
            if stopped is not None:
                stop()
            elif ask is not None and watch.cancel_requested():
                ask()


class Outcome(NamedTuple):
    """How a supervised command ended: its return code (-N: killed by signal N), the Stop it
    was stopped for (None: it ended by itself) and its last stderr lines."""
    returncode: int
    stop: Optional[Stop]
    log_tail: str = ""

    @property
    def crashed(self) -> bool:
        """Killed by a crash signal that the supervisor did not send."""
        return self.stop is None and -self.returncode in CRASH_SIGNALS

    def describe(self) -> str:
        """One phrase after the child's name: 'crashed (SIGSEGV)', 'ended with exit status
        0', or the Stop's words."""
        if self.stop is not None:
            return self.stop.describe()
        if self.returncode == -int(signal.SIGKILL):
            return "was killed (SIGKILL: the kernel's OOM killer, or another process)"
        if self.crashed:
            return f"crashed ({signal_name(self.returncode)})"
        if self.returncode < 0:
            return f"was stopped ({signal_name(self.returncode)})"
        return f"ended with {signal_name(self.returncode)}"


def run(argv: Sequence[str], *, timeout: Optional[float] = None,
        max_rss: Optional[int] = None, cancel: Optional[threading.Event] = None,
        grace: float = 0.0, env: Optional[Dict[str, str]] = None, poll_s: float = 0.02,
        stderr_lines: int = 40) -> Outcome:
    """Run `argv` under the watch: its own session, stdin and stdout closed to it, the time
    and memory limits, Cancel (SIGTERM to its group, SIGKILL after `grace` s); a stopped
    child's group is killed. Raises OSError when it cannot start."""
    proc = spawn(argv, child_env(env), stdin=DEVNULL, stdout=DEVNULL)
    tail = StderrTail(stderr_lines)
    tail.follow(proc)
    fd = open_pidfd(proc.pid)
    try:
        watch = Watch(proc.pid, timeout=timeout, max_rss=max_rss, cancel=cancel, grace=grace)
        status, stopped = wait_pid(
            proc.pid, watch, fd=fd, poll_s=poll_s,
            stop=lambda: _killpg(proc.pid, signal.SIGKILL),
            ask=lambda: _killpg(proc.pid, signal.SIGTERM))
    finally:
        if fd is not None:
            os.close(fd)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if stopped is None and watch.cancelled_at is not None and proc.returncode < 0:
        stopped = Stop("cancelled", grace)  # it ended on the polite SIGTERM
    _killpg(proc.pid, signal.SIGKILL)  # what it started and left behind
    time.sleep(0.05)  # the stderr reader takes the last lines
    return Outcome(proc.returncode, stopped, tail.text())


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
