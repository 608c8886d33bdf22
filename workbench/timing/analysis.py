"""A workbench timing analysis as NVIDIA trt-perf-analysis `analyze-data.json` (schema 1.0).

    from workbench.timing import LayerTable
    from workbench.timing.analysis import write_analyze_data
    write_analyze_data("analyze-data.json", LayerTable.build("e.layers.json", "e.profile.json"))

Mapping: layers -> `layers` (inspector objects, tensors normalised to the schema's `Name`,
`Dimensions`, `Format`, `Datatype`); per-layer times -> `profile` (trtexec --exportProfile
entries) and `records`; `by_type` -> `type_breakdown`; the timing lint (reformat-heavy, FP32 in
a reduced-precision engine, unaligned convolution channels, unmapped time) -> scored `issues`
(score: the share of engine time the finding covers, plus a base by severity; evidence: the
finding's message and layers; next_check: its hint). Their report (`report_template/`) and the
TimingPanel both open the result.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from workbench.core.errors import Finding
from workbench.formats import analyze_data
from workbench.formats.layerinfo import EngineLayer, TensorInfo
from workbench.timing.summary import by_type, lint
from workbench.timing.table import LayerTable

_BASE_SCORE = {"error": 70.0, "warning": 50.0, "info": 20.0}
_TITLES = {"reformat-heavy": "Reformat/copy layers take a large share of time",
           "fp32-in-reduced-precision": "FP32 compute layers in a reduced-precision engine",
           "conv-channels-unaligned": "Convolution channels not aligned to tensor-core width",
           "timing-unmapped": "Engine time that maps to no ONNX node"}


def _num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) else 0.0


def _tensor(t: TensorInfo) -> Dict[str, Any]:
    out: Dict[str, Any] = {"Name": t.name, "Dimensions": [int(x) for x in t.shape]}
    if t.format:
        out["Format"] = t.format
    out["Datatype"] = t.precision or None
    return out


def _layer(layer: EngineLayer) -> Dict[str, Any]:
    """An inspector layer object that meets the schema (raw extra fields kept)."""
    raw = {k: v for k, v in layer.raw.items() if k not in ("Inputs", "Outputs", "Constants")}
    raw.update({"Name": layer.name, "LayerType": layer.type,
                "Inputs": [_tensor(t) for t in layer.inputs],
                "Outputs": [_tensor(t) for t in layer.outputs]})
    if layer.tactic and "TacticName" not in raw:
        raw["TacticName"] = layer.tactic
    if raw.get("TacticName") is not None and not isinstance(raw["TacticName"], str):
        raw["TacticName"] = str(raw["TacticName"])
    if not isinstance(raw.get("StreamId", None), (int, str, type(None))):
        raw["StreamId"] = str(raw["StreamId"])
    return raw


def _tags(layer: EngineLayer) -> List[str]:
    """Their report's layer tags, from the layer type and name (tactic names say 'gemm' for
    implicit-GEMM convolutions too, so only attention kernels are recognised by tactic)."""
    t, name = layer.type.lower(), layer.name.lower()
    text = f"{name} {layer.tactic}".lower()
    tags = []
    if layer.is_reformat:
        tags.append("reformat")
    if t == "kgen":
        tags.append("kgen")
    if t in ("gemm", "matrix_multiply", "matrixmultiply", "caskgemmlayer") or "matmul" in name \
            or "gemm" in name:
        tags.append("matmul/gemm")
    if "convolution" in t or "/conv" in name:
        tags.append("convolution")
    if "attention" in text or "fmha" in text or "mha" in text:
        tags.append("attention")
    return tags or ["other"]


def _graph(layers: List[EngineLayer]) -> Dict[str, Any]:
    produced = {t.name for x in layers for t in x.outputs if t.name}
    consumed = [t.name for x in layers for t in x.inputs if t.name]
    edges = sum(1 for n in consumed if n in produced)
    ext = list(dict.fromkeys(n for n in consumed if n not in produced))
    used = set(consumed)
    outs = list(dict.fromkeys(t.name for x in layers for t in x.outputs
                              if t.name and t.name not in used))
    return {"edge_count": edges, "external_inputs": ext, "graph_outputs": outs}


def _model(t: LayerTable, name: Optional[str], ext: List[str]) -> Dict[str, Any]:
    shapes = {}
    for layer in t.layers.layers:
        for ti in layer.inputs:
            if ti.name in ext and ti.name not in shapes and ti.shape:
                shapes[ti.name] = [int(x) for x in ti.shape]
    return {"name": name, "category": "unknown", "confidence": "low",
            "evidence": ["the workbench does not guess the model family"], "config_path": None,
            "hidden_size": None, "intermediate_size": None, "num_layers": None,
            "num_heads": None, "max_position_embeddings": None, "sequence_length": None,
            "dynamic_dims": any(x < 0 for s in shapes.values() for x in s),
            "input_shapes": shapes}


def issue_of(f: Finding, t: LayerTable) -> Dict[str, Any]:
    """One timing finding as a scored issue: base score by severity (error 70, warning 50,
    info 20) plus half the share of engine time the finding covers (its `time_ms`, else its
    listed layers), so the costliest issue sorts first."""
    extra = f.extra or {}
    layers = list(extra.get("layers") or [])
    share = 0.0
    if t.total_ms > 0 and isinstance(extra.get("time_ms"), (int, float)):
        share = float(extra["time_ms"]) / t.total_ms * 100.0  # all the finding's layers
    elif layers and t.total_ms > 0:
        d = t.df[t.df["name"].isin(layers)]
        share = float(d["time_ms"].sum()) / t.total_ms * 100.0
    evidence = f.message + (f"; layers: {', '.join(layers[:5])}" if layers else "")
    return {"score": round(min(100.0, _BASE_SCORE.get(f.severity, 20.0) + share / 2), 1),
            "title": _TITLES.get(f.code, f.code.replace("-", " ")),
            "evidence": evidence,
            "next_check": f.hint or "inspect the layers named in the evidence",
            "confidence": "high" if layers and t.has_times else "medium"}


def _records(t: LayerTable) -> List[Dict[str, Any]]:
    out = []
    for layer, (tm, mean, med, pct, count) in zip(t.layers.layers, zip(
            t.df["time_ms"], t.df["time_mean_ms"], t.df["time_median_ms"], t.df["pct"],
            t.df["count"])):
        if tm != tm:  # no time for this layer
            continue
        avg = _num(mean)
        out.append({"name": layer.name, "layer_type": layer.type, "raw_layer_type": layer.type,
                    "tactic": layer.tactic or None,
                    "time_ms": avg * (count if count == count and count > 0 else 1),
                    "avg_ms": avg, "median_ms": _num(med if med == med else mean),
                    "percentage": _num(pct), "tags": _tags(layer), "layer": _layer(layer)})
    return out


def _breakdown(items: List[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
    return [{"name": str(x[key]), "count": int(x["layers"]), "time_ms": _num(x["time_ms"]),
             "percentage": _num(x["pct"])} for x in items]


def _tag_breakdown(records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    agg: Dict[str, List[float]] = {}
    for r in records:
        for tag in r["tags"]:
            a = agg.setdefault(tag, [0, 0.0, 0.0])
            a[0] += 1
            a[1] += r["avg_ms"]
            a[2] += r["percentage"]
    return sorted(({"name": k, "count": int(v[0]), "time_ms": v[1], "percentage": v[2]}
                   for k, v in agg.items()), key=lambda x: -x["time_ms"])


def result_of(t: LayerTable, label: str = "engine", model_name: Optional[str] = None,
              findings: Optional[List[Finding]] = None) -> Dict[str, Any]:
    """One engine's result (layer_profile when the table has times, else layer_only)."""
    layers = t.layers.layers
    graph = _graph(layers)
    prof_src = t.profile.source if t.profile is not None else None
    messages = [{"level": w.severity if w.severity in ("error", "warning", "info") else "info",
                 "message": w.message} for w in t.warnings]
    mode = "layer_profile" if t.has_times else "layer_only"
    result: Dict[str, Any] = {
        "label": label,
        "validation": {"status": "passed", "analysis_mode": mode, "messages": messages,
                       "source_paths": {"layer": t.layers.source, "profile": prof_src},
                       "report_available": True},
        "layers": [_layer(x) for x in layers], "layer_count": len(layers), "graph": graph,
        "model": _model(t, model_name, graph["external_inputs"]),
        "engines": {"engine_files": [], "subgraphs": [],
                    "streams": sorted({x.raw["StreamId"] for x in layers
                                       if isinstance(x.raw.get("StreamId"), int)}),
                    "inferred_count": 1, "source": "workbench timing"},
    }
    if mode == "layer_profile":
        records = _records(t)
        found = lint(t) if findings is None else findings
        issues = sorted((issue_of(f, t) for f in found), key=lambda x: -x["score"])
        count = t.profile.iterations if t.profile is not None else None
        result.update({
            "profile": [{"name": r["name"], "timeMs": r["time_ms"], "averageMs": r["avg_ms"],
                         "medianMs": r["median_ms"], "percentage": r["percentage"]}
                        for r in records],
            "profile_count": len(records), "count": count,
            "count_source": f"{t.profile.kind} profile" if t.profile is not None else "none",
            "timing": {"average_inference_ms": sum(r["avg_ms"] for r in records),
                       "total_time_ms": sum(r["time_ms"] for r in records),
                       "total_percentage": sum(r["percentage"] for r in records)},
            "records": records, "type_breakdown": _breakdown(by_type(t), "type"),
            "tag_breakdown": _tag_breakdown(records), "issues": issues,
            "positives": _positives(t, found)})
    return result


def to_analyze_data(t: LayerTable, label: str = "engine", model_name: Optional[str] = None,
                    findings: Optional[List[Finding]] = None,
                    others: Sequence[Tuple[str, LayerTable]] = ()) -> Dict[str, Any]:
    """The analyze-data.json document for one engine's timing (see module docstring);
    `others`: more (label, table) results, e.g. the FP32 baseline (their report's tabs)."""
    results = [result_of(t, label, model_name, findings)]
    results += [result_of(o, lab, model_name) for lab, o in others]
    src = t.layers.source
    folder = os.path.dirname(os.path.abspath(src)) if not src.startswith("<") else None
    return {"schema_version": analyze_data.SCHEMA_VERSION, "folder": folder,
            "model_name": model_name,
            "validation": {"status": "passed", "backend_count": len(results),
                           "passed_count": len(results), "failed_count": 0, "warnings": []},
            "results": results}


def _positives(t: LayerTable, found: List[Finding]) -> List[str]:
    codes = {f.code for f in found}
    out = []
    if "reformat-heavy" not in codes:
        out.append("reformat/copy layers take a small share of engine time")
    if "fp32-in-reduced-precision" not in codes:
        out.append("no FP32 compute layers left in a reduced-precision engine")
    cov = t.coverage()
    if cov.get("mapped_pct") is not None and cov["mapped_pct"] >= 90:
        out.append(f"{cov['mapped_pct']:.0f}% of engine time maps to ONNX nodes")
    return out


def write_analyze_data(path: Any, t: LayerTable, label: str = "engine",
                       model_name: Optional[str] = None,
                       others: Sequence[Tuple[str, LayerTable]] = ()) -> Path:
    """Write `to_analyze_data(t, ...)` to `path` atomically; returns the path."""
    return analyze_data.write(path, to_analyze_data(t, label, model_name, others=others))
