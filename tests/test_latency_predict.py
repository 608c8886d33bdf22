"""Latency predicted from recorded per-layer profiles of uniform engines (TensorRT 8.6 on an
H200, trtexec/TREx on an A100), mapped to ONNX nodes through the fused layers."""
from __future__ import annotations

import pytest

from conftest import A100, H200
from workbench.core.errors import WorkbenchError
from workbench.timing.predict import LatencyModel, find_profiles


@pytest.fixture(scope="module")
def h200():
    return LatencyModel.from_dir(H200, "resnet50.onnx", onnx=H200 / "resnet50.structure.onnx")


def test_recordings_found_per_model_in_both_layouts():
    assert set(find_profiles(H200, "resnet50.structure.onnx")) == {"fp32", "fp16"}
    assert set(find_profiles(H200, "bert_small.onnx")) == {"fp16"}
    assert find_profiles(H200, "yolo.onnx") == {}
    assert set(find_profiles(A100)) == {"fp32", "fp16", "int8"}  # (qat is INT8)
    with pytest.raises(WorkbenchError, match="profile folder not found"):
        find_profiles(H200 / "nope")


def test_uniform_engines_predict_their_recorded_totals(h200):
    assert h200.predict({}, default="fp32") == pytest.approx(2.934, abs=1e-3)
    assert h200.predict({}, default="fp16") == pytest.approx(0.879, abs=1e-3)
    assert h200.coverage("fp16") == pytest.approx(1.0)


def test_a_region_kept_in_fp32_costs_its_fp32_time_plus_reformats(h200):
    regions = h200.regions
    assert regions[0] == ["/conv1/Conv", "/relu/Relu"]  # conv + its activation, fused
    assert all(not n.startswith("onnx::") for r in regions for n in r)
    mid = regions[len(regions) // 2]
    base = h200.predict({}, default="fp16")
    mixed = h200.predict({n: "fp32" for n in mid}, default="fp16")
    own = sum(h200.node_time(n, "fp32") - h200.node_time(n, "fp16") for n in mid)
    # the region's FP32 time instead of its FP16 time, and two precision boundaries
    assert mixed == pytest.approx(base + own + 2 * h200.boundary_ms, rel=0.05)
    assert base < mixed < h200.predict({}, default="fp32")
