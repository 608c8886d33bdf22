"""Models onnxruntime's `quantize_static` wrote in QDQ format with its defaults (int32 biases,
asymmetric int8 activations, a Relu folded into the zero point): TensorRT parses none of them.
`fold_constants` folds what can only go (the int32 bias DequantizeLinear, exactly), `strip_qdq`
recovers the float model (the saturation kept), and `workbench precision --to int8` on such a
model quantizes it again, symmetric, instead of failing on the old zero points."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from quant_models import cnn
from workbench.support.checker import check
from workbench.surgery.recipes import get_recipe
from workbench.surgery.recipes.qdq import dequantize_constant, strip_qdq


def _feeds(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def ort_qdq(tmp_path_factory):
    """(fp32 path, QDQ path): quantize_static with onnxruntime's defaults, QDQ format."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    d = tmp_path_factory.mktemp("ortqdq")
    fp32, q = d / "fp32.onnx", d / "qdq.onnx"
    onnx.save(cnn(), str(fp32))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(_feeds())

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(fp32), str(q), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return fp32, q


def _run(model, x, optimize=True):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    so = ort.SessionOptions()
    if not optimize:  # (onnxruntime fuses DQ(weight) -> MatMul into an int8 kernel that also
        # quantizes the activations: not what the graph says)
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _dq_inputs(m):
    inits = {t.name: t.data_type for t in m.graph.initializer}
    return [inits.get(n.input[0]) for n in m.graph.node if n.op_type == "DequantizeLinear"]


def test_the_onnxruntime_default_is_what_tensorrt_refuses(ort_qdq):
    """The premise: int32 bias DequantizeLinear and non-zero zero points; the parser says no."""
    _, q = ort_qdq
    m = onnx.load(str(q))
    assert T.INT32 in _dq_inputs(m)
    assert not check(str(q), backend="tensorrt-rtx").supported
    assert "Relu" not in {n.op_type for n in m.graph.node}  # folded into a zero point


def test_fold_constants_folds_the_int32_bias_exactly_and_keeps_int8_pairs(ort_qdq, tmp_path):
    """graphsurgeon never folds Q/DQ, so `fold_constants` (which `check` advises for the
    bias) changed nothing; now the refused DequantizeLinear goes, bit-exact, and the int8
    weight pairs TensorRT runs in INT8 stay; the parser no longer names the bias."""
    _, q = ort_qdq
    m = onnx.load(str(q))
    rec = get_recipe("fold_constants")
    pre = rec.precondition(m)
    assert pre.applies and all(n.endswith("DequantizeLinear") for n in pre.nodes)
    out = rec.apply(m)
    types = _dq_inputs(out)
    assert T.INT32 not in types and types.count(T.INT8) >= 2
    x = _feeds(1, seed=7)[0]["x"]
    assert np.array_equal(_run(out, x), _run(m, x))
    path = tmp_path / "folded.onnx"
    onnx.save(out, str(path))
    rep = check(str(path), backend="tensorrt-rtx")
    assert not any("Int32" in str(u.get("reason", "")) for u in rep.unsupported), rep.unsupported


def test_strip_qdq_recovers_the_float_model_with_its_relu(ort_qdq):
    """No Q/DQ left; the outputs are the FP32 model's up to the weights' rounding. The
    folded Relu lives on as the pairs' saturation (Clip): without it the output moves far."""
    fp32, q = ort_qdq
    m = onnx.load(str(q))
    out, counts = strip_qdq(m)
    ops = [n.op_type for n in out.graph.node]
    assert not {"QuantizeLinear", "DequantizeLinear"} & set(ops)
    assert counts["weights"] >= 4 and counts["pairs"] >= 2 and "Clip" in ops
    onnx.checker.check_model(out)
    xs = np.concatenate([f["x"] for f in _feeds(4, seed=3)])
    ref = _run(fp32, xs)
    got = _run(out, xs)
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() / scale < 0.02
    noclip = onnx.ModelProto()
    noclip.CopyFrom(out)
    for n in noclip.graph.node:
        if n.op_type == "Clip":
            n.op_type = "Identity"
            del n.input[1:]
    assert np.abs(_run(noclip, xs) - ref).max() / scale > 0.05
    assert len(onnx.load(str(q)).graph.node) == len(m.graph.node)  # the input is untouched


def test_precision_int8_on_a_quantized_model_quantizes_it_again(ort_qdq, tmp_path):
    """`convert(..., "int8")` used to fail with 'quantization produced non-zero zero points
    ... please report this model'; now the model is turned back into float first (said as a
    warning) and comes out symmetric, accepted by the parser and close to the FP32 model."""
    from workbench.precision.transform import convert

    fp32, q = ort_qdq
    res = convert(str(q), "int8", calibration=_feeds(), calibrate_method="minmax")
    codes = [f.code for f in res.findings]
    assert "requantized" in codes
    zps = [nh.to_array(t) for t in res.proto.graph.initializer if "zero_point" in t.name]
    assert zps and all(not np.any(z) for z in zps)
    assert T.INT32 not in _dq_inputs(res.proto)
    path = tmp_path / "int8.onnx"
    res.save(path)
    assert check(str(path), backend="tensorrt-rtx").supported
    xs = np.concatenate([f["x"] for f in _feeds(4, seed=5)])
    ref = _run(fp32, xs)
    assert np.abs(_run(res.proto, xs) - ref).max() / np.abs(ref).max() < 0.05


def test_strip_qdq_refuses_integer_ops_naming_the_node():
    """A QuantizeLinear feeding an integer op (QOperator format) is not a rounding step."""
    from workbench.core.errors import WorkbenchError

    g = h.make_graph([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant_x"),
                      h.make_node("QLinearSigmoid", ["q", "s", "z", "s", "z"], ["qs"],
                                  name="qsig", domain="com.microsoft"),
                      h.make_node("DequantizeLinear", ["qs", "s", "z"], ["y"], name="dq")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4])],
                     [nh.from_array(np.float32(0.1), "s"), nh.from_array(np.int8(0), "z")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    with pytest.raises(WorkbenchError, match="quant_x: QuantizeLinear feeds qsig"):
        strip_qdq(m)
    pre = get_recipe("strip_qdq").precondition(m)
    assert not pre.applies and "quant_x" in pre.reason and "emulate_quantized" in pre.reason


@pytest.mark.parametrize("axis", [0, 1])
def test_dequantize_constant_matches_onnxruntime_per_axis(axis):
    rng = np.random.default_rng(axis)
    x = rng.integers(-2 ** 20, 2 ** 20, size=(3, 4), dtype=np.int32)
    n = x.shape[axis]
    scale = rng.uniform(1e-4, 1e-2, n).astype(np.float32)
    zp = rng.integers(-50, 50, n).astype(np.int32)
    g = h.make_graph([h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=axis)], "g",
                     [], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(x, "x"), nh.from_array(scale, "s"), nh.from_array(zp, "z")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]
    got = dequantize_constant(x, scale, zp, axis)
    assert got.dtype == np.float32 and np.array_equal(got, want)


def test_fix_auto_takes_the_onnxruntime_default_to_supported(ort_qdq, tmp_path):
    """`workbench fix --auto -o OUT` on quantize_static's QDQ default: it used to fold the int32
    bias and stop at the asymmetric zero points (supported: False); now one emulate_quantized
    takes bias, weights and pairs at once, the parser takes OUT, and what is printed names
    OUT, never the workspace copy."""
    import subprocess
    import sys

    _, q = ort_qdq
    out = tmp_path / "mine fixed.onnx"
    r = subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import run; "
                        "sys.argv[0]='workbench'; run()", "fix", str(q), "--auto", "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert out.exists() and r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    assert "supported by tensorrt-rtx: True" in text and "still unsupported" not in text, text
    assert str(out) in text and ".trt-workbench" not in text, text
    steps = [ln for ln in text.splitlines() if ": kept" in ln]
    assert len(steps) == 1 and steps[0].startswith("emulate_quantized on "), text
    assert T.INT32 not in _dq_inputs(onnx.load(str(out)))
    x = _feeds(1, seed=7)[0]["x"]
    assert np.array_equal(_run(out, x), _run(q, x))


@pytest.mark.parametrize("zp_type", ["int8", "uint8", "float8_e4m3fn"])
def test_a_weight_quantized_in_the_graph_keeps_its_rounded_value(zp_type):
    """Q -> DQ on a float weight: the stripped model holds what the pair computes (int8/uint8
    rounding and clamping, float8's own rounding), so its output is the quantized model's."""
    import ml_dtypes

    dt = {"int8": np.int8, "uint8": np.uint8, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}[zp_type]
    zp = np.array(0 if zp_type != "uint8" else 128, dtype=dt)
    w = (np.random.default_rng(0).standard_normal((4, 4)) * 2).astype(np.float32)
    g = h.make_graph([h.make_node("QuantizeLinear", ["w", "s", "z"], ["q"], name="qw"),
                      h.make_node("DequantizeLinear", ["q", "s", "z"], ["wd"], name="dqw"),
                      h.make_node("MatMul", ["x", "wd"], ["y"], name="mm")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 4])],
                     [nh.from_array(w, "w"), nh.from_array(np.float32(0.02), "s"),
                      nh.from_array(zp, "z")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 19)])
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    out, counts = strip_qdq(m)
    assert counts == {"weights": 1, "pairs": 0}
    assert [n.op_type for n in out.graph.node] == ["MatMul"]
    assert np.array_equal(_run(out, x, optimize=False), _run(m, x, optimize=False))
