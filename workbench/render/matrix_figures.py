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

from workbench.core.fsutil import atomic_write_text
from workbench.render import htmltext
from workbench.timing.colours import PALETTE


def _finite(size_mb: Any) -> list:
    return [float(v) if v is not None and math.isfinite(float(v)) else 0.0 for v in size_mb]


def _marker_sizes(size_mb: Any, top: float) -> list:
    """Marker diameters 8..40 px, the area proportional to the engine size (`top`: the
    largest engine of the figure, so sizes compare across models)."""
    return [8 + 32 * math.sqrt(v / (top or 1.0)) for v in _finite(size_mb)]


def point_labels(points: Any, x: str, y: str, log_y: bool, near: float = 0.05) -> list:
    """The text beside each point: 'precision/target', where points lie within `near` of the
    axes' spans of each other (sm89 and sm120 builds of one precision differ by a few bytes
    and the same error) one label says them all ('fp32/sm89, sm120') and the others stay
    blank: labels drawn on top of each other cannot be read."""
    xs, ys = _coords(points[x]), _coords(points[y])
    if log_y:
        ys = [math.log10(v) if v > 0 else 0.0 for v in ys]
    span_x = ((max(xs) - min(xs)) if xs else 0.0) or 1.0  # (all in one place: one label)
    span_y = ((max(ys) - min(ys)) if ys else 0.0) or 1.0
    names = [(str(r.precision), str(r.target)) for r in points.itertuples()]
    owner = list(range(len(xs)))  # each point's label: its own or the first close one's
    for i in range(len(xs)):
        for j in range(i):
            if owner[j] == j and abs(xs[i] - xs[j]) <= near * span_x \
                    and abs(ys[i] - ys[j]) <= near * span_y:
                owner[i] = j
                break
    out = []
    for i in range(len(xs)):
        if owner[i] != i:
            out.append("")
            continue
        group: Dict[str, list] = {}
        for k in range(len(xs)):
            if owner[k] == i:
                targets = group.setdefault(names[k][0], [])
                if names[k][1] not in targets:
                    targets.append(names[k][1])
        out.append(" \u00b7 ".join(f"{p}/{', '.join(t)}" for p, t in group.items()))
    return out


def _coords(values: Any) -> list:
    """Positions along an axis: the numbers, or for a categorical axis (the variants' ids in
    the accuracy-only view) each category's place in order of first appearance."""
    vals = list(values)
    try:
        return [float(v) for v in vals]
    except (TypeError, ValueError):
        order: Dict[Any, float] = {}
        return [order.setdefault(v, float(len(order))) for v in vals]


def pareto_figure(points: Any, axes: Dict[str, str], title: str = "Variant matrix") -> Any:
    """`points`: pareto_front's frame (model, id, precision, target, size_mb, the x/y columns,
    pareto); `axes`: pareto_axes' dict."""
    x, y = axes["x"], axes["y"]
    fig = go.Figure()
    top = max(_finite(points["size_mb"]), default=0.0)
    positive = points[y][points[y] > 0] if len(points) else points[y]
    log_y = bool(len(positive) and len(positive) == len(points))
    points = points.assign(_label=point_labels(points, x, y, log_y) if len(points) else [])
    for k, (model, grp) in enumerate(points.groupby("model", sort=True)):
        colour = PALETTE[k % len(PALETTE)]
        text = [f"{r.id}<br>{r.precision} {r.target}<br>size {r.size_mb:.2f} MB"
                for r in grp.itertuples()]
        fig.add_trace(go.Scatter(
            x=list(grp[x]), y=list(grp[y]), mode="markers+text", name=str(model),
            text=list(grp["_label"]),
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
    if log_y:
        fig.update_yaxes(type="log")
    if axes.get("kind") == "accuracy-only":  # the variants' ids on x: long, one per point,
        fig.update_xaxes(tickangle=-90, automargin=True)  # upright so they never overlap
    return fig


# the table wraps its long ids and names inside the window; should it still be wider (a very
# long error message), it scrolls inside its own box, never the page
_CSS = ("body{font-family:system-ui,sans-serif;margin:20px}"
        "table.results{border-collapse:collapse;font-size:12px;max-width:100%}"
        "table.results td,table.results th{border:1px solid #ddd;padding:2px 6px;"
        "text-align:left}"
        "table.results td.num{text-align:right;font-variant-numeric:tabular-nums}" + htmltext.CSS)


def _cell(v: Any) -> str:
    """A table cell's text: blank for a missing value (None, NaN, pandas' NA), 4 significant
    digits for a float."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if not isinstance(v, (list, tuple, dict, str)):
        import pandas as pd

        if pd.isna(v):
            return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def results_table_html(table: Any) -> str:
    """The results as an HTML table: no engine path (long; results.csv has it), no column that
    is empty in every row (latency on a CPU-only run), blank cells for missing values."""
    import pandas as pd

    cols = [c for c in table.columns
            if c != "engine_path" and any(_cell(v) for v in table[c])]
    num = {c for c in cols if pd.api.types.is_numeric_dtype(table[c])
           and not pd.api.types.is_bool_dtype(table[c])}
    head = "".join(f"<th>{htmltext.breakable(c, 8)}</th>" for c in cols)
    rows = []
    for r in table[cols].itertuples(index=False):
        cells = [f"<td class='num'>{html.escape(_cell(v))}</td>" if c in num
                 else f"<td>{htmltext.breakable(_cell(v))}</td>" for c, v in zip(cols, r)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class='results'><tr>{head}</tr>{''.join(rows)}</table>"


def write_pareto_html(points: Any, axes: Dict[str, str], path: Any,
                      table: Optional[Any] = None, title: str = "Variant matrix") -> Path:
    """The Pareto page (figure + optional results table), written atomically."""
    fig = pareto_figure(points, axes, title)
    body = fig.to_html(full_html=False, include_plotlyjs=True, div_id="pareto",
                       config={"displaylogo": False})
    tab = "" if table is None else f"<div class='wb-scroll'>{results_table_html(table)}</div>"
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(axes['note'])}; marker area: engine size; dotted line: each "
            f"model's Pareto front.</p>{body}{tab}</body></html>")
    return atomic_write_text(path, page)
