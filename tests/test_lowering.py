"""The float lowering (workbench.precision.lowering) on models that break onnxconverter-common:
If branches reading outer-scope values, Loop and Scan bodies, a CLIP-style block whose ops bind
operands of mixed origin to one type. Every result must pass onnx's full checker and run in
onnxruntime within 1e-2 relative error of FP32 (FP16 keeps 11 significant bits; these graphs
are a few layers deep, measured < 1e-3)."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T

from lowering_models import CASES, clip_block, if_outer_scope, loop_body
from workbench.core.errors import WorkbenchError
from workbench.precision.lowering import check_lowered, lower, scoped_types
from workbench.precision.transform import convert

F16, BF16 = T.FLOAT16, T.BFLOAT16


def _run(m, feed):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def _rel(ref, got):
    return {k: float(np.abs(ref[k].astype(np.float64) - got[k]).max() / np.abs(ref[k]).max())
            for k in ref}


def _types(m):
    """Types of every value in every graph of the lowered model (per-scope inference)."""
    out = {}
    for scope in scoped_types(m).values():
        out.update(dict(scope))
    return out


def _body(m, node, attr):
    n = next(x for x in m.graph.node if x.name == node)
    return next(a.g for a in n.attribute if a.name == attr)


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_cases_are_valid_and_run_within_tolerance(name):
    m, feed = CASES[name]()
    ex = ["head/add"] if name == "clip_block" else []
    res = lower(m, "fp16", exclude_nodes=ex)
    onnx.checker.check_model(res.proto, full_check=True)
    assert [o.name for o in res.proto.graph.output] == [o.name for o in m.graph.output]
    assert all(o.type.tensor_type.elem_type == T.FLOAT for o in res.proto.graph.output)
    rel = _rel(_run(m, feed), _run(res.proto, feed))
    print(f"\n{name}: FP16 vs FP32 rel err {rel}, {res.casts} casts, kept {res.kept}")
    assert all(v < 1e-2 for v in rel.values()), rel
    assert res.casts > 0
    b = lower(m, "bf16", exclude_nodes=ex)
    onnx.checker.check_model(b.proto, full_check=True)


def test_if_branches_compute_fp16_and_keep_the_if_interface_fp32():
    m, feed = if_outer_scope()
    out = lower(m, "fp16").proto
    types = _types(out)
    then, els = _body(out, "if", "then_branch"), _body(out, "if", "else_branch")
    conv = next(n for n in then.node if n.name == "then/conv")
    # the branch Conv reads the outer Conv's FP16 output and FP16 weights cast inside the branch
    assert [types[x] for x in conv.input] == [F16, F16, F16]
    assert types[next(n for n in els.node if n.name == "else/relu").output[0]] == F16
    # branch outputs (and so the If's output) stay FLOAT: a Cast up is the branch's last node
    for g in (then, els):
        assert g.output[0].type.tensor_type.elem_type == T.FLOAT
        last = g.node[-1]
        assert last.op_type == "Cast" and last.output[0] == g.output[0].name
    # casts for values of the outer graph are made inside the branch, never after the If
    outer_names = {o for n in out.graph.node for o in n.output}
    for g in (then, els):
        assert not {o for n in g.node for o in n.output} & outer_names
    assert types[next(n for n in out.graph.node if n.name == "conv").output[0]] == F16


def test_loop_body_lowered_and_carried_state_stays_fp32():
    m, feed = loop_body()
    out = lower(m, "fp16").proto
    body = _body(out, "loop", "body")
    types = _types(out)
    mm = next(n for n in body.node if n.name == "body/mm")
    assert [types[x] for x in mm.input] == [F16, F16]
    assert [i.type.tensor_type.elem_type for i in body.input] == [T.INT64, T.BOOL, T.FLOAT]
    assert [o.type.tensor_type.elem_type for o in body.output] == [T.BOOL, T.FLOAT, T.FLOAT]
    # the outer-scope weight is read by the body only: cast there, the initializer stays FP32
    wl = next(t for t in out.graph.initializer if t.name == "wl")
    assert wl.data_type == T.FLOAT


def test_type_constrained_operands_get_one_type():
    """Conv X/W/B share T: with the bias also read by an excluded node, the Conv gets a Cast of
    the bias, not the FP32 bias (what onnxconverter-common does)."""
    m, feed = clip_block()
    out = lower(m, "fp16", exclude_nodes=["head/add"]).proto
    types = _types(out)
    node = {n.name: n for n in out.graph.node}
    assert [types[x] for x in node["patch/conv"].input] == [F16, F16, F16]
    assert [types[x] for x in node["head/add"].input] == [T.FLOAT, T.FLOAT]
    assert types[node["mask"].input[0]] == T.BOOL
    assert [types[x] for x in node["mask"].input[1:]] == [F16, F16]
    assert [types[x] for x in node["clip"].input] == [F16, F16, F16]
    assert [types[x] for x in node["pad"].input] == [F16, T.INT64, F16]
    # Resize: X follows T, roi/scales stay float32 as the spec and TensorRT want
    assert [types[x] for x in node["resize"].input] == [F16, T.FLOAT, T.FLOAT]
    # the Cast from int64 feeds float math: a Cast down, the Cast itself untouched
    assert types[node["idx/mul"].input[0]] == F16
    assert types[node["idx/cast"].output[0]] == T.FLOAT
    # constants read only by lowered nodes are converted in place
    inits = {t.name: t.data_type for t in out.graph.initializer}
    assert inits["lo"] == F16 and inits["pw"] == F16 and inits["pb"] == T.FLOAT
    scale = next(n for n in out.graph.node if n.name == "scale_const")
    assert scale.attribute[0].t.data_type == F16


@pytest.mark.parametrize("make", [if_outer_scope, clip_block], ids=["if", "clip"])
def test_onnxconverter_common_breaks_on_these_models(make):
    """The reproduction: onnxconverter-common 1.16 writes invalid ONNX for them (if this test
    fails, the library was fixed and these models no longer reproduce its bugs)."""
    from onnxconverter_common import float16

    m, feed = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = float16.convert_float_to_float16(
            m, keep_io_types=True,
            node_block_list=["head/add"] if make is clip_block else None)
    with pytest.raises(Exception) as e:
        onnx.checker.check_model(c, full_check=True)
    text = str(e.value)
    assert ("topologically sorted" in text) if make is if_outer_scope else \
        ("inconsistent type" in text and "patch/conv" in text)


def test_invalid_lowering_is_refused_naming_the_node():
    """What onnxconverter-common writes for the CLIP block, handed to our validation: a
    one-line error naming the Conv and the next step."""
    from onnxconverter_common import float16

    m, _ = clip_block()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = float16.convert_float_to_float16(m, keep_io_types=True,
                                               node_block_list=["head/add"])
    with pytest.raises(WorkbenchError) as e:
        check_lowered(bad, m, "fp16")
    msg = str(e.value)
    assert "patch/conv" in msg and "--exclude patch/conv" in msg and "\n" not in msg


def test_keep_io_false_retypes_io_and_runs():
    m, feed = clip_block()
    out = lower(m, "fp16", keep_io_types=False).proto
    onnx.checker.check_model(out, full_check=True)
    assert out.graph.input[0].type.tensor_type.elem_type == F16
    assert out.graph.output[0].type.tensor_type.elem_type == F16
    got = _run(out, {"x": feed["x"].astype(np.float16)})
    rel = _rel(_run(m, feed), got)
    assert rel["y"] < 1e-2, rel


def test_convert_reports_kept_nodes_with_reasons():
    m, feed = if_outer_scope()
    r = convert(m, "fp16", calibration=[feed])
    kept = next(f for f in r.findings if f.code == "kept-fp32")
    assert kept.nodes == ["if"] and "control flow" in kept.message
    assert r.report["kept_fp32"] == ["if"]
    assert r.report["error"]["y"]["rel_err"] < 1e-2
    b = convert(m, "bf16", calibration=[feed])
    onnx.checker.check_model(b.proto, full_check=True)
    assert any(t.data_type == BF16 for t in b.proto.graph.initializer)


def test_sequence_operands_stay_fp32():
    """onnx's simple/test_sequence_model1: a tensor inserted into a sequence of FLOAT tensors
    must keep the sequence's element type (SequenceInsert binds both)."""
    from pathlib import Path

    path = (Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple" /
            "test_sequence_model1" / "model.onnx")
    r = lower(onnx.load(str(path)), "fp16")
    onnx.checker.check_model(r.proto, full_check=True)
    assert any(why == "sequence/optional operands stay FP32" for why in r.kept.values())


def test_an_identity_of_a_float_tensor_is_lowered_and_control_flow_says_its_body_is():
    """Identity's type parameter admits sequences and optionals since opset 16: every Identity
    (e.g. an exporter's alias of a LayerNorm weight) was kept FP32 as 'sequence/optional
    operands'; an If said 'stays FP32' though its branches are lowered."""
    from onnx import helper as h, numpy_helper as nh

    vi = h.make_tensor_value_info
    w = nh.from_array(np.full((4,), 0.5, np.float32), "w")
    branch = lambda n: h.make_graph([h.make_node("Mul", ["a", "wa"], [f"{n}_y"], name=f"/{n}/Mul")],  # noqa: E731
                                    n, [], [vi(f"{n}_y", T.FLOAT, [2, 4])])
    g = h.make_graph(
        [h.make_node("Identity", ["w"], ["wa"], name="/alias/Identity"),
         h.make_node("Mul", ["x", "wa"], ["a"], name="/Mul"),
         h.make_node("ReduceSum", ["a"], ["s"], keepdims=0, name="/ReduceSum"),
         h.make_node("Greater", ["s", "zero"], ["c"], name="/Greater"),
         h.make_node("If", ["c"], ["y"], name="/If", then_branch=branch("then"),
                     else_branch=branch("else"))],
        "g", [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 4])],
        [w, nh.from_array(np.array(0, np.float32), "zero")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    res = lower(m, "fp16")
    assert "/alias/Identity" not in res.kept
    assert res.kept["/If"] == "control flow: its inputs and outputs stay FP32, its body is lowered"
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    got = ort.InferenceSession(res.proto.SerializeToString()).run(None, {"x": x})[0]
    assert np.allclose(got, want, atol=1e-2)
