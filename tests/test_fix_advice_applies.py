"""Advice that fails when run is worse than none: `check` offers the decompose command only
where its precondition holds (a Det of 2x2/3x3 matrices, not 4x4), and a session whose model no
recipe fixes automatically does not point at `fix --auto` (it would change nothing). Real
TensorRT-RTX parser."""
from __future__ import annotations

import shlex

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from tests.next_step_cases import advice_text
from workbench.cli import main
from workbench.support import check
from workbench.surgery.propose import advise
from workbench.surgery.session import FixSession


def _det(path, n):
    g = h.make_graph([h.make_node("Det", ["x"], ["y"], name="/Det")], "det",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, n, n])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def _hint(path):
    rep = advise(check(str(path), backend="tensorrt-rtx"))
    assert not rep.supported, "TensorRT-RTX has no Det importer"
    (u,) = [u for u in rep.unsupported if u["node"] == "/Det"]
    return advice_text(u)


def test_a_3x3_det_is_advised_the_decompose_that_then_works(tmp_path, capsys):
    path = _det(tmp_path / "det3.onnx", 3)
    hint = _hint(path)
    assert hint.startswith("`workbench fix ") and "--recipe decompose:node=/Det`" in hint
    argv = shlex.split(hint.split("`")[1])
    assert main(argv[1:]) == 0
    fixed = tmp_path / "det3.fixed.onnx"
    assert "Det" not in {n.op_type for n in onnx.load(str(fixed)).graph.node}


def test_a_4x4_det_is_not_advised_a_decompose_that_refuses_it(tmp_path):
    path = _det(tmp_path / "det4.onnx", 4)
    hint = _hint(path)
    assert "decompose" not in hint
    assert "--split -o " in hint  # the way that works: engine + onnxruntime tail
    # and the recipe itself still refuses it, naming why
    with pytest.raises(Exception, match="4x4: only static 2x2 and 3x3"):
        from workbench.surgery.changes import prepare_change
        prepare_change(onnx.load(str(path)), "decompose", {"node": "/Det"})


def test_a_session_no_recipe_fixes_automatically_does_not_send_the_user_to_auto(tmp_path):
    path = _det(tmp_path / "det4.onnx", 4)
    s = FixSession(path, backend="tensorrt-rtx")
    s.check()
    assert not any(p.auto for p in s.proposals)
    steps = s.next_steps()
    assert not any("--auto" in x for x in steps), steps
    assert steps == ["no recipe fixes /Det (Det) automatically: see the next step beside each "
                     "finding (a manual proposal, a split, a plugin)"]
    # a model with an automatic fix still gets the --auto line
    s3 = FixSession(_det(tmp_path / "det3.onnx", 3), backend="tensorrt-rtx")
    s3.check()
    assert any("--auto` applies the proposed fixes" in x for x in s3.next_steps())


def _affine_grid(path, constant_size):
    """theta [N, 2, 3] -> AffineGrid -> grid; the size a constant, or Shape(image) (what a
    spatial transformer exported with dynamic axes computes at run time)."""
    from onnx import numpy_helper as nh

    inputs = [h.make_tensor_value_info("theta", T.FLOAT, [2, 2, 3])]
    inits, nodes = [], []
    if constant_size:
        inits.append(nh.from_array(np.array([2, 1, 4, 5], np.int64), "size"))
    else:
        inputs.append(h.make_tensor_value_info("image", T.FLOAT, ["N", 1, "H", "W"]))
        nodes.append(h.make_node("Shape", ["image"], ["size"], name="/Shape"))
    nodes.append(h.make_node("AffineGrid", ["theta", "size"], ["grid"], name="/AffineGrid"))
    g = h.make_graph(nodes, "stn", inputs, [h.make_tensor_value_info("grid", T.FLOAT, None)],
                     initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 20)]), str(path))
    return path


def _grid_hint(path):
    rep = advise(check(str(path), backend="tensorrt-rtx"))
    (u,) = [u for u in rep.unsupported if u["node"] == "/AffineGrid"]
    return advice_text(u)


def test_an_affine_grid_of_a_run_time_size_is_not_advised_the_decompose_that_refuses_it(
        tmp_path):
    """stn_gridsample: `check` advised 'decompose into MatMul + Reshape on a constant base
    grid', and `fix --recipe decompose:node=/AffineGrid` then failed: 'the output size is not
    a constant'. The next step is the split; the hint says why the decompose is none."""
    path = _affine_grid(tmp_path / "stn.onnx", constant_size=False)
    hint = _grid_hint(path)
    assert hint.startswith(f"`workbench fix {path} --split -o {str(path)[:-5]}_split`"), hint
    assert "decompose into MatMul" not in hint and "--recipe decompose" not in hint
    assert hint.endswith("the decompose recipe does not apply to it: the output size "
                         "('size') is not a constant: the model computes it at run time")
    from workbench.surgery.changes import prepare_change

    with pytest.raises(Exception, match="'size'\\) is not a constant"):
        prepare_change(onnx.load(str(path)), "decompose", {"node": "/AffineGrid"})
    rep = advise(advise(check(str(path), backend="tensorrt-rtx")))  # twice: nothing added
    assert advice_text(rep.unsupported[0]) == hint


def test_an_affine_grid_of_a_constant_size_is_advised_the_decompose_that_then_works(tmp_path):
    path = _affine_grid(tmp_path / "stn_c.onnx", constant_size=True)
    hint = _grid_hint(path)
    assert "--recipe decompose:node=/AffineGrid`" in hint and "does not apply" not in hint
    argv = shlex.split(hint.split("`")[1])
    assert main(argv[1:]) == 0
    fixed = tmp_path / "stn_c.fixed.onnx"
    assert "AffineGrid" not in {n.op_type for n in onnx.load(str(fixed)).graph.node}
