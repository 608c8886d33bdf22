"""The worker's main loop: read JSON requests on stdin, run ops, write JSON events (shapes:
workbench.worker.protocol), and the ops that need no TensorRT (ping, backend_info, sleep, crash).

The original stdout file descriptor is kept for the protocol and fd 1 is pointed at stderr,
so that anything TensorRT's C++ code prints can never corrupt the message stream. An op's
module is imported when the op is first asked for (protocol.OP_MODULES says which).
"""
from __future__ import annotations

import os
import queue
import sys
import threading
from typing import Any, Callable, Dict, Optional

from workbench.worker import protocol as P
from workbench.worker.registry import OPS, Cancelled, Context, OpError, op


def _find_op(name: Any) -> Optional[Callable[..., Any]]:
    """The op registered under `name`, importing its module first when needed."""
    if name not in OPS and name in P.OP_MODULES:
        import importlib

        importlib.import_module("workbench.worker." + P.OP_MODULES[name])
    return OPS.get(name)


def _load_all_ops() -> None:
    """Import every op module (ping lists the ops); one that fails to import is logged."""
    for name in sorted(P.OP_MODULES):
        try:
            _find_op(name)
        except Exception as e:  # an op module failing to import must not kill the worker
            sys.stderr.write("worker: op module for %s failed to import: %r\n" % (name, e))


@op(P.PING)
def _ping(ctx: Context) -> Dict[str, Any]:
    import platform

    _load_all_ops()
    out: Dict[str, Any] = {"python": platform.python_version(), "pid": os.getpid(),
                           "ops": sorted(OPS)}
    try:
        import numpy

        out["numpy"] = numpy.__version__
    except Exception as e:  # pragma: no cover
        out["numpy"] = f"unavailable: {e}"
    return out


@op(P.BACKEND_INFO)
def _backend_info(ctx: Optional[Context], backend: str = "auto") -> Dict[str, Any]:
    from workbench.worker.loaders import (builder_knobs, capabilities, load_backend,
                                          version_of)

    name, trt = load_backend(backend)
    return {"backend": name, "module": trt.__name__, "version": version_of(trt),
            "capabilities": capabilities(trt), "builder_knobs": builder_knobs(trt)}


@op(P.SLEEP)
def _sleep(ctx: Context, seconds: float = 1.0, step: float = 0.05) -> Dict[str, Any]:
    """A cancellable wait with progress: used to test timeouts, cancel and progress plumbing."""
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        ctx.check_cancel()
        ctx.progress("sleep", min(1.0, (time.monotonic() - t0) / seconds))
        time.sleep(step)
    return {"slept": seconds}


@op(P.CRASH)
def _crash(ctx: Context, how: str = "abort") -> None:
    """Die the way TensorRT sometimes does (for crash-containment tests)."""
    sys.stderr.write("worker: about to crash on purpose (%s)\n" % how)
    sys.stderr.flush()
    if how == "segfault":
        import ctypes

        ctypes.string_at(0)
    elif how == "exit":
        os._exit(3)
    os.abort()


def main(ready: Optional[Dict[str, Any]] = None) -> None:
    """Serve requests until stdin closes; `ready` adds fields to the "ready" event."""
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    out = os.fdopen(proto_fd, "w", buffering=1, encoding="utf-8")
    lock = threading.Lock()

    def send(msg: Dict[str, Any]) -> None:
        line = P.encode(msg)
        with lock:
            out.write(line)
            out.flush()

    requests: "queue.Queue[Any]" = queue.Queue()
    current: Dict[str, Context] = {}

    def bad_request(line: str) -> None:
        send(P.error(None, "bad JSON request", type="protocol", code="bad-args"))

    def reader() -> None:
        for msg in P.read_json_lines(sys.stdin, bad_request):
            if msg.get("op") == P.CANCEL:
                ctx = current.get(str(msg.get("id")))
                if ctx is not None:
                    ctx.cancel_event.set()
                continue
            requests.put(msg)
        requests.put(None)

    threading.Thread(target=reader, daemon=True).start()
    send(P.ready(os.getpid(), **(ready or {})))
    while True:
        msg = requests.get()
        if msg is None:
            break
        rid = msg.get("id")
        ctx = Context(rid, send)
        current[str(rid)] = ctx
        try:
            problem = P.check_request(msg)
            if problem:
                raise OpError(problem, code="bad-args")
            fn = _find_op(msg["op"])
            if fn is None:
                raise OpError(f"unknown worker op '{msg.get('op')}'", code="unknown-op",
                              details={"ops": sorted(P.OP_MODULES)})
            send(P.result(rid, fn(ctx, **(msg.get("args") or {}))))
        except OpError as e:
            send(P.error(rid, e.message, type="cancelled" if isinstance(e, Cancelled) else "op",
                         code=e.code, node=e.node, op=e.op, hint=e.hint, details=e.details))
        except Exception as e:
            import traceback

            send(P.error(rid, str(e), type="exception", code=type(e).__name__,
                         traceback=traceback.format_exc()))
        finally:
            current.pop(str(rid), None)


if __name__ == "__main__":
    main()
