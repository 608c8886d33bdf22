"""How far a variant is from onnxruntime FP32 on the user's data, through `workbench.runtime.comparison`
(the one output comparison) at the precision table's tolerances.

On a GPU the engine itself runs (`engine_runner`: `workbench.runtime.trtrunner.TensorRTRunner`);
where no engine can run here (no GPU, a TensorRT-RTX engine built ahead of time for another
GPU) the ONNX that TensorRT was given (the precision transform: FP16 casts, INT8 Q/DQ) runs on
CPU instead, FP16 graphs in onnx's reference evaluator so FP16 arithmetic shows (onnxruntime's
CPU provider upcasts it). `source` says which: "engine" or "onnx-cpu".
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Sequence, Set

import numpy as np

Feed = Dict[str, np.ndarray]
# above this ONNX size the numpy reference evaluator takes minutes a sample (a ResNet-50 in
# FP16): onnxruntime runs the FP16 graph instead, with a note that it upcasts most FP16 ops
REFERENCE_MAX_BYTES = 20_000_000


def feeds_for(model: str, data: Optional[str], samples: int,
              notes: Optional[List[str]] = None) -> List[Feed]:
    """The user's data (at most `samples` samples), or random inputs with a note."""
    from workbench.compare.layer_compare import sample_feeds
    from workbench.runtime.runners import limit_samples

    found: List[Any] = []
    feeds = sample_feeds(model, calibration=data, allow_random=True, findings=found)
    if notes is not None:
        notes += [f.message for f in found]
    from workbench.runtime.runners import batched_inputs

    return limit_samples(feeds, samples, batched_inputs(model))


def engine_runner(engine_path: str, backend: str = "auto", profile_index: int = -1) -> Any:
    """The engine as a Runner (`workbench.runtime.trtrunner.TensorRTRunner`, through the worker), on
    optimization profile `profile_index` (-1: the first that holds the feed)."""
    from workbench.runtime.trtrunner import TensorRTRunner

    if profile_index < 0:  # (the runner's default: the first profile that holds the feed)
        return TensorRTRunner(engine_path, backend=backend)
    return TensorRTRunner(engine_path, backend=backend, profile_index=profile_index)


def _chunks(feeds: Sequence[Feed], limit: Optional[int],
            batched: Optional[Set[str]] = None) -> List[Feed]:
    """Feeds of at most `limit` samples each (an engine's profile caps its batch), cut along
    axis 0 of the `batched` inputs (`workbench.runtime.runners.batched_inputs`; None: every input;
    empty: a feed is one sample, never cut)."""
    if not limit or batched == set():
        return list(feeds)
    out: List[Feed] = []
    for f in feeds:
        cut = set(f) if not batched else set(batched) & set(f)
        n = min((len(f[k]) for k in cut if np.ndim(f[k])), default=1)
        for i in range(0, n, limit):
            out.append({k: (v[i:i + limit] if k in cut and np.ndim(v) else v)
                        for k, v in f.items()})
    return out


def max_batch(profiles: Sequence[Dict[str, List[List[int]]]],
              batched: Optional[Set[str]] = None) -> Optional[int]:
    """The largest batch (axis 0) the first profile allows for every input whose axis 0 is a
    batch (`batched`, `workbench.runtime.runners.batched_inputs`; None: every input), if any."""
    if not profiles or batched == set():
        return None
    dims = [trio[2][0] for name, trio in profiles[0].items() if trio and trio[2]
            and (not batched or name in batched)]
    return min(dims) if dims else None


def measure(model: str, candidate_onnx: str, precision: str, feeds: Sequence[Feed], *,
            engine: Optional[str] = None, backend: str = "auto", batch_limit: Optional[int] = None,
            notes: Optional[List[str]] = None, profile_index: int = -1, metric: Any = None,
            budget: Any = None) -> Dict[str, Any]:
    """{source, error_rel, error_max_abs, cosine, passed, elementwise_passed, verdict, atol,
    rtol, samples, outputs}: `passed` is the verdict (`workbench.runtime.verdict`: `metric` within
    `budget`, else the default per output kind), the elementwise atol/rtol rule beside it."""
    from workbench.runtime.comparison import compare_outputs
    from workbench.precision.table import is_low_float
    from workbench.precision import table
    from workbench.runtime.runners import OnnxRuntimeRunner, batched_inputs, low_float_runner, make_runner

    batches = _chunks(feeds, batch_limit, batched_inputs(model))
    ref = OnnxRuntimeRunner(model).infer_all(batches)
    got, source = None, "onnx-cpu"
    if engine is not None:
        try:
            runner = engine_runner(engine, backend, profile_index)
            got, source = runner.infer_all(batches), "engine"
        except Exception as e:  # the engine cannot run here: say so, measure what we can
            if notes is not None:
                notes.append("the engine could not run here (" + " ".join(str(e).split())[:200]
                             + "): accuracy measured on the transformed ONNX on CPU")
    if got is None:
        kind = low_float_runner(candidate_onnx)  # FP16/BF16 storage emulated where it can be
        if kind == "reference" and os.path.getsize(candidate_onnx) > REFERENCE_MAX_BYTES:
            kind = "onnxruntime"  # the numpy evaluator takes minutes a sample on big models
            if notes is not None and is_low_float(precision):
                notes.append("large model the emulation cannot take (control flow): the FP16 "
                             "ONNX ran in onnxruntime, which computes most FP16 ops in FP32 "
                             "(overflow would not show); run on a GPU for the engine's own "
                             "error")
        got = make_runner(kind, candidate_onnx).infer_all(batches)
    atol, rtol = table.tolerances(precision)
    c = compare_outputs(ref, got, atol, rtol)
    from workbench.runtime.verdict import judge

    v = judge(c, precision, metric=metric, budget=budget, ref=ref, got=got)
    worst = max(c.outputs.values(), key=lambda t: t.rel if math.isfinite(t.rel) else math.inf,
                default=None)
    return {"source": source, "error_rel": _num(c.rel), "error_max_abs": _num(c.max_abs),
            "cosine": _num(min((t.cosine for t in c.outputs.values()), default=1.0)),
            "passed": v.passed, "elementwise_passed": c.passed, "verdict": v.words(),
            "verdict_rule": v.rule, "atol": atol, "rtol": rtol, "samples": c.samples,
            "worst_output": worst.name if worst is not None else None, "reason": c.reason,
            "outputs": {k: {"rel": _num(t.rel), "max_abs": _num(t.max_abs),
                            "cosine": _num(t.cosine), "passed": v.outputs[k].passed,
                            "elementwise_passed": t.passed, "kind": v.outputs[k].kind,
                            "verdict": v.outputs[k].words}
                        for k, t in c.outputs.items()}}


def _num(v: float) -> Any:
    """A float JSON can hold: inf/NaN as strings (the comparison's own convention)."""
    v = float(v)
    return v if math.isfinite(v) else str(v)
