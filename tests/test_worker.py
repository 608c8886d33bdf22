"""The worker process: protocol, progress, time limit, cancel, crash containment, backend probe."""
from __future__ import annotations

import threading
import time

import pytest

from workbench.worker.client import (WorkerCancelled, WorkerClient, WorkerCrashed, WorkerError,
                                     WorkerTimeout)


@pytest.fixture
def worker():
    w = WorkerClient()
    yield w
    w.close()


def test_ping_reports_interpreter_and_ops(worker):
    info = worker.call("ping")
    assert info["python"].count(".") == 2
    assert {"ping", "backend_info", "sleep", "crash"} <= set(info["ops"])
    assert info["pid"] == worker.pid


def test_progress_events_stream_before_result(worker):
    events = []
    res = worker.call("sleep", {"seconds": 0.3, "step": 0.05}, on_event=events.append)
    assert res == {"slept": 0.3}
    fractions = [e["fraction"] for e in events if e["event"] == "progress"]
    assert len(fractions) >= 3 and fractions == sorted(fractions)


def test_time_limit_kills_worker_and_next_call_restarts(worker):
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout, match="time limit of 0.5 s"):
        worker.call("sleep", {"seconds": 30}, timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert not worker.alive
    assert worker.call("ping")["pid"] == worker.pid


def test_cancel_stops_a_running_op(worker):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerCancelled):
        worker.call("sleep", {"seconds": 30}, cancel=cancel)
    assert time.monotonic() - t0 < 3
    assert worker.call("ping")  # still usable


@pytest.mark.parametrize("how,status", [("segfault", "SIGSEGV"), ("abort", "SIGABRT"),
                                        ("exit", "exit status 3")])
def test_crash_is_contained_with_status_and_log_tail(worker, how, status):
    with pytest.raises(WorkerCrashed) as ei:
        worker.call("crash", {"how": how})
    msg = str(ei.value)
    assert status in msg and "about to crash on purpose" in msg
    assert worker.call("ping")["python"]


def test_unknown_op_is_a_clear_error(worker):
    with pytest.raises(WorkerError, match="unknown worker op 'nope'"):
        worker.call("nope")


def test_bad_interpreter_is_a_clear_error():
    w = WorkerClient(python="/nonexistent/python3")
    with pytest.raises(WorkerError, match="cannot start the TensorRT worker"):
        w.call("ping")


def test_tensorrt_rtx_backend_is_real_and_probed(worker):
    info = worker.call("backend_info", {"backend": "tensorrt-rtx"})
    assert info["backend"] == "tensorrt-rtx"
    assert info["module"] in ("tensorrt_rtx", "tensorrt_rtx_bindings")
    caps = info["capabilities"]
    # TensorRT-RTX is strongly typed: no precision builder flags, but AOT compute capability
    assert not caps.get("fp16_flag") and not caps.get("int8_flag")  # strongly typed only
    assert caps["compute_capability"] is True and caps["supports_model_v2"] is True


def test_worker_code_is_python39_and_dependency_clean():
    """The worker runs under the GPU rig's Python 3.9 with only stdlib/numpy/tensorrt."""
    import ast
    import pathlib
    import sys

    # cuda-python / pycuda are accepted where a user has them (imported under try), never required
    allowed = set(sys.stdlib_module_names) | {"numpy", "tensorrt", "tensorrt_rtx",
                                              "tensorrt_rtx_bindings", "polygraphy", "workbench",
                                              "cuda", "pycuda"}
    pkg = pathlib.Path(__file__).resolve().parents[1] / "workbench" / "worker"
    for f in sorted(pkg.glob("*.py")):
        tree = ast.parse(f.read_text(), feature_version=(3, 9))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                assert top in allowed, f"{f.name} imports {n}"
                if top == "workbench":
                    assert n.startswith("workbench.worker") or n == "workbench.core.errors", f"{f.name}: {n}"
