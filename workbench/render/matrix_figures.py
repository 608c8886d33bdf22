"""The variant matrix's Pareto view: error against latency (measured, or predicted from
recorded profiles; the variants themselves when neither exists: accuracy only), one colour per
model, marker area by engine size, each model's front as a line; and
the standalone HTML page with it and the results table (plotly.js inlined: opens offline).

Takes the data workbench.matrix.table computes (`pareto_front`, `pareto_axes`): this module
draws, it decides nothing."""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Dict, Optional

import plotly.graph_objects as go

from workbench.fsutil import atomic_write_text
from workbench.render.timing_figures import PALETTE


def _finite(size_mb: Any) -> list:
    return [float(v) if v is not None and math.isfinite(float(v)) else 0.0 for v in size_mb]


def _marker_sizes(size_mb: Any, top: float) -> list:
    """Marker diameters 8..40 px, the area proportional to the engine size (`top`: the
    largest engine of the figure, so sizes compare across models)."""
    return [8 + 32 * math.sqrt(v / (top or 1.0)) for v in _finite(size_mb)]


def pareto_figure(points: Any, axes: Dict[str, str], title: str = "Variant matrix") -> Any:
    """`points`: pareto_front's frame (model, id, precision, target, size_mb, the x/y columns,
    pareto); `axes`: pareto_axes' dict."""
    x, y = axes["x"], axes["y"]
    fig = go.Figure()
    top = max(_finite(points["size_mb"]), default=0.0)
    for k, (model, grp) in enumerate(points.groupby("model", sort=True)):
        colour = PALETTE[k % len(PALETTE)]
        text = [f"{r.id}<br>{r.precision} {r.target}<br>size {r.size_mb:.2f} MB"
                for r in grp.itertuples()]
        fig.add_trace(go.Scatter(
            x=list(grp[x]), y=list(grp[y]), mode="markers+text", name=str(model),
            text=[f"{r.precision}/{r.target}" for r in grp.itertuples()],
            textposition="top center", hovertext=text, hoverinfo="text",
            marker=dict(size=_marker_sizes(grp["size_mb"], top), color=colour, opacity=0.75,
                        line=dict(width=1, color="#333")), legendgroup=str(model)))
        front = grp[grp["pareto"]].sort_values(x)
        if len(front):
            fig.add_trace(go.Scatter(x=list(front[x]), y=list(front[y]), mode="lines",
                                     line=dict(color=colour, dash="dot"), showlegend=False,
                                     hoverinfo="skip", legendgroup=str(model),
                                     name=f"{model} front"))
    fig.update_layout(title=f"{title}: {axes['note']}", xaxis_title=axes["x_title"],
                      yaxis_title="error (max relative, vs onnxruntime FP32)",
                      template="plotly_white", height=480, margin=dict(l=60, r=20, t=60, b=50))
    positive = points[y][points[y] > 0] if len(points) else points[y]
    if len(positive) and len(positive) == len(points):
        fig.update_yaxes(type="log")
    return fig


def write_pareto_html(points: Any, axes: Dict[str, str], path: Any,
                      table: Optional[Any] = None, title: str = "Variant matrix") -> Path:
    """The Pareto page (figure + optional results table), written atomically."""
    fig = pareto_figure(points, axes, title)
    body = fig.to_html(full_html=False, include_plotlyjs=True, div_id="pareto",
                       config={"displaylogo": False})
    tab = ""
    if table is not None:
        tab = table.drop(columns=[c for c in ("engine_path",) if c in table]).to_html(
            index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0,
            classes="results")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:system-ui,sans-serif;margin:20px}"
            "table.results{border-collapse:collapse;font-size:12px}"
            "table.results td,table.results th{border:1px solid #ddd;padding:2px 6px}"
            f"</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(axes['note'])}; marker area: engine size; dotted line: each "
            f"model's Pareto front.</p>{body}{tab}</body></html>")
    return atomic_write_text(path, page)
