"""Worker ops that time an engine on the GPU: per-layer IProfiler times, end-to-end latency
percentiles with CUDA events, throughput across batch sizes, and the engine's layer
information JSON (with the execution context set, so shapes are concrete).

`profile_engine` runs a serialized engine (an ONNX is built first by the one `build` op, on
the client's side: workbench.measure.capture); `cuda_info` says whether there is a GPU. CUDA
through the worker's one wrapper (worker.cuda). numpy is imported with this module: op
modules load on first use, so a build never pays for it (the lazy-numpy shim this module had
is gone). Python 3.9, stdlib + numpy + tensorrt + polygraphy only.
"""
from __future__ import annotations

import ctypes
import json
import os
import time
from functools import partial
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from workbench.worker import card as C
from workbench.worker import loaders as L
from workbench.worker.cuda import Cuda, CudaGraph
from workbench.worker.iolayout import engine_shape, tensor_layout, to_engine
from workbench.worker.protocol import CUDA_INFO, PROFILE_ENGINE
from workbench.worker.registry import Context, OpError, op

WARMUP_MS = 200.0  # back-to-back executions before timing (trtexec's --warmUp default)


def _np_dtype(trt: Any, dt: Any) -> Any:
    fn = getattr(trt, "nptype", None)
    if fn is not None:
        try:
            return np.dtype(fn(dt))
        except Exception:
            pass
    name = str(dt).split(".")[-1].upper()
    table = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32,
             "INT64": np.int64, "BOOL": np.bool_, "UINT8": np.uint8}
    if name not in table:
        raise OpError(f"cannot feed an input of TensorRT dtype {name}", code="bad-input")
    return np.dtype(table[name])


def _io(engine: Any, trt: Any) -> Tuple[List[str], List[str]]:
    ins, outs = [], []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        mode = engine.get_tensor_mode(name)
        (ins if mode == trt.TensorIOMode.INPUT else outs).append(name)
    return ins, outs


def _profile_shapes(engine: Any, name: str, index: int) -> Optional[List[List[int]]]:
    try:
        mn, opt, mx = engine.get_tensor_profile_shape(name, index)
        return [list(mn), list(opt), list(mx)]
    except Exception:
        return None


def _is_shape_tensor(engine: Any, name: str) -> bool:
    """Whether input `name` is a shape tensor (its profile holds values, not a shape)."""
    fn = getattr(engine, "is_shape_inference_io", None)
    try:
        return bool(fn(name)) if fn is not None else False
    except Exception:
        return False


def _synthetic(shape: Sequence[int], dtype: Any, name: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=tuple(shape)).astype(dtype)
    if dtype == np.bool_:
        return np.ones(tuple(shape), dtype=np.bool_)
    return np.ones(tuple(shape), dtype=dtype)  # token id 1 / mask 1: valid for index inputs


def _feed(arr: np.ndarray, want: Any, name: str) -> np.ndarray:
    """Cast user data to the engine's dtype (TensorRT 8.6 turns INT64 inputs into INT32)."""
    if arr.dtype == want:
        return np.ascontiguousarray(arr)
    if np.issubdtype(arr.dtype, np.integer) and np.issubdtype(want, np.integer):
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise OpError(f"input '{name}' has values outside {want} range", node=name,
                          code="bad-input", hint="the engine takes %s for this input" % want)
    return np.ascontiguousarray(arr.astype(want))


def fitting_profile(ranges: Sequence[Dict[str, Tuple[Sequence[int], Sequence[int]]]],
                    shapes: Dict[str, Sequence[int]]) -> Optional[int]:
    """The first optimization profile (of `ranges`: per profile, input -> (min, max)) whose
    min..max holds every shape in `shapes`; None when none does."""
    for k, rng in enumerate(ranges):
        if all(_within(shapes[n], *rng[n]) for n in shapes if n in rng):
            return k
    return None


def _within(shape: Sequence[int], mn: Sequence[int], mx: Sequence[int]) -> bool:
    return len(shape) == len(mn) and all(a <= int(d) <= b for d, a, b in zip(shape, mn, mx))


def outside_why(ranges: Sequence[Dict[str, Tuple[Sequence[int], Sequence[int]]]],
                shapes: Dict[str, Sequence[int]]) -> Tuple[str, str]:
    """(first input outside profile 0, what keeps the shapes out of each profile): e.g.
    "profile 1: 'past' axis 2 is 8, its range 0..0"."""
    first, parts = "", []
    for k, rng in enumerate(ranges):
        for n in shapes:
            if n not in rng or _within(shapes[n], *rng[n]):
                continue
            mn, mx = rng[n]
            shape = [int(d) for d in shapes[n]]
            if len(shape) != len(mn):
                why = f"'{n}' has rank {len(shape)}, the profile {len(mn)}"
            else:
                ax = next(a for a, (d, lo, hi) in enumerate(zip(shape, mn, mx))
                          if not lo <= d <= hi)
                why = f"'{n}' axis {ax} is {shape[ax]}, its range {mn[ax]}..{mx[ax]}"
            first = first or n
            parts.append(f"profile {k}: {why}" if len(ranges) > 1 else why)
            break
    return first, "; ".join(parts)


class _Empty:
    """The buffer of an empty tensor: a small real allocation (TensorRT takes no null address
    for an I/O tensor, and polygraphy's DeviceArray allocates nothing for 0 bytes), no data."""

    def __init__(self, ptr: int) -> None:
        self.ptr, self.shape, self.dtype = ptr, (0,), None

    def copy_from(self, arr: Any, stream: Any = None) -> None:
        pass

    def copy_to(self, arr: Any, stream: Any = None) -> Any:
        return arr

    def resize(self, shape: Sequence[int]) -> None:
        self.shape = tuple(shape)

    def free(self) -> None:
        pass  # (the Cuda wrapper frees it with the rest: free_all)


def _executed(ok: bool) -> None:
    """Raise for an execute_async_v3 that returned False (checked after its end event)."""
    if not ok:
        raise OpError("execute_async_v3 failed", code="execute-failed")


class _Runner:
    """One execution context with device buffers bound to its I/O tensors. profile_index < 0:
    each set of inputs runs on the first optimization profile that holds its shapes (an engine
    built with prefill and decode profiles serves both); else always on that profile."""

    def __init__(self, trt: Any, cuda: Cuda, engine: Any, profile_index: int) -> None:
        self.trt, self.cuda, self.engine = trt, cuda, engine
        self.context = engine.create_execution_context()
        self.stream = cuda.stream()
        self.inputs, self.outputs = _io(engine, trt)
        self.buffers: Dict[str, Any] = {}
        # vectorized I/O (HWC8, CHW16...): buffers hold the engine's layout; None: linear
        self.layouts = {n: tensor_layout(trt, engine, n) for n in self.inputs + self.outputs}
        self.logical: Dict[str, List[int]] = {}  # each output's shape as TensorRT names it
        self.auto = profile_index < 0
        self.profile_index = max(int(profile_index), 0)
        n = int(getattr(engine, "num_optimization_profiles", 1) or 1)
        if self.profile_index >= n:
            raise OpError(f"the engine has {n} optimization profile{'s' if n > 1 else ''}; "
                          f"there is no profile {self.profile_index}", code="bad-input",
                          hint=f"choose a profile index from 0 to {n - 1}")
        self.ranges: List[Dict[str, Tuple[List[int], List[int]]]] = []
        for k in range(n):
            rng = {}
            for name in self.inputs:
                prof = _profile_shapes(engine, name, k)
                if prof is not None and not _is_shape_tensor(engine, name):
                    rng[name] = (prof[0], prof[2])
            self.ranges.append(rng)
        if self.profile_index:
            self.context.set_optimization_profile_async(self.profile_index, self.stream.ptr)

    def fix_profile(self, k: int) -> int:
        """Run on profile `k` from now on (no more choosing per call); returns k."""
        self.auto = False
        if k != self.profile_index:
            self.context.set_optimization_profile_async(k, self.stream.ptr)
            self.stream.synchronize()
            self.profile_index = k
        return k

    def use_profile_for(self, feeds: Dict[str, np.ndarray]) -> int:
        """Switch to the profile that holds the feeds' shapes (auto), or check they fit the
        fixed one; an error names the input, the axis and each profile's range."""
        shapes = {n: list(feeds[n].shape) for n in self.inputs if n in feeds}
        if self.auto:
            k = fitting_profile(self.ranges, shapes)
        else:
            k = fitting_profile(self.ranges[self.profile_index:self.profile_index + 1], shapes)
            k = None if k is None else self.profile_index
        if k is None:
            ranges = self.ranges if self.auto else [self.ranges[self.profile_index]]
            name, why = outside_why(ranges, shapes)
            whose = ("every optimization profile of the engine" if self.auto and len(ranges) > 1
                     else f"optimization profile {self.profile_index} of the engine"
                     if len(self.ranges) > 1 else "the engine's optimization profile")
            raise OpError(f"input '{name}': shape {shapes.get(name)} is outside {whose} ({why})",
                          node=name, code="bad-shape",
                          hint="feed shapes inside a profile's min..max, or rebuild the engine "
                               "with a profile that holds them (--profile INPUT:MIN:OPT:MAX; a "
                               "leading '+' adds another profile)")
        if k != self.profile_index:
            self.context.set_optimization_profile_async(k, self.stream.ptr)
            self.stream.synchronize()
            self.profile_index = k
        return k

    def set_inputs(self, feeds: Dict[str, np.ndarray]) -> Dict[str, List[int]]:
        if self.ranges and any(self.ranges):
            self.use_profile_for(feeds)
        for name in self.inputs:
            arr = feeds[name]
            if not self.context.set_input_shape(name, tuple(arr.shape)):
                raise OpError(f"input '{name}': shape {list(arr.shape)} is outside the engine's "
                              f"optimization profile", node=name, code="bad-shape",
                              hint="choose shapes between the profile's min and max")
            if self.layouts[name] is not None:
                arr = to_engine(arr, self.layouts[name])
            buf = self._buf(name, arr.shape, arr.dtype)
            buf.copy_from(arr, stream=self.stream)
            self.context.set_tensor_address(name, buf.ptr)
        shapes = {}
        for name in self.outputs:
            shape = [max(int(d), 0) for d in self.context.get_tensor_shape(name)]
            dt = _np_dtype(self.trt, self.engine.get_tensor_dtype(name))
            layout = self.layouts[name]
            buf = self._buf(name, engine_shape(shape, layout) if layout else shape, dt)
            self.logical[name] = shape
            self.context.set_tensor_address(name, buf.ptr)
            shapes[name] = shape
        self.stream.synchronize()
        return shapes

    def _buf(self, name: str, shape: Sequence[int], dtype: Any) -> Any:
        if any(int(d) == 0 for d in shape):  # an empty tensor (a prefill's empty KV cache):
            old = self.buffers.get(name)  # a real address all the same (a DeviceArray of
            if old is not None and not isinstance(old, _Empty):  # no bytes holds none)
                old.free()
            buf = old if isinstance(old, _Empty) else _Empty(self.cuda.malloc(256))
            buf.shape, buf.dtype = tuple(int(d) for d in shape), dtype
            self.buffers[name] = buf
            return buf
        buf = self.buffers.get(name)
        if isinstance(buf, _Empty):
            buf = None
        if buf is None or buf.dtype != dtype:
            if buf is not None:
                buf.free()
            buf = self.cuda.array(shape, dtype)
            self.buffers[name] = buf
        else:
            buf.resize(tuple(shape))
        return buf

    def run(self) -> None:
        if not self.context.execute_async_v3(self.stream.ptr):
            raise OpError("execute_async_v3 failed", code="execute-failed")

    def timed(self, iterations: int, warmup: int, ctx: Context, phase: str,
              warmup_ms: float = WARMUP_MS) -> List[float]:
        """Latency of `iterations` executions in ms, each between two CUDA events on the
        stream (host waits on the end event), after `warmup` executions and at least
        `warmup_ms` of back-to-back ones (trtexec's --warmUp: the GPU's clocks rise under
        load; a count of 10 at batch 1 is a few ms, timed at idle clocks). Inside the events
        nothing but execute_async_v3, the same work as a bare loop (`Cuda.event_timed`: a
        progress message every 10 executions was ~100 a second)."""
        t_end = time.perf_counter() + max(float(warmup_ms), 0.0) / 1e3
        n = 0
        while n < warmup or time.perf_counter() < t_end:
            self.run()
            n += 1
            if n % 10 == 0:
                self.stream.synchronize()  # (a bounded queue: time is waited, not enqueued)
        self.stream.synchronize()
        return self.cuda.event_timed(partial(self.context.execute_async_v3, self.stream.ptr),
                                     _executed, ctypes.c_void_p(self.stream.ptr), iterations,
                                     ctx, phase, "timing an execution")

    def graph_timed(self, iterations: int, ctx: Context, phase: str) -> Dict[str, Any]:
        """Latency of `iterations` replays of one execution captured in a CUDA graph (as
        trtexec's --useCudaGraph), each between two CUDA events; call after `timed` (its
        warm-up executions set the shapes and let TensorRT allocate before capture).
        Returns {"samples_ms": [...]} or {"reason": why capture failed} (e.g. an engine
        with data-dependent shapes enqueues host work that a graph cannot hold)."""
        graph = CudaGraph(self.cuda, self.stream)
        reason = graph.capture(lambda: self.context.execute_async_v3(self.stream.ptr))
        if reason:
            return {"reason": reason}
        try:
            return {"samples_ms": graph.timed(iterations, ctx, phase)}
        finally:
            graph.free()

    def free(self) -> None:
        for b in self.buffers.values():
            try:
                b.free()
            except Exception:
                pass
        self.buffers.clear()
        try:
            self.cuda.free_all()  # (the empty tensors' small allocations)
        except Exception:
            pass


def _stats(lat: List[float]) -> Dict[str, Any]:
    a = np.asarray(lat, dtype=float)
    return {"n": int(a.size), "mean_ms": float(a.mean()), "min_ms": float(a.min()),
            "max_ms": float(a.max()), "p50_ms": float(np.percentile(a, 50)),
            "p90_ms": float(np.percentile(a, 90)), "p99_ms": float(np.percentile(a, 99)),
            "samples_ms": [round(x, 6) for x in lat]}


def _graph_stats(res: Dict[str, Any]) -> Dict[str, Any]:
    """CUDA-graph latency stats, or {"reason": why there are none}."""
    return _stats(res["samples_ms"]) if res.get("samples_ms") else {"reason": res.get("reason")}


def _graph_summary(graph: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    return None if graph is None else {k: v for k, v in graph.items() if k != "samples_ms"}


def _make_profiler(trt: Any) -> Any:
    class _Profiler(trt.IProfiler):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.runs: List[List[Tuple[str, float]]] = []
            self.current: List[Tuple[str, float]] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            self.current.append((layer_name, float(ms)))

        def end_run(self) -> None:
            if self.current:
                self.runs.append(self.current)
            self.current = []

    return _Profiler()


def _layer_records(runs: List[List[Tuple[str, float]]]) -> List[Dict[str, Any]]:
    """Per-layer average/median over runs, keyed by (name, k-th occurrence in a run)."""
    order: List[Tuple[str, int]] = []
    times: Dict[Tuple[str, int], List[float]] = {}
    for run in runs:
        seen: Dict[str, int] = {}
        for name, ms in run:
            k = seen.get(name, 0)
            seen[name] = k + 1
            key = (name, k)
            if key not in times:
                times[key] = []
                order.append(key)
            times[key].append(ms)
    return [{"name": name, "averageMs": float(np.mean(times[(name, k)])),
             "medianMs": float(np.median(times[(name, k)])), "count": len(times[(name, k)])}
            for name, k in order]


def _load_feeds(inputs_npz: Optional[str]) -> Dict[str, np.ndarray]:
    """The user's input arrays from an .npz (none without one): fed where their shapes match."""
    if not inputs_npz:
        return {}
    with np.load(inputs_npz, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _resolve_profile(runner: _Runner, shapes: Optional[Dict[str, Any]],
                     feeds_user: Dict[str, np.ndarray], profile_index: int) -> int:
    """The profile to time on: `profile_index`, or (< 0) the first holding the shapes asked for
    and the user's arrays (else profile 0), fixed on the runner."""
    if profile_index >= 0:
        return profile_index
    asked = {n: [int(d) for d in v] for n, v in (shapes or {}).items()}
    asked.update({n: list(a.shape) for n, a in feeds_user.items()})
    asked = {n: v for n, v in asked.items() if n in runner.inputs}
    k = fitting_profile(runner.ranges, asked) if asked else 0
    return runner.fix_profile(k if k is not None else 0)


def _chosen_shapes(runner: _Runner, engine: Any, shapes: Optional[Dict[str, Any]],
                   feeds_user: Dict[str, np.ndarray], profile_index: int
                   ) -> Tuple[Dict[str, List[int]], Dict[str, Any]]:
    """(each input's timed shape, each input's [min, opt, max] on the profile): the user's array,
    else the shape asked for, else the profile's opt shape, else the engine's (-1 -> 1); an
    unknown input name in `shapes` is an error that lists the engine's inputs."""
    chosen: Dict[str, List[int]] = {}
    profiles: Dict[str, Any] = {}
    for name in runner.inputs:
        prof = _profile_shapes(engine, name, profile_index)
        profiles[name] = prof
        if name in feeds_user:
            chosen[name] = list(feeds_user[name].shape)
        elif shapes and name in shapes:
            chosen[name] = [int(d) for d in shapes[name]]
        elif prof is not None:
            chosen[name] = list(prof[1])  # the profile's opt shape
        else:
            chosen[name] = [max(int(d), 1) for d in engine.get_tensor_shape(name)]
    unknown = set(shapes or {}) - set(runner.inputs)
    if unknown:
        raise OpError(f"no engine input named {sorted(unknown)[0]!r}", code="bad-input",
                      hint="engine inputs: %s" % ", ".join(runner.inputs))
    return chosen, profiles


def _feeds_for(trt: Any, engine: Any, inputs: List[str], feeds_user: Dict[str, np.ndarray],
               sh: Dict[str, List[int]]) -> Dict[str, np.ndarray]:
    """Arrays of shapes `sh` in the engine's dtypes: the user's where its shape matches, else
    seeded synthetic data (the same every run, so timings compare)."""
    out = {}
    for i, name in enumerate(inputs):
        want = _np_dtype(trt, engine.get_tensor_dtype(name))
        if name in feeds_user and list(feeds_user[name].shape) == sh[name]:
            out[name] = _feed(feeds_user[name], want, name)
        else:
            out[name] = _synthetic(sh[name], want, name, seed=i)
    return out


def _profile_batches(profiles: Dict[str, Any]) -> List[int]:
    """The min, opt and max batch of the first input with a dynamic batch axis (none: [])."""
    dyn = [p for p in profiles.values() if p is not None and p[0] and p[0][0] != p[2][0]]
    return sorted({dyn[0][0][0], dyn[0][1][0], dyn[0][2][0]}) if dyn else []


def _batch_shapes(inputs: List[str], chosen: Dict[str, List[int]], profiles: Dict[str, Any],
                  b: int) -> Dict[str, List[int]]:
    """The chosen shapes with batch `b` on each input whose profile has a dynamic batch axis;
    a batch outside that range is an error naming the input and its range."""
    sh = {}
    for name in inputs:
        s = list(chosen[name])
        prof = profiles.get(name)
        if s and prof is not None and prof[0][0] != prof[2][0]:
            if not (prof[0][0] <= b <= prof[2][0]):
                raise OpError(f"batch size {b} is outside the profile of '{name}' "
                              f"({prof[0][0]}..{prof[2][0]})", node=name, code="bad-shape")
            s[0] = int(b)
        sh[name] = s
    return sh


def _throughput(ctx: Context, runner: _Runner, feeds_for: Any, batch_sizes: List[int],
                chosen: Dict[str, List[int]], profiles: Dict[str, Any], iterations: int,
                warmup: int) -> List[Dict[str, Any]]:
    """Median/p99 latency and items per second at each batch size (half the iterations each)."""
    out = []
    for b in batch_sizes:
        runner.set_inputs(feeds_for(_batch_shapes(runner.inputs, chosen, profiles, b)))
        bl = runner.timed(max(iterations // 2, 5), warmup, ctx, "throughput b=%d" % b)
        med = float(np.median(bl))
        out.append({"batch": int(b), "p50_ms": med, "p99_ms": float(np.percentile(bl, 99)),
                    "items_per_s": float(b / (med / 1000.0)) if med > 0 else None})
    return out


def _layer_times(ctx: Context, trt: Any, runner: _Runner, warmup: int,
                 layer_iterations: int) -> List[Dict[str, Any]]:
    """Per-layer times from the IProfiler over `layer_iterations` runs, each synchronised
    (its reports are per enqueue), after a few untimed ones."""
    profiler = _make_profiler(trt)
    runner.context.profiler = profiler
    for _ in range(max(warmup // 2, 1)):
        runner.run()
        runner.stream.synchronize()
    profiler.runs, profiler.current = [], []
    for i in range(layer_iterations):
        ctx.check_cancel()
        runner.run()
        runner.stream.synchronize()
        profiler.end_run()
        if i % 10 == 0:
            ctx.progress("layers", i / max(layer_iterations, 1))
    return _layer_records(profiler.runs)


def _write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file, so a reader never sees half of it."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _write_layer_info(trt: Any, engine: Any, runner: _Runner, out_dir: str) -> Optional[str]:
    """The engine inspector's layer JSON (context set: concrete shapes) as out_dir/layers.json;
    None where this TensorRT has no inspector or no JSON format."""
    inspector_fn = getattr(engine, "create_engine_inspector", None)
    if inspector_fn is None:
        return None
    inspector = inspector_fn()
    try:
        inspector.execution_context = runner.context
    except Exception:
        pass
    fmt = getattr(getattr(trt, "LayerInformationFormat", None), "JSON", None)
    if fmt is None:
        return None
    info_path = os.path.join(out_dir, "layers.json")
    _write_atomic(info_path, inspector.get_engine_information(fmt))
    return info_path


def _profile(ctx: Context, trt: Any, cuda: Cuda, engine: Any, *, shapes: Optional[Dict[str, Any]],
             inputs_npz: Optional[str], batch_sizes: Any, iterations: int,
             warmup: int, profile_index: int, out_dir: str, layer_iterations: int,
             cuda_graph: bool = True) -> Dict[str, Any]:
    """Time `engine`: latency (plain and CUDA graph), throughput per batch, per-layer times;
    writes profile.json (and layers.json) to out_dir and returns their summary."""
    runner = _Runner(trt, cuda, engine, profile_index)
    try:
        feeds_user = _load_feeds(inputs_npz)
        profile_index = _resolve_profile(runner, shapes, feeds_user, profile_index)
        chosen, profiles = _chosen_shapes(runner, engine, shapes, feeds_user, profile_index)

        def feeds_for(sh: Dict[str, List[int]]) -> Dict[str, np.ndarray]:
            return _feeds_for(trt, engine, runner.inputs, feeds_user, sh)

        ctx.progress("prepare", 0.0, "binding buffers")
        out_shapes = runner.set_inputs(feeds_for(chosen))
        lat = runner.timed(iterations, warmup, ctx, "latency")
        graph = _graph_stats(runner.graph_timed(iterations, ctx, "cuda graph")) \
            if cuda_graph else None
        if batch_sizes == "profile":  # min, opt and max batch of the optimization profile
            batch_sizes = _profile_batches(profiles)
        throughput = _throughput(ctx, runner, feeds_for, list(batch_sizes or []), chosen,
                                 profiles, iterations, warmup)
        if batch_sizes:
            runner.set_inputs(feeds_for(chosen))
        layers = _layer_times(ctx, trt, runner, warmup, layer_iterations)
        info_path = _write_layer_info(trt, engine, runner, out_dir)
        stats = _stats(lat)
        record = {"format": "workbench-profile", "layers": layers, "iterations": layer_iterations,
                  "latency": stats, "latency_ms": stats["samples_ms"], "throughput": throughput,
                  "latency_graph": graph,
                  "shapes": chosen, "output_shapes": out_shapes, "profile_index": profile_index,
                  "profile_shapes": profiles, "warmup": warmup,
                  "compute_capability": cuda.compute_capability(),
                  "backend_version": L.version_of(trt)}
        prof_path = os.path.join(out_dir, "profile.json")
        _write_atomic(prof_path, json.dumps(record))
        summary = {k: v for k, v in stats.items() if k != "samples_ms"}
        return {"layers_json": info_path, "profile_json": prof_path, "latency": summary,
                "latency_graph": _graph_summary(graph),
                "throughput": throughput, "shapes": chosen, "output_shapes": out_shapes,
                "layers_timed": len(layers),
                "layer_sum_median_ms": float(sum(r["medianMs"] for r in layers)),
                "compute_capability": record["compute_capability"],
                "backend_version": L.version_of(trt)}
    finally:
        runner.free()


def _out_dir(out_dir: Optional[str]) -> str:
    import tempfile

    d = out_dir or tempfile.mkdtemp(prefix="wb-profile-")
    os.makedirs(d, exist_ok=True)
    return d


@op(PROFILE_ENGINE)
def profile_engine(ctx: Context, engine_path: str, shapes: Optional[Dict[str, Any]] = None,
                   inputs_npz: Optional[str] = None, batch_sizes: Any = None,
                   iterations: int = 100, warmup: int = 20, layer_iterations: int = 50,
                   profile_index: int = -1, backend: str = "auto",
                   out_dir: Optional[str] = None, cuda_graph: bool = True) -> Dict[str, Any]:
    """Deserialize an engine and time it: see the module docstring. profile_index < 0: the
    first optimization profile that holds `shapes` / the inputs' shapes (else profile 0).
    cuda_graph: also time the same execution replayed from a CUDA graph (`latency_graph`,
    or its `reason` where capture failed), beside the plain enqueue latency."""
    if os.path.isfile(engine_path) and C.read_card(engine_path) is not None:
        # an engine for another TensorRT is refused before anything else, GPU or not
        name, trt = L.load_backend(L.backend_for(engine_path, backend))
        L.read_checked_engine(name, trt, engine_path, check_only=True)
    cuda = Cuda("profiling an engine")  # first: a clear "needs a GPU" before anything else
    if not os.path.isfile(engine_path):
        raise OpError(f"engine file not found: {engine_path}", code="not-found")
    name, trt = L.load_backend(L.backend_for(engine_path, backend))
    logger = L.make_logger(trt, ctx)
    engine, reason = L.deserialize(trt, logger, L.read_checked_engine(
        name, trt, engine_path, compute_capability=cuda.compute_capability()))
    if engine is None:
        raise OpError(f"could not deserialize the engine ({reason})", code="cannot-deserialize",
                      hint="engines only run with the TensorRT version and GPU family that "
                      "built them; rebuild it here")
    res = _profile(ctx, trt, cuda, engine, shapes=shapes, inputs_npz=inputs_npz,
                   batch_sizes=batch_sizes, iterations=int(iterations), warmup=int(warmup),
                   profile_index=int(profile_index), out_dir=_out_dir(out_dir),
                   layer_iterations=int(layer_iterations), cuda_graph=bool(cuda_graph))
    res["backend"] = name
    return res


@op(CUDA_INFO)
def cuda_info(ctx: Context) -> Dict[str, Any]:
    """Is there a usable GPU for this worker? Raises the same 'no-gpu' error as profiling,
    naming what needs it as running engines (builds, runs and profiles alike ask this)."""
    cuda = Cuda("running TensorRT engines")
    return {"device_count": cuda.device_count, "compute_capability": cuda.compute_capability()}
