"""Does onnxruntime's own graph optimizer survive a model this tool wrote? The workbench runs
models with optimizations off; the user loads the written model with onnxruntime's default
(ORT_ENABLE_ALL) next, and some lowered models (an FP16 ViT) crash it there. The load is tried
in a child process of its own (a crash ends only that child); a crash becomes a finding on the
written model naming the levels that crash and the one that loads."""
from __future__ import annotations

import os
from typing import Any, List, Optional

from workbench.core.findings import Finding

# onnxruntime's graph optimization levels, its default first
LEVELS = ("ORT_ENABLE_ALL", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC", "ORT_DISABLE_ALL")
PROBE_ENV = "WORKBENCH_ORT_PROBE"  # "0": do not probe written models
CODE = "ort-optimizer-crash"


PROBE_MAX_BYTES = 1 << 30  # a model with more weights than this is not reloaded to probe it


def probe_skipped(path: Any) -> str:
    """Why the written model at `path` is not probed ('' when it is): the probe loads the whole
    model in onnxruntime again, which for a large model costs its weights' memory and a minute;
    that is not paid behind the user's back."""
    if os.environ.get(PROBE_ENV, "1") == "0":
        return f"off ({PROBE_ENV}=0)"
    from workbench.core.model import open_model

    m = open_model(path)
    total = os.path.getsize(path) + sum(os.path.getsize(f) for f in m.external_files
                                        if os.path.exists(f))
    if total > PROBE_MAX_BYTES and os.environ.get(PROBE_ENV) != "1":
        return (f"not probed: {total / 2**30:.1f} GiB of weights (loading it again in "
                f"onnxruntime costs that much memory); {PROBE_ENV}=1 probes it")
    return ""


def optimizer_crash(path: Any, *, timeout: float = 120.0, child: Any = None
                    ) -> Optional[Finding]:
    """A warning Finding when onnxruntime crashes loading the model at `path` with its default
    optimization level (which levels crash, which one loads, how to set it), else None (it
    loads, refuses the model in words, takes longer than `timeout`, or probing is off)."""
    if os.environ.get(PROBE_ENV, "1") == "0":
        return None
    from workbench.runtime.ortchild import OrtChild, OrtCrashed, OrtError, OrtFailed
    from workbench.runtime.ortserver import custom_op_libraries

    own = child is None
    child = child or OrtChild(timeout=timeout)
    crashed: List[str] = []
    loads: Optional[str] = None
    why = ""
    try:
        for level in LEVELS:
            try:
                child.call("probe_load", {"model": str(path), "level": level,
                                          "custom_ops": custom_op_libraries()},
                           what=f"loading the model at {level}", label=str(path),
                           timeout=timeout)
            except OrtCrashed as e:
                crashed.append(level)
                why = why or e.message.split("(", 1)[-1].split(")", 1)[0]
                continue
            except (OrtFailed, OrtError):  # refused in words, or past its limit: not ours
                return None if not crashed else _finding(path, crashed, None, why)
            loads = level
            break
    finally:
        if own:
            child.close()
    return _finding(path, crashed, loads, why) if crashed else None


def _finding(path: Any, crashed: List[str], loads: Optional[str], why: str) -> Finding:
    from workbench.core import blame

    levels = ", ".join(crashed)
    fix = (f"load it with `so = onnxruntime.SessionOptions(); so.graph_optimization_level = "
           f"onnxruntime.GraphOptimizationLevel.{loads}; onnxruntime.InferenceSession(path, "
           "so)` (the workbench itself runs models with optimizations off)" if loads else
           "report the model to onnxruntime: it crashes at every optimization level")
    return Finding(
        "warning", CODE,
        f"onnxruntime crashes ({why or 'killed'}) loading the written model {path} with its "
        f"graph optimization level {levels}" + (" (its default)" if crashed[0] == LEVELS[0]
                                                 else "")
        + (f"; it loads with {loads}" if loads else ""),
        hint=fix, source="onnxruntime", category=blame.TOOL,
        extra={"crashing_levels": crashed, "loading_level": loads})
