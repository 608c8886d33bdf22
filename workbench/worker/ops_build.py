"""Worker ops `build` and `inspect_engine`: ONNX -> serialized engine, in the TensorRT process.

The client (workbench.build.engine) decides the route and prepares the ONNX; this side only talks to
TensorRT: parse, network flags, optimization profiles, memory pool, optimization level, timing
cache, compute-capability targets (TensorRT-RTX ahead-of-time builds), DETAILED profiling
verbosity, progress through IProgressMonitor (phases from the log where it is missing), cancel,
and the legacy builder-flag route (FP16/INT8 flags, entropy calibrator) on TensorRT <= 10.
Every feature is probed with getattr. Stdlib + numpy + tensorrt (+ polygraphy.cuda for
calibration buffers) only; Python 3.9 syntax.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.registry import Cancelled, Context, OpError, op
from workbench.worker.trt import import_backend, version_of

LEVELS = ("error", "warning", "info", "verbose")

# Phases recognised in the log when the TensorRT has no IProgressMonitor (8.x).
_LOG_PHASES = (
    (re.compile(r"Graph optimization time|Applying generic optimizations|Graph construction"),
     "optimizing graph", 0.2),
    (re.compile(r"Starting Calibration|Calibrated batch|Post Processing Calibration"),
     "calibrating", 0.3),
    (re.compile(r"Total Activation Memory|Total Host Persistent Memory|Detected \d+ inputs"),
     "selecting tactics", 0.6),
    (re.compile(r"Engine generation completed|Total Weights Memory"), "serializing", 0.9),
)


# --------------------------------------------------------------------------------------------
# logging and progress
# --------------------------------------------------------------------------------------------
def _make_logger(trt: Any, ctx: Context, keep: str, phases_from_log: bool) -> Any:
    """ILogger that keeps messages down to `keep`, streams warnings/errors and log phases.

    TensorRT calls it for every message, verbose ones included (thousands per build), so the
    common case, a message below `keep`, returns after one int() of the severity."""
    sev = trt.ILogger.Severity
    names = {int(sev.INTERNAL_ERROR): "error", int(sev.ERROR): "error",
             int(sev.WARNING): "warning", int(sev.INFO): "info", int(sev.VERBOSE): "verbose"}
    keep_rank = LEVELS.index(keep) if keep in LEVELS else 2
    kept = {v for v, name in names.items() if LEVELS.index(name) <= keep_rank}
    streamed = {v for v, name in names.items() if name in ("error", "warning")}

    class _Logger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Dict[str, str]] = []
            self.phases_from_log = phases_from_log

        def log(self, severity: Any, msg: str) -> None:  # noqa: A003
            v = int(severity)
            if v in kept:
                level = names[v]
                self.messages.append({"level": level, "message": msg})
                if v in streamed:
                    ctx.log(level, msg)
            if self.phases_from_log:
                for rx, phase, frac in _LOG_PHASES:
                    if rx.search(msg):
                        ctx.progress(phase, frac, msg[:200])
                        break

    return _Logger()


def _make_progress_monitor(trt: Any, ctx: Context, step_delay: float) -> Any:
    """IProgressMonitor subclass: nested phases -> one overall fraction; False cancels."""

    class _Monitor(trt.IProgressMonitor):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.IProgressMonitor.__init__(self)
            self.stack: List[List[Any]] = []  # [name, num_steps, completed]
            self.last_sent = 0.0
            self.cancelled = False
            self.best = 0.0  # TensorRT's nested phases can step back: never show that

        def _fraction(self) -> float:
            frac, scale = 0.0, 1.0
            for _name, n, done in self.stack:
                n = max(int(n), 1)
                frac += scale * min(done, n) / n
                scale /= n
            return min(frac, 1.0)

        def _send(self, force: bool = False) -> None:
            now = time.monotonic()
            if force or now - self.last_sent > 0.05:
                self.last_sent = now
                names = " / ".join(s[0] for s in self.stack)
                self.best = max(self.best, self._fraction())
                ctx.progress("building", round(self.best, 4), names)

        def phase_start(self, phase_name: str, parent_phase: Optional[str],
                        num_steps: int) -> None:
            try:
                self.stack.append([phase_name, num_steps, 0])
                self._send()
            except Exception:  # never let an exception cross into TensorRT
                pass

        def step_complete(self, phase_name: str, step: int) -> bool:
            try:
                for entry in reversed(self.stack):
                    if entry[0] == phase_name:
                        entry[2] = int(step) + 1
                        break
                if step_delay:
                    time.sleep(step_delay)
                self._send()
                if ctx.cancelled:
                    self.cancelled = True
                    return False
                return True
            except Exception:
                return True

        def phase_finish(self, phase_name: str) -> None:
            try:
                for i in range(len(self.stack) - 1, -1, -1):
                    if self.stack[i][0] == phase_name:
                        del self.stack[i:]
                        break
                if self.stack:
                    self._send()
            except Exception:
                pass

    return _Monitor()


# --------------------------------------------------------------------------------------------
# parse
# --------------------------------------------------------------------------------------------
def _parser_errors(parser: Any) -> List[Dict[str, Any]]:
    out = []
    for i in range(int(getattr(parser, "num_errors", 0))):
        err = parser.get_error(i)
        rec: Dict[str, Any] = {"desc": str(err.desc())}
        for key, attr in (("node_name", "node_name"), ("op", "node_operator"),
                          ("node_index", "node"), ("code", "code")):
            fn = getattr(err, attr, None)
            if fn is not None:
                try:
                    val = fn()
                    rec[key] = val if isinstance(val, (int, str)) else str(val)
                except Exception:
                    pass
        out.append(rec)
    return out


def _load_plugins(trt: Any, logger: Any, plugins: List[str]) -> List[str]:
    """Load only the plugin libraries the user named (untrusted input: nothing implicit)."""
    loaded = []
    for path in plugins or []:
        if not os.path.isfile(path):
            raise OpError("plugin library not found: %s" % path, code="bad-plugin",
                          hint="pass the path of an existing .so / .dll")
        try:
            reg = trt.get_plugin_registry()
            if hasattr(reg, "load_library"):
                reg.load_library(path)
            else:
                ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
        except OSError as e:
            raise OpError("cannot load plugin library %s: %s" % (path, e), code="bad-plugin")
        loaded.append(path)
    init = getattr(trt, "init_libnvinfer_plugins", None)
    if plugins and init is not None:
        try:
            init(logger, "")
        except Exception:
            pass
    return loaded


def _parse(trt: Any, builder: Any, logger: Any, onnx_path: str, strongly_typed: bool
           ) -> Tuple[Any, Any, Dict[str, Any]]:
    flags = 0
    ndcf = getattr(trt, "NetworkDefinitionCreationFlag", None)
    eb = getattr(ndcf, "EXPLICIT_BATCH", None)
    info: Dict[str, Any] = {"strongly_typed": False}
    if eb is not None and getattr(ndcf, "STRONGLY_TYPED", None) is None:
        flags |= 1 << int(eb)  # 8.x needs explicit batch; later versions have nothing else
    if strongly_typed:
        st = getattr(ndcf, "STRONGLY_TYPED", None)
        if st is not None:
            flags |= 1 << int(st)
            info["strongly_typed"] = True
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(onnx_path)
    if not ok:
        errors = _parser_errors(parser)
        first = errors[0] if errors else {"desc": "unknown parser error"}
        node = first.get("node_name") or None
        where = " at node '%s'" % node if node else ""
        opname = first.get("op") or None
        if opname:
            where += " (%s)" % opname
        raise OpError("TensorRT could not parse the model%s: %s" % (where, first.get("desc")),
                      node=node, op=opname, code="parse-failed",
                      hint="run `workbench check MODEL` for every unsupported node and the "
                           "recipes that fix them",
                      details={"errors": errors})
    return network, parser, info


def _enum_namer(enum: Any) -> Any:
    """value -> member name for a pybind11 enum (str() of a member costs ~10 us; this ~0.3)."""
    try:
        table = {int(v): k for k, v in enum.__members__.items()}
    except Exception:  # no __members__: the slow, general way
        return lambda v: str(v).split(".")[-1]
    return lambda v: table.get(int(v)) or str(v).split(".")[-1]


def network_layers(trt: Any, network: Any) -> List[Dict[str, Any]]:
    """Each layer of a parsed network: name, type and the dtypes of its outputs."""
    type_name = _enum_namer(trt.LayerType)
    dtype_name = _enum_namer(trt.DataType)
    layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        outs = []
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            outs.append({"name": t.name, "dtype": dtype_name(t.dtype)})
        rec: Dict[str, Any] = {"name": layer.name, "type": type_name(layer.type),
                               "outputs": outs}
        meta = getattr(layer, "metadata", None)
        if meta:
            rec["metadata"] = str(meta)
        layers.append(rec)
    return layers


# --------------------------------------------------------------------------------------------
# profiles
# --------------------------------------------------------------------------------------------
def _network_inputs(network: Any) -> Dict[str, Any]:
    return {network.get_input(i).name: network.get_input(i) for i in range(network.num_inputs)}


def _add_profiles(trt: Any, builder: Any, config: Any, network: Any,
                  profiles: List[Dict[str, List[List[int]]]]) -> List[Any]:
    inputs = _network_inputs(network)
    made = []
    for k, prof in enumerate(profiles or []):
        p = builder.create_optimization_profile()
        for name, shapes in prof.items():
            field = "profiles[%d].%s" % (k, name)
            if name not in inputs:
                raise OpError("profile %d names '%s', which is not a network input (inputs: %s)"
                              % (k, name, ", ".join(sorted(inputs))), code="bad-profile",
                              details={"field": field})
            if len(shapes) != 3:
                raise OpError("profile for '%s' needs [min, opt, max]" % name,
                              code="bad-profile", details={"field": field})
            mn, opt, mx = [tuple(int(d) for d in s) for s in shapes]
            dims = tuple(inputs[name].shape)
            for label, s in (("min", mn), ("opt", opt), ("max", mx)):
                if len(s) != len(dims):
                    raise OpError("profile %s shape %s for '%s' has rank %d; the input has "
                                  "rank %d %s" % (label, list(s), name, len(s), len(dims),
                                                   list(dims)),
                                  code="bad-profile", details={"field": field})
                for axis, (want, got) in enumerate(zip(dims, s)):
                    if want >= 0 and want != got:
                        raise OpError("profile %s shape %s for '%s' changes static dim %d "
                                      "(%d -> %d)" % (label, list(s), name, axis, want, got),
                                      code="bad-profile", details={"field": field})
            for axis in range(len(dims)):
                if not (1 <= mn[axis] <= opt[axis] <= mx[axis]) and not (
                        mn[axis] == opt[axis] == mx[axis] == 0):
                    raise OpError("profile for '%s' needs 1 <= min <= opt <= max on dim %d "
                                  "(got %d, %d, %d)" % (name, axis, mn[axis], opt[axis],
                                                         mx[axis]),
                                  code="bad-profile", details={"field": field})
            if getattr(inputs[name], "is_shape_tensor", False):
                p.set_shape_input(name, mn, opt, mx)
            else:
                p.set_shape(name, mn, opt, mx)
        for name, t in inputs.items():
            if any(d < 0 for d in t.shape) and name not in prof:
                raise OpError("input '%s' has dynamic dims %s but profile %d gives it no "
                              "min/opt/max" % (name, list(t.shape), k), code="bad-profile",
                              details={"field": "profiles[%d]" % k},
                              hint="add --profile %s:MIN:OPT:MAX" % name)
        idx = config.add_optimization_profile(p)
        if idx is not None and int(idx) < 0:
            raise OpError("TensorRT rejected profile %d (see the log)" % k, code="bad-profile",
                          details={"field": "profiles[%d]" % k})
        made.append(p)
    if not profiles:
        dyn = [n for n, t in inputs.items() if any(d < 0 for d in t.shape)]
        if dyn:
            raise OpError("input(s) %s have dynamic dims and no profile was given"
                          % ", ".join("'%s' %s" % (n, list(inputs[n].shape)) for n in dyn),
                          code="bad-profile", details={"field": "profiles"},
                          hint="add --profile INPUT:MIN:OPT:MAX for each, e.g. "
                               "%s:1x...:8x...:32x..." % dyn[0])
    return made


# --------------------------------------------------------------------------------------------
# legacy route: builder flags + calibrator
# --------------------------------------------------------------------------------------------
class _DeviceBuffers:
    """Device memory through polygraphy.cuda (ctypes over libcudart: no compiled package).
    The worker's import rules allow polygraphy but not cuda-python; the exported standalone
    script uses cuda-python when the user has it."""

    def __init__(self) -> None:
        self.ptrs: List[int] = []
        try:
            from polygraphy import cuda as pcuda  # type: ignore

            pcuda.wrapper()
        except Exception as e:
            raise OpError("INT8 calibration needs device buffers: polygraphy.cuda is not "
                          "usable in the worker's interpreter (%s)" % e, code="no-cuda",
                          hint="pip install polygraphy in the TensorRT interpreter, and check "
                               "the CUDA runtime is found")
        self._pcuda = pcuda

    def alloc(self, nbytes: int) -> int:
        ptr = int(self._pcuda.wrapper().malloc(max(int(nbytes), 1)))
        self.ptrs.append(ptr)
        return ptr

    def upload(self, ptr: int, arr: Any) -> None:
        import numpy as np

        arr = np.ascontiguousarray(arr)
        self._pcuda.wrapper().memcpy(dst=ptr, src=arr.ctypes.data, nbytes=arr.nbytes,
                                     kind=self._pcuda.MemcpyKind.HostToDevice)

    def free(self) -> None:
        for ptr in self.ptrs:
            try:
                self._pcuda.wrapper().free(ptr)
            except Exception:
                pass
        self.ptrs = []


def load_calibration_npz(path: str) -> List[Dict[str, Any]]:
    """Batches written by the client: keys 'b<index>:<input name>' (allow_pickle=False)."""
    import numpy as np

    batches: Dict[int, Dict[str, Any]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            head, sep, name = key.partition(":")
            if not sep or not head.startswith("b") or not head[1:].isdigit():
                raise OpError("calibration file %s has an unexpected key '%s'" % (path, key),
                              code="bad-calibration")
            batches.setdefault(int(head[1:]), {})[name] = data[key]
    return [batches[i] for i in sorted(batches)]


def _make_calibrator(trt: Any, ctx: Context, batches: List[Dict[str, Any]],
                     cache_path: Optional[str], method: str) -> Any:
    base_name = {"minmax": "IInt8MinMaxCalibrator", "legacy": "IInt8LegacyCalibrator"
                 }.get(method, "IInt8EntropyCalibrator2")
    base = getattr(trt, base_name, None) or getattr(trt, "IInt8EntropyCalibrator2", None)
    if base is None:
        raise OpError("this TensorRT has no INT8 calibrator classes", code="no-calibrator",
                      hint="use the strongly typed route (Q/DQ in the ONNX) instead")

    class _Calibrator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.batches = batches
            self.index = 0
            self.buffers: Optional[_DeviceBuffers] = None
            self.ptrs: Dict[str, int] = {}
            self.error: Optional[BaseException] = None

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is part of each input's shape

        def get_batch(self, names: List[str]) -> Optional[List[int]]:
            try:
                if ctx.cancelled or self.index >= len(self.batches):
                    return None
                if self.buffers is None:
                    self.buffers = _DeviceBuffers()
                batch = self.batches[self.index]
                ptrs = []
                for name in names:
                    if name not in batch:
                        raise OpError("calibration batch %d has no data for input '%s'"
                                      % (self.index, name), code="bad-calibration")
                    arr = batch[name]
                    if name not in self.ptrs:
                        self.ptrs[name] = self.buffers.alloc(
                            max(b[name].nbytes for b in self.batches if name in b))
                    self.buffers.upload(self.ptrs[name], arr)
                    ptrs.append(self.ptrs[name])
                self.index += 1
                ctx.progress("calibrating", None, "batch %d/%d" % (self.index,
                                                                   len(self.batches)))
                return ptrs
            except BaseException as e:  # an exception must not cross into TensorRT
                self.error = e
                return None

        def read_calibration_cache(self) -> Optional[bytes]:
            if cache_path and os.path.isfile(cache_path) and os.path.getsize(cache_path):
                with open(cache_path, "rb") as f:
                    return f.read()
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            if not cache_path:
                return
            data = bytes(cache)
            tmp = cache_path + ".tmp%d" % os.getpid()
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, cache_path)

        def free(self) -> None:
            if self.buffers is not None:
                self.buffers.free()

    return _Calibrator()


def _set_flag(trt: Any, config: Any, name: str) -> None:
    flag = getattr(trt.BuilderFlag, name, None)
    if flag is None:
        raise OpError("this TensorRT has no BuilderFlag.%s" % name, code="no-flag",
                      hint="use the strongly typed route (precision in the ONNX) instead")
    config.set_flag(flag)


def _pin_fp32_layers(trt: Any, config: Any, network: Any, names: List[str]) -> List[str]:
    """Legacy route exclusions: keep the named layers in FP32 (OBEY precision constraints)."""
    wanted = set(names)
    found = set()
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        meta = str(getattr(layer, "metadata", "") or "")
        hit = layer.name in wanted or any("[ONNX Layer: %s]" % n in meta for n in wanted)
        if not hit:
            continue
        found.update(n for n in wanted if n == layer.name or "[ONNX Layer: %s]" % n in meta)
        layer.precision = trt.float32
        for j in range(layer.num_outputs):
            if layer.get_output(j).dtype in (trt.float32, trt.float16):
                layer.set_output_type(j, trt.float32)
    if wanted:
        bf = trt.BuilderFlag
        flag = getattr(bf, "OBEY_PRECISION_CONSTRAINTS", None) or getattr(
            bf, "STRICT_TYPES", None)
        if flag is not None:
            config.set_flag(flag)
    return sorted(wanted - found)


# --------------------------------------------------------------------------------------------
# the op
# --------------------------------------------------------------------------------------------
def _write_atomic(path: str, data: Any) -> None:
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _compute_capabilities(trt: Any, config: Any, target: str) -> List[str]:
    cc_enum = getattr(trt, "ComputeCapability", None)
    if cc_enum is None or not hasattr(config, "set_compute_capability"):
        raise OpError("this TensorRT cannot build for a chosen compute capability (target "
                      "'%s')" % target, code="bad-target",
                      hint="drop --target; only TensorRT-RTX builds ahead of time for a target")
    names = [t.strip().upper() for t in target.replace(";", ",").split(",") if t.strip()]
    values = []
    for n in names:
        key = n if n.startswith("SM") or n == "CURRENT" else "SM" + n.replace(".", "")
        v = getattr(cc_enum, key, None)
        if v is None:
            avail = [a.lower() for a in dir(cc_enum) if a.startswith("SM")]
            raise OpError("unknown target compute capability '%s'" % n.lower(),
                          code="bad-target", details={"field": "target"},
                          hint="one of: %s" % ", ".join(avail))
        values.append(v)
    config.num_compute_capabilities = len(values)
    for i, v in enumerate(values):
        if not config.set_compute_capability(v, i):
            raise OpError("TensorRT refused compute capability %s" % names[i],
                          code="bad-target", details={"field": "target"})
    return [n.lower() for n in names]


@op("build")
def build(ctx: Context, onnx_path: str, engine_path: str, backend: str = "auto",
          route: str = "strongly-typed", precision: str = "fp32",
          profiles: Optional[List[Dict[str, List[List[int]]]]] = None,
          workspace_bytes: Optional[int] = None, optimization_level: Optional[int] = None,
          timing_cache: Optional[str] = None, target: Optional[str] = None,
          plugins: Optional[List[str]] = None, extra_flags: Optional[List[str]] = None,
          fp32_layers: Optional[List[str]] = None, calib_npz: Optional[str] = None,
          calib_cache: Optional[str] = None, calibrate_method: str = "entropy",
          tactic_sources: Optional[List[str]] = None,
          keep_log: str = "info", report_layers: bool = True,
          test_step_delay: float = 0.0) -> Dict[str, Any]:
    """Build `onnx_path` into `engine_path` (the client renames it into the cache)."""
    t_start = time.monotonic()
    name, trt = import_backend(backend)
    have_monitor = getattr(trt, "IProgressMonitor", None) is not None
    logger = _make_logger(trt, ctx, keep_log, phases_from_log=not have_monitor)
    notes: List[str] = []
    ctx.progress("parsing", 0.0, os.path.basename(onnx_path))
    try:
        builder = trt.Builder(logger)
    except TypeError as e:  # 8.x returns nullptr without a usable CUDA device
        raise OpError("%s %s could not create a builder (%s)" % (name, version_of(trt), e),
                      code="no-gpu", hint="this TensorRT needs a usable NVIDIA GPU and driver "
                      "to build; TensorRT-RTX builds ahead of time on a CPU (--backend "
                      "tensorrt-rtx --target sm89)")
    _load_plugins(trt, logger, plugins or [])
    network, parser, ninfo = _parse(trt, builder, logger, onnx_path,
                                    strongly_typed=(route == "strongly-typed"))
    ctx.check_cancel()
    layers = network_layers(trt, network) if report_layers else []
    config = builder.create_builder_config()

    if workspace_bytes:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    if optimization_level is not None:
        if not hasattr(config, "builder_optimization_level"):
            notes.append("this TensorRT has no builder optimization level; ignored")
        else:
            config.builder_optimization_level = int(optimization_level)
    pv = getattr(trt, "ProfilingVerbosity", None)
    if pv is not None and hasattr(config, "profiling_verbosity"):
        config.profiling_verbosity = pv.DETAILED  # the engine inspector needs it
    targets = _compute_capabilities(trt, config, target) if target else []
    _add_profiles(trt, builder, config, network, profiles or [])

    for flag in extra_flags or []:
        _set_flag(trt, config, flag.upper())
    if tactic_sources is not None:
        ts = getattr(trt, "TacticSource", None)
        if ts is None or not hasattr(config, "set_tactic_sources"):
            raise OpError("this TensorRT has no tactic sources to choose", code="no-flag")
        mask = 0
        for t in tactic_sources:
            v = getattr(ts, t.upper(), None)
            if v is None:
                raise OpError("unknown tactic source '%s'" % t, code="no-flag",
                              hint="one of: %s" % ", ".join(a for a in dir(ts)
                                                            if a.isupper()))
            mask |= 1 << int(v)
        config.set_tactic_sources(mask)

    calibrator = None
    unmatched: List[str] = []
    if route == "legacy-flags":
        if precision == "fp16":
            _set_flag(trt, config, "FP16")
        if precision == "bf16":
            _set_flag(trt, config, "BF16")
        if precision == "fp8":
            raise OpError("FP8 has no calibrator route; use the strongly typed route",
                          code="bad-precision")
        if precision == "int8":
            _set_flag(trt, config, "INT8")
            if calib_npz:
                batches = load_calibration_npz(calib_npz)
                if not batches:
                    raise OpError("calibration file has no batches", code="bad-calibration")
                if calibrate_method == "percentile":
                    notes.append("TensorRT has no percentile calibrator: entropy calibration "
                                 "used (the strongly typed route supports percentile)")
                calibrator = _make_calibrator(trt, ctx, batches, calib_cache, calibrate_method)
                config.int8_calibrator = calibrator
                if hasattr(config, "set_calibration_profile"):
                    cp = builder.create_optimization_profile()
                    for iname, arr in batches[0].items():
                        shp = tuple(int(d) for d in arr.shape)
                        cp.set_shape(iname, shp, shp, shp)
                    config.set_calibration_profile(cp)
            elif not (calib_cache and os.path.isfile(calib_cache)):
                raise OpError("INT8 with builder flags needs calibration data or a "
                              "calibration cache", code="bad-calibration",
                              hint="pass --calib PATH with representative inputs")
        if fp32_layers:
            unmatched = _pin_fp32_layers(trt, config, network, fp32_layers)

    # timing cache: load/save where it means something. TensorRT-RTX keeps the calls as
    # no-ops that warn (and a loaded cache makes it look for a GPU): probe on a scratch config.
    use_tc = bool(timing_cache) and hasattr(config, "create_timing_cache")
    if use_tc:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scratch = builder.create_builder_config()
            scratch.set_timing_cache(scratch.create_timing_cache(b""), False)
        noop = [str(w.message) for w in caught if "no-op" in str(w.message).lower()]
        if noop:
            use_tc = False
            notes.append("timing cache not used: %s" % noop[0])
    if use_tc:
        blob = b""
        if os.path.isfile(timing_cache):
            with open(timing_cache, "rb") as f:
                blob = f.read()
        cache = config.create_timing_cache(blob)
        if not config.set_timing_cache(cache, False):
            notes.append("timing cache %s did not match this TensorRT; started a new one"
                         % timing_cache)
            config.set_timing_cache(config.create_timing_cache(b""), False)
        elif blob:
            notes.append("timing cache loaded: %s (%d bytes)" % (timing_cache, len(blob)))

    monitor = None
    if have_monitor:
        monitor = _make_progress_monitor(trt, ctx, float(test_step_delay or 0.0))
        config.progress_monitor = monitor
    ctx.check_cancel()
    ctx.progress("building", 0.0, "")
    t_build = time.monotonic()
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None:
            calibrator.free()
    build_s = time.monotonic() - t_build
    if calibrator is not None and calibrator.error is not None:
        err = calibrator.error
        if isinstance(err, OpError):
            raise err
        raise OpError("calibration failed: %s: %s" % (type(err).__name__, err),
                      code="bad-calibration")
    if serialized is None:
        if ctx.cancelled or (monitor is not None and monitor.cancelled):
            raise Cancelled("the build was cancelled")
        errs = [m["message"] for m in logger.messages if m["level"] == "error"]
        last = errs[-1] if errs else "no error message (see the log)"
        node = None
        m = re.search(r"\[ONNX Layer: ([^\]]+)\]", last) or re.search(
            r"(?:[Ll]ayer|[Nn]ode)[: ]+'?([^\s':,()]+)", last)
        if m:
            node = m.group(1)
        raise OpError("TensorRT failed to build the engine: %s" % last, node=node,
                      code="build-failed", details={"log": logger.messages[-60:]})
    ctx.progress("writing", 0.98, engine_path)
    _write_atomic(engine_path, serialized)
    size = os.path.getsize(engine_path)
    if use_tc and hasattr(config, "get_timing_cache"):
        try:
            tc = config.get_timing_cache()
            if tc is not None:
                os.makedirs(os.path.dirname(os.path.abspath(timing_cache)), exist_ok=True)
                _write_atomic(timing_cache, bytes(tc.serialize()))
        except Exception as e:
            notes.append("timing cache not saved: %s" % e)
    ctx.progress("done", 1.0, "")
    return {
        "backend": name, "backend_version": version_of(trt), "engine_path": engine_path,
        "size_bytes": size, "build_seconds": build_s,
        "seconds": time.monotonic() - t_start, "strongly_typed": ninfo["strongly_typed"],
        "route": route, "targets": targets, "log": logger.messages, "notes": notes,
        "layers": layers, "unmatched_fp32_layers": unmatched,
        "progress_monitor": have_monitor,
        "calibration_cache": calib_cache if calib_cache and os.path.isfile(calib_cache) else None,
    }


def _attach_context(trt: Any, engine: Any, inspector: Any) -> Tuple[Any, str]:
    """Give the inspector an execution context with every dynamic input at profile 0's opt
    shape: without one, formats and shapes of dynamic engines read "N/A due to dynamic shapes".
    Returns a note when that was not possible (the JSON is still returned)."""
    try:
        context = engine.create_execution_context()
        n = getattr(engine, "num_io_tensors", 0)
        for i in range(n):
            tname = engine.get_tensor_name(i)
            if engine.get_tensor_mode(tname) != trt.TensorIOMode.INPUT:
                continue
            if -1 in tuple(engine.get_tensor_shape(tname)):
                opt = engine.get_tensor_profile_shape(tname, 0)[1]
                context.set_input_shape(tname, tuple(opt))
        infer = getattr(context, "infer_shapes", None)
        if infer is not None:  # 8.6/10.x: shapes propagate only when asked (seen on the rig)
            infer()
        inspector.execution_context = context
        return context, ""
    except Exception as e:  # e.g. no device memory for a context: info without shapes
        return None, "no execution context (%s: %s): dynamic shapes and formats read N/A" % (
            type(e).__name__, e)


@op("inspect_engine")
def inspect_engine(ctx: Context, engine_path: str, backend: str = "auto",
                   onnx_path: Optional[str] = None, strongly_typed: bool = True
                   ) -> Dict[str, Any]:
    """Engine-inspector JSON when the engine deserializes here; else the parsed network's
    per-layer dtypes (e.g. a TensorRT-RTX engine built ahead of time on a CPU machine)."""
    name, trt = import_backend(backend)
    logger = _make_logger(trt, ctx, "warning", phases_from_log=False)
    reason = ""
    engine = None
    try:
        with open(engine_path, "rb") as f:
            blob = f.read()
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(blob)
    except OSError as e:
        raise OpError("cannot read engine %s: %s" % (engine_path, e), code="bad-engine")
    except Exception as e:
        reason = "%s: %s" % (type(e).__name__, e)
    if engine is not None and hasattr(engine, "create_engine_inspector"):
        inspector = engine.create_engine_inspector()
        context, context_note = _attach_context(trt, engine, inspector)
        text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
        del context  # kept alive until the inspector has read it
        info = json.loads(text, strict=False)
        out = {"source": "engine-inspector", "backend": name,
               "backend_version": version_of(trt), "info": info}
        if context_note:
            out["note"] = context_note
        return out
    if not reason:
        errs = [m["message"] for m in logger.messages if m["level"] == "error"]
        reason = errs[-1] if errs else "the engine did not deserialize"
    if not onnx_path:
        raise OpError("the engine cannot be deserialized here (%s) and no ONNX was given to "
                      "fall back to" % reason, code="cannot-deserialize")
    builder = trt.Builder(logger)
    network, _parser, _info = _parse(trt, builder, logger, onnx_path, strongly_typed)
    return {"source": "network", "backend": name, "backend_version": version_of(trt),
            "reason": reason, "layers": network_layers(trt, network)}
