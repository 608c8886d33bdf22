"""What onnxruntime's `quantize_static` writes, QDQ (int8 per-channel, uint8) and QOperator
(QLinearConv, QGemm, QLinearGlobalAveragePool): one `emulate_quantized` leaves nothing it would
be proposed for again, `fix --auto` (FixSession.auto_fix) reaches supported with the real
TensorRT-RTX parser, the outputs are onnxruntime's on the quantized model, and a recipe the
loop already applied is never proposed again as if new."""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from workbench.support.checker import SupportReport, check
from workbench.surgery.propose import propose
from workbench.surgery.recipes import get_recipe
from workbench.surgery.session import FixSession

RECIPE = "emulate_quantized"
SHAPE = (1, 3, 8, 8)


def _float_model() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (transB): the
    shape of a small classifier, which quantize_static turns into QLinearConv + QGemm."""
    rng = np.random.default_rng(11)
    r = lambda *s: (0.4 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2],
                         name="conv2"),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             h.make_node("GlobalAveragePool", ["r2"], ["p"], name="gap"),
             h.make_node("Flatten", ["p"], ["f"], axis=1, name="flatten"),
             h.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")]
    inits = {"w1": r(8, 3, 3, 3), "b1": r(8), "w2": r(16, 8, 3, 3), "b2": r(16),
             "wf": r(5, 16), "bf": r(5)}
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, list(SHAPE))],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 5])],
                     [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def _data(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(n)]


FLAVOURS = {  # name -> quantize_static arguments (as /tmp/nu3/zoo/make_q.py, ORT's defaults)
    "qdq_s8_per_channel": dict(fmt="QDQ", act="QInt8", w="QInt8", per_channel=True),
    "qdq_u8": dict(fmt="QDQ", act="QUInt8", w="QUInt8", per_channel=False),
    "qop_u8": dict(fmt="QOperator", act="QUInt8", w="QInt8", per_channel=False),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    d = tmp_path_factory.mktemp("ortq")
    fp32 = d / "fp32.onnx"
    onnx.save(_float_model(), str(fp32))
    out: Dict[str, str] = {}
    for name, a in FLAVOURS.items():
        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.it = iter([{"x": x} for x in _data(16, seed=5)])

            def get_next(self):
                return next(self.it, None)

        path = d / f"{name}.onnx"
        quantize_static(str(fp32), str(path), Reader(),
                        quant_format=getattr(QuantFormat, a["fmt"]),
                        activation_type=getattr(QuantType, a["act"]),
                        weight_type=getattr(QuantType, a["w"]), per_channel=a["per_channel"])
        out[name] = str(path)
    return out


def _run(model, x):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    s = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def _output_scale(path: str) -> float:
    """The scale of the last DequantizeLinear (the quantized output's step)."""
    m = onnx.load(path)
    dq = [n for n in m.graph.node if n.op_type == "DequantizeLinear"][-1]
    return float(nh.to_array(next(t for t in m.graph.initializer if t.name == dq.input[1])))


def _assert_same_outputs(original: str, fixed: str) -> None:
    """Outputs within one step of the output quantization of onnxruntime's (the emulation is
    float32 arithmetic on the same integers: at most a rounding tie may flip one step)."""
    tol = _output_scale(original) * 1.001
    worst = max(float(np.max(np.abs(_run(original, x) - _run(fixed, x))))
                for x in _data(8, seed=9))
    assert worst <= tol, (worst, tol)


def test_the_premise_int32_bias_per_channel_scales_and_qgemm(models):
    """What onnxruntime writes, and what the parser refuses in it."""
    s8 = onnx.load(models["qdq_s8_per_channel"])
    inits = {t.name: t for t in s8.graph.initializer}
    dq = [n for n in s8.graph.node if n.op_type == "DequantizeLinear"]
    assert any(inits[n.input[0]].data_type == T.INT32 for n in dq if n.input[0] in inits)
    assert any(len(inits[n.input[1]].dims) == 1 and inits[n.input[1]].dims[0] > 1
               for n in dq if n.input[1] in inits)  # per-channel scales
    qop = {n.op_type for n in onnx.load(models["qop_u8"]).graph.node}
    assert {"QLinearConv", "QGemm"} <= qop
    for path in models.values():
        assert not check(path, backend="tensorrt-rtx").supported


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_one_application_leaves_nothing_to_emulate(models, flavour, tmp_path):
    """After one emulate_quantized: no int32/uint8 DequantizeLinear, no QOperator op, the
    recipe's precondition no longer applies, the parser takes the model and no proposal names
    the recipe again (it used to: `f.0.bias_DequantizeLinear ... input has type Int32`)."""
    path = models[flavour]
    rec = get_recipe(RECIPE)
    out = rec.apply(onnx.load(path))
    onnx.checker.check_model(out)
    inits = {t.name: t.data_type for t in out.graph.initializer}
    assert not [n.name for n in out.graph.node if n.op_type == "DequantizeLinear"
                and inits.get(n.input[0]) in (T.INT32, T.UINT8)]
    assert not [n.op_type for n in out.graph.node if n.domain == "com.microsoft"]
    pre = rec.precondition(out)
    assert not pre.applies, pre.reason
    fixed = tmp_path / "emulated.onnx"
    onnx.save(out, str(fixed))
    rep = check(str(fixed), backend="tensorrt-rtx")
    assert rep.supported, rep.unsupported
    assert not [p for p in propose(rep, out) if p.recipe == RECIPE]
    _assert_same_outputs(path, str(fixed))


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_auto_fix_reaches_supported_in_one_step(models, flavour, tmp_path):
    """FixSession.auto_fix (what `workbench fix --auto` runs): one kept emulate_quantized, then
    supported (QDQ used to stop after fold_constants, QOperator at the QGemm)."""
    path = models[flavour]
    s = FixSession(path, backend="tensorrt-rtx", start="original",
                   output=tmp_path / "fixed.onnx")
    res = s.auto_fix()
    assert res.supported, res.remaining
    assert res.stop_reason == "supported"
    assert [st["proposal"]["recipe"] for st in res.steps if st.get("kept")] == [RECIPE]
    assert not res.repeats
    out = s.export()
    assert check(str(out), backend="tensorrt-rtx").supported
    _assert_same_outputs(path, str(out))


def test_qgemm_alone_matches_onnxruntime():
    """com.microsoft QGemm with int32 bias, transB, alpha and per-column weight scales, both
    with a quantized output and with a float output (no y_scale)."""
    rng = np.random.default_rng(3)
    b = rng.integers(-127, 128, (6, 12)).astype(np.int8)  # transB: N x K
    c = rng.integers(-3000, 3000, (6,)).astype(np.int32)
    inits = [nh.from_array(np.float32(0.02), "sa"), nh.from_array(np.uint8(120), "za"),
             nh.from_array(b, "b"), nh.from_array(rng.uniform(0.005, 0.02, 6).astype(np.float32),
                                                  "sb"),
             nh.from_array(np.zeros(6, np.int8), "zb"), nh.from_array(c, "c"),
             nh.from_array(np.float32(0.07), "sy"), nh.from_array(np.uint8(131), "zy")]
    for quantized_out in (True, False):
        ins = ["a", "sa", "za", "b", "sb", "zb", "c"] + (["sy", "zy"] if quantized_out else [])
        node = h.make_node("QGemm", ins, ["y"], domain="com.microsoft", transB=1, alpha=0.75,
                           name="qg")
        g = h.make_graph([node], "g", [h.make_tensor_value_info("a", T.UINT8, [4, 12])],
                         [h.make_tensor_value_info("y", T.UINT8 if quantized_out else T.FLOAT,
                                                   [4, 6])], inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17),
                                           h.make_opsetid("com.microsoft", 1)])
        m.ir_version = 9
        out = get_recipe(RECIPE).apply(m)
        assert not [n for n in out.graph.node if n.domain == "com.microsoft"]
        a = rng.integers(0, 256, (4, 12)).astype(np.uint8)
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                    ).run(None, {"a": a})[0]
        got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]
                                   ).run(None, {"a": a})[0]
        assert got.dtype == want.dtype
        if quantized_out:
            assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        else:
            assert np.allclose(got, want, rtol=1e-5, atol=1e-5), np.abs(got - want).max()


def test_a_recipe_applied_that_did_not_help_is_not_proposed_again(models, tmp_path,
                                                                  monkeypatch):
    """The loop's own rule, whatever the recipes do: a parser that keeps refusing the node
    after the change and a proposer that names emulate_quantized for it again (what `check`
    did after the old emulation left the int32 bias): the recipe is applied once, then the
    loop says why it did not help instead of applying it again as if new."""
    import workbench.surgery.session as session_mod
    from workbench.surgery.recipes import Proposal

    path = models["qdq_u8"]
    stuck = check(path, backend="tensorrt-rtx")  # the same refusal, whatever the version
    node = stuck.unsupported[0]["node"]
    calls = []

    def proposer(report, model):
        calls.append(node)
        return [Proposal(node, "DequantizeLinear", RECIPE, {}, "stub reason", code="x")]

    monkeypatch.setattr(session_mod, "propose", proposer)
    s = FixSession(path, backend="tensorrt-rtx", start="original", check=lambda p: stuck,
                   output=tmp_path / "fixed.onnx")
    res = s.auto_fix()
    assert not res.supported and len(calls) == 2
    assert [st["proposal"]["recipe"] for st in res.steps] == [RECIPE]
    assert res.steps[0]["kept"]
    assert len(res.repeats) == 1 and res.repeats[0]["repeat_of_step"] == 1
    why = res.repeats[0]["why"]
    assert why.startswith(f"{RECIPE} was applied at step 1 and the parser still refuses {node}")
    assert "would not help" in why and "stub reason" in why
    assert res.stop_reason == "no more proposals; " + why
    from workbench.cli.cmd_fix import step_line

    assert step_line(res.repeats[0], "tensorrt-rtx").startswith(
        f"{RECIPE} on {node}: not applied again ({RECIPE} was applied at step 1")


def test_the_same_recipe_after_another_change_is_new_for_a_new_node(monkeypatch, tmp_path,
                                                                     models):
    """Not every second proposal is a repeat: after another recipe changed the model, the
    same recipe for a node that was not failing when it ran is applied again; for the node it
    already failed on, it is not. (Recipes stubbed: only the loop's rule is under test.)"""
    import workbench.surgery.session as session_mod
    from workbench.surgery.changes import Change
    from workbench.surgery.recipes import Proposal

    real = check(models["qdq_u8"], backend="tensorrt-rtx")
    failing = iter([["A"], ["B"], ["C"], ["C"]])
    plan = {"A": "r1", "B": "r2", "C": "r1"}

    def checker(p):
        d = real.to_dict()
        d["unsupported"] = [dict(d["unsupported"][0], node=n) for n in next(failing, ["C"])]
        return SupportReport.from_dict(d)

    def proposer(report, model):
        return [Proposal(u["node"], "Conv", plan[u["node"]], {}, f"for {u['node']}", code="x")
                for u in report.unsupported]

    monkeypatch.setattr(session_mod, "propose", proposer)
    s = FixSession(models["qdq_u8"], backend="tensorrt-rtx", start="original", check=checker,
                   output=tmp_path / "fixed.onnx")

    def fake_apply(what, params=None, *, recheck=True):
        s.check()
        return Change(recipe=what.recipe, params={}, precondition={}, preserves_semantics=True,
                      verification=None, diff={}, kept=True)

    monkeypatch.setattr(s, "apply", fake_apply)
    res = s.auto_fix(max_steps=6)
    assert [(st["proposal"]["recipe"], st["proposal"]["node"]) for st in res.steps] == \
        [("r1", "A"), ("r2", "B"), ("r1", "C")]
    assert [(r["proposal"]["recipe"], r["proposal"]["node"], r["repeat_of_step"])
            for r in res.repeats] == [("r1", "C", 3)]


def test_a_quantized_op_without_importer_or_emulation_says_what_to_do(tmp_path):
    """com.microsoft QLinearSoftmax: TensorRT has no importer and emulate_quantized no
    rewrite; the finding names the op and says to re-quantize in QDQ format with the command,
    and --auto proposes nothing for it (instead of a plugin it does not need)."""
    z = [nh.from_array(np.float32(0.05), "s"), nh.from_array(np.int8(0), "z"),
         nh.from_array(np.float32(1 / 256), "sy"), nh.from_array(np.int8(-128), "zy")]
    g = h.make_graph([h.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
                      h.make_node("QLinearSoftmax", ["q", "s", "z", "sy", "zy"], ["qs"],
                                  name="qsoftmax", domain="com.microsoft", axis=-1, opset=13),
                      h.make_node("DequantizeLinear", ["qs", "sy", "zy"], ["y"], name="dq")],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 8])], z)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    path = tmp_path / "qsoftmax.onnx"
    onnx.save(m, str(path))
    s = FixSession(str(path), backend="tensorrt-rtx", start="original")
    rep = s.check()
    assert not rep.supported
    u = [x for x in rep.unsupported if x.get("op") == "QLinearSoftmax"]
    assert u, rep.unsupported
    assert ("QLinearSoftmax is an onnxruntime quantized op (QOperator format) that TensorRT has "
            "no importer for") in u[0]["hint"]
    assert "re-quantize the float model in QDQ format (precision --to int8 on the FP32 " \
        "model" in u[0]["hint"]
    assert not [p for p in s.proposals if p.recipe == RECIPE and p.node == "qsoftmax"]


def test_the_auto_step_line_says_emulation_gives_up_int8():
    from workbench.cli.cmd_fix import step_line

    step = {"proposal": {"recipe": "emulate_quantized", "node": "f.0.bias_DequantizeLinear"},
            "kept": True, "verification": {"max_abs_diff": 0.0}, "supported_after": True}
    line = step_line(step, "tensorrt-rtx")
    assert "no INT8 speed-up" in line and "--to int8" in line and "now parses" in line
    other = dict(step, proposal={"recipe": "fold_constants", "node": "n"})
    assert "INT8" not in step_line(other, "tensorrt-rtx")


def test_the_fix_panels_auto_fix_says_what_emulation_costs(models):
    """The panel said 'supported' after emulate_quantized and not that INT8 was given up,
    which the CLI's --auto log says (`Recipe.cost`, one text for both)."""
    from widgets.fix import FixPanel
    from workbench.surgery.recipes import recipe_cost

    panel = FixPanel(models["qdq_u8"], graph=False)
    panel.wait(120)
    panel.auto_fix()
    res = panel.wait(300)
    assert res.supported and RECIPE in [s["proposal"]["recipe"] for s in res.steps
                                        if s.get("kept")]
    assert "no INT8 speed-up" in panel.status.value
    assert recipe_cost(RECIPE) in panel.status.value.replace("&#x27;", "'")
    assert recipe_cost("fold_constants") is None and recipe_cost("no-such-recipe") is None
