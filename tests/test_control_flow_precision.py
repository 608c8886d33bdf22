"""FP16 inside a Loop body: the model computes in FP16 even when its top level does not.

A TorchScript loop exported to ONNX (`Loop` whose body does the math) lowered to FP16 was
reported as exact: `precision` said "0 Cast(s) inserted" and "max abs 0", `compare` judged the
candidate as FP32 on onnxruntime at FP32 tolerance. Whether a model holds low floats, the
precision it is judged in and the casts counted read every subgraph."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.runtime.comparison import infer_precision
from workbench.runtime.runners import has_low_float, low_float_runner


def _loop_model() -> onnx.ModelProto:
    """y = (tanh(x @ W + b)) applied 3 times in a Loop body (W, b read from the outer scope)."""
    rng = np.random.default_rng(0)
    w = nh.from_array((rng.standard_normal((16, 16)) * 0.3).astype(np.float32), "W")
    b = nh.from_array(rng.standard_normal(16).astype(np.float32), "b")
    body = h.make_graph(
        [h.make_node("MatMul", ["x_in", "W"], ["mm"], name="/body/MatMul"),
         h.make_node("Add", ["mm", "b"], ["ad"], name="/body/Add"),
         h.make_node("Tanh", ["ad"], ["x_out"], name="/body/Tanh"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="/body/cond")],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("x_in", T.FLOAT, ["n", 16])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("x_out", T.FLOAT, ["n", 16])])
    trips = nh.from_array(np.array(3, np.int64), "trips")
    cond = nh.from_array(np.array(True), "cond")
    g = h.make_graph([h.make_node("Loop", ["trips", "cond", "x"], ["y"], name="/Loop", body=body)],
                     "loop", [h.make_tensor_value_info("x", T.FLOAT, ["n", 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", 16])],
                     initializer=[w, b, trips, cond])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def test_fp16_in_a_loop_body_is_fp16_for_precision_and_compare(tmp_path):
    from workbench import compare
    from workbench.precision import convert

    m = _loop_model()
    data = tmp_path / "x.npz"
    np.savez(data, x=np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32))
    res = convert(m, "fp16", calibration=str(data))
    low = res.proto
    assert not has_low_float(m) and has_low_float(low)
    assert infer_precision(m) == "fp32" and infer_precision(low) == "fp16"
    assert low_float_runner(low) != "onnxruntime"  # FP16 arithmetic, not ORT's own choice
    assert res.report["casts_inserted"] > 0
    cand = tmp_path / "low.onnx"
    onnx.save(low, str(cand))
    ref = tmp_path / "ref.onnx"
    onnx.save(m, str(ref))
    rep = compare.layerwise(ref, cand, calibration=str(data))
    assert rep.precision == "fp16" and rep.atol >= 1e-3
    (y,) = rep.outputs
    assert 0 < y.max_abs < 0.05, y  # FP16 rounding through three tanh layers: real, small
