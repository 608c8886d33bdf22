"""A standalone HTML timing report: plotly.js inlined once (opens offline, no CDN), summary
tables, per-layer bars, breakdowns, the ONNX-scope treemap, latency, and an engine-vs-engine
section when a second engine is given. Written atomically."""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from workbench.core.fsutil import atomic_write_text
from workbench.render import htmltext, timing_figures as figures
from workbench.timing.summary import compare, node_comparison, summarize
from workbench.timing.table import LayerTable

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:20px;color:#222}
h1{font-size:22px} h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0;max-width:100%}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left} th{background:#f4f4f4}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.warning{color:#a15c00} .error{color:#b00020} .info{color:#555}
.plot{margin:12px 0}
""" + htmltext.CSS


def _table(rows: List[Dict[str, Any]], cols: Sequence[str], fmt: Optional[Dict[str, str]] = None) -> str:
    fmt = fmt or {}
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if isinstance(v, float) and not math.isfinite(v):  # missing: blank, not 'nan'
                cells.append("<td class='num'></td>")
            elif isinstance(v, float):
                cells.append(f"<td class='num'>{format(v, fmt.get(c, '.4f'))}</td>")
            elif isinstance(v, (list, tuple)):
                cells.append(f"<td>{htmltext.breakable(', '.join(map(str, v[:4])))}"
                             f"{' ...' if len(v) > 4 else ''}</td>")
            else:
                cells.append(f"<td>{htmltext.breakable('' if v is None else v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    # long kernel and layer names wrap in their cells (htmltext.breakable); a table still wider
    # than the window scrolls in its own box, not the page
    return f"<div class='wb-scroll'><table><tr>{head}</tr>{''.join(body)}</table></div>"


def _fig_html(fig: Any, div_id: str, first: bool) -> str:
    return ("<div class='plot'>" + fig.to_html(full_html=False, include_plotlyjs=bool(first),
                                               div_id=div_id, config={"displaylogo": False})
            + "</div>")


def report_html(t: LayerTable, vs: Optional[LayerTable] = None,
                names: Sequence[str] = ("A", "B"), title: Optional[str] = None) -> str:
    """The report as one HTML string (plotly.js inlined in the first plot). `vs`: a baseline
    engine to compare with; `names`: (this engine, the baseline)."""
    s = summarize(t)
    title = title or f"TensorRT timing: {Path(t.source).name}"
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    cov = s["onnx_mapping"]
    total = "n/a (no profile)" if s["total_ms"] is None else f"{s['total_ms']:.4f} ms ({s['statistic']})"
    lines = [("layers", s["layers"]), ("timed layers", s["timed_layers"]), ("total", total),
             ("reformat/copy", f"{s['reformat']['layers']} layers, "
                               f"{s['reformat']['time_ms']:.4f} ms"
                               + (f" ({s['reformat']['pct']:.1f}%)" if s['reformat']['pct'] is not None else "")),
             ("time mapped to ONNX nodes",
              "n/a" if cov["mapped_pct"] is None else
              f"{cov['mapped_pct']:.1f}% direct, {cov['attributed_pct']:.1f}% with reformats "
              f"attributed" + ("" if cov["verified_with_onnx"] else " (names not verified: no ONNX given)")),
             ("layer info", f"{t.source} ({s['schema']})")]
    if t.profile is not None:
        lines.append(("profile", f"{t.profile.source} ({t.profile.kind})"))
    if s.get("latency"):
        la = s["latency"]
        lines.append(("latency", f"P50 {la['p50_ms']:.4f} / P90 {la['p90_ms']:.4f} / "
                                 f"P99 {la['p99_ms']:.4f} ms over {la['n']} runs"))
    parts.append("<table>" + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                                     for k, v in lines) + "</table>")
    found = s["findings"]
    if found:
        parts.append("<h2>Findings</h2><ul>" + "".join(
            f"<li class='{f['severity']}'><b>{html.escape(f['code'])}</b>: {html.escape(f['message'])}"
            f"{(' &rarr; ' + html.escape(f['hint'])) if f.get('hint') else ''}</li>" for f in found)
            + "</ul>")
    first = True
    if t.has_times:
        parts.append("<h2>Where the time goes</h2>")
        parts.append(_fig_html(figures.layer_bars(t, "type"), "layers-by-type", first))
        first = False
        parts.append(_fig_html(figures.breakdown(t, "type"), "by-type", first))
        parts.append(_fig_html(figures.breakdown(t, "precision"), "by-precision", first))
        parts.append(_fig_html(figures.scope_treemap(t), "scope-treemap", first))
    if t.profile is not None and t.profile.latency_ms is not None and len(t.profile.latency_ms):
        parts.append(_fig_html(figures.latency_figure(t.profile.latency_ms, t.profile.throughput),
                               "latency", first))
        first = False
    parts.append("<h2>By layer type</h2>" + _table(s["by_type"], ["type", "time_ms", "pct", "layers"],
                                                   {"pct": ".1f"}))
    parts.append("<h2>By precision</h2>" + _table(s["by_precision"],
                                                  ["precision", "time_ms", "pct", "layers"], {"pct": ".1f"}))
    parts.append("<h2>Top layers</h2>" + _table(s["top_layers"], ["name", "type", "precision",
                                                                  "time_ms", "pct", "onnx_nodes", "tactic"],
                                                {"pct": ".1f"}))
    fu = s["fusion"]
    parts.append(f"<h2>Fusion</h2><p>{fu['layers_with_onnx']} layers cover "
                 f"{fu['onnx_nodes_in_layers']} ONNX nodes (mean "
                 f"{(fu['mean_nodes_per_layer'] or 0):.2f}, max {fu['max_nodes_per_layer']} per "
                 f"layer); histogram {html.escape(str(fu['histogram']))}</p>")
    if vs is not None:
        # baseline first: speedup = baseline time / this engine's time
        nb, na = names[0], names[1]
        cmp = compare(vs, t, (na, nb))
        parts.append(f"<h2>{html.escape(nb)} vs baseline {html.escape(na)}</h2>")
        if t.has_times and vs.has_times:
            parts.append(_fig_html(figures.compare_types(cmp), "compare-types", first))
            first = False
            parts.append(_fig_html(figures.compare_nodes(node_comparison(vs, t, (na, nb)), (na, nb)),
                                   "compare-nodes", first))
        parts.append(_table(cmp["by_type"], ["type", f"{na}_ms", f"{nb}_ms", "speedup"],
                            {"speedup": ".2f"}))
        parts.append("<h3>Largest gains per ONNX node</h3>" + _table(
            cmp["top_node_gains"], ["node", f"{na}_ms", f"{nb}_ms", "saved_ms", "speedup"],
            {"speedup": ".2f"}))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(path: Any, t: LayerTable, vs: Optional[LayerTable] = None,
                 names: Sequence[str] = ("A", "B"), title: Optional[str] = None) -> Path:
    """Write the standalone HTML report atomically; returns its path."""
    return atomic_write_text(path, report_html(t, vs, names, title))
