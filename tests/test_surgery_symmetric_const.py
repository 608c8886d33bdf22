"""symmetric_qdq on what onnxruntime's QDQ quantizer writes: DequantizeLinear of stored int8
constants with a non-zero zero point (no QuantizeLinear in front), next to asymmetric
activation Q/DQ pairs; the advice `check` gives for them; grouped warnings in its text."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.core.errors import WorkbenchError
from workbench.core.findings import Finding
from workbench.support import codes
from workbench.surgery.changes import apply_recipe
from workbench.surgery.recipes import ProposeContext, get_recipe

RULE_HINT = ("`workbench fix m.onnx -o m.fixed.onnx --recipe symmetric_qdq:node={node}` "
             "(applies only where exact), or re-quantize symmetrically with `workbench "
             "precision` (zero point 0)")


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def qdq_model():
    """x -> Q/DQ (int8, zero point 5, computed input) -> Add eps -> Mul gamma -> Add bias:
    eps is a scalar stored as code 127 with zero point -128 (255 steps: outside int8 with
    zero point 0), gamma a vector of equal codes, bias codes whose shift by the zero point
    leaves int8 (-128 - 1) and whose values no symmetric scale represents exactly."""
    rng = np.random.default_rng(0)
    bias_codes = rng.integers(-128, 128, 16).astype(np.int8)
    bias_codes[0] = -128
    bias_codes[1] = 127
    inits = [
        _init("s_x", np.float32(0.05)), _init("z_x", np.int8(5)),
        _init("eps_q", np.int8(127)), _init("eps_s", np.float32(3.9e-9)),
        _init("eps_z", np.int8(-128)),
        _init("g_q", np.full(16, 127, np.int8)), _init("g_s", np.float32(3.9e-5)),
        _init("g_z", np.int8(-128)),
        _init("b_q", bias_codes), _init("b_s", np.float32(0.0013)), _init("b_z", np.int8(1)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"], name="x_Q"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"], name="x_DQ"),
        helper.make_node("DequantizeLinear", ["eps_q", "eps_s", "eps_z"], ["eps"], name="eps_DQ"),
        helper.make_node("DequantizeLinear", ["g_q", "g_s", "g_z"], ["g"], name="g_DQ"),
        helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_z"], ["b"], name="b_DQ"),
        helper.make_node("Add", ["xd", "eps"], ["a"], name="add_eps"),
        helper.make_node("Mul", ["a", "g"], ["m"], name="mul_gamma"),
        helper.make_node("Add", ["m", "b"], ["y"], name="add_bias"),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _zero_point(proto, node):
    n = next(n for n in proto.graph.node if n.name == node)
    return numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == n.input[2]))


def test_constant_dq_scalar_and_equal_vector_are_re_encoded_exactly():
    m = qdq_model()
    r = get_recipe("symmetric_qdq")
    for node in ("eps_DQ", "g_DQ"):
        pre = r.precondition(m, node=node)
        assert pre.applies and pre.nodes == [node] and "identical values" in pre.reason
        ch = apply_recipe(m, "symmetric_qdq", {"node": node})
        assert ch.kept and ch.verification.max_abs_diff == 0
        zp = _zero_point(ch.proto, node)
        assert zp.dtype == np.int8 and not np.any(zp)
    # the stored codes and scale dequantize to the very same float32 values
    ch = apply_recipe(m, "symmetric_qdq", {"node": "eps_DQ"})
    n = next(n for n in ch.proto.graph.node if n.name == "eps_DQ")
    vals = {t.name: numpy_helper.to_array(t) for t in ch.proto.graph.initializer}
    assert np.float32(vals[n.input[0]]) * vals[n.input[1]] == np.float32(255) * np.float32(3.9e-9)


def test_constant_dq_not_representable_is_refused_with_the_evidence():
    pre = get_recipe("symmetric_qdq").precondition(qdq_model(), node="b_DQ")
    assert not pre.applies and "not exact" in pre.reason and "quantization step" in pre.reason
    with pytest.raises(WorkbenchError, match="does not apply"):
        apply_recipe(qdq_model(), "symmetric_qdq", {"node": "b_DQ"})


def test_node_may_name_the_dq_of_a_pair_and_a_runtime_pair_is_refused():
    pre = get_recipe("symmetric_qdq").precondition(qdq_model(), node="x_DQ")
    assert not pre.applies and pre.nodes == ["x_Q"] and "computed at run time" in pre.reason


def test_no_node_fixes_what_it_can_and_names_the_rest():
    m = qdq_model()
    pre = get_recipe("symmetric_qdq").precondition(m)
    assert pre.applies and sorted(pre.nodes) == ["eps_DQ", "g_DQ"]
    left = pre.reason.partition("; left as they are: ")[2]
    assert "x_Q" in left and "b_DQ" in left and "not exact" in left
    ch = apply_recipe(m, "symmetric_qdq")
    assert ch.kept and ch.verification.max_abs_diff == 0
    assert not np.any(_zero_point(ch.proto, "eps_DQ")) and not np.any(_zero_point(ch.proto, "g_DQ"))
    assert np.all(_zero_point(ch.proto, "b_DQ") == 1) and np.all(_zero_point(ch.proto, "x_Q") == 5)


def test_no_node_fails_only_when_nothing_applies():
    m = qdq_model()
    done = apply_recipe(m, "symmetric_qdq").proto
    with pytest.raises(WorkbenchError, match="does not apply") as e:
        apply_recipe(done, "symmetric_qdq")
    assert "x_Q" in str(e.value) and "b_DQ" in str(e.value)


def _finding(node):
    return Finding("error", codes.QDQ_ZERO_POINT, "DequantizeLinear has a non-zero zero point",
                   nodes=[node], op="DequantizeLinear", hint=RULE_HINT.format(node=node))


@pytest.mark.parametrize("node,proposed", [("eps_DQ", True), ("g_DQ", True), ("b_DQ", False),
                                           ("x_DQ", False), ("x_Q", False)])
def test_proposed_and_advised_only_where_it_applies(node, proposed):
    m = qdq_model()
    r = get_recipe("symmetric_qdq")
    ctx = ProposeContext(m)
    f = _finding(node)
    props = r.propose(f, ctx)
    assert bool(props) is proposed
    if proposed:
        assert props[0].auto and props[0].params == {"node": node}
        assert r.retracts(f, ctx) is None  # the table's command runs as printed
    else:
        words, why = r.retracts(f, ctx)
        assert words in f.hint and "symmetric_qdq:node=" in words
        assert why.startswith("symmetric_qdq does not apply to it") and "not exact" in why


def test_advise_drops_the_command_that_fails_from_warnings_too(tmp_path):
    from workbench.support.checker import SupportReport
    from workbench.surgery.propose import advise

    path = tmp_path / "m.onnx"
    onnx.save(qdq_model(), str(path))
    report = SupportReport(model=str(path), backend="tensorrt-rtx", backend_version=None,
                           supported=False, mode="parser", unsupported=[{"node": "b_DQ", "op": "DequantizeLinear",
                                         "reason": "non-zero zero point", "source": "parser",
                                         "code": codes.QDQ_ZERO_POINT,
                                         "hint": RULE_HINT.format(node="b_DQ")}],
                           findings=[Finding("warning", codes.QDQ_ZERO_POINT, "zp", nodes=[n],
                                             op="DequantizeLinear",
                                             hint=RULE_HINT.format(node=n))
                                     for n in ("x_DQ", "g_DQ")])
    advise(report)
    assert "symmetric_qdq" not in report.unsupported[0]["hint"].split(";")[0]
    assert "does not apply to it" in report.unsupported[0]["hint"]
    warn = {f.nodes[0]: f.hint for f in report.findings if f.severity == "warning"}
    assert "--recipe symmetric_qdq:node=x_DQ" not in warn["x_DQ"]
    assert "--recipe symmetric_qdq:node=g_DQ" in warn["g_DQ"]
