"""The matrix's predicted latency: each built variant not timed on a GPU gets the latency
`workbench.timing.predict.LatencyModel` predicts from recorded per-layer profiles of the
model's uniform engines. A uniform variant is its recorded engine's total; one with a float
fallback ("int8+fp16") computes its quantized nodes at the target's recorded time and the
rest at the fallback's (`LatencyModel.predict(fallback=, quantized=)`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from workbench.core.errors import WorkbenchError


def add_predicted_latency(results: List[Dict[str, Any]], folder: Any) -> None:
    """Set `latency_predicted_ms` (and `latency_prediction`, what it was predicted from) on
    each built variant without a measured latency whose model has the recorded engines its
    precision needs in `folder` (`predicted_latency`)."""
    from workbench.timing.predict import LatencyModel, find_profiles

    models: Dict[str, Any] = {}
    for r in results:
        if r.get("status") != "ok" or r.get("latency_p50_ms") is not None:
            continue
        path = r.get("model_path") or r.get("model")
        if path not in models:
            files = find_profiles(folder, path)
            models[path] = LatencyModel.from_files(files) if files else None
        lm = models[path]
        got = predicted_latency(lm, r) if lm is not None else None
        if got is not None:
            r["latency_predicted_ms"] = got[0]
            r["latency_prediction"] = got[1] + " in " + str(folder)


def predicted_latency(lm: Any, row: Mapping[str, Any]) -> Optional[Tuple[float, str]]:
    """(ms, what it was predicted from) for one variant's result row (its `precision` as the
    matrix names it, "fp16" or "int8+fp16"), or None where `lm` lacks a recorded engine the
    prediction needs (the target's; with a fallback, the fallback's too)."""
    from workbench.precision.spec import parse_precision

    try:
        target, fallback = parse_precision(row.get("precision"))
    except WorkbenchError:
        return None
    ms = lm.uniform(target)
    if ms is None:
        return None
    if not fallback:
        return ms, f"predicted from the recorded {target} engine's per-layer profile"
    if lm.uniform(fallback) is None:
        return None
    quantized = quantized_nodes(row)
    ms = lm.predict({}, default=target, fallback=fallback, quantized=quantized)
    return float(ms), (f"predicted from the recorded {target} and {fallback} engines' "
                       f"per-layer profiles: {len(quantized)} quantized node(s) at the "
                       f"{target} engine's time, the rest at the {fallback} engine's")


def quantized_nodes(row: Mapping[str, Any]) -> Set[str]:
    """The nodes a variant computes quantized: those the Q/DQ ONNX TensorRT was given
    quantizes (`onnx_path`, the strongly typed route: `core.qdq.quantized_nodes`); where it
    got the model itself (the builder-flag route) the nodes of an op the quantizer gives Q/DQ
    (`core.qdq.QUANT_OPS`), as the precision planner predicts them."""
    import onnx

    from workbench.core.qdq import QDQ_OPS, QUANT_OPS
    from workbench.core.qdq import quantized_nodes as qdq_quantized

    given = row.get("onnx_path")
    if given and Path(given).is_file():
        proto = onnx.load(str(given), load_external_data=False)
        if any(n.op_type in QDQ_OPS for n in proto.graph.node):
            return set(qdq_quantized(proto))
    model = row.get("model_path")
    if not model or not Path(model).is_file():
        return set()
    proto = onnx.load(str(model), load_external_data=False)
    return {n.name for n in proto.graph.node if n.op_type in QUANT_OPS}
