"""Summaries of a LayerTable: totals, by type/precision, reformat overhead, top layers, fusion
statistics, TREx-style lints, and engine-vs-engine comparison (e.g. FP32 vs FP16)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import pandas as pd

from workbench.core.errors import Finding
from workbench.timing import io_advice
from workbench.timing.table import LayerTable

_FLOAT_LOW = ("FP16", "BF16", "FP8", "INT8", "FP4", "INT4")


def _group(t: LayerTable, col: str) -> List[Dict[str, Any]]:
    d = t.df[~t.df["is_constant"]]
    total = t.total_ms
    g = d.groupby(d[col].replace("", "unknown"), sort=False).agg(
        time_ms=("time_ms", "sum"), layers=("name", "size"))  # sum skips NaN
    g = g.sort_values("time_ms", ascending=False)
    return [{col: k, "time_ms": float(r.time_ms), "layers": int(r.layers),
             "pct": float(r.time_ms / total * 100) if total > 0 else None}
            for k, r in g.iterrows()]


def by_type(t: LayerTable) -> List[Dict[str, Any]]:
    return _group(t, "type")


def by_precision(t: LayerTable) -> List[Dict[str, Any]]:
    return _group(t, "precision")


def reformat_overhead(t: LayerTable) -> Dict[str, Any]:
    d = t.df[t.df["is_reformat"]]
    ms = float(np.nansum(d["time_ms"]))
    return {"layers": int(len(d)), "time_ms": ms,
            "pct": ms / t.total_ms * 100 if t.total_ms > 0 else None}


def top_layers(t: LayerTable, n: int = 10) -> List[Dict[str, Any]]:
    d = t.df.dropna(subset=["time_ms"]).sort_values("time_ms", ascending=False).head(n)
    return [{"name": r.name, "type": r.type, "time_ms": float(r.time_ms),
             "pct": None if r.pct != r.pct else float(r.pct), "precision": r.precision,
             "tactic": r.tactic, "onnx_nodes": list(r.onnx_nodes), "mapping": r.mapping}
            for r in d.itertuples()]


def fusion_stats(t: LayerTable) -> Dict[str, Any]:
    """How many ONNX nodes each engine layer fuses (direct mappings only)."""
    d = t.df[(t.df["n_onnx"] > 0)]
    counts = d["n_onnx"].to_numpy()
    hist = {str(k): int(v) for k, v in sorted(pd.Series(counts).value_counts().items())}
    out = {"layers_with_onnx": int(len(d)), "onnx_nodes_in_layers": int(counts.sum()),
           "mean_nodes_per_layer": float(counts.mean()) if len(counts) else None,
           "max_nodes_per_layer": int(counts.max()) if len(counts) else 0,
           "histogram": hist}
    if len(d):
        big = d.sort_values("n_onnx", ascending=False).iloc[0]
        out["largest"] = {"name": big["name"], "type": big["type"], "n_onnx": int(big["n_onnx"])}
    return out


def lint(t: LayerTable, reformat_pct: float = 10.0) -> List[Finding]:
    """Cheap TREx-style checks: reformat-heavy engines, FP32 compute layers left in a
    reduced-precision engine, unmapped time."""
    out: List[Finding] = []
    if not t.has_times:
        return out
    ro = reformat_overhead(t)
    advice = io_advice.advise(t)  # the I/O reformats and the build change that removes them
    step = ""
    if advice:
        step = (f"; {advice['time_ms']:.3f} ms of it at the I/O: rebuild with "
                f"{advice['cli']} (predicted saving {advice['time_ms']:.3f} ms, measured "
                "from this profile)")
    if ro["pct"] is not None and ro["pct"] >= reformat_pct:
        names = t.df[t.df["is_reformat"]].sort_values("time_ms", ascending=False)["name"]
        out.append(Finding(
            "warning", "reformat-heavy",
            f"reformat/copy layers take {ro['pct']:.1f}% of engine time "
            f"({ro['time_ms']:.3f} ms in {ro['layers']} layers)" + step,
            hint="keep the I/O in the engine's precision and format (" +
                 (advice["cli"] if advice else "e.g. FP16 I/O, --inputIOFormats") +
                 "), and avoid precision islands that force conversions",
            source="timing-lint", extra={"layers": names.head(10).tolist(),
                                         "time_ms": ro["time_ms"],
                                         **({"next_step": advice} if advice else {})}))
    elif advice:
        out.append(Finding(
            "info", "io-reformat",
            f"{len(advice['layers'])} reformat layer(s) at the engine's I/O take "
            f"{advice['time_ms']:.3f} ms: rebuild with {advice['cli']} (predicted saving, "
            "measured from this profile)", hint=advice["cli"], source="timing-lint",
            extra={"layers": [la["name"] for la in advice["layers"]], "next_step": advice}))
    d = t.df[~t.df["is_constant"] & ~t.df["is_reformat"] & ~t.df["is_noop"]]
    precs = set(d["precision"])
    if precs & set(_FLOAT_LOW):
        fp32 = d[(d["precision"] == "FP32") & (d["time_ms"] > 0)]
        if len(fp32):
            ms = float(fp32["time_ms"].sum())
            nodes = sorted({n for ns in fp32["onnx_nodes"] for n in ns})
            out.append(Finding(
                "warning", "fp32-in-reduced-precision",
                f"{len(fp32)} compute layer(s) still run in FP32 in a reduced-precision engine "
                f"({ms:.3f} ms, {ms / t.total_ms * 100:.1f}% of time)", nodes=nodes[:50],
                hint="check why: a precision constraint, an unsupported FP16 kernel, or an "
                     "FP32 island from Q/DQ placement; exclude it on purpose or convert it",
                source="timing-lint", extra={"layers": fp32["name"].tolist()[:20],
                                                 "time_ms": ms}))
    out.extend(_conv_alignment(t))
    cov = t.coverage()
    if cov["mapped_pct"] is not None and cov["mapped_pct"] < 90 and t.index is not None:
        out.append(Finding(
            "info", "timing-unmapped",
            f"only {cov['mapped_pct']:.1f}% of engine time maps to ONNX nodes",
            hint="build with ProfilingVerbosity.DETAILED so layers carry ONNX Metadata",
            source="timing-lint"))
    return out


_ALIGN = {"FP16": 8, "BF16": 8, "INT8": 16, "FP8": 16}


def _conv_alignment(t: LayerTable) -> List[Finding]:
    """Tensor-core convolutions want channel counts that are multiples of 8 (FP16/BF16) or 16
    (INT8/FP8); other counts are padded, wasting work."""
    rows = []
    for layer, (prec, tm, nodes) in zip(t.layers.layers, zip(t.df["precision"], t.df["time_ms"],
                                                             t.df["onnx_nodes"])):
        need = _ALIGN.get(prec)
        if need is None or layer.raw.get("ParameterType") != "Convolution":
            continue
        cin = layer.inputs[0].shape[1] if layer.inputs and len(layer.inputs[0].shape) > 1 else None
        cout = layer.raw.get("OutMaps")
        bad = [c for c in (cin, cout) if isinstance(c, int) and c > 0 and c % need]
        if bad:
            rows.append((layer.name, 0.0 if tm != tm else float(tm), nodes, cin, cout, need))
    if not rows:
        return []
    ms = sum(r[1] for r in rows)
    return [Finding(
        "info", "conv-channels-unaligned",
        f"{len(rows)} convolution(s) have channel counts that are not multiples of the tensor-core "
        f"width ({ms:.3f} ms); e.g. '{rows[0][0]}' in={rows[0][3]} out={rows[0][4]} "
        f"(wants multiples of {rows[0][5]})",
        nodes=sorted({n for r in rows for n in r[2]})[:50],
        hint="pad channels to a multiple of 8 (FP16) / 16 (INT8) where the model allows; the "
             "first convolution of an RGB image (3 channels) is expected here",
        source="timing-lint", extra={"layers": [r[0] for r in rows][:20], "time_ms": ms})]


def summarize(t: LayerTable, top: int = 10) -> Dict[str, Any]:
    """The JSON summary the CLI prints and the report shows."""
    out: Dict[str, Any] = {
        "source": t.source, "schema": t.layers.schema, "layers": len(t),
        "timed_layers": int(t.df["time_ms"].notna().sum()), "statistic": t.stat,
        "total_ms": t.total_ms if t.has_times else None,
        "total_mean_ms": float(np.nansum(t.df["time_mean_ms"])) if t.has_times else None,
        "by_type": by_type(t), "by_precision": by_precision(t),
        "reformat": reformat_overhead(t), "top_layers": top_layers(t, top),
        "fusion": fusion_stats(t), "onnx_mapping": t.coverage(),
        "findings": [f.to_dict() for f in lint(t)],
        "warnings": [w.to_dict() for w in t.warnings],
    }
    if t.profile is not None:
        out["profile"] = {"source": t.profile.source, "kind": t.profile.kind,
                          "iterations": t.profile.iterations}
        lat = t.profile.latency_stats()
        if lat:
            out["latency"] = lat
        if t.profile.throughput:
            out["throughput"] = t.profile.throughput
    return out


def speed_words(speedup: Optional[float]) -> str:
    """A speedup (baseline time / this engine's time) in words: 'x1.52 faster', 'x1.03 slower'
    (a slowdown reads as one, never 'x0.97 faster'), 'same speed (x1.00)', or 'n/a'."""
    if speedup is None or not speedup > 0 or speedup == float("inf"):
        return "n/a"
    if f"{speedup:.2f}" == "1.00" and f"{1 / speedup:.2f}" == "1.00":
        return "same speed (x1.00)"
    return f"x{speedup:.2f} faster" if speedup > 1 else f"x{1 / speedup:.2f} slower"


def compare(a: LayerTable, b: LayerTable, names: tuple = ("a", "b")) -> Dict[str, Any]:
    """Engine A vs engine B (e.g. FP32 vs FP16 of the same model): totals and speedup
    (A time / B time), per layer type, per ONNX node (layer time shared by its nodes) and per
    layer covering the same ONNX nodes in both; `speed` says B's speedup in words."""
    na, nb = names
    ta, tb = a.total_ms, b.total_ms
    ty_a = {r["type"]: r["time_ms"] for r in by_type(a)}
    ty_b = {r["type"]: r["time_ms"] for r in by_type(b)}
    types = []
    for ty in sorted(set(ty_a) | set(ty_b), key=lambda k: -(ty_a.get(k, 0) + ty_b.get(k, 0))):
        x, y = ty_a.get(ty), ty_b.get(ty)
        types.append({"type": ty, f"{na}_ms": x, f"{nb}_ms": y,
                      "speedup": (x / y) if x is not None and y else None})
    pr_a = {r["precision"]: r["time_ms"] for r in by_precision(a)}
    pr_b = {r["precision"]: r["time_ms"] for r in by_precision(b)}
    nodes = node_comparison(a, b, names)
    matched = nodes.dropna(subset=[f"{na}_ms", f"{nb}_ms"])
    same = _same_layers(a, b, names)
    return {
        "names": [na, nb], f"{na}_total_ms": ta, f"{nb}_total_ms": tb,
        "speedup": ta / tb if tb > 0 else None,
        "speed": speed_words(ta / tb if tb > 0 else None),
        "by_type": types,
        "by_precision": {na: pr_a, nb: pr_b},
        "onnx_nodes_compared": int(len(matched)),
        "node_time_matched_ms": {na: float(matched[f"{na}_ms"].sum()),
                                 nb: float(matched[f"{nb}_ms"].sum())},
        "top_node_gains": [
            {"node": r.node, f"{na}_ms": float(getattr(r, f"{na}_ms")),
             f"{nb}_ms": float(getattr(r, f"{nb}_ms")), "saved_ms": float(r.saved_ms),
             "speedup": None if r.speedup != r.speedup else float(r.speedup)}
            for r in matched.sort_values("saved_ms", ascending=False).head(10).itertuples()],
        "same_layers": int(len(same)),
        "reformat": {na: reformat_overhead(a), nb: reformat_overhead(b)},
    }


def node_comparison(a: LayerTable, b: LayerTable, names: tuple = ("a", "b")) -> pd.DataFrame:
    """Per-ONNX-node time in each engine: node, op, scope, <a>_ms, <b>_ms, speedup, saved_ms."""
    na, nb = names
    x = a.node_times(include_attributed=True).set_index("node")
    y = b.node_times(include_attributed=True).set_index("node")
    df = pd.DataFrame({f"{na}_ms": x["time_ms"], f"{nb}_ms": y["time_ms"]})
    df["op"] = x["op"].combine_first(y["op"])
    df["speedup"] = df[f"{na}_ms"] / df[f"{nb}_ms"].replace(0.0, np.nan)
    df["saved_ms"] = df[f"{na}_ms"].fillna(0) - df[f"{nb}_ms"].fillna(0)
    df.index.name = "node"
    return df.reset_index()


def _same_layers(a: LayerTable, b: LayerTable, names: tuple) -> pd.DataFrame:
    """Layers of A and B that cover exactly the same ONNX nodes (direct mappings)."""
    na, nb = names

    def keyed(t: LayerTable) -> pd.DataFrame:
        d = t.df[t.df["n_onnx"] > 0]
        return pd.DataFrame({"key": [tuple(sorted(n)) for n in d["onnx_nodes"]],
                             "name": d["name"].values, "time_ms": d["time_ms"].values})

    ka, kb = keyed(a), keyed(b)
    ka = ka.drop_duplicates("key")
    kb = kb.drop_duplicates("key")
    m = ka.merge(kb, on="key", suffixes=(f"_{na}", f"_{nb}"))
    m["speedup"] = m[f"time_ms_{na}"] / m[f"time_ms_{nb}"].replace(0.0, np.nan)
    return m


def same_layers(a: LayerTable, b: LayerTable, names: tuple = ("a", "b")) -> pd.DataFrame:
    """Public view of the layers the two engines share (same ONNX node set), with speedups."""
    return _same_layers(a, b, names)
