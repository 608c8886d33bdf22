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
