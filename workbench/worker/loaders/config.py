"""The builder config from one spec (Polygraphy's CreateConfig): memory pool, optimization
level, profiling verbosity, compute-capability targets, hardware compatibility, profiles,
builder flags, TF32, tactic sources, the legacy precision route (builder flag, calibrator),
layer precisions, the timing cache and the progress monitor."""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Optional

from workbench.worker.loaders.calibration import load_calibration_npz, make_calibrator
from workbench.worker.loaders.files import write_atomic
from workbench.worker.loaders.layer_precisions import set_layer_precisions
from workbench.worker.loaders.logger import make_progress_monitor
from workbench.worker.loaders.profiles import add_profiles
from workbench.worker.registry import Context, OpError


class Config:
    """What create_config made: the IBuilderConfig and everything the build op reports."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.notes: List[str] = []
        self.targets: List[str] = []
        self.calibrator: Any = None
        self.monitor: Any = None
        self.timing_cache: Optional[str] = None  # the path, when it is used
        self.unmatched_layers: List[str] = []  # layer_precisions names no layer matched


def create_config(trt: Any, builder: Any, network: Any, logger: Any,
                  ctx: Optional[Context] = None, *,
                  workspace_bytes: Optional[int] = None,
                  optimization_level: Optional[int] = None, detailed_profiling: bool = True,
                  target: Optional[str] = None, target_required: bool = True,
                  profiles: Optional[List[Dict[str, List[List[int]]]]] = None,
                  fill_dynamic: bool = False, extra_flags: Optional[List[str]] = None,
                  tactic_sources: Optional[List[str]] = None, precision: str = "",
                  legacy_flags: bool = False, builder_flag: Optional[str] = None,
                  calibrate: bool = False,
                  layer_precisions: Optional[Dict[str, str]] = None,
                  precision_constraints: str = "obey",
                  calib_npz: Optional[str] = None, calib_cache: Optional[str] = None,
                  calibrate_method: str = "entropy", timing_cache: Optional[str] = None,
                  progress: bool = False, step_delay: float = 0.0,
                  hardware_compatibility: Optional[str] = None,
                  tf32: Optional[bool] = None) -> Config:
    """The builder config from one spec (the fields of the `build` request):

    memory pool (`workspace_bytes`), builder optimization level, DETAILED profiling verbosity
    (the engine inspector needs it), compute-capability targets (TensorRT-RTX ahead of time;
    `target_required=False` ignores them where the backend has none), optimization profiles
    (see add_profiles), builder flags and tactic sources by name, the legacy precision route
    (FP16/BF16/INT8 builder flags, entropy/minmax calibrator), layer precisions (see
    set_layer_precisions), the timing cache, and the progress monitor (cancel through it)."""
    cfg = Config(builder.create_builder_config())
    config = cfg.config
    if workspace_bytes:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_bytes))
    if optimization_level is not None:
        if not hasattr(config, "builder_optimization_level"):
            cfg.notes.append("this TensorRT has no builder optimization level; ignored")
        else:
            config.builder_optimization_level = int(optimization_level)
    pv = getattr(trt, "ProfilingVerbosity", None)
    if detailed_profiling and pv is not None and hasattr(config, "profiling_verbosity"):
        config.profiling_verbosity = pv.DETAILED
    if target:
        cfg.targets = set_targets(trt, config, target, required=target_required)
    if hardware_compatibility:
        set_hardware_compatibility(trt, config, hardware_compatibility)
    cfg.notes += add_profiles(trt, builder, config, network, profiles, fill_dynamic)
    for flag in extra_flags or []:
        set_flag(trt, config, flag.upper())
    if tf32 is not None:
        set_tf32(trt, config, bool(tf32), cfg)
    if tactic_sources is not None:
        set_tactic_sources(trt, config, tactic_sources)
    if legacy_flags:
        _legacy_precision(trt, builder, config, network, ctx, cfg, precision, builder_flag,
                          calibrate, calib_npz, calib_cache, calibrate_method)
    if layer_precisions:
        cfg.unmatched_layers, notes = set_layer_precisions(trt, config, network,
                                                           layer_precisions,
                                                           precision_constraints)
        cfg.notes += notes
    if timing_cache:
        _load_timing_cache(builder, config, timing_cache, cfg)
    if progress and ctx is not None and getattr(trt, "IProgressMonitor", None) is not None:
        cfg.monitor = make_progress_monitor(trt, ctx, float(step_delay or 0.0))
        config.progress_monitor = cfg.monitor
    return cfg


def set_targets(trt: Any, config: Any, target: str, required: bool = True) -> List[str]:
    """Compute capabilities to build for ahead of time ("sm89", "sm86,sm89", "current")."""
    cc_enum = getattr(trt, "ComputeCapability", None)
    if cc_enum is None or not hasattr(config, "set_compute_capability"):
        if not required:
            return []
        raise OpError("this TensorRT cannot build for a chosen compute capability (target "
                      "'%s')" % target, code="bad-target",
                      hint="drop --target; only TensorRT-RTX builds ahead of time for a target")
    names = [t.strip().upper() for t in str(target).replace(";", ",").split(",") if t.strip()]
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


def set_hardware_compatibility(trt: Any, config: Any, level: str) -> None:
    """config.hardware_compatibility_level by name ("ampere_plus", ...), probed (8.6+)."""
    enum = getattr(trt, "HardwareCompatibilityLevel", None)
    value = getattr(enum, str(level).upper(), None) if enum is not None else None
    if value is None or not hasattr(config, "hardware_compatibility_level"):
        raise OpError("this TensorRT has no hardware-compatibility level '%s'" % level,
                      code="bad-args", details={"field": "hardware_compatibility"},
                      hint="hardware compatibility needs TensorRT >= 8.6; rebuild on the GPU "
                           "that runs the engine instead")
    config.hardware_compatibility_level = value


def set_flag(trt: Any, config: Any, name: str) -> None:
    flag = getattr(getattr(trt, "BuilderFlag", None), name, None)
    if flag is None:
        raise OpError("this TensorRT has no BuilderFlag.%s" % name, code="no-flag",
                      hint="use the strongly typed route (precision in the ONNX) instead")
    config.set_flag(flag)


def set_tf32(trt: Any, config: Any, on: bool, cfg: Config) -> None:
    """Set or clear BuilderFlag.TF32 (probed; a TensorRT without it gets a note)."""
    flag = getattr(getattr(trt, "BuilderFlag", None), "TF32", None)
    if flag is None:
        cfg.notes.append("this TensorRT has no TF32 builder flag; TF32 %s ignored"
                         % ("on" if on else "off"))
        return
    if on:
        config.set_flag(flag)
    else:
        config.clear_flag(flag)


def set_tactic_sources(trt: Any, config: Any, names: List[str]) -> None:
    ts = getattr(trt, "TacticSource", None)
    if ts is None or not hasattr(config, "set_tactic_sources"):
        raise OpError("this TensorRT has no tactic sources to choose", code="no-flag")
    mask = 0
    for t in names:
        v = getattr(ts, t.upper(), None)
        if v is None:
            raise OpError("unknown tactic source '%s'" % t, code="no-flag",
                          hint="one of: %s" % ", ".join(a for a in dir(ts) if a.isupper()))
        mask |= 1 << int(v)
    config.set_tactic_sources(mask)


def _legacy_precision(trt: Any, builder: Any, config: Any, network: Any, ctx: Any, cfg: Config,
                      precision: str, builder_flag: Optional[str], calibrate: bool,
                      calib_npz: Optional[str], calib_cache: Optional[str],
                      method: str) -> None:
    """TensorRT <= 10: the builder lowers precision by flag (the network stays FP32).

    The client's precision table says which BuilderFlag (`builder_flag`, e.g. "FP16") and
    whether a calibrator is fed (`calibrate`): the worker knows no precision names."""
    if builder_flag:
        set_flag(trt, config, builder_flag.upper())
    if calibrate:
        if calib_npz:
            batches = load_calibration_npz(calib_npz)
            if not batches:
                raise OpError("calibration file has no batches", code="bad-calibration")
            if method == "percentile":
                cfg.notes.append("TensorRT has no percentile calibrator: entropy calibration "
                                 "used (the strongly typed route supports percentile)")
            cfg.calibrator = make_calibrator(trt, ctx, batches, calib_cache, method)
            config.int8_calibrator = cfg.calibrator
            if hasattr(config, "set_calibration_profile"):
                cp = builder.create_optimization_profile()
                for iname, arr in batches[0].items():
                    shp = tuple(int(d) for d in arr.shape)
                    cp.set_shape(iname, shp, shp, shp)
                config.set_calibration_profile(cp)
        elif not (calib_cache and os.path.isfile(calib_cache)):
            raise OpError("%s with builder flags needs calibration data or a calibration "
                          "cache" % precision.upper(), code="bad-calibration",
                          hint="pass --calib PATH with representative inputs")


# -- timing cache -----------------------------------------------------------------------------
def _load_timing_cache(builder: Any, config: Any, path: str, cfg: Config) -> None:
    """Load the timing cache where it means something. TensorRT-RTX keeps the calls as no-ops
    that warn (and a loaded cache makes it look for a GPU): probed on a scratch config."""
    if not hasattr(config, "create_timing_cache"):
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scratch = builder.create_builder_config()
        scratch.set_timing_cache(scratch.create_timing_cache(b""), False)
    noop = [str(w.message) for w in caught if "no-op" in str(w.message).lower()]
    if noop:
        cfg.notes.append("timing cache not used: %s" % noop[0])
        return
    blob = b""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            blob = f.read()
    cache = config.create_timing_cache(blob)
    if not config.set_timing_cache(cache, False):
        cfg.notes.append("timing cache %s did not match this TensorRT; started a new one" % path)
        config.set_timing_cache(config.create_timing_cache(b""), False)
    elif blob:
        cfg.notes.append("timing cache loaded: %s (%d bytes)" % (path, len(blob)))
    cfg.timing_cache = path


def save_timing_cache(cfg: Config) -> None:
    if not cfg.timing_cache or not hasattr(cfg.config, "get_timing_cache"):
        return
    try:
        tc = cfg.config.get_timing_cache()
        if tc is not None:
            os.makedirs(os.path.dirname(os.path.abspath(cfg.timing_cache)), exist_ok=True)
            write_atomic(cfg.timing_cache, bytes(tc.serialize()))
    except Exception as e:
        cfg.notes.append("timing cache not saved: %s" % e)
