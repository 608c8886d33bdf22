"""The worker process's entry: import TensorRT at once when asked, then serve requests.

Start-up trick kept here: the backend import (tensorrt_rtx_bindings: 100-240 ms measured on the
2-core VM, 2026-12-01) overlaps the client's own work instead of following its first request.

The client names the backend to preload in WORKBENCH_WORKER_PRELOAD when it will need it soon
(a CLI build): the import then runs while the client hashes and checks the model,
and the "ready" event carries the backend's name, version and capabilities. In one thread: a
second one only fights it for the GIL. An import error is not reported here; the request that
needs the backend reports it.

Dropped (measured < 20 ms): loading the op modules while the loop is idle. With compiled
bytecode, ops_build + loaders import in ~5 ms and the other op modules in < 1 ms each, so an
op's module is now imported when the op is first asked for (main._find_op).
"""
import os

PRELOAD_ENV = "WORKBENCH_WORKER_PRELOAD"


def run() -> None:
    backend = os.environ.pop(PRELOAD_ENV, None)
    ready = None
    if backend:
        from workbench.worker.main import _backend_info

        try:
            # the "ready" event carries what a backend_info request would answer: one round
            # trip less before the client can build
            ready = {"preloaded": backend, "backend_info": _backend_info(None, backend)}
        except Exception:
            pass  # the request that needs the backend reports it
    from workbench.worker.main import main

    main(ready)
