"""Start the worker by forking the calling process (no new interpreter), for the CLI.

A `workbench build` from the command line pays a second interpreter start-up for its worker
(tens of ms: interpreter, site, json/re/typing, ...) on every call. Measured (2-core VM): the
fork reaches the worker loop ~4 ms after the CLI starts, and with it (plus the backend preload,
boot.py) `workbench build` of resnet_tiny went from
+67% over a direct TensorRT-RTX script to +6-7%. When this process is plain
enough to fork safely, the worker is forked instead: the child already has the interpreter and
those modules, sets up its pipes, starts its own session and runs the same protocol loop as an
exec'd worker; it leaves with os._exit and never returns into the caller's code.

Safe means: POSIX fork, the interpreter the worker would run anyway, and exactly one thread in
the process (native threads included, counted in /proc/self/task), so no lock can be held by a
thread that does not exist in the child. A notebook kernel never qualifies (it runs many
threads); the CLI asks for it before it starts any thread. Everything else uses exec.
"""
from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from typing import IO, Dict, Optional


def can_fork(python: str) -> bool:
    """True when forking this process is a safe way to start a worker running `python`."""
    if not hasattr(os, "fork") or os.environ.get("WORKBENCH_WORKER_FORK", "1") == "0":
        return False
    from workbench.worker.launch import same_interpreter

    if not same_interpreter(python):
        return False
    if threading.active_count() != 1 or threading.current_thread() is not threading.main_thread():
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc (macOS): Python threads were counted above
        return sys.platform != "darwin"  # forking without exec is unsafe there


class ForkedProcess:
    """The parts of subprocess.Popen the client uses, for a forked child."""

    def __init__(self, pid: int, stdin: IO[str], stdout: IO[str], stderr: IO[str]) -> None:
        self.pid = pid
        self.stdin: Optional[IO[str]] = stdin
        self.stdout: Optional[IO[str]] = stdout
        self.stderr: Optional[IO[str]] = stderr
        self.returncode: Optional[int] = None
        self._lock = threading.Lock()  # one reaper: waitpid from two threads would race

    def poll(self) -> Optional[int]:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere (a SIGCHLD handler): unknown
                    self.returncode = -int(signal.SIGKILL)
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                import subprocess

                raise subprocess.TimeoutExpired(["<forked worker>"], timeout or 0)
            time.sleep(delay)
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_worker(env: Dict[str, str]) -> ForkedProcess:
    """Fork a worker whose environment is `env`; return its Popen-like handle."""
    child_in, parent_in = os.pipe()
    parent_out, child_out = os.pipe()
    parent_err, child_err = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # nothing buffered here may be written twice
        except Exception:
            pass
    gc.freeze()  # the child's collections then skip what it inherited (no copy-on-write storm)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setsid()  # its own process group: a time limit kills it and what it started
            os.dup2(child_in, 0)
            os.dup2(child_out, 1)
            os.dup2(child_err, 2)
            os.closerange(3, 1 << 16)  # the parent's ends and files: EOF must reach us
            os.environ.clear()
            os.environ.update(env)
            sys.stdin = open(0, "r", encoding="utf-8", errors="replace", closefd=False)
            sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
            from workbench.worker.boot import run

            run()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
        except BaseException:
            try:
                import traceback

                traceback.print_exc()
            except Exception:
                pass
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    gc.unfreeze()
    os.close(child_in)
    os.close(child_out)
    os.close(child_err)
    return ForkedProcess(
        pid,
        os.fdopen(parent_in, "w", encoding="utf-8", buffering=1),
        os.fdopen(parent_out, "r", encoding="utf-8", errors="replace"),
        os.fdopen(parent_err, "r", encoding="utf-8", errors="replace"))
