"""Plotly figures of a LayerTable (plain `go.Figure`s: the HTML report embeds them, the notebook
panel wraps them in FigureWidgets). Every per-layer trace carries the layer name in
`customdata` so that a click can be mapped back to the layer and its ONNX nodes."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import pandas as pd

from workbench.core.graphindex import leaf_name
from workbench.timing.colours import PALETTE, PRECISION_COLOURS, colour_map  # noqa: F401 (re-exported)
from workbench.timing.table import LayerTable

PRECISION_COLORS = PRECISION_COLOURS  # (the older spelling, kept for callers)

# Readable text (CSS px; plotly draws its font sizes 1:1). Tick labels were 9 px, and plotly
# shrinks bar and treemap text to fit its bar or box, down to ~7 px: text that would be smaller
# than MIN_TEXT_SIZE is hidden instead (its value stays in the hover).
FONT_SIZE = 12          # titles, legends, hover
TICK_FONT_SIZE = 11     # axis tick labels
MIN_TEXT_SIZE = 11      # text on bars / in treemap boxes
ROW_PX = 18             # per bar of the per-layer chart: an 11-px label and a gap, no overlap
LABEL_CHARS = 44        # layer names on that chart's axis (the hover has them whole)


def short_name(name: str, limit: int = LABEL_CHARS) -> str:
    """A long name cut in the middle ('/layer3/0/conv2/conv/Conv + ... + /layer3/0/relu/Relu'
    keeps both ends, which is where fused layers differ): at most `limit` characters."""
    name = str(name)
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return name[:head] + "\u2026" + name[len(name) - (limit - 1 - head):]


def readable(fig: Any) -> Any:
    """The text sizes above on a figure (in place; returns it)."""
    fig.update_layout(font=dict(size=FONT_SIZE), hoverlabel=dict(font_size=FONT_SIZE),
                      uniformtext=dict(minsize=MIN_TEXT_SIZE, mode="hide"))
    fig.update_xaxes(tickfont=dict(size=TICK_FONT_SIZE), automargin=True)
    fig.update_yaxes(tickfont=dict(size=TICK_FONT_SIZE), automargin=True)
    return fig


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def color_map(values: Sequence[str], by: str) -> Dict[str, str]:
    """{value: colour}: one colour per layer type / precision in every chart
    (workbench.timing.colours)."""
    return colour_map(values, by)


def layer_bar_data(t: LayerTable, color_by: str = "type", top: int = 60) -> pd.DataFrame:
    """The rows the per-layer bar chart shows: the `top` slowest layers, slowest first."""
    if color_by not in ("type", "precision"):
        raise ValueError("color_by must be 'type' or 'precision'")
    d = t.df[~t.df["is_constant"]].dropna(subset=["time_ms"])
    d = d.sort_values("time_ms", ascending=False).head(top).copy()
    d["group"] = d[color_by].replace("", "unknown")
    return d


def layer_bars(t: LayerTable, color_by: str = "type", top: int = 60,
               title: Optional[str] = None) -> Any:
    """Horizontal bars of the slowest layers, one trace per type (or precision)."""
    go = _go()
    d = layer_bar_data(t, color_by, top)
    colors = color_map(d["group"].tolist(), color_by)
    fig = go.Figure()
    order = d["name"].tolist()
    for g in sorted(set(d["group"])):
        s = d[d["group"] == g]
        fig.add_trace(go.Bar(
            x=s["time_ms"], y=s["name"], orientation="h", name=g, marker_color=colors[g],
            customdata=np.array(s["name"].tolist(), dtype=object),
            hovertext=[f"{r.name}<br>{r.type} {r.precision}<br>{r.time_ms:.4f} ms "
                       f"({r.pct:.1f}%)<br>ONNX: {len(r.onnx_nodes)} node(s)"
                       for r in s.itertuples()], hoverinfo="text"))
    axis = order[::-1]
    fig.update_layout(
        title=title or f"Slowest {len(d)} layers ({t.stat} ms), colour = {color_by}",
        barmode="stack", height=max(320, ROW_PX * len(d) + 120), margin=dict(l=10, r=10, t=40, b=30),
        # the axis lists the names cut to LABEL_CHARS; the categories (and customdata, which a
        # click reads) stay the whole names, and so does the hover
        yaxis=dict(categoryorder="array", categoryarray=axis, tickmode="array", tickvals=axis,
                   ticktext=[short_name(n) for n in axis]),
        xaxis_title="ms", legend_title=color_by)
    return readable(fig)


def breakdown(t: LayerTable, by: str = "type") -> Any:
    """Time per layer type (or precision) as bars."""
    go = _go()
    d = t.df[~t.df["is_constant"]]
    g = d.groupby(d[by].replace("", "unknown"))["time_ms"].sum().sort_values(ascending=False)
    colors = color_map(g.index.tolist(), by)
    fig = go.Figure(go.Bar(x=g.index.tolist(), y=g.values, marker_color=[colors[k] for k in g.index],
                           text=[f"{v:.3f}" for v in g.values], textposition="auto",
                           hovertemplate="%{x}<br>%{y:.4f} ms<extra></extra>"))
    fig.update_layout(title=f"Time by {by} (total {t.total_ms:.3f} ms)", yaxis_title="ms",
                      height=360, margin=dict(l=10, r=10, t=40, b=30))
    return readable(fig)


def treemap_data(t: LayerTable, include_attributed: bool = True) -> pd.DataFrame:
    """ids/labels/parents/values for a treemap by ONNX name scope ('/layer1/layer1.0/conv1')."""
    nt = t.node_times(include_attributed=include_attributed)
    vals: Dict[str, float] = {}
    labels: Dict[str, str] = {}
    parents: Dict[str, str] = {}
    root = "all"
    labels[root], parents[root], vals[root] = "engine", "", 0.0

    def add(path: List[str], leaf: str, v: float) -> None:
        parent = root
        vals[root] += v
        for i in range(len(path)):
            key = "/" + "/".join(path[: i + 1])
            if key not in labels:
                labels[key], parents[key], vals[key] = path[i], parent, 0.0
            vals[key] += v
            parent = key
        key = "node:" + leaf
        labels[key], parents[key] = leaf_name(leaf), parent
        vals[key] = vals.get(key, 0.0) + v

    for r in nt.itertuples():
        # unscoped nodes (e.g. exporter-made Identity_12) are grouped by op type
        path = list(r.scope) if r.scope else ["(top level)", r.op or "node"]
        add(path, r.node, float(r.time_ms))
    d = t.df[(t.df["mapping"] == "") & ~t.df["is_constant"] & (t.df["time_ms"].fillna(0) > 0)]
    if len(d):
        for r in d.itertuples():
            add(["(unmapped)", r.type], "layer:" + r.name, float(r.time_ms))
    ids = list(labels)
    return pd.DataFrame({"id": ids, "label": [labels[i] for i in ids],
                         "parent": [parents[i] for i in ids], "value": [vals[i] for i in ids]})


def scope_treemap(t: LayerTable) -> Any:
    go = _go()
    d = treemap_data(t)
    fig = go.Figure(go.Treemap(ids=d["id"], labels=d["label"], parents=d["parent"],
                               values=d["value"], branchvalues="total",
                               hovertemplate="%{id}<br>%{value:.4f} ms<extra></extra>",
                               maxdepth=3))
    fig.update_layout(title="Time by ONNX name scope (layer time shared by its nodes)",
                      height=480, margin=dict(l=5, r=5, t=40, b=5))
    return readable(fig)


def compare_types(cmp: Dict[str, Any]) -> Any:
    """Grouped bars per layer type for two engines, speedup in the hover/text."""
    go = _go()
    na, nb = cmp["names"]
    rows = [r for r in cmp["by_type"] if (r.get(f"{na}_ms") or 0) + (r.get(f"{nb}_ms") or 0) > 0]
    types = [r["type"] for r in rows]
    fig = go.Figure()
    fig.add_trace(go.Bar(name=na, x=types, y=[r.get(f"{na}_ms") or 0 for r in rows],
                         marker_color="#e45756",
                         hovertemplate=f"%{{x}}<br>{na} %{{y:.4f}} ms<extra></extra>"))
    speedups = [f"x{r['speedup']:.2f}" if r["speedup"] else "" for r in rows]
    fig.add_trace(go.Bar(name=nb, x=types, y=[r.get(f"{nb}_ms") or 0 for r in rows],
                         marker_color="#4c78a8", text=speedups, textposition="outside",
                         cliponaxis=False, customdata=speedups,  # hidden text: still in the hover
                         hovertemplate=f"%{{x}}<br>{nb} %{{y:.4f}} ms %{{customdata}}"
                                       "<extra></extra>"))
    sp = cmp.get("speedup")
    fig.update_layout(barmode="group", yaxis_title="ms", height=380,
                      title=f"{na} {cmp[f'{na}_total_ms']:.3f} ms vs {nb} "
                            f"{cmp[f'{nb}_total_ms']:.3f} ms (x{sp:.2f})" if sp else "comparison",
                      margin=dict(l=10, r=10, t=40, b=30))
    return readable(fig)


def log_ticks(lo: float, hi: float, most: int = 8) -> Optional[List[float]]:
    """Tick values for a log axis over less than ~1.5 decades, where plotly labels every
    0.0005 step and 11-px labels run into each other (0.0055 over 0.006): the first of the
    1 / 1-2-5 / 1-1.5-2-3-5-7 series that gives 3 or more ticks, at most `most`. None where
    plotly's own (decade) ticks do."""
    if not (lo > 0 and hi > lo) or math.log10(hi / lo) > 1.5:
        return None
    for mantissas in ((1,), (1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        vals = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                for m in mantissas]
        vals = [float(f"{v:.6g}") for v in vals if lo * 0.999 <= v <= hi * 1.001]
        if len(vals) >= 3:
            return vals[:most] if len(vals) <= most else vals[::math.ceil(len(vals) / most)]
    return [float(f"{lo:.2g}"), float(f"{hi:.2g}")]


def compare_nodes(nodes: pd.DataFrame, names: Sequence[str]) -> Any:
    """Per-ONNX-node time in engine A vs B (log-log scatter; the diagonal is 'no change')."""
    go = _go()
    na, nb = names
    d = nodes.dropna(subset=[f"{na}_ms", f"{nb}_ms"])
    d = d[(d[f"{na}_ms"] > 0) & (d[f"{nb}_ms"] > 0)]
    fig = go.Figure(go.Scatter(x=d[f"{na}_ms"], y=d[f"{nb}_ms"], mode="markers",
                               text=d["node"], customdata=np.array(d["node"].tolist(), dtype=object),
                               hovertemplate="%{text}<br>%{x:.4f} -> %{y:.4f} ms<extra></extra>",
                               marker=dict(size=6, color="#4c78a8")))
    if len(d):
        lo = float(min(d[f"{na}_ms"].min(), d[f"{nb}_ms"].min()))
        hi = float(max(d[f"{na}_ms"].max(), d[f"{nb}_ms"].max()))
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="same",
                                 line=dict(dash="dot", color="#888")))
        ticks = log_ticks(lo, hi)
        if ticks:
            fig.update_xaxes(tickmode="array", tickvals=ticks)
            fig.update_yaxes(tickmode="array", tickvals=ticks)
    fig.update_layout(title=f"Per ONNX node: {na} vs {nb} (ms)", xaxis_type="log",
                      yaxis_type="log", xaxis_title=f"{na} ms", yaxis_title=f"{nb} ms",
                      height=420, showlegend=False, margin=dict(l=10, r=10, t=40, b=30))
    return readable(fig)


def latency_figure(lat_ms: Any, throughput: Optional[List[Dict[str, Any]]] = None) -> Any:
    """Histogram of end-to-end latencies with P50/P90/P99 lines."""
    go = _go()
    from workbench.formats.profiledata import latency_stats

    a = np.asarray(lat_ms, dtype=float)
    st = latency_stats(a) or {}
    fig = go.Figure(go.Histogram(x=a, nbinsx=40, marker_color="#4c78a8", name="latency"))
    for key, color in (("p50_ms", "#54a24b"), ("p90_ms", "#f58518"), ("p99_ms", "#e45756")):
        if key in st:
            fig.add_vline(x=st[key], line_color=color, line_dash="dash",
                          annotation_text=f"{key[:3].upper()} {st[key]:.3f}")
    title = "End-to-end latency (ms)"
    if throughput:
        title += " | throughput: " + ", ".join(
            f"b{r['batch']} {r['items_per_s']:.0f}/s" for r in throughput if r.get("items_per_s"))
    fig.update_layout(title=title, xaxis_title="ms", height=340, showlegend=False,
                      margin=dict(l=10, r=10, t=40, b=30))
    return readable(fig)
