"""Precision targets on a model that is already FP16: said as such, never as an FP32 model
whose activations went unchecked, and a BF16 request that converts nothing is a warning."""
from __future__ import annotations

import collections

import pytest

from conftest import SAMPLES
from workbench.precision import convert


@pytest.fixture(scope="module")
def fp16_model():
    res = convert(SAMPLES / "resnet_tiny.onnx", "fp16")
    kinds = collections.Counter(t.data_type for t in res.proto.graph.initializer)
    assert set(kinds) == {10}  # every weight FP16
    assert "no-overflow-check" in {f.code for f in res.findings}  # an FP32 source: said
    return res.proto


def test_fp16_of_an_fp16_model_says_it_already_is(fp16_model):
    res = convert(fp16_model, "fp16")
    codes = [f.code for f in res.findings]
    assert codes[0] == "already-low-precision" and "no-overflow-check" not in codes
    assert "already computes in FP16" in res.findings[0].message
    assert res.report["casts_inserted"] == 0
    assert [n.op_type for n in res.proto.graph.node] == [n.op_type for n in fp16_model.graph.node]


def test_bf16_of_an_fp16_model_warns_that_nothing_became_bf16(fp16_model):
    res = convert(fp16_model, "bf16")
    first = res.findings[0]
    assert (first.severity, first.code) == ("warning", "not-an-fp32-model")
    assert "computes in FP16, not FP32" in first.message and "still computes in FP16" in \
        first.message
    assert "no-overflow-check" not in {f.code for f in res.findings}
    # what the warning says is what the output holds
    kinds = {t.data_type for t in res.proto.graph.initializer}
    assert kinds == {10}


def test_a_model_with_fp32_weights_is_not_called_low(fp16_model):
    import copy

    import numpy as np
    from onnx import numpy_helper

    m = copy.deepcopy(fp16_model)
    m.graph.initializer.append(numpy_helper.from_array(np.ones(3, np.float32), "extra_fp32"))
    res = convert(m, "fp16")
    codes = {f.code for f in res.findings}
    assert "already-low-precision" not in codes and "not-an-fp32-model" not in codes


def test_entropy_on_few_samples_says_so_and_minmax_does_not():
    """The sample's 32 calibration images: entropy's scales clip (its error is several times
    minmax's on the same data), and the finding says why and what to compare."""
    import numpy as np

    data = np.load(SAMPLES / "calib" / "resnet_tiny.npz", allow_pickle=False)
    batches = [{"input": data["input"]}]
    ent = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=batches)
    mm = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=batches,
                 calibrate_method="minmax")
    few = [f for f in ent.findings if f.code == "few-calibration-samples"]
    assert len(few) == 1 and "on 32 sample(s)" in few[0].message and "minmax" in few[0].hint
    assert "few-calibration-samples" not in {f.code for f in mm.findings}
    assert ent.report["error"]["logits"]["rel_err"] > 2 * mm.report["error"]["logits"]["rel_err"]
    # enough samples: no finding
    many = [{"input": np.concatenate([data["input"]] * 8)}]
    big = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=many)
    assert "few-calibration-samples" not in {f.code for f in big.findings}
