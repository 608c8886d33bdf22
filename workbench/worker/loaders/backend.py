"""Loading the TensorRT module and asking it what it can do (Polygraphy's
`backend/trt/util.py` probes): the backend by name, its version, its builder flags and knobs,
its capabilities. Every feature is probed with getattr, never by version string."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Dict, List, Tuple

from workbench.worker.protocol import AUTO_ORDER, BACKEND_MODULES
from workbench.worker.registry import OpError

_backends: Dict[str, Tuple[str, Any]] = {}


def load_backend(backend: str = "auto") -> Tuple[str, Any]:
    """(backend name, TensorRT module) for auto | tensorrt | tensorrt-rtx, imported once."""
    if backend in _backends:
        return _backends[backend]
    try:
        return _import_backend(backend)
    except OpError:
        if not sys.flags.no_site:
            raise
    # started with -S (see launch.worker_command): a backend installed through a .pth hook
    # only becomes importable once site has run
    import site

    site.main()
    return _import_backend(backend)


def _import_backend(backend: str) -> Tuple[str, Any]:
    names = AUTO_ORDER if backend == "auto" else (backend,)
    errors: List[str] = []
    for name in names:
        if name not in BACKEND_MODULES:
            raise OpError("unknown backend '%s'" % backend, code="bad-args",
                          hint="use auto, tensorrt or tensorrt-rtx")
        for mod_name in BACKEND_MODULES[name]:
            try:
                mod = importlib.import_module(mod_name)
            except Exception as e:  # ImportError, or a broken install raising OSError
                errors.append("%s: %s: %s" % (mod_name, type(e).__name__, e))
                continue
            if not hasattr(mod, "Builder"):  # e.g. the PyPI stub meta-package
                errors.append("%s: imported but has no Builder (a stub package?)" % mod_name)
                continue
            _backends[backend] = (name, mod)
            return name, mod
    raise OpError(
        "no TensorRT backend '%s' importable in this interpreter" % backend,
        code="no-backend",
        hint="pip install 'trt-workbench[rtx]' for TensorRT-RTX, or point WORKBENCH_TRT_PYTHON "
             "at an interpreter that has tensorrt",
        details={"tried": errors})


def version_of(trt: Any) -> str:
    return str(getattr(trt, "__version__", "unknown"))


def builder_flags(trt: Any) -> List[str]:
    """Names of this TensorRT's BuilderFlag members (none on a strongly typed-only build)."""
    bf = getattr(trt, "BuilderFlag", None)
    if bf is None:
        return []
    members = getattr(bf, "__members__", None)
    names = list(members) if members else [n for n in dir(bf) if n.isupper()]
    return sorted(n for n in names if getattr(bf, n, None) is not None)


# IBuilderConfig knobs beyond precision, probed by name (each exists on some TensorRT only)
BUILDER_KNOBS = ("builder_optimization_level", "max_aux_streams", "avg_timing_iterations",
                 "tiling_optimization_level", "l2_limit_for_tiling", "max_num_tactics",
                 "hardware_compatibility_level", "runtime_platform", "engine_capability",
                 "profile_stream", "num_compute_capabilities")


def builder_knobs(trt: Any) -> Dict[str, Any]:
    """Which builder knobs this TensorRT exposes: IBuilderConfig attributes by name, and the
    enums that feed them (TacticSource, TensorFormat, PreviewFeature members)."""
    cls = getattr(trt, "IBuilderConfig", object)
    out: Dict[str, Any] = {"config": [k for k in BUILDER_KNOBS if hasattr(cls, k)]}
    for enum in ("TacticSource", "TensorFormat", "PreviewFeature"):
        e = getattr(trt, enum, None)
        members = getattr(e, "__members__", None) if e is not None else None
        out[enum] = sorted(members) if members else sorted(
            n for n in dir(e) if n.isupper()) if e is not None else []
    return out


def capabilities(trt: Any) -> Dict[str, bool]:
    """What this TensorRT can do, probed attribute by attribute. Every BuilderFlag member is
    reported as `<name>_flag` (`fp16_flag`, ...): the client's precision table decides which
    flag a target needs, so a new target needs no change here."""
    parser = getattr(trt, "OnnxParser", None)
    ndcf = getattr(trt, "NetworkDefinitionCreationFlag", None)
    flags = {"%s_flag" % n.lower(): True for n in builder_flags(trt)}
    return {
        **flags,
        "int8_calibrator": getattr(trt, "IInt8EntropyCalibrator2", None) is not None,
        "strongly_typed_flag": getattr(ndcf, "STRONGLY_TYPED", None) is not None,
        "explicit_batch_flag": getattr(ndcf, "EXPLICIT_BATCH", None) is not None,
        "progress_monitor": getattr(trt, "IProgressMonitor", None) is not None,
        "compute_capability": getattr(trt, "ComputeCapability", None) is not None,
        "supports_model_v2": parser is not None and hasattr(parser, "supports_model_v2"),
        "engine_inspector": hasattr(getattr(trt, "ICudaEngine", object), "create_engine_inspector"),
        "runtime_cache": hasattr(getattr(trt, "IBuilderConfig", object), "create_runtime_cache"),
    }
