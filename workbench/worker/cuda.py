"""The worker's one CUDA wrapper: device check, streams, events, device memory.

Built on polygraphy.cuda (pure Python over libcudart through ctypes), so the worker needs no
compiled CUDA binding and runs the same on the 8.6 rig's Python 3.9 as on a user's machine.
Used for profiling (streams, events, bound I/O buffers) and for the legacy INT8 calibrator
(raw device buffers). Stdlib + numpy (lazily) + polygraphy only.
"""
from __future__ import annotations

import ctypes
import time
from functools import partial
from typing import Any, Callable, List, Sequence

from workbench.worker.nogpu import needs_gpu
from workbench.worker.registry import OpError

PROGRESS_S = 0.25  # timed loops report progress at most this often (a UI refresh)
NEEDS_GPU_HINT = ("run it on a machine with an NVIDIA GPU and driver (e.g. set "
                  "WORKBENCH_TRT_PYTHON to a Python with tensorrt there); on this machine, analyse "
                  "exported layer/profile JSON with `workbench timing LAYERS.json --profile P.json`")


class Cuda:
    """libcudart for `purpose` ("profiling an engine", "INT8 calibration"...): raises OpError
    'no-gpu' at once when there is no usable device, before any other work is done."""

    def __init__(self, purpose: str = "profiling an engine") -> None:
        try:
            from polygraphy import cuda as pcuda  # type: ignore
        except Exception as e:
            raise OpError("%s needs an NVIDIA GPU and the CUDA runtime: polygraphy.cuda is not "
                          "importable (%s: %s)" % (purpose, type(e).__name__, e), code="no-gpu",
                          hint="pip install polygraphy in the worker's Python; " + NEEDS_GPU_HINT) from None
        self.pcuda = pcuda
        try:
            self.lib = pcuda.wrapper().handle
        except Exception as e:
            raise OpError("%s needs an NVIDIA GPU: the CUDA runtime library could not be loaded "
                          "(%s: %s)" % (purpose, type(e).__name__, e), code="no-gpu",
                          hint=NEEDS_GPU_HINT) from None
        if self.lib is None:
            raise OpError("%s needs an NVIDIA GPU: libcudart was not found" % purpose,
                          code="no-gpu", hint=NEEDS_GPU_HINT)
        self.lib.cudaGetErrorString.restype = ctypes.c_char_p
        n = ctypes.c_int(0)
        rc = self.lib.cudaGetDeviceCount(ctypes.byref(n))
        if rc != 0 or n.value < 1:
            why = self.error_string(rc) if rc != 0 else "no CUDA device found"
            raise OpError(needs_gpu(purpose, why), code="no-gpu", hint=NEEDS_GPU_HINT)
        self.device_count = n.value
        self._ptrs: List[int] = []

    # -- device -------------------------------------------------------------------------------
    def error_string(self, rc: int) -> str:
        try:
            return self.lib.cudaGetErrorString(rc).decode()
        except Exception:
            return "cudaError %d" % rc

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise OpError("CUDA error in %s: %s" % (what, self.error_string(rc)),
                          code="cuda-error")

    def compute_capability(self) -> str:
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        self.lib.cudaDeviceGetAttribute(ctypes.byref(major), 75, 0)  # ComputeCapabilityMajor
        self.lib.cudaDeviceGetAttribute(ctypes.byref(minor), 76, 0)
        return "%d.%d" % (major.value, minor.value)

    # -- streams and events -------------------------------------------------------------------
    def stream(self) -> Any:
        return self.pcuda.Stream()

    def event(self) -> ctypes.c_void_p:
        ev = ctypes.c_void_p()
        self.check(self.lib.cudaEventCreate(ctypes.byref(ev)), "cudaEventCreate")
        return ev

    def record(self, ev: ctypes.c_void_p, stream_ptr: int) -> None:
        self.check(self.lib.cudaEventRecord(ev, ctypes.c_void_p(stream_ptr)), "cudaEventRecord")

    def elapsed_ms(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        self.check(self.lib.cudaEventSynchronize(end), "cudaEventSynchronize")
        ms = ctypes.c_float(0.0)
        self.check(self.lib.cudaEventElapsedTime(ctypes.byref(ms), start, end),
                   "cudaEventElapsedTime")
        return float(ms.value)

    def destroy(self, ev: ctypes.c_void_p) -> None:
        self.lib.cudaEventDestroy(ev)

    def event_timed(self, launch: Callable[[], Any], accept: Callable[[Any], None],
                    stream: ctypes.c_void_p, iterations: int, ctx: Any, phase: str,
                    what: str) -> List[float]:
        """Latency in ms of `iterations` calls of `launch`, each between two CUDA events on
        `stream` (the host waits on the end event). Inside the events nothing but `launch`;
        `accept(what launch returned)` (raises for a failed launch), the cancel check (every
        10th iteration) and the progress events (at most every PROGRESS_S) are outside them:
        host work between timed runs that a bare loop does not do."""
        record, sync, elapsed = self.lib.cudaEventRecord, self.lib.cudaEventSynchronize, \
            self.lib.cudaEventElapsedTime
        start, end = self.event(), self.event()
        ms = ctypes.c_float(0.0)
        ref = ctypes.byref(ms)
        out: List[float] = []
        clock = time.perf_counter
        note = clock() + PROGRESS_S
        try:
            for i in range(iterations):
                if ctx is not None and i % 10 == 0:
                    ctx.check_cancel()
                    if i == 0 or clock() >= note:
                        ctx.progress(phase, i / max(iterations, 1))
                        note = clock() + PROGRESS_S
                record(start, stream)
                got = launch()
                record(end, stream)
                rc = sync(end) or elapsed(ref, start, end)
                accept(got)
                self.check(rc, what)
                out.append(float(ms.value))
        finally:
            self.destroy(start)
            self.destroy(end)
        return out

    # -- memory -------------------------------------------------------------------------------
    def array(self, shape: Sequence[int], dtype: Any) -> Any:
        """A device array with shape/dtype, copy_from(host, stream), resize, ptr, free."""
        return self.pcuda.DeviceArray(shape=tuple(shape), dtype=dtype)

    def malloc(self, nbytes: int) -> int:
        """Raw device memory, freed by free_all()."""
        ptr = int(self.pcuda.wrapper().malloc(max(int(nbytes), 1)))
        self._ptrs.append(ptr)
        return ptr

    def upload(self, ptr: int, arr: Any) -> None:
        import numpy as np

        arr = np.ascontiguousarray(arr)
        self.pcuda.wrapper().memcpy(dst=ptr, src=arr.ctypes.data, nbytes=arr.nbytes,
                                    kind=self.pcuda.MemcpyKind.HostToDevice)

    def free_all(self) -> None:
        for ptr in self._ptrs:
            try:
                self.pcuda.wrapper().free(ptr)
            except Exception:
                pass
        self._ptrs = []


# cudaStreamCaptureModeThreadLocal: only this thread's unsafe CUDA calls are refused while
# capturing (what trtexec uses for --useCudaGraph); Global is 0, Relaxed 2
CAPTURE_THREAD_LOCAL = 1


class CudaGraph:
    """One stream's work captured once and replayed (`cudaStreamBeginCapture` ..
    `cudaStreamEndCapture`, `cudaGraphInstantiate`, `cudaGraphLaunch`) through libcudart's
    ctypes handle: the host enqueues one launch instead of every kernel of an engine."""

    def __init__(self, cuda: Cuda, stream: Any) -> None:
        self.cuda, self.stream = cuda, stream
        self.graph = ctypes.c_void_p()
        self.exec = ctypes.c_void_p()

    def _runtime_version(self) -> int:
        v = ctypes.c_int(0)
        self.cuda.lib.cudaRuntimeGetVersion(ctypes.byref(v))
        return int(v.value)

    def capture(self, enqueue: Any) -> str:
        """Capture what `enqueue()` puts on the stream; '' when the graph is ready, else why
        not (the stream is left usable and the error cleared)."""
        lib, sptr = self.cuda.lib, ctypes.c_void_p(self.stream.ptr)
        self.stream.synchronize()
        rc = lib.cudaStreamBeginCapture(sptr, CAPTURE_THREAD_LOCAL)
        if rc != 0:
            lib.cudaGetLastError()
            return "cudaStreamBeginCapture failed: %s" % self.cuda.error_string(rc)
        try:
            ok = bool(enqueue())
        except Exception as e:  # end the capture all the same: the stream must not stay in it
            ok, err = False, "%s: %s" % (type(e).__name__, e)
        else:
            err = "" if ok else "execute_async_v3 returned false while capturing (TensorRT " \
                "refuses capture for this engine, e.g. data-dependent shapes)"
        rc = lib.cudaStreamEndCapture(sptr, ctypes.byref(self.graph))
        if not ok or rc != 0:
            lib.cudaGetLastError()
            self.free()
            return err or "cudaStreamEndCapture failed: %s" % self.cuda.error_string(rc)
        if self._runtime_version() >= 12000:  # (cudaGraphExec_t*, cudaGraph_t, flags)
            rc = lib.cudaGraphInstantiate(ctypes.byref(self.exec), self.graph,
                                          ctypes.c_ulonglong(0))
        else:  # CUDA 11: (exec*, graph, errorNode*, logBuffer, bufferSize)
            rc = lib.cudaGraphInstantiate(ctypes.byref(self.exec), self.graph, None, None,
                                          ctypes.c_size_t(0))
        if rc != 0:
            lib.cudaGetLastError()
            self.free()
            return "cudaGraphInstantiate failed: %s" % self.cuda.error_string(rc)
        return ""

    def launch(self) -> None:
        self.cuda.check(self.cuda.lib.cudaGraphLaunch(self.exec, ctypes.c_void_p(self.stream.ptr)),
                        "cudaGraphLaunch")

    def timed(self, iterations: int, ctx: Any = None, phase: str = "graph") -> List[float]:
        """Latency in ms of `iterations` graph launches, each between two CUDA events, after
        10 untimed launches."""
        for _ in range(10):
            self.launch()
        self.stream.synchronize()
        sptr = ctypes.c_void_p(self.stream.ptr)
        return self.cuda.event_timed(partial(self.cuda.lib.cudaGraphLaunch, self.exec, sptr),
                                     partial(self.cuda.check, what="timing a graph launch"), sptr,
                                     int(iterations), ctx, phase, "timing a graph launch")

    def free(self) -> None:
        if self.exec.value:
            self.cuda.lib.cudaGraphExecDestroy(self.exec)
            self.exec = ctypes.c_void_p()
        if self.graph.value:
            self.cuda.lib.cudaGraphDestroy(self.graph)
            self.graph = ctypes.c_void_p()
