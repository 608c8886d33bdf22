"""The matrix as a pandas table and the Pareto data drawn from it.

Pareto axes: the error (worst output's relative error against onnxruntime FP32) against the
latency P50 where the variants were timed on a GPU; else against the latency predicted from
recorded per-layer profiles of the uniform engines (said as predicted); with neither, an
accuracy-only view (the engine size is no latency: an INT8 engine can be larger than its
FP32 one). `pareto_axes` says which and why. A point is on the front when no other variant
of the same model is at least as good on both axes and better on one (errors of different
models are not comparable); the accuracy-only view has no front.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

# the table's columns, in the order people read them (JSON results hold more)
COLUMNS = ["id", "model", "precision", "target", "profile", "opt_level", "status",
           "cache_hit", "resumed", "size_bytes", "build_seconds", "error_rel", "error_max_abs",
           "cosine", "accuracy_passed", "accuracy_verdict", "accuracy_source", "latency_p50_ms",
           "latency_predicted_ms", "latency_p99_ms",
           "throughput_qps", "engine_path", "error"]


LATENCY = "latency_p50_ms"
PREDICTED = "latency_predicted_ms"
SIZE = "size_mb"
ERROR = "error_rel"


def results_frame(results: Sequence[Dict[str, Any]]) -> Any:
    """One row per variant with the table's columns (plus `size_mb`), in the given order."""
    import pandas as pd

    rows = [{c: r.get(c) for c in COLUMNS} for r in results]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df[PREDICTED] = pd.to_numeric(df[PREDICTED], errors="coerce")
    df[SIZE] = pd.to_numeric(df["size_bytes"], errors="coerce") / 1e6
    return df


def pareto_axes(df: Any) -> Dict[str, str]:
    """{"x": column, "y": column, "x_title", "note": why, "kind": "measured" | "predicted" |
    "accuracy-only"}: measured latency where any variant has one, else predicted latency,
    else the variants themselves on x (accuracy only, no front)."""
    import pandas as pd

    def any_of(col: str) -> bool:
        return col in df and bool(pd.to_numeric(df[col], errors="coerce").notna().any())

    if any_of(LATENCY):
        return {"x": LATENCY, "y": ERROR, "x_title": "latency P50 (ms)", "kind": "measured",
                "note": "latency measured on the GPU"}
    if any_of(PREDICTED):
        return {"x": PREDICTED, "y": ERROR, "x_title": "latency, predicted (ms)",
                "kind": "predicted",
                "note": "latency predicted from recorded per-layer profiles of the uniform "
                        "engines, not measured: time the engines on a GPU (--gpus) to measure"}
    return {"x": "id", "y": ERROR, "x_title": "variant", "kind": "accuracy-only",
            "note": "accuracy only: no latency was measured (the variants were not timed on a "
                    "GPU: --gpus) or predicted (no recorded per-layer profiles: "
                    "--latency-profiles DIR); engine size is not latency, so it is not "
                    "plotted as one"}


def _dominated(a: Sequence[float], b: Sequence[float]) -> bool:
    """Is point a dominated by b (b no worse on both axes, better on one)?"""
    return b[0] <= a[0] and b[1] <= a[1] and (b[0] < a[0] or b[1] < a[1])


def pareto_front(df: Any, x: Optional[str] = None, y: str = ERROR) -> Any:
    """`df` (built variants with both figures) with a boolean `pareto` column: on the front
    of its model."""
    import pandas as pd

    x = x or pareto_axes(df)["x"]
    ok = df[df["status"] == "ok"].copy()
    if x not in (LATENCY, PREDICTED, SIZE):  # accuracy only: no front on a category axis
        ok[y] = pd.to_numeric(ok[y], errors="coerce")
        ok = ok[ok[y].notna() & ok[y].map(lambda v: math.isfinite(v))]
        ok["pareto"] = False
        return ok
    ok[x] = pd.to_numeric(ok[x], errors="coerce")
    ok[y] = pd.to_numeric(ok[y], errors="coerce")
    ok = ok[ok[x].notna() & ok[y].notna() & ok[y].map(lambda v: math.isfinite(v))]
    flags: List[bool] = []
    pts = list(zip(ok["model"], ok[x], ok[y]))
    for m, px, py in pts:
        flags.append(not any(_dominated((px, py), (qx, qy)) for n, qx, qy in pts if n == m))
    ok["pareto"] = flags
    return ok
