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


class _Table:
    """A recorded engine's layer table as `LatencyModel.from_tables` reads it (its `df`)."""

    def __init__(self, rows):
        import pandas as pd

        self.df = pd.DataFrame(rows, columns=["onnx_nodes", "time_ms", "is_reformat",
                                              "is_constant"])


def _layers(a, b, c, reformat):
    return _Table([(["a"], a, False, False), (["b"], b, False, False),
                   (["c"], c, False, False), ([], reformat, True, False)])


def test_a_fallback_predicts_the_nodes_without_qdq_at_the_fallbacks_time():
    """INT8 with an FP16 fallback: the quantized nodes (a, c: convolutions) at their INT8
    time, the rest (b) at its FP16 time, a reformat at each precision boundary (the mean
    reformat of the low-precision engines) and the INT8 engine's I/O reformat once."""
    lm = LatencyModel.from_tables({"fp32": _layers(4.0, 2.0, 4.0, 0.0),
                                   "fp16": _layers(2.0, 1.0, 2.0, 0.2),
                                   "int8": _layers(1.0, 1.5, 1.0, 0.4)})
    assert lm.boundary_ms == pytest.approx(0.3)
    # without a fallback: the recorded INT8 engine
    assert lm.predict({}, default="int8") == pytest.approx(3.9)
    fb = lm.predict({}, default="int8", fallback="fp16", quantized={"a", "c"})
    assert fb == pytest.approx(1.0 + 1.0 + 1.0 + 2 * 0.3 + 0.4)
    # a node the assignment names keeps its precision (an FP32 exclusion)
    kept = lm.predict({"c": "fp32"}, default="int8", fallback="fp16", quantized={"a", "c"})
    assert kept == pytest.approx(1.0 + 1.0 + 4.0 + 2 * 0.3 + 0.4)
    # every node quantized: the recorded INT8 engine again; a float default ignores it
    assert lm.predict({}, default="int8", fallback="fp16", quantized={"a", "b", "c"}) == \
        pytest.approx(3.9)
    assert lm.predict({}, default="fp16", fallback="fp16", quantized={"a"}) == \
        pytest.approx(lm.uniform("fp16"))
