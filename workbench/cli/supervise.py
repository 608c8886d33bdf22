"""Run a verb in a forked process that runs onnxruntime in-process, this process only watching it.

A verb that runs onnxruntime (compare) normally sends every run to the onnxruntime child
(`workbench.ortchild`), so that a crash in onnxruntime ends that child and not the caller. In a
notebook the caller is the user's kernel and must survive. A CLI call has no state to keep:
it needs only to turn a crash into a one-line error. So the console script forks once, before
anything heavy is imported. The fork (the worker) runs the verb with onnxruntime in its own
address space (no transfer of every tensor through shared-memory files, no round trip per
segment: a layer-wise compare of ResNet-50 took 0.78 s instead of 1.01 s), and this process
waits for it:

- the worker's exit status is the command's;
- a crash (killed by SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE or SIGKILL) is announced in one
  line and the command runs again here, the usual way (onnxruntime in its child), which names the
  model and, where a fresh run pins it, the node (`ortchild.locate_crash`);
- the worker's resident memory is watched as the child's is ($WORKBENCH_ORT_MAX_RSS, default 3/4
  of physical memory): past it, the worker is stopped and the error says so;
- SIGTERM and SIGHUP are passed on; SIGINT too, unless it came from the terminal, which sends it
  to the worker as well (both are in the terminal's foreground process group).

Not used where fork is missing, where threads already run, with $WORKBENCH_ORT_ISOLATE=0 (the
user runs onnxruntime in-process anyway), with $WORKBENCH_ORT_TIMEOUT set (a per-run time limit
needs the child), or with $WORKBENCH_CLI_FORK=0. Stdlib only: this process imports nothing heavy.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable, List, Optional

FORK_ENV = "WORKBENCH_CLI_FORK"  # "0": never fork; the verb runs with onnxruntime in its child
CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE,
           signal.SIGKILL}
WATCH_S = 0.05  # how often the worker's resident memory is read


def wanted(argv: List[str]) -> bool:
    """Should this command run in a forked worker (see the module docstring)?"""
    from workbench.ortchild import ISOLATE_ENV, TIMEOUT_ENV

    env = os.environ
    return (hasattr(os, "fork") and env.get(FORK_ENV, "1") != "0"
            and env.get(ISOLATE_ENV, "1") != "0" and not env.get(TIMEOUT_ENV)
            and threading.active_count() == 1 and "-h" not in argv and "--help" not in argv)


def run_forked(verb: str, work: Callable[[], None]) -> Optional[int]:
    """Run `work` (the verb; it ends the process itself, with the verb's exit code) in a forked
    worker with onnxruntime in-process. Here: the worker's exit code, or None when it crashed
    (the caller then runs the verb the usual way, onnxruntime in its child)."""
    from workbench.ortchild import ISOLATE_ENV, MAX_RSS_ENV, _default_max_rss

    limit = int(os.environ.get(MAX_RSS_ENV) or _default_max_rss())
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the caller's code
        code = 70  # (EX_SOFTWARE: `work` returned instead of ending the process)
        try:
            os.environ[ISOLATE_ENV] = "0"
            _die_with_parent()
            work()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # (WORKBENCH_DEBUG re-raises our bugs: show the traceback)
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)
    return _watch(verb, pid, limit)


def _die_with_parent() -> None:
    """Linux: the worker gets SIGTERM when this process dies (killed with SIGKILL, say)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(128 + int(signal.SIGTERM))


def _from_terminal() -> bool:
    """Is this process in the terminal's foreground process group (a Ctrl-C reaches the worker
    too)?"""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _watch(verb: str, pid: int, limit: int) -> Optional[int]:
    stopped: List[int] = []

    def forward(sig: int, _frame: object) -> None:
        if sig == signal.SIGINT and _from_terminal():
            return  # the terminal sent it to the worker as well
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = _wait(pid, limit, stopped)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stopped:
        sys.stderr.write(f"workbench {verb}: error: the run used {stopped[0] / 2**20:.0f} MiB, "
                         f"over its memory limit of {limit / 2**20:.0f} MiB, and was stopped "
                         f"(raise ${'WORKBENCH_ORT_MAX_RSS'}, or use fewer samples or a smaller "
                         "--memory-budget)\n")
        return 2
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    if sig in CRASHES:
        name = signal.Signals(sig).name
        sys.stderr.write(f"workbench {verb}: the run crashed ({name}); running it again with "
                         "onnxruntime in a child process, to name the model and node\n")
        return None
    return 128 + sig


def _wait(pid: int, limit: int, stopped: List[int]) -> int:
    """The worker's wait status; its RSS read every WATCH_S, and the worker killed past
    `limit` (the RSS is put in `stopped`). Wakes at once when the worker ends (a pidfd)."""
    import select

    fd = None
    if hasattr(os, "pidfd_open"):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            fd = None
    try:
        while True:
            if fd is not None:
                try:
                    select.select([fd], [], [], WATCH_S)
                except InterruptedError:  # pragma: no cover - (retried by Python since 3.5)
                    pass
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                return status
            rss = _rss(pid)
            if limit and rss > limit and not stopped:
                stopped.append(rss)
                os.kill(pid, signal.SIGKILL)
            if fd is None:
                import time

                time.sleep(0.005)
    finally:
        if fd is not None:
            os.close(fd)


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
