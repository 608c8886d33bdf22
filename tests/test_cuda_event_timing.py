"""The one event-timed loop of the worker (`Cuda.event_timed`, used by the engine profile and
the CUDA-graph replay) against a recording stand-in for libcudart, without a GPU: only the
launch sits between the two events, a failed launch is raised after its end event with the
events destroyed, and the cancel check and progress stay outside the events."""
import ctypes

import pytest

from workbench.worker.cuda import Cuda
from workbench.worker.registry import OpError


class _Lib:
    """libcudart's event calls, recorded; each elapsed time is the next of `times`."""

    def __init__(self, times, rc=None):
        self.calls, self.times, self.rc = [], list(times), rc or {}

    def __getattr__(self, name):
        def fn(*args):
            self.calls.append(name)
            if name == "cudaEventElapsedTime":
                args[0]._obj.value = self.times.pop(0)
            return self.rc.get(name, 0)
        return fn


class _Ctx:
    def __init__(self):
        self.events = []

    def check_cancel(self):
        self.events.append("cancel?")

    def progress(self, phase, fraction):
        self.events.append((phase, fraction))


def _cuda(lib):
    cuda = Cuda.__new__(Cuda)  # (no libcudart here: the stand-in is its `lib`)
    cuda.lib = lib
    return cuda


def test_only_the_launch_is_timed_and_each_latency_is_read():
    lib = _Lib([1.5, 2.25, 3.0])
    ctx = _Ctx()
    launched = []

    def launch():
        lib.calls.append("launch")
        launched.append(1)
        return 0

    out = _cuda(lib).event_timed(launch, lambda rc: None, ctypes.c_void_p(7), 3, ctx, "run",
                                 "timing")
    assert out == [1.5, 2.25, 3.0] and len(launched) == 3
    loop = lib.calls[2:-2]  # after the two cudaEventCreate, before the two cudaEventDestroy
    assert loop == ["cudaEventRecord", "launch", "cudaEventRecord", "cudaEventSynchronize",
                    "cudaEventElapsedTime"] * 3
    assert lib.calls[:2] == ["cudaEventCreate"] * 2 and lib.calls[-2:] == ["cudaEventDestroy"] * 2
    assert ctx.events == ["cancel?", ("run", 0.0)]  # iteration 0 only: every 10th, throttled


def test_a_failed_launch_raises_after_its_end_event_and_frees_the_events():
    lib = _Lib([1.0])

    def accept(ok):
        if not ok:
            raise OpError("execute_async_v3 failed", code="execute-failed")

    with pytest.raises(OpError, match="execute_async_v3 failed"):
        _cuda(lib).event_timed(lambda: False, accept, ctypes.c_void_p(7), 5, None, "run",
                               "timing")
    assert lib.calls[-5:] == ["cudaEventRecord", "cudaEventSynchronize", "cudaEventElapsedTime",
                              "cudaEventDestroy", "cudaEventDestroy"]


def test_a_cuda_error_while_timing_names_what_was_timed():
    lib = _Lib([1.0], rc={"cudaEventSynchronize": 700})
    with pytest.raises(OpError, match="CUDA error in timing a graph launch: cudaError 700"):
        _cuda(lib).event_timed(lambda: 0, lambda rc: None, ctypes.c_void_p(7), 2, None, "g",
                               "timing a graph launch")
