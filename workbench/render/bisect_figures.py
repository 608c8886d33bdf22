"""The accuracy-vs-latency figure of an FP32-exclusion bisection (`compare.bisect`)."""
from __future__ import annotations

import math
from typing import Any


def bisect_figure(result: Any) -> Any:
    """A plotly figure: one point per prefix of the exclusions (x: P50 latency where measured,
    else the number of FP32 nodes; y: worst output relative error, log scale)."""
    import plotly.graph_objects as go

    rows = result.rows if hasattr(result, "rows") else result["rows"]
    timed = all(r.get("p50_ms") is not None for r in rows)
    xs = [r["p50_ms"] if timed else len(r["excluded"]) for r in rows]
    ys = [r["worst_rel"] if not isinstance(r["worst_rel"], str) else float("nan") for r in rows]
    ys = [y if (isinstance(y, float) and math.isfinite(y) and y > 0) or
          (isinstance(y, int) and y > 0) else None for y in ys]
    text = [("+" + r["added"]) if r["added"] else "no FP32 node" for r in rows]
    colours = ["#2ca02c" if r["passed"] else "#d62728" for r in rows]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=text,
                               textposition="top center", marker={"color": colours, "size": 10}))
    fig.update_layout(title="FP32 exclusions: accuracy vs latency",
                      xaxis_title="P50 latency (ms)" if timed else "nodes kept in FP32",
                      yaxis_title="worst output relative error", yaxis_type="log",
                      yaxis_tickformat="~s",  # every tick labelled, not bare digits
                      template="plotly_white", height=360)
    return fig
