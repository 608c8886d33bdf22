"""Panel layout choices that decide what a user can read (widget state, no browser; the real
browser checks are tests/browser/test_panel_layout.py): the support heading says who answered,
the histogram has a width its column holds, the Compare axis names tensors, the Timing axis
labels leave the bars their width."""
from __future__ import annotations

import re

from conftest import REPO, SAMPLES
from widgets.base import short_label
from widgets.compare import MAX_TICKS, ComparePanel, tensor_ticks
from widgets.inspector import HIST_WIDTH, Inspector
from widgets.timing import LABEL_CHARS, TimingPanel
from workbench.precision.transform import convert

TIMING = REPO / "tests" / "data" / "timing"


def _text(html: str) -> str:
    html = re.sub(r"<(div|tr|br)[^>]*>", " ", html)  # block breaks read as spaces
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html)).strip()


def test_short_label_keeps_both_ends():
    name = "/layer3/0/conv2/conv/Conv + /layer3/0/conv2/bn/BatchNormalization + /layer3/0/relu/Relu"
    s = short_label(name, 40)
    assert len(s) == 40 and s.startswith("/layer3/0/conv2/con") and s.endswith("/layer3/0/relu/Relu")
    assert "\u2026" in s
    assert short_label("Conv_3", 40) == "Conv_3"


def test_static_heading_names_the_rules_and_the_parser_the_button_asks():
    ins = Inspector(SAMPLES / "bert_tiny.onnx")
    text = _text(ins.support_html.value)
    # the static rules of the dropdown's backend answered; its parser has not been asked yet
    assert text.startswith("static rules for tensorrt-rtx: every node is supported"), text
    assert "not checked by a parser yet: Check with TensorRT asks tensorrt-rtx" in text
    assert "static (static)" not in text
    ins.backend_dd.value = "tensorrt"
    assert "asks tensorrt " in _text(ins.support_html.value) + " "
    assert _text(ins.support_html.value).startswith("static rules for tensorrt: every node")
    ins.backend_dd.value = "static"
    assert "not checked" not in _text(ins.support_html.value)


def test_static_rules_name_the_active_backend_and_the_matrix_they_come_from():
    """The findings said 'not supported by TensorRT (10.15 matrix)' while tensorrt-rtx was the
    active backend: the static check now uses the dropdown's backend's own rules, its findings
    name that backend, and the note says what the rules were compiled from."""
    from workbench.support.rules import MATRIX_VERSION

    ins = Inspector(SAMPLES / "needs_fixing.onnx")  # backend tensorrt-rtx (the default)
    assert ins.report.rules == "tensorrt-rtx"
    text = _text(ins.support_html.value)
    assert text.startswith("static rules for tensorrt-rtx: 3 node(s) refused"), text
    assert "CenterCropPad is not supported by TensorRT-RTX 1.7" in text
    assert "10.15 matrix)" not in text and "not supported by TensorRT (" not in text
    assert (f"static rules for tensorrt-rtx: TensorRT-RTX 1.7 rules: the TensorRT {MATRIX_VERSION} "
            "operator matrix with the differences measured") in text
    ins.backend_dd.value = "tensorrt"  # re-checked with that backend's rules, still no parser
    assert ins.report.backend == "static" and ins.report.rules == "tensorrt"
    text = _text(ins.support_html.value)
    assert text.startswith("static rules for tensorrt: 3 node(s) refused"), text
    assert f"CenterCropPad is not supported by TensorRT (per its {MATRIX_VERSION} operator matrix)" \
        in text
    assert "TensorRT-RTX" not in text
    assert (f"static rules for tensorrt: TensorRT rules from the published onnx-tensorrt operator "
            f"matrix of TensorRT {MATRIX_VERSION}") in text
    ins.backend_dd.value = "auto"  # either parser may answer: the published matrix's rules
    assert ins.report.rules == "tensorrt" and "asks auto" in _text(ins.support_html.value)


def test_parser_heading_names_backend_and_version_once():
    ins = Inspector(SAMPLES / "resnet_tiny.onnx", backend="tensorrt-rtx")
    ins.run_check(wait=True)
    text = _text(ins.support_html.value)
    assert re.match(r"tensorrt-rtx \d+\.\d+[\d.]* \(parser\): every node is supported", text), text
    assert "not checked" not in text


def test_histogram_fits_its_column_and_keeps_the_counts():
    ins = Inspector(SAMPLES / "bert_tiny.onnx", static_check=False)
    fig = ins.op_figure
    assert fig.layout.width == HIST_WIDTH  # not plotly's 700 px default, which was clipped
    counts = dict(zip(fig.data[0].y, fig.data[0].x))
    assert (counts["Add"], counts["Constant"], counts["MatMul"]) == (23, 18, 17)


def test_tensor_ticks_name_tensors_and_thin_out():
    names = [f"/block{i}/conv/Conv_output_0" for i in range(100)]
    t = tensor_ticks(names)
    assert len(t["tickvals"]) <= MAX_TICKS and t["tickvals"][0] == 0
    assert t["ticktext"][0] == "block0/conv/Conv"
    step = t["tickvals"][1]
    assert t["ticktext"][1] == f"block{step}/conv/Conv"
    few = tensor_ticks(["a_output_0", "b"])
    assert few["tickvals"] == [0, 1] and few["ticktext"] == ["a", "b"]
    assert t["tickfont"]["size"] >= 11  # (9 px read poorly)


def test_compare_axis_shows_tensor_names(tmp_path):
    fp16 = tmp_path / "r16.onnx"
    convert(SAMPLES / "resnet_tiny.onnx", "fp16", measure=False).save(fp16)
    p = ComparePanel(SAMPLES / "resnet_tiny.onnx", fp16, inputs=SAMPLES / "calib" / "resnet_tiny.npz")
    p.wait(300)
    assert p.error is None and p.report is not None
    ax = p.figure.layout.xaxis
    names = [t.tensor for t in p.report.tensors]
    assert list(ax.tickvals) == list(range(len(names)))
    assert ax.ticktext[0] == names[0].lstrip("/").replace("_output_0", "")
    assert all(len(s) <= 28 for s in ax.ticktext)
    assert p.compare_btn.layout.width == p.search_btn.layout.width == "auto"  # labels not cut


def test_timing_axis_labels_are_short_and_clicks_keep_full_names():
    p = TimingPanel(TIMING / "resnet_tiny_fp16.layers.json", TIMING / "resnet_tiny_fp16.profile.json",
                    onnx=SAMPLES / "resnet_tiny.onnx")

    def check():
        ax = p.bars.layout.yaxis
        assert list(ax.tickvals) == list(ax.categoryarray)
        assert max(len(n) for n in ax.tickvals) > LABEL_CHARS  # the data has long fused names
        assert all(len(s) <= LABEL_CHARS for s in ax.ticktext)
        full = {str(n) for tr in p.bars.data for n in tr.customdata}
        assert full == set(ax.tickvals)  # a click still maps to the whole layer name

    check()
    p.color_by.value = "precision"  # redrawn in place: still short labels
    check()


def test_timing_text_is_readable_and_long_names_keep_whole_in_the_hover():
    """Tick labels were 9 px and plotly shrank bar / treemap text to ~7 px to fit: every figure
    of the panel now has 11-px ticks, a 12-px base font and text below 11 px hidden (not shrunk);
    the bar rows are tall enough that 11-px labels do not touch (real browser:
    tests/browser/test_readable_outputs.py)."""
    from workbench.render import timing_figures as tf

    p = TimingPanel(TIMING / "resnet_tiny_fp16.layers.json", TIMING / "resnet_tiny_fp16.profile.json",
                    onnx=SAMPLES / "resnet_tiny.onnx", vs=(TIMING / "resnet_tiny_fp32.layers.json",
                                                          TIMING / "resnet_tiny_fp32.profile.json"),
                    names=("fp16", "fp32"))
    figs = {"bars": p.bars, "treemap": p.treemap, "compare": p.compare_fig, "nodes": p.nodes_fig,
            "latency": p.latency_fig}
    assert all(f is not None for f in figs.values()), [k for k, f in figs.items() if f is None]
    for name, fig in figs.items():
        lay = fig.layout
        assert lay.font.size >= 12 and lay.hoverlabel.font.size >= 12, name
        assert lay.uniformtext.minsize >= 11 and lay.uniformtext.mode == "hide", name
        if name != "treemap":
            assert lay.xaxis.tickfont.size >= 11 and lay.yaxis.tickfont.size >= 11, name
    bars = p.bars.layout
    rows = len(bars.yaxis.tickvals)
    plot_px = bars.height - bars.margin.t - bars.margin.b
    assert plot_px / rows >= 1.5 * bars.yaxis.tickfont.size  # a gap between neighbouring labels
    # hover: the whole name, whatever the axis shows
    for tr in p.bars.data:
        for full, hover in zip(tr.customdata, tr.hovertext):
            assert hover.startswith(f"{full}<br>")
    # the HTML report's figure (no widget in between) cuts its axis names the same way
    fig = tf.layer_bars(p.table)
    ax = fig.layout.yaxis
    assert list(ax.tickvals) == list(ax.categoryarray)
    assert max(len(n) for n in ax.tickvals) > tf.LABEL_CHARS
    assert [tf.short_name(n) for n in ax.tickvals] == list(ax.ticktext)
    assert all(len(s) <= tf.LABEL_CHARS for s in ax.ticktext)
    assert fig.layout.yaxis.tickfont.size == tf.TICK_FONT_SIZE >= 11
    cut = tf.short_name("/layer3/0/conv2/conv/Conv + /layer3/0/conv2/bn/BatchNormalization + "
                        "/layer3/0/relu/Relu", 40)
    assert len(cut) == 40 and cut.startswith("/layer3/0/conv2/con") and cut.endswith("relu/Relu")
    by_type = tf.breakdown(p.table)
    assert by_type.layout.uniformtext.minsize >= 11 and by_type.layout.xaxis.tickfont.size >= 11


def test_a_next_step_wraps_between_profile_inputs_not_inside_a_shape():
    """The narrow next-step column broke '--profile image:1x3x224x2 / 24:...' mid-token."""
    from widgets.base import findings_html

    hint = "--profile image:1x3x224x224:4x3x224x224:8x3x224x224,rois:1x4:8x4:64x4,idx:1:8:64"
    html = findings_html([{"severity": "warning", "code": "default-profile", "message": "m",
                           "hint": hint}])
    assert "image:1x3x224x224:4x3x224x224:8x3x224x224,<wbr>rois:1x4:8x4:64x4,<wbr>idx" in html
    # fixed columns (a long token cannot widen its column past the panel) that break a word
    # only where it cannot fit (overflow-wrap anywhere would split 224x224 at any width)
    assert "table-layout:fixed" in html and ".wb-findings td {overflow-wrap:break-word}" in html
    assert "<td><span style='white-space:nowrap'>--profile</span> image" in html


def test_node_names_wrap_between_their_scopes():
    from widgets.base import findings_html

    html = findings_html([{"severity": "error", "code": "qdq-zero-point", "message": "m",
                           "nodes": ["/b/b.1/Constant_1_output_0_DequantizeLinear"]}])
    assert "/<wbr>b/<wbr>b.<wbr>1/<wbr>Constant_<wbr>1_<wbr>output_<wbr>0_<wbr>Dequantize" in html
