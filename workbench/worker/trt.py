"""Find a TensorRT module: `tensorrt`, `tensorrt_rtx` (users' machines) or
`tensorrt_rtx_bindings` (the PyPI wheels usable on CPU machines). Capabilities are probed with
getattr, never by comparing version strings."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Dict, List, Optional, Tuple

from workbench.worker.registry import OpError

CANDIDATES = {
    "tensorrt": ("tensorrt",),
    "tensorrt-rtx": ("tensorrt_rtx", "tensorrt_rtx_bindings"),
}
AUTO_ORDER = ("tensorrt", "tensorrt-rtx")
BUILD_BACKENDS = ("auto",) + AUTO_ORDER  # what `backend=` accepts wherever TensorRT builds

_cache: Dict[str, Tuple[str, Any]] = {}


def import_backend(backend: str = "auto") -> Tuple[str, Any]:
    """Return (backend name, module). `backend` is auto | tensorrt | tensorrt-rtx."""
    if backend in _cache:
        return _cache[backend]
    try:
        return _import_backend(backend)
    except OpError:
        if not sys.flags.no_site:
            raise
    # started with -S (see client.worker_command): a backend installed through a .pth hook
    # only becomes importable once site has run
    import site

    site.main()
    return _import_backend(backend)


def _import_backend(backend: str) -> Tuple[str, Any]:
    names = AUTO_ORDER if backend == "auto" else (backend,)
    errors: List[str] = []
    for name in names:
        if name not in CANDIDATES:
            raise OpError(f"unknown backend '{backend}'", hint="use auto, tensorrt or tensorrt-rtx")
        for mod_name in CANDIDATES[name]:
            try:
                mod = importlib.import_module(mod_name)
            except Exception as e:  # ImportError, or a broken install raising OSError
                errors.append(f"{mod_name}: {type(e).__name__}: {e}")
                continue
            if not hasattr(mod, "Builder"):  # e.g. the PyPI stub meta-package
                errors.append(f"{mod_name}: imported but has no Builder (a stub package?)")
                continue
            _cache[backend] = (name, mod)
            return name, mod
    raise OpError(
        f"no TensorRT backend '{backend}' importable in this interpreter",
        code="no-backend",
        hint="pip install 'trt-workbench[rtx]' for TensorRT-RTX, or point WORKBENCH_TRT_PYTHON "
             "at an interpreter that has tensorrt",
        details={"tried": errors})


def version_of(mod: Any) -> str:
    return str(getattr(mod, "__version__", "unknown"))


def make_logger(trt: Any, ctx: Any = None, min_severity: Optional[str] = None) -> Any:
    """An ILogger that forwards TensorRT messages to the client as log events and keeps them."""
    sev = trt.ILogger.Severity
    names = {sev.INTERNAL_ERROR: "error", sev.ERROR: "error", sev.WARNING: "warning",
             sev.INFO: "info", sev.VERBOSE: "verbose"}
    threshold = getattr(sev, (min_severity or "WARNING").upper(), sev.WARNING)

    class _Logger(trt.ILogger):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: List[Dict[str, str]] = []

        def log(self, severity: Any, msg: str) -> None:  # noqa: A003
            level = names.get(severity, "info")
            if int(severity) <= int(threshold):
                self.messages.append({"level": level, "message": msg})
                if ctx is not None and level in ("error", "warning"):
                    ctx.log(level, msg)

    return _Logger()


def capabilities(trt: Any) -> Dict[str, bool]:
    """What this TensorRT can do, probed attribute by attribute."""
    bf = getattr(trt, "BuilderFlag", None)
    parser = getattr(trt, "OnnxParser", None)
    return {
        "fp16_flag": bf is not None and getattr(bf, "FP16", None) is not None,
        "bf16_flag": bf is not None and getattr(bf, "BF16", None) is not None,
        "int8_flag": bf is not None and getattr(bf, "INT8", None) is not None,
        "fp8_flag": bf is not None and getattr(bf, "FP8", None) is not None,
        "int8_calibrator": getattr(trt, "IInt8EntropyCalibrator2", None) is not None,
        "strongly_typed_flag": getattr(getattr(trt, "NetworkDefinitionCreationFlag", None),
                                       "STRONGLY_TYPED", None) is not None,
        "explicit_batch_flag": getattr(getattr(trt, "NetworkDefinitionCreationFlag", None),
                                       "EXPLICIT_BATCH", None) is not None,
        "progress_monitor": getattr(trt, "IProgressMonitor", None) is not None,
        "compute_capability": getattr(trt, "ComputeCapability", None) is not None,
        "supports_model_v2": parser is not None and hasattr(parser, "supports_model_v2"),
        "engine_inspector": hasattr(getattr(trt, "ICudaEngine", object), "create_engine_inspector"),
        "runtime_cache": hasattr(getattr(trt, "IBuilderConfig", object), "create_runtime_cache"),
    }


def network_flags(trt: Any) -> int:
    """0 on TensorRT >= 10 (explicit batch is the only mode); EXPLICIT_BATCH on 8.x."""
    f = getattr(getattr(trt, "NetworkDefinitionCreationFlag", None), "EXPLICIT_BATCH", None)
    if f is None:
        return 0
    # 10.x keeps the enum member but deprecates it; it is harmless to set.
    return 1 << int(f)
