"""Old opsets: onnx's own `pytorch-converted` models (opset 6, IR 3) through the real
TensorRT-RTX parser, `fix --auto` with the opset-upgrade recipe, and their FP16 transform in
onnxruntime. Expected outputs come with the models (test_data_set_0); FP16 must stay within
1e-2 relative error of them (11 significant bits over one or two layers, measured < 5e-4)."""
from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper as h, numpy_helper, TensorProto as T

from workbench.cli import main as cli_main
from workbench.cli.cmd_fix import remaining_line
from workbench.support.checker import check_files, static_check
from workbench.surgery.recipes import get_recipe
from workbench.surgery.recipes.opset import MIN_TARGET, upgrade_opset
from workbench.surgery.session import auto_fix
from workbench.precision.transform import convert, run_ort

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"


def _opset(p):
    m = p if isinstance(p, onnx.ModelProto) else onnx.load(str(p))
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


OLD = [Path(p) for p in sorted(glob.glob(str(DATA / "*" / "model.onnx"))) if _opset(p) < 7]


def _case(path):
    d = path.parent / "test_data_set_0"
    ins = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(d.glob("input_*.pb"))]
    outs = [numpy_helper.to_array(onnx.load_tensor(str(p))) for p in sorted(d.glob("output_*.pb"))]
    return ins, outs


@pytest.fixture(scope="module")
def worker():
    from workbench.worker.client import WorkerClient

    c = WorkerClient()
    yield c
    c.close()


@pytest.fixture(scope="module")
def refused(worker):
    reports = check_files([str(p) for p in OLD], "tensorrt-rtx", client=worker)
    return [(p, r) for p, r in zip(OLD, reports) if not r.supported]


def test_old_opset_models_are_in_the_onnx_wheel():
    assert len(OLD) >= 70


def test_parser_refusals_of_old_opsets_are_named_old_opset(refused):
    """The real parser refuses pre-7 broadcasting for the model as a whole (no node); the
    report says why and which recipe to run, and the static rule predicted it."""
    assert len(refused) >= 10
    for p, r in refused:
        u = r.unsupported[0]
        assert u["code"] == "old-opset" and not u["node"], (p.parent.name, u)
        assert "opset 7" in u["message"]
        codes = [e["code"] for e in static_check(str(p), "tensorrt-rtx")[0]]
        assert "old-opset" in codes, p.parent.name


def test_fix_auto_makes_every_refused_old_opset_model_parse(refused, worker):
    for p, _ in refused:
        res = auto_fix(p, backend="tensorrt-rtx", client=worker)
        assert res.supported, (p.parent.name, res.remaining)
        step = res.steps[0]
        assert step["recipe"] == "opset-upgrade" and step["kept"]
        # verified: the opset-6 original runs on onnx's reference evaluator
        assert step["verification"]["status"] == "equivalent", (p.parent.name, step)


def test_upgraded_models_match_their_expected_outputs():
    """PRelu's [C] slope broadcasts along axis 1 before opset 7 and numpy-style after: the
    upgrade reshapes it (the version converter alone gets the multi-parameter PRelus wrong)."""
    for p in OLD:
        out, target = upgrade_opset(onnx.load(str(p)))
        assert target == MIN_TARGET, p.parent.name
        onnx.checker.check_model(out, full_check=True)
        ins, outs = _case(p)
        names = [i.name for i in out.graph.input]
        got = list(run_ort(out, [dict(zip(names, ins))])[0].values())
        for g, ref in zip(got, outs):
            np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5, err_msg=p.parent.name)


def test_fp16_of_every_old_opset_model_runs_in_onnxruntime():
    worst = 0.0
    for p in OLD:
        r = convert(p, "fp16", measure=False)
        assert any(f.code == "opset-raised" for f in r.findings), p.parent.name
        onnx.checker.check_model(r.proto, full_check=True)
        ins, outs = _case(p)
        names = [i.name for i in r.proto.graph.input]
        got = list(run_ort(r.proto, [dict(zip(names, ins))])[0].values())
        for g, ref in zip(got, outs):
            rel = float(np.abs(g.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-12))
            worst = max(worst, rel)
            assert rel < 1e-2, (p.parent.name, rel)
    print(f"\nFP16 of {len(OLD)} opset-6 models vs their expected outputs: worst rel err {worst:.2e}")


def test_cli_fix_auto_upgrades_and_reports(tmp_path, capsys):
    out = tmp_path / "lin.onnx"
    rc = cli_main(["fix", str(DATA / "test_Linear" / "model.onnx"), "-o", str(out), "--auto"])
    text = capsys.readouterr()
    assert rc == 0, text
    assert "opset-upgrade on the model: kept" in text.err
    assert "end-to-end equivalent" in text.out and "supported by tensorrt-rtx: True" in text.out
    assert _opset(out) == MIN_TARGET


def test_still_unsupported_names_node_op_and_next_step(tmp_path, capsys):
    m = h.make_model(h.make_graph([h.make_node("NonZero", ["x"], ["y"], name="nz")], "g",
                                  [h.make_tensor_value_info("x", T.FLOAT, [3])],
                                  [h.make_tensor_value_info("y", T.INT64, None)]),
                     opset_imports=[h.make_opsetid("", 17)])
    src = tmp_path / "nz.onnx"
    onnx.save(m, str(src))
    rc = cli_main(["fix", str(src), "-o", str(tmp_path / "o.onnx"), "--auto"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "still unsupported" in ln]
    assert rc == 1 and lines
    assert lines[0].startswith("  still unsupported: nz (NonZero): ") and " - next: " in lines[0]
    assert "()" not in lines[0]
    graph = remaining_line({"node": "", "op": "", "reason": "Pre-opset 7 broadcasting is "
                            "unsupported", "hint": "`workbench fix M --recipe opset-upgrade`"})
    assert graph == ("the model as a whole: Pre-opset 7 broadcasting is unsupported - next: "
                     "`workbench fix M --recipe opset-upgrade`")


def test_recipe_describes_itself_and_its_preconditions():
    r = get_recipe("opset-upgrade")
    d = r.describe()
    assert d["fixes"] == ["old-opset"] and d["preserves_semantics"]
    old = onnx.load(str(DATA / "test_Linear" / "model.onnx"))
    pre = r.precondition(old)
    assert pre.applies and "opset is 6" in pre.reason
    new = r.apply(old)
    assert _opset(new) == MIN_TARGET and _opset(DATA / "test_Linear" / "model.onnx") == 6
    assert not r.precondition(new).applies
    assert r.precondition(new, target=17).applies
    assert _opset(r.apply(new, target=17)) == 17
    assert not r.precondition(new, target=MIN_TARGET).applies


def _opset4_conv(tmp_path):
    """An opset-4, IR-3 Conv -> Relu whose output has a type but no shape, as old hand-written
    models have (its weight listed as a graph input, as IR 3 wants)."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], name="c"),
                      h.make_node("Relu", ["c"], ["y"], name="r")], "o4",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8]),
                      h.make_tensor_value_info("w", T.FLOAT, [4, 3, 3, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [numpy_helper.from_array(w, "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 4)])
    m.ir_version = 3
    path = tmp_path / "old conv.onnx"
    onnx.save(m, str(path))
    return m, path


def test_an_output_without_shape_does_not_stop_the_upgrade(tmp_path):
    """onnx's checker wants a shape on graph outputs at the IR the upgrade writes: one found by
    shape inference is filled in (it failed with "Field 'shape' of 'type' is required")."""
    m, _ = _opset4_conv(tmp_path)
    out, reached = upgrade_opset(m)
    assert reached == MIN_TARGET
    dims = [d.dim_value for d in out.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 4, 6, 6]


def test_the_opset_range_warning_names_the_recipe_that_raises_it(tmp_path):
    """Below the backend's range the warning's next step is the opset-upgrade command on the
    user's file (quoted); above it, a re-export with the highest opset in range."""
    _, path = _opset4_conv(tmp_path)
    _, extra = static_check(str(path), "tensorrt-rtx")
    w = [f for f in extra if f.code == "opset-range"]
    assert w and "--recipe opset-upgrade" in w[0].hint and f"'{path}'" in w[0].hint
    m = onnx.load(str(path))
    m.opset_import[0].version = 99
    hi_path = tmp_path / "new.onnx"
    onnx.save(m, str(hi_path))
    _, extra = static_check(str(hi_path), "tensorrt-rtx")
    w = [f for f in extra if f.code == "opset-range"]
    assert w and "opset_version=" in w[0].hint and "opset-upgrade" not in w[0].hint
