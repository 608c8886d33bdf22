"""What the static HTML pages put in their tables and on their points, without a browser (the
browser test tests/browser/test_pages_fit.py measures them drawn): long names get line-break
chances, missing values show blank, points that coincide share one label."""
from __future__ import annotations

import math

from workbench.matrix.table import pareto_axes, pareto_front, results_frame
from workbench.render.htmltext import breakable
from workbench.render.matrix_figures import pareto_figure, point_labels, results_table_html
from workbench.render.timing_report import _table

TACTIC = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64x64x64"


def test_long_names_get_break_chances_short_ones_stay_whole():
    out = breakable(TACTIC)
    assert out.replace("<wbr>", "") == TACTIC and out.count("<wbr>") == TACTIC.count("_")
    assert breakable("/layer1/layer1.0/conv1/Conv").count("<wbr>") == 5  # 4 "/", 1 "."
    assert breakable("CaskConvolution") == "CaskConvolution"  # short: one line
    assert breakable("a<b>_" * 6).startswith("a&lt;b&gt;_<wbr>")  # escaped first


def _rows():
    """Two targets of each precision: the same predicted latency (one recorded profile per
    precision) and the same error (an AOT matrix)."""
    rows = []
    for model, base in (("resnet_tiny", 4.9e5), ("bert_tiny", 3.1e6)):
        for prec, err, shrink in (("fp32", 0.0, 1.0), ("fp16", 1e-3, 0.85)):
            for k, target in enumerate(("sm89", "sm120")):
                rows.append(dict(id=f"{model}-{prec}-{target}", model=model, precision=prec,
                                 target=target, status="ok", size_bytes=base * shrink + 700 * k,
                                 latency_predicted_ms=base * shrink / 1e6, error_rel=err))
    return rows


def test_coinciding_points_share_one_label():
    df = results_frame(_rows())
    axes = pareto_axes(df)
    pts = pareto_front(df)
    labels = point_labels(pts, axes["x"], axes["y"], log_y=False)
    shown = [t for t in labels if t]
    assert sorted(shown) == ["fp16/sm89, sm120"] * 2 + ["fp32/sm89, sm120"] * 2
    fig = pareto_figure(pts, axes)
    texts = [t for tr in fig.data if tr.mode == "markers+text" for t in tr.text]
    assert sorted(t for t in texts if t) == sorted(shown) and len(texts) == 8


def test_the_accuracy_only_view_labels_each_variant():
    """Without latency the variants are the x axis (one place each): nothing coincides."""
    rows = [{k: v for k, v in r.items() if k != "latency_predicted_ms"} for r in _rows()]
    df = results_frame(rows)
    axes = pareto_axes(df)
    assert axes["kind"] == "accuracy-only"
    labels = point_labels(pareto_front(df), axes["x"], axes["y"], log_y=False)
    assert len(labels) == 8 and all(labels) and len(set(labels)) == 4  # precision/target each


def test_points_apart_keep_their_own_labels():
    rows = _rows()[:2]
    rows[1]["error_rel"] = 0.5
    df = results_frame(rows)
    axes = pareto_axes(df)
    assert point_labels(pareto_front(df), axes["x"], axes["y"], log_y=False) == [
        "fp32/sm89", "fp32/sm120"]


def test_results_table_shows_no_missing_values_and_no_empty_columns():
    rows = [{k: v for k, v in r.items() if k != "latency_predicted_ms"} for r in _rows()]
    rows.append(dict(id="x", model="resnet_tiny", precision="fp8", status="failed",
                     error="refused", error_rel=math.nan))
    page = results_table_html(results_frame(rows))
    assert "None" not in page and "nan" not in page.lower()
    assert "latency" not in page and "engine_path" not in page  # empty in every row / long
    assert ">refused<" in page and "<th>error</th>" in page


def test_timing_report_table_cells_show_missing_values_blank():
    html = _table([{"type": "Reformat", "a_ms": 0.5, "b_ms": math.nan, "speedup": None}],
                  ["type", "a_ms", "b_ms", "speedup"])
    assert "nan" not in html.lower() and "None" not in html
    assert html.count("<td class='num'></td>") == 1 and "<td></td>" in html
