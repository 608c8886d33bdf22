"""Compare panel state without a browser: chart data, culprits, errors, exclusion search."""
from __future__ import annotations

import html
import numpy as np
import onnx

from conftest import SAMPLES
from widgets.compare import BANDS, ComparePanel
from workbench.precision.transform import convert

OVERFLOW = SAMPLES / "fp16_overflow.onnx"


def test_panel_shows_per_tensor_errors_and_culprit(tmp_path):
    fp16 = tmp_path / "o16.onnx"
    onnx.save(convert(OVERFLOW, "fp16").proto, str(fp16))
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, fp16, inputs=tmp_path / "in.npz")
    p.wait(300)  # the first compare runs in the panel's background task
    assert p.error is None and p.report is not None
    bar = p.figure.data[0]
    assert len(bar.x) == len(p.report.tensors) > 5
    # the overflowing node is drawn in the worst band and named as the culprit
    idx = [t.node for t in p.report.tensors].index("/scale/Mul")
    assert bar.marker.color[idx] == BANDS[-1][1]
    assert p.culprit_nodes() == ["/scale/Mul"]
    assert "FAIL" in p.status.value and "/scale/Mul" in p.findings_html.value


def test_panel_search_names_fp32_nodes(tmp_path):
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, target="fp16", inputs=tmp_path / "in.npz")
    p.wait(300)  # the model converted as it is: compared at once, beyond tolerance
    assert p.report is not None and not p.report.outputs_pass
    s = p.run_search()
    assert s.passed and "/scale/Mul" in s.excluded
    assert "within budget</b> (default per output kind, FP16 budgets)" in p.status.value
    assert "--exclude /scale/Mul" in p.status.value


def test_panel_without_inputs_shows_a_clear_error():
    p = ComparePanel(OVERFLOW, target="fp16", run=False)
    p.run_search()
    assert p.error and "no inputs" in p.error and "inputs" in p.status.value
    assert not p.search_btn.disabled  # usable again


def test_panel_compares_off_the_kernel_thread(tmp_path, monkeypatch):
    """The constructor returns while the compare runs in the background task; the kernel thread
    stays free, the buttons are disabled meanwhile and the result lands when the work ends."""
    import threading

    from workbench import compare

    fp16 = tmp_path / "o16.onnx"
    onnx.save(convert(OVERFLOW, "fp16").proto, str(fp16))
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    gate, seen = threading.Event(), {}
    real = compare.layerwise

    def gated(*a, **k):
        seen["thread"] = threading.get_ident()
        assert gate.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(compare, "layerwise", gated)
    p = ComparePanel(OVERFLOW, fp16, inputs=tmp_path / "in.npz")
    assert p.busy and p.compare_btn.disabled and "comparing" in p.status.value
    assert p.report is None
    gate.set()
    p.wait(300)
    assert seen["thread"] != threading.get_ident()
    assert not p.busy and not p.compare_btn.disabled and p.culprit_nodes() == ["/scale/Mul"]


def test_panel_engine_side_observer_and_one_line_error(tmp_path):
    """The engine side: an EngineCompareReport (CPU stand-in) shows its observer verdict; the
    real TensorRT path without a GPU ends in one line in the status."""
    import pytest

    from workbench.compare.engine_compare import compare_tensors, engine_layerwise, onnx_candidate

    x = np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    fp16 = convert(OVERFLOW, "fp16", measure=False).proto
    rep = engine_layerwise(OVERFLOW, onnx_candidate(fp16), [{"input": x}],
                           tensors=compare_tensors(OVERFLOW), memory_budget_mb=0.004,
                           precision="fp16")
    p = ComparePanel(OVERFLOW, run=False)
    assert p.engine_btn.disabled
    p.show(rep)
    assert "observer check" in p.status.value and "unmarked engine's answer" in p.status.value
    pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.worker.client import WorkerError, default_client

    try:
        default_client().call("cuda_info", timeout=120)
        return  # a GPU is here: tests/gpu covers the engine run
    except WorkerError:
        pass
    p = ComparePanel(OVERFLOW, inputs=tmp_path / "in.npz", run=False,
                     engine={"precision": "fp16", "backend": "tensorrt-rtx", "target": "sm89",
                             "builder_optimization_level": 0})
    assert not p.engine_btn.disabled
    assert p.run_engine() is None
    assert p.error and "needs an NVIDIA GPU" in p.error and "\n" not in p.error
    assert not p.engine_btn.disabled


RESNET = SAMPLES / "resnet_tiny.onnx"
RESNET_CALIB = SAMPLES / "calib" / "resnet_tiny.npz"


def test_readme_target_call_shows_the_comparison_at_once():
    """README's quick start, `ComparePanel(model, target="fp16", inputs=...)`, on a small CNN:
    the model converted to FP16 is compared at once (chart, status, table, findings), Compare
    stays usable, and the figures are those of the plain call on the same conversion."""
    from workbench import compare
    from workbench.precision.table import tolerances

    p = ComparePanel(RESNET, target="fp16", inputs=RESNET_CALIB)
    p.wait(300)
    assert p.error is None and p.report is not None
    rep = p.report
    assert rep.precision == "fp16" and (rep.atol, rep.rtol) == tolerances("fp16")
    assert len(p.figure.data[0].x) == len(rep.tensors) == 29
    assert not p.compare_btn.disabled and not p.search_btn.disabled
    assert "outputs PASS" in p.status.value
    assert ("candidate: the model converted to FP16 (no node kept in FP32), FP16 emulated on "
            "onnxruntime CPU") in p.status.value
    assert "FP16 as converted is within budget: no node needs to stay FP32" in p.status.value
    assert p.table.value.count("<tr>") == 11  # header + the 10 worst tensors
    assert "kept-fp32" in p.findings_html.value  # what the conversion said comes first
    # the same figures as the plain call on the same conversion
    plain = compare.layerwise(RESNET, convert(RESNET, "fp16", calibration=RESNET_CALIB,
                                              measure=False).proto, calibration=RESNET_CALIB)
    assert [t.to_dict() for t in plain.outputs] == [t.to_dict() for t in rep.outputs]
    assert rep.outputs[0].rel < rep.rtol
    # Compare again reuses the converted model (converted once)
    converted = p.converted
    assert p.run_compare() is not None and p.converted is converted


def test_target_call_beyond_tolerance_says_to_find_fp32_nodes(tmp_path):
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, target="fp16", inputs=tmp_path / "in.npz")
    p.wait(300)
    assert p.error is None and not p.report.outputs_pass
    assert "outputs FAIL" in p.status.value
    assert "<b>next:</b> press <i>Find FP32 nodes (fp16)</i>" in p.status.value
    assert "panel.run_search()" in p.status.value
    assert p.culprit_nodes() == ["/scale/Mul"]
    assert "fp16-overflow" in p.findings_html.value  # the conversion's range check is shown
    assert not p.search_btn.disabled


def test_a_panel_that_runs_nothing_says_what_to_press():
    p = ComparePanel(RESNET, target="fp16", inputs=RESNET_CALIB, run=False)
    assert p.report is None and not p.compare_btn.disabled
    assert "press Compare to compare the model converted to fp16" in p.status.value
    assert "or Find FP32 nodes (fp16)" in p.status.value
    p = ComparePanel(RESNET, run=False)
    assert p.compare_btn.disabled and p.search_btn.disabled
    assert "nothing to compare: pass a candidate model" in p.status.value
    assert "target=&#x27;fp16&#x27;" in p.status.value
    p = ComparePanel(RESNET, engine={"precision": "fp16"}, run=False)
    assert "press Compare engine" in p.status.value
    p = ComparePanel(RESNET)  # no candidate, no target: not silent either
    assert "nothing to compare" in p.status.value


def test_target_call_without_inputs_says_so():
    p = ComparePanel(RESNET, target="fp16")
    p.wait(300)
    assert p.report is None and p.error and "no inputs" in p.error
    assert "no inputs" in p.status.value and not p.compare_btn.disabled


def test_a_search_that_stops_says_why_and_what_to_try_in_the_panel(tmp_path):
    """The panel ended 'int8: NOT within tolerance with 0 node(s) kept in FP32:' and nothing
    after the colon; it now says why the search stopped and, for INT8, the calibration method
    to try (the CLI's line, with the panel's own model and data). The panel's atol/rtol ask
    for the elementwise rule, which INT8 of this model does not meet (the default verdict
    passes it with one Conv in FP32)."""
    data = SAMPLES / "calib" / "resnet_tiny.npz"
    p = ComparePanel(SAMPLES / "resnet_tiny.onnx", target="int8", inputs=data, run=False,
                     atol=1e-2, rtol=1e-2)
    s = p.run_search()
    assert not s.passed
    text = p.status.value
    assert "NOT within budget</b> (elementwise atol 0.01 rtol 0.01)" in text
    assert "kept in FP32:</b>" not in text
    assert "stopped" in text and "--calib-method percentile" in text
    assert str(SAMPLES / "resnet_tiny.onnx") in text and str(data) in text


def test_failing_tensors_are_outlined_and_exact_zeros_draw_no_bar(tmp_path):
    """A tensor failing the elementwise rule with a small relative error was a green bar and a
    green rel beside '17 beyond tol'; a zero error was a bar at '1p' on the log axis."""
    from widgets.base import SEVERITY_COLOURS

    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, target="fp16", inputs=tmp_path / "in.npz")
    p.wait(300)
    bar = p.figure.data[0]
    for t, y, line in zip(p.report.tensors, bar.y, bar.marker.line.color):
        assert (line == SEVERITY_COLOURS["error"]) == (not t.passed)
        assert (y is None) == (t.rel == 0)
    assert any(not t.passed for t in p.report.tensors)


def test_the_bars_fill_and_outline_have_a_legend():
    """The bar outline and fill colours had no legend (one trace: plotly shows none)."""
    from widgets.compare import BANDS, bands_legend

    text = bands_legend()
    for _, colour, label in BANDS:
        assert colour in text and html.escape(label, quote=False) in text
    assert "outline: elements beyond atol/rtol" in text and "no bar: identical to FP32" in text


def test_the_next_steps_name_the_panels_own_model_and_data(tmp_path):
    """The panel showed `workbench precision MODEL ... --calib DATA` though it was given both
    paths; the CLI prints them (`workbench.core.nextstep.pasteable`): so does the panel."""
    import re

    data = tmp_path / "in.npz"
    np.savez(data, input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, target="fp16", inputs=data)
    p.wait(300)
    text = html.unescape(re.sub(r"<[^>]+>", "", p.findings_html.value))
    assert f"workbench precision {OVERFLOW} --to fp16" in text
    assert f"--calib {data}" in text
    assert not re.search(r"\b(MODEL|DATA)\b", text)
    # the report itself keeps its placeholders (its JSON is read by scripts)
    assert any("MODEL" in (f.hint or "") for f in p.report.findings)


def test_the_log_axis_labels_what_its_height_can_hold(tmp_path):
    """1.5 decades labelled at every digit ran '10m 9m 8m 7m 6m' into each other."""
    from widgets.compare import log_dtick

    assert log_dtick([6e-3, 2e-1]) == "D2"  # 10m 20m 50m 100m 200m
    assert log_dtick([2e-3, 9e-3]) == "D1"
    assert log_dtick([1e-7, 0.5]) == 1 and log_dtick([]) == "D1"
    fp16 = tmp_path / "o16.onnx"
    onnx.save(convert(OVERFLOW, "fp16").proto, str(fp16))
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    p = ComparePanel(OVERFLOW, fp16, inputs=tmp_path / "in.npz")
    p.wait(300)
    drawn = [y for y in p.figure.data[0].y if y is not None]
    assert max(drawn) / min(drawn) > 1e3 and p.figure.layout.yaxis.dtick == 1
