"""The precision planner's front: accuracy loss against latency (predicted from recorded
profiles, said so; the number of regions in the low precision where nothing predicts latency),
one point per candidate the search accepted, the chosen plan marked, the budget as a line.

Takes a `workbench.planner.search.Plan` (or its `to_dict()`): this module draws, it decides
nothing."""
from __future__ import annotations

from typing import Any, Dict

import plotly.graph_objects as go


def front_figure(plan: Any) -> Any:
    """The Pareto front of `plan` as a plotly Figure; each point's customdata is the index of
    its candidate in `plan.front` (a click names the regions it keeps in FP32)."""
    d: Dict[str, Any] = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    front = d["front"]
    n = int(d["regions"])
    predicted = all(c["latency_ms"] is not None for c in front)
    xs = [c["latency_ms"] if predicted else n - len(c["kept_regions"]) for c in front]

    def loss(c: Dict[str, Any]) -> float:
        v = c["held_loss"] if c["held_loss"] is not None else c["search_loss"]
        return float(v)

    ys = [loss(c) for c in front]
    chosen = d.get("chosen")
    text = [f"{c['step']}<br>{len(c['kept_regions'])} of {n} region(s) in FP32<br>search loss "
            f"{c['search_loss']}" + (f"<br>held-back loss {c['held_loss']}"
                                     if c["held_loss"] is not None else "")
            for c in front]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name="front",
                             customdata=list(range(len(front))), hovertext=text,
                             hoverinfo="text", marker=dict(size=10, color="#1f77b4")))
    if chosen is not None:
        fig.add_trace(go.Scatter(x=[xs[chosen]], y=[ys[chosen]], mode="markers", name="plan",
                                 marker=dict(size=16, color="#2ca02c", symbol="star"),
                                 customdata=[chosen], hoverinfo="skip"))
    fig.add_hline(y=float(d["budget"]), line=dict(color="#d62728", dash="dot"),
                  annotation_text=f"budget {d['budget']:g} ({d['metric']})")
    fig.update_layout(
        title=f"Precision plan ({d['target'].upper()}): {d['metric']} loss vs "
              + ("latency, predicted" if predicted else "regions in " + d["target"].upper()),
        xaxis_title="latency, predicted (ms)" if predicted else
        f"regions in {d['target'].upper()} (no latency predicted: no recorded profiles)",
        yaxis_title=f"{d['metric']} loss (held-back where verified, else search set)",
        template="plotly_white", height=420, margin=dict(l=60, r=20, t=60, b=50))
    return fig

