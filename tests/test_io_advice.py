"""The reformat finding's next step, read from real TensorRT 8.6 captures (H200 fixtures):
the I/O reformat layers, their measured time (the predicted saving) and the I/O formats to
build with; the proposal applies as a BuildConfig and as CLI flags."""
from __future__ import annotations

import pytest

from workbench.engines.spec import BuildConfig
from workbench.timing.io_advice import advise, io_format_of, verify
from workbench.timing.summary import lint
from workbench.timing.table import LayerTable

from tests.conftest import H200  # the H200 captures kept in the repository


def table(name: str) -> LayerTable:
    return LayerTable.build(str(H200 / f"{name}.layers.json"), str(H200 / f"{name}.profile.json"))


@pytest.mark.parametrize("desc,spec", [
    ("Row major linear FP32", "fp32:chw"), ("Row major linear FP16 format", "fp16:chw"),
    ("Channel major FP16 format where channel % 8 == 0", "fp16:hwc8"),
    ("Channel major FP16 format where channel % 4 == 0", "fp16:hwc8"),
    ("Sixteen wide channel vectorized row major FP16 format", "fp16:chw16"),
    ("Row major linear Int32", "int32:chw")])
def test_format_descriptions_map_to_trtexec_names(desc, spec):
    assert io_format_of(desc) == spec


def test_resnet_fp16_advice_is_fp16_hwc8_in_fp16_out_with_measured_saving():
    t = table("resnet50_fp16")
    a = advise(t)
    assert a["build"] == {"input_io_formats": "fp16:hwc8", "output_io_formats": "fp16:chw"}
    assert {la["side"] for la in a["layers"]} == {"input", "output"}
    assert a["time_ms"] == pytest.approx(sum(la["time_ms"] for la in a["layers"]))
    assert 0 < a["time_ms"] < t.total_ms
    # the proposal is a valid build config and CLI flags
    cfg = BuildConfig(precision="fp16", **a["build"])
    assert cfg.input_io_formats == "fp16:hwc8"
    assert a["cli"] == "--input-io-formats fp16:hwc8 --output-io-formats fp16:chw"


def test_bert_advice_leaves_integer_inputs_and_makes_outputs_fp16():
    a = advise(table("bert_small_fp16"))
    assert a["build"] == {"output_io_formats": "fp16:chw"}
    assert {la["tensor"] for la in a["layers"]} == {"last_hidden_state", "pooler_output"}


def test_fp32_engine_has_nothing_to_advise():
    assert advise(table("resnet50_fp32")) is None


def test_lint_carries_the_next_step_with_predicted_saving():
    found = [f for f in lint(table("resnet50_fp16")) if "reformat" in f.code]
    assert found and "--input-io-formats fp16:hwc8" in found[0].message
    step = found[0].extra["next_step"]
    assert step["build"]["input_io_formats"] == "fp16:hwc8" and step["time_ms"] > 0


def test_verify_reports_before_and_after():
    t = table("resnet50_fp16")
    v = verify(t, t)
    assert v["reformat_pct_before"] == v["reformat_pct_after"] > 0
    assert v["io_reformat_ms_before"] > 0 and v["saved_ms"] == 0
