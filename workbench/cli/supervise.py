"""Run a verb in a forked process that runs onnxruntime in-process, this process only watching it.

A verb that runs onnxruntime (compare) normally sends every run to the onnxruntime child
(`workbench.runtime.ortchild`), so that a crash in onnxruntime ends that child and not the caller. In a
notebook the caller is the user's kernel and must survive. A CLI call has no state to keep:
it needs only to turn a crash into a one-line error. So on Linux the console script forks once,
before anything heavy is imported. The fork (the worker) runs the verb with onnxruntime in its
own address space (no transfer of every tensor through shared-memory files, no round trip per
segment: a layer-wise compare of ResNet-50 took 0.90 s instead of 1.10 s), under the same
per-run time limit ($WORKBENCH_ORT_TIMEOUT, default 600 s: onnxruntime's terminate flag), and
this process waits for it:

- the worker's exit status is the command's (a worker killed by SIGTERM, SIGHUP or SIGINT ends
  this process with the same signal);
- a crash (killed by SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE or SIGKILL), or a worker past the
  memory limit ($WORKBENCH_ORT_MAX_RSS, default 3/4 of physical memory: the worker is stopped),
  is announced in one line and the command runs again here, the usual way (onnxruntime in its
  child), which names the model and, where a fresh run pins it, the node
  (`ortchild.locate_crash`), or the run past the limit. Files the verb appends to as it goes
  (`--stats`) are cut back to where they were first;
- SIGTERM, SIGHUP and SIGINT are passed on to the worker, which takes a second SIGINT within a
  second for the same one (a terminal sends Ctrl-C to both processes).

Not used off Linux, where threads already run, with $WORKBENCH_ORT_ISOLATE=0 (the user runs
onnxruntime in-process anyway), with $WORKBENCH_ORT_ADDRESS_SPACE set (an RLIMIT_AS for the child
alone), or with $WORKBENCH_CLI_FORK=0. Stdlib only: this process imports nothing heavy.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from workbench.worker import childproc

FORK_ENV = "WORKBENCH_CLI_FORK"  # "0": never fork; the verb runs with onnxruntime in its child
CRASHES = childproc.CRASH_SIGNALS
PASSED_ON = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                  if hasattr(signal, n))
WATCH_S = 0.05  # how often the worker's resident memory is read


def wanted(argv: List[str]) -> bool:
    """Should this command run in a forked worker (see the module docstring)?"""
    from workbench.runtime.ortchild import ISOLATE_ENV
    from workbench.runtime.ortserver import ADDRESS_SPACE_ENV

    env = os.environ
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and env.get(FORK_ENV, "1") != "0" and env.get(ISOLATE_ENV, "1") != "0"
            and not env.get(ADDRESS_SPACE_ENV) and threading.active_count() == 1
            and "-h" not in argv and "--help" not in argv)


def option_values(argv: Sequence[str], names: Sequence[str]) -> List[str]:
    """The values given to the options `names` in `argv` (`--opt V` and `--opt=V`)."""
    out: List[str] = []
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                out.append(argv[i + 1])
            elif a.startswith(n + "="):
                out.append(a[len(n) + 1:])
    return out


def run_forked(verb: str, work: Callable[[], None], rewind: Sequence[str] = ()
               ) -> Optional[int]:
    """Run `work` (the verb; it ends the process itself, with the verb's exit code) in a forked
    worker with onnxruntime in-process. Here: the worker's exit code, or None when it crashed or
    went past the memory limit (the caller then runs the verb the usual way, onnxruntime in its
    child); the files in `rewind` are then as they were before the fork."""
    from workbench.cli.common import flush_streams
    from workbench.runtime.ortchild import ISOLATE_ENV, MAX_RSS_ENV

    limit = int(os.environ.get(MAX_RSS_ENV) or childproc.default_max_rss())
    marks = [(p, _size(p)) for p in rewind]
    flush_streams()  # (what is buffered is written once, not by both processes)
    parent = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, PASSED_ON)  # (until each side has its handlers)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
        return _main_here(verb, "could not fork")
    if pid == 0:  # the worker: never returns into the caller's code
        code = 70  # (EX_SOFTWARE: `work` returned instead of ending the process)
        try:
            os.environ[ISOLATE_ENV] = "0"
            _once_per_interrupt()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
            childproc.die_with_parent(parent)
            work()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # (WORKBENCH_DEBUG re-raises our bugs: show the traceback)
            import traceback

            traceback.print_exc()
            code = 3
        finally:
            if not flush_streams():
                code = code or 120
            os._exit(code)
    status, stop = _watch(pid, limit)
    if stop is not None:
        return _again(verb, marks, f"it used {childproc.mib(stop.rss)}, over the "
                      f"{stop.limit_text()}, and was stopped")
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    if sig in CRASHES:
        return _again(verb, marks, f"it crashed ({signal.Signals(sig).name})")
    if sig in PASSED_ON:  # end as the worker did, by the same signal
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    return 128 + sig


def _main_here(verb: str, why: str) -> None:
    sys.stderr.write(f"workbench {verb}: note: {why}; onnxruntime runs in its child process\n")
    return None


def _again(verb: str, marks: List[Tuple[str, Optional[int]]], why: str) -> None:
    """Announce the re-run, and put the files the worker appended to back as they were."""
    for path, size in marks:
        try:
            if size is None:
                os.unlink(path)
            else:
                os.truncate(path, size)
        except OSError:
            pass
    sys.stderr.write(f"workbench {verb}: the run with onnxruntime in-process stopped ({why}); "
                     "running it again with onnxruntime in a child process\n")
    return None


def _size(path: str) -> Optional[int]:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _once_per_interrupt() -> None:
    """In the worker: a SIGINT within a second of the last one is the same Ctrl-C (the
    terminal sends it to the process group, the supervisor passes its own copy on)."""
    last = [-10.0]

    def handler(sig: int, frame: Any) -> None:
        now = time.monotonic()
        if now - last[0] < 1.0:
            return
        last[0] = now
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)


def _watch(pid: int, limit: int) -> Tuple[int, Optional[childproc.Stop]]:
    """(the worker's wait status, the Stop when it went past `limit` bytes of resident memory
    and was killed). Signals this process gets meanwhile are passed on; waking at once when
    the worker ends (a pidfd), the RSS read every WATCH_S."""
    fd = childproc.open_pidfd(pid)

    def send(sig: int) -> None:
        childproc.send_signal(pid, sig, fd)  # (through the pidfd: never a reused pid)
    old: Dict[int, Any] = {s: signal.signal(s, lambda sig, _f: send(sig)) for s in PASSED_ON}
    signal.pthread_sigmask(signal.SIG_UNBLOCK, PASSED_ON)
    try:
        return childproc.wait_pid(pid, childproc.Watch(pid, max_rss=limit),
                                  stop=lambda: send(signal.SIGKILL), fd=fd, poll_s=WATCH_S)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if fd is not None:
            os.close(fd)
