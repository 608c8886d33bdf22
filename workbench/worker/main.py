"""The worker's main loop: read JSON requests on stdin, run ops, write JSON events.

The original stdout file descriptor is kept for the protocol and fd 1 is pointed at stderr,
so that anything TensorRT's C++ code prints can never corrupt the message stream.
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
from typing import Any, Dict, Optional

from workbench.worker.registry import OPS, Cancelled, Context, OpError, op, read_json_lines

_ops_loaded = False


def _load_op_modules() -> None:
    """Import every ops_* module once (they register their ops); a failing one is logged."""
    global _ops_loaded
    if _ops_loaded:
        return
    _ops_loaded = True
    import importlib

    here = os.path.dirname(os.path.abspath(__file__))  # (pkgutil would import inspect: 5 ms)
    for fn in sorted(os.listdir(here)):
        if fn.startswith("ops_") and fn.endswith(".py"):
            try:
                importlib.import_module("workbench.worker." + fn[:-3])
            except Exception as e:  # an op module failing to import must not kill the worker
                sys.stderr.write("worker: op module %s failed to import: %r\n" % (fn, e))


@op("ping")
def _ping(ctx: Context) -> Dict[str, Any]:
    import platform

    _load_op_modules()
    out: Dict[str, Any] = {"python": platform.python_version(), "pid": os.getpid(),
                           "ops": sorted(OPS)}
    try:
        import numpy

        out["numpy"] = numpy.__version__
    except Exception as e:  # pragma: no cover
        out["numpy"] = f"unavailable: {e}"
    return out


@op("backend_info")
def _backend_info(ctx: Optional[Context], backend: str = "auto") -> Dict[str, Any]:
    from workbench.worker.trt import capabilities, import_backend, version_of

    name, trt = import_backend(backend)
    return {"backend": name, "module": trt.__name__, "version": version_of(trt),
            "capabilities": capabilities(trt)}


@op("sleep")
def _sleep(ctx: Context, seconds: float = 1.0, step: float = 0.05) -> Dict[str, Any]:
    """A cancellable wait with progress: used to test timeouts, cancel and progress plumbing."""
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        ctx.check_cancel()
        ctx.progress("sleep", min(1.0, (time.monotonic() - t0) / seconds))
        time.sleep(step)
    return {"slept": seconds}


@op("crash")
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
        line = json.dumps(msg, default=str)
        with lock:
            out.write(line + "\n")
            out.flush()

    requests: "queue.Queue[Any]" = queue.Queue()
    current: Dict[str, Context] = {}

    def bad_request(line: str) -> None:
        send({"id": None, "event": "error",
              "error": {"type": "protocol", "message": "bad JSON request"}})

    def reader() -> None:
        for msg in read_json_lines(sys.stdin, bad_request):
            if msg.get("op") == "cancel":
                ctx = current.get(str(msg.get("id")))
                if ctx is not None:
                    ctx.cancel_event.set()
                continue
            requests.put(msg)
        requests.put(None)

    threading.Thread(target=reader, daemon=True).start()
    send(dict(ready or {}, id=None, event="ready", pid=os.getpid()))
    while True:
        try:
            msg = requests.get_nowait()
        except queue.Empty:  # idle: register the op modules now rather than on a request
            _load_op_modules()
            msg = requests.get()
        if msg is None:
            break
        rid = msg.get("id")
        ctx = Context(rid, send)
        current[str(rid)] = ctx
        try:
            fn = OPS.get(msg.get("op"))
            if fn is None:
                _load_op_modules()
                fn = OPS.get(msg.get("op"))
            if fn is None:
                raise OpError(f"unknown worker op '{msg.get('op')}'", code="unknown-op",
                              details={"ops": sorted(OPS)})
            result = fn(ctx, **(msg.get("args") or {}))
            send({"id": rid, "event": "result", "result": result})
        except OpError as e:
            send({"id": rid, "event": "error", "error": {
                "type": "cancelled" if isinstance(e, Cancelled) else "op",
                "code": e.code, "message": e.message, "node": e.node, "op": e.op,
                "hint": e.hint, "details": e.details}})
        except Exception as e:
            import traceback

            send({"id": rid, "event": "error", "error": {
                "type": "exception", "code": type(e).__name__, "message": str(e),
                "traceback": traceback.format_exc()}})
        finally:
            current.pop(str(rid), None)


if __name__ == "__main__":
    main()
