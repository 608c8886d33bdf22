"""CUDA-graph timing plumbing without a GPU: capture failure ends the capture and gives a
reason instead of a traceback; the CLI line puts the graph latency beside plain enqueue."""
import ctypes

from workbench.cli.cmd_timing_capture import graph_line
from workbench.worker.cuda import CAPTURE_THREAD_LOCAL, CudaGraph


class _Lib:
    """Records libcudart calls in order; cudaStreamEndCapture hands back a graph handle."""

    def __init__(self, runtime=12080):
        self.calls, self.runtime = [], runtime

    def __getattr__(self, name):
        def fn(*args):
            self.calls.append((name, args))
            if name == "cudaRuntimeGetVersion":
                args[0]._obj.value = self.runtime
            if name == "cudaStreamEndCapture":
                args[1]._obj.value = 0x1234
            if name == "cudaGraphInstantiate":
                args[0]._obj.value = 0x5678
            return 0
        return fn


class _Cuda:
    def __init__(self, lib):
        self.lib = lib

    def error_string(self, rc):
        return "err %d" % rc


class _Stream:
    ptr = 0x42

    def synchronize(self):
        pass


def test_failed_enqueue_ends_capture_and_says_why():
    lib = _Lib()
    g = CudaGraph(_Cuda(lib), _Stream())
    reason = g.capture(lambda: False)
    names = [c[0] for c in lib.calls]
    assert "data-dependent" in reason
    assert names.index("cudaStreamBeginCapture") < names.index("cudaStreamEndCapture")
    assert "cudaGraphInstantiate" not in names
    assert "cudaGraphDestroy" in names  # the captured graph is not leaked


def test_capture_uses_thread_local_mode_and_three_argument_instantiate():
    lib = _Lib(runtime=12080)
    g = CudaGraph(_Cuda(lib), _Stream())
    assert g.capture(lambda: True) == ""
    begin = [c for c in lib.calls if c[0] == "cudaStreamBeginCapture"][0]
    assert begin[1][1] == CAPTURE_THREAD_LOCAL == 1
    inst = [c for c in lib.calls if c[0] == "cudaGraphInstantiate"][0]
    assert len(inst[1]) == 3 and g.exec.value == 0x5678
    lib11 = _Lib(runtime=11080)
    CudaGraph(_Cuda(lib11), _Stream()).capture(lambda: True)
    inst = [c for c in lib11.calls if c[0] == "cudaGraphInstantiate"][0]
    assert len(inst[1]) == 5  # CUDA 11's form


def test_exception_in_enqueue_still_ends_capture():
    lib = _Lib()
    g = CudaGraph(_Cuda(lib), _Stream())

    def boom():
        raise RuntimeError("no")
    assert g.capture(boom) == "RuntimeError: no"
    assert any(c[0] == "cudaStreamEndCapture" for c in lib.calls)


def test_graph_line_beside_plain_enqueue():
    plain = {"p50_ms": 0.75}
    line = graph_line({"p50_ms": 0.47, "p99_ms": 0.5}, plain)
    assert "0.4700" in line and "0.63x plain enqueue" in line
    assert "not captured (capture refused)" in graph_line({"reason": "capture refused"}, plain)
    assert graph_line(None, plain) == "CUDA graph: not timed"
