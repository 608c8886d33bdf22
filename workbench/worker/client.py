"""The client side of the worker: start it, send requests, stream events, survive its death.

    with WorkerClient() as w:
        info = w.call("backend_info", {"backend": "tensorrt-rtx"}, timeout=60)

A crash (segfault, abort, OOM kill) becomes a WorkerCrashed error carrying the exit status and
the last lines the worker wrote to stderr; a time limit kills the whole process group; cancel
asks the op to stop and kills the worker if it has not stopped within `grace` seconds.
The interpreter is `python=` or $WORKBENCH_TRT_PYTHON or the current one. The watching (limits,
Cancel, group kill, signal names, stderr tail) is `childproc`'s, shared with the onnxruntime
child and the CLI's forked runs.
"""
from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from workbench.worker import childproc
from workbench.core.errors import WorkbenchError
from workbench.worker import protocol
from workbench.worker.launch import same_interpreter, worker_command  # noqa: F401 (re-exported)

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

class WorkerError(WorkbenchError):
    """The worker reported an error for a request (parse failure, build failure, ...)."""

    def __init__(self, message: str, *, code: str = "op-error", node: Optional[str] = None,
                 op: Optional[str] = None, hint: Optional[str] = None,
                 details: Optional[Dict[str, Any]] = None, log_tail: str = "",
                 category: Optional[str] = None) -> None:
        super().__init__(message, node=node, hint=hint, category=category)
        self.code = code
        self.op = op
        self.details = details or {}
        self.log_tail = log_tail


class WorkerCrashed(WorkerError):
    pass


class WorkerTimeout(WorkerError):
    pass


class WorkerCancelled(WorkerError):
    pass


_signal_name = childproc.signal_name  # (the name older callers import)


class WorkerClient(childproc.ChildHandle):
    """One worker process, started lazily and restarted after a crash, timeout or kill."""

    def __init__(self, python: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                 stderr_lines: int = 40) -> None:
        self.python = python or os.environ.get("WORKBENCH_TRT_PYTHON") or sys.executable
        super().__init__(env, stderr_lines)
        self._lock = threading.RLock()  # start() may run from a warm-up thread
        self._preload: Optional[str] = None  # backend the next start imports at once
        self._preloaded: Optional[str] = None  # ... and the one the running worker did
        self._ready = threading.Event()
        self._ready_msg: Optional[Dict[str, Any]] = None

    # -- process management -------------------------------------------------------------------
    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 60.0) -> None:
        """Start the worker process (no-op if running); safe to call from any thread."""
        with self._lock:
            self._start(timeout)

    def warm_up(self, backend: Optional[str] = None, *, fork: bool = False
                ) -> Optional[threading.Thread]:
        """Start the worker in the background (errors surface on the next call) and return
        the thread doing it; with `backend`, a worker started now imports that TensorRT right
        away, so the first request does not wait for the import. With `fork`, and when this
        process is plain enough (see `forked.can_fork`: the CLI before it starts threads),
        the worker is forked here and now instead of starting a second interpreter (returns
        None: nothing is left to wait for)."""
        from workbench.worker import forked

        if fork and forked.can_fork(self.python):
            with self._lock:
                if not self.alive:
                    self._preload = backend
                    self._spawn(fork=True)  # its "ready" is skipped by the first call
            return None

        def _go() -> None:
            try:
                with self._lock:
                    if not self.alive:
                        self._preload = backend
                    self._start(60.0)
            except Exception:
                pass

        t = threading.Thread(target=_go, daemon=True)
        t.start()
        return t

    def _start(self, timeout: float) -> None:
        if self.alive:
            return
        proc = self._spawn(fork=False)
        msg = self._next_event(proc, time.monotonic() + timeout)
        if msg is None or msg.get("event") != "ready":
            self._raise_crash("starting")

    def _spawn(self, fork: bool) -> Any:
        """Start the process and its reader threads (without waiting for "ready")."""
        env = childproc.child_env(self.env)
        self._preloaded = self._preload
        if self._preload:
            env["WORKBENCH_WORKER_PRELOAD"] = self._preload
            self._preload = None
        self._ready = threading.Event()
        self._ready_msg = None
        self._events = queue.Queue()
        self._stderr.clear()
        if fork:
            from workbench.worker.forked import fork_worker

            self._proc = fork_worker(env)  # type: ignore[assignment]
        else:
            try:
                self._proc = childproc.spawn(worker_command(self.python), env)
            except OSError as e:
                raise WorkerError(f"cannot start the TensorRT worker with '{self.python}': {e}",
                                  code="worker-start",
                                  hint="set WORKBENCH_TRT_PYTHON to a Python that exists"
                                  ) from None
        proc = self._proc
        threading.Thread(target=self._read_stdout, args=(proc, self._ready),
                         daemon=True).start()
        self._stderr.follow(proc)
        return proc

    def preloaded_backend_info(self, backend: str, timeout: float = 120.0
                               ) -> Optional[Dict[str, Any]]:
        """What `backend_info` would answer, from the "ready" event of a worker started with
        warm_up(backend=...); None when it was not preloaded (or failed to: ask it then)."""
        with self._lock:
            ready, wanted = self._ready, self._preloaded
        if wanted != backend or not self.alive:
            return None
        ready.wait(timeout)  # set on "ready" and when the worker's stdout closes
        msg = self._ready_msg
        if not msg or msg.get("preloaded") != backend:
            return None
        return msg.get("backend_info")

    def _read_stdout(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        assert proc.stdout is not None
        events = self._events
        try:
            for msg in protocol.read_json_lines(proc.stdout, lambda line: self._stderr.append(
                    "[stdout] " + line)):
                if msg.get("event") == "ready" and not ready.is_set():
                    self._ready_msg = msg
                    ready.set()
                events.put(msg)
        finally:
            ready.set()
            events.put(None)

    def kill(self) -> None:
        """Stop the worker now, with its process group."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        childproc.kill_group(proc)

    def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                self.kill()
        self._proc = None

    def release(self) -> None:
        """Let the worker go without waiting for it to exit (a CLI's last step: TensorRT's
        teardown is of no use to anyone). Its process group is killed; the OS reaps it."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except Exception:
            pass
        childproc.kill_group(proc, wait=False)

    def __enter__(self) -> "WorkerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.kill()
        except Exception:
            pass

    # -- requests -----------------------------------------------------------------------------
    def _next_event(self, proc: subprocess.Popen, deadline: float) -> Optional[Dict[str, Any]]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {"event": "_timeout"}
            try:
                return self._events.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                if proc.poll() is not None and self._events.empty():
                    time.sleep(0.05)  # let the reader drain the last lines
                    if self._events.empty():
                        return None

    def _raise_crash(self, what: str, working: Optional[Dict[str, Any]] = None) -> None:
        """WorkerCrashed for a worker that died; `working`: the last "node" event of the
        request (the ONNX node TensorRT was on), named with the next step when known."""
        proc = self._proc
        rc = proc.wait(timeout=10) if proc is not None else -1
        time.sleep(0.05)
        tail = self.log_tail()
        last = "; ".join(tail.splitlines()[-3:]) if tail else "no output"
        self._proc = None
        node = (working or {}).get("node") or None
        kind = (working or {}).get("op")
        stage = (working or {}).get("stage") or "parse"
        index = (working or {}).get("index")
        where = (f" at {kind or 'the'} node '{node}' (TensorRT's {stage} of that node crashed)"
                 if node else f" at the unnamed {kind} node #{index} in the parser's order"
                 if kind and index is not None else "")
        raise WorkerCrashed(
            f"the TensorRT worker died while {what}{where} ({_signal_name(rc)}); last log "
            f"lines: {last}", code="worker-crashed", node=node, op=kind,
            details={"returncode": rc, "stage": stage if kind else None,
                     "node_index": index if kind else None}, log_tail=tail,
            hint=("the notebook is fine; TensorRT crashed on that node instead of refusing "
                  "it: rewrite it or keep it out of the engine, or try another TensorRT "
                  "version") if kind else
            "the notebook is fine; see the log tail, retry, or report the TensorRT crash",
            category="tool")  # (workbench.core.blame.TOOL: a crash is the tool's, not the model's)

    def call(self, op: str, args: Optional[Dict[str, Any]] = None, *,
             timeout: Optional[float] = None,
             on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
             cancel: Optional[threading.Event] = None, grace: float = 5.0,
             sent: Optional[threading.Event] = None) -> Any:
        """Run `op` in the worker and return its result; events go to `on_event`; `sent` is
        set once the request is on its way (work meant to run beside the op can wait for it,
        rather than compete with sending it)."""
        with self._lock:
            self.start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            rid = next(self._ids)
            try:
                proc.stdin.write(protocol.encode(protocol.request(rid, op, args)))
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._raise_crash(f"receiving '{op}'")
            if sent is not None:
                sent.set()
            watch = childproc.Watch(proc.pid, timeout=timeout, cancel=cancel, grace=grace)
            working: Optional[Dict[str, Any]] = None
            while True:
                msg = self._next_event(proc, watch.wake_by(0.2))
                if msg is None:
                    self._raise_crash(f"running '{op}'", working)
                stop = watch.check()
                if stop is not None:
                    self.kill()
                    self._proc = None
                    if stop.kind == "time":
                        raise WorkerTimeout(
                            f"'{op}' {stop.describe()}", code="timeout",
                            log_tail=self.log_tail(),
                            hint="raise the time limit, or lower the builder optimization level")
                    raise WorkerCancelled(f"'{op}' was cancelled (worker stopped)",
                                          code="cancelled")
                if watch.cancel_requested():  # ask the op to stop; killed after `grace`
                    try:
                        proc.stdin.write(protocol.encode(protocol.cancel(rid)))
                        proc.stdin.flush()
                    except (BrokenPipeError, OSError):
                        pass
                if msg.get("event") == "_timeout":
                    continue
                if msg.get("id") != rid:
                    continue
                ev = msg.get("event")
                if ev == "node":  # where TensorRT is (named if the worker dies there)
                    working = msg if msg.get("node") is not None else None
                    continue
                if ev == "result":
                    return msg.get("result")
                if ev == "error":
                    err = msg.get("error") or {}
                    cls = WorkerCancelled if err.get("type") == "cancelled" else WorkerError
                    text = err.get("message") or "unknown worker error"
                    if err.get("type") == "exception":
                        text = f"'{op}' failed in the worker: {err.get('code')}: {text}"
                    raise cls(text, code=err.get("code") or "op-error", node=err.get("node"),
                              op=err.get("op"), hint=err.get("hint"),
                              details=dict(err.get("details") or {},
                                           traceback=err.get("traceback")),
                              log_tail=self.log_tail())
                if on_event is not None:
                    on_event(msg)


_default: Optional[WorkerClient] = None


def default_client() -> WorkerClient:
    """A process-wide shared worker (restarted on demand)."""
    global _default
    if _default is None:
        _default = WorkerClient()
    return _default


def release_default_client() -> None:
    """Let the shared worker go without waiting (a CLI process about to exit)."""
    if _default is not None:
        _default.release()
