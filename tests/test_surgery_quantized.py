"""emulate_quantized: onnxruntime-quantized models (quantize_dynamic, quantize_static QOperator)
become float emulation the real TensorRT-RTX parser takes, with onnxruntime's outputs."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import REPO
from quant_models import feeds, quantized
from surgery_models import qdq_conv_runtime_input
from workbench.core.errors import WorkbenchError
from workbench.support.checker import check
from workbench.surgery.changes import apply_recipe
from workbench.surgery.propose import propose
from workbench.surgery.recipes import get_recipe
from workbench.surgery.recipes.quantized import OPS

RECIPE = "emulate_quantized"
CASES = [(k, m) for k in ("mlp", "cnn", "branchy") for m in ("dynamic", "qop", "qop-int8")]


@pytest.fixture(scope="module")
def qfolder(tmp_path_factory):
    return tmp_path_factory.mktemp("quantized")


def _run(model, x):
    s = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                             else str(model), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})


def _max_diff(a, b, kind):
    return max(float(np.max(np.abs(u.astype(np.float64) - v.astype(np.float64))))
               for x in feeds(kind) for u, v in zip(_run(a, x), _run(b, x)))


@pytest.mark.parametrize("kind,mode", CASES)
def test_emulation_computes_what_onnxruntime_computes(qfolder, kind, mode):
    _, qpath = quantized(qfolder, kind, mode)
    q = onnx.load(str(qpath))
    before = {n.op_type for n in q.graph.node}
    assert before & {"MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul"}
    out = get_recipe(RECIPE).apply(q)
    onnx.checker.check_model(out)
    left = {n.op_type for n in out.graph.node} & set(OPS)
    assert not left, left  # every quantized op is rewritten (none left for the parser)
    assert not any(n.domain == "com.microsoft" for n in out.graph.node)
    assert _max_diff(q, out, kind) <= 1e-5
    assert len(q.graph.node) == len(onnx.load(str(qpath)).graph.node)  # input untouched


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import run; "
                           "sys.argv[0]='workbench'; run()", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


@pytest.mark.parametrize("kind,mode", [("mlp", "dynamic"), ("cnn", "dynamic"), ("mlp", "qop"),
                                       ("cnn", "qop"), ("branchy", "qop-int8")])
def test_fix_auto_makes_quantized_models_parse_with_onnxruntime_outputs(qfolder, tmp_path,
                                                                         kind, mode):
    """Acceptance: `fix --auto` on a quantize_dynamic / QOperator model reaches supported with
    the real TensorRT-RTX parser; outputs equal onnxruntime's on the quantized model."""
    _, qpath = quantized(qfolder, kind, mode)
    out = tmp_path / "fixed.onnx"
    r = _cli("fix", qpath, "-o", out, "--auto", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["support_before"]["supported"] is False
    before_ops = {u["op"] for u in rep["support_before"]["unsupported"]}
    assert before_ops and before_ops <= set(OPS)  # the parser refuses only quantized ops
    assert rep["supported"] is True and [a["recipe"] for a in rep["applied"]] == [RECIPE]
    assert rep["verification"]["max_abs_diff"] <= 1e-5
    assert check(str(out), backend="tensorrt-rtx").supported
    assert _max_diff(qpath, out, kind) <= 1e-5


def test_matmul_integer_is_exact_integer_math():
    """The emulation computes the exact integers of the ONNX spec, also where x86 kernels
    without VNNI saturate int16 pair sums (255*127 + 255*127 > 32767)."""
    rng = np.random.default_rng(0)
    b = rng.integers(-127, 128, (64, 8)).astype(np.int8)
    b[:2] = 127
    g = h.make_graph([h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"], name="mmi")], "g",
                     [h.make_tensor_value_info("a", T.UINT8, [4, 64])],
                     [h.make_tensor_value_info("y", T.INT32, [4, 8])],
                     [nh.from_array(b, "b"), nh.from_array(np.uint8(3), "az"),
                      nh.from_array(np.int8(-2), "bz")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    out = get_recipe(RECIPE).apply(m)
    assert [o.name for o in out.graph.output] == ["y"]
    a = rng.integers(0, 256, (4, 64)).astype(np.uint8)
    a[:, :2] = 255
    got = ort.InferenceSession(out.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    want = (a.astype(np.int64) - 3) @ (b.astype(np.int64) + 2)
    assert got.dtype == np.int32 and np.array_equal(got, want)  # cast back to the graph's int32


def test_sums_beyond_float32_integers_are_stated_and_verified():
    # 2048 * 255 * 63 > 2**24: float32 rounds such sums (7-bit weights: no int16 pair
    # saturation in onnxruntime's x86 kernels, see test_matmul_integer_is_exact_integer_math)
    k = 2048
    g = h.make_graph([h.make_node("MatMulInteger", ["a", "b"], ["y"], name="big")], "g",
                     [h.make_tensor_value_info("a", T.UINT8, [2, k])],
                     [h.make_tensor_value_info("y", T.INT32, [2, 4])],
                     [nh.from_array(np.full((k, 4), 63, np.int8), "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    pre = get_recipe(RECIPE).precondition(m)
    assert pre.applies and "big: sums of 2048 products" in pre.reason and "2**24" in pre.reason
    a = np.full((2, k), 255, np.uint8)  # the worst case: 2048 * 255 * 63 = 32,901,120
    ch = apply_recipe(m, RECIPE, inputs={"a": a})
    assert ch.kept and ch.verification.max_rel_diff < 1e-7


def test_qdq_only_model_is_proposed_saying_it_gives_up_int8(tmp_path):
    """Asymmetric Q/DQ alone (what onnxruntime's QDQ quantizer writes): no other recipe makes
    it parse, so `fix --auto` applies the emulation (it used to stop, supported: False); the
    proposal says the pairs then compute in float and how to keep INT8; the change is verified
    like every recipe and the parser takes it."""
    m = qdq_conv_runtime_input()
    path = tmp_path / "qdq.onnx"
    onnx.save(m, str(path))
    rep = check(str(path), backend="tensorrt-rtx")
    assert not rep.supported
    mine = [p for p in propose(rep, m) if p.recipe == RECIPE]
    assert mine and all(p.auto for p in mine)
    assert "no INT8 speed-up" in mine[0].reason and "--to int8" in mine[0].reason
    ch = apply_recipe(m, RECIPE)
    assert ch.kept and ch.verification.max_abs_diff <= 1e-5
    out = tmp_path / "emulated.onnx"
    onnx.save(ch.proto, str(out))
    assert check(str(out), backend="tensorrt-rtx").supported


def test_no_quantized_op_no_recipe(qfolder):
    fp32, _ = quantized(qfolder, "mlp", "dynamic")
    pre = get_recipe(RECIPE).precondition(onnx.load(str(fp32)))
    assert not pre.applies and "no onnxruntime-quantized op" in pre.reason


def test_symmetric_qdq_pairs_stay_for_tensorrt_int8():
    """Zero-point-0 int8 Q -> DQ is what TensorRT runs in INT8: nothing to emulate there."""
    g = h.make_graph([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
                      h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4])],
                     [nh.from_array(np.float32(0.1), "s"), nh.from_array(np.int8(0), "z")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    pre = get_recipe(RECIPE).precondition(m)
    assert not pre.applies and "symmetric Q/DQ only" in pre.reason
