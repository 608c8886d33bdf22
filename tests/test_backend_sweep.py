"""Never exit 3: `check`, `fix --auto`, `precision --to fp16` and `build` (TensorRT-RTX, ahead of
time, time-limited) over every model in onnx's backend test data end in exit 0, 1 or 2, with no
traceback and exit 2 in one line (tests/backend_sweep_cases.py; benchmarks/backend_sweep.py
prints the whole table).

In CI (about a minute on 2 cores): all models for check/fix/precision and builds of models up
to 250 nodes in this process through `workbench.cli.main`, and a sample through the real
console script. Below the sweep: one test per cause of an exit 3 the sweep found.
"""
from __future__ import annotations

import collections
import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import backend_sweep_cases as bs

MODELS = bs.models()
PLAN = bs.ci_selection(MODELS)


def _broken(outcomes) -> str:
    return "\n".join(f"{o.model} {o.verb} ({o.via}): {'; '.join(o.problems)}: "
                     f"{o.stderr.strip()[-300:]}" for o in outcomes if o.problems)


def test_the_sweep_covers_every_folder_of_the_backend_data():
    present = {m.folder for m in MODELS}
    on_disk = {f for f in bs.FOLDERS if (bs.data_root() / f).is_dir()}
    assert present == on_disk and {"simple", "real", "pytorch-converted", "pytorch-operator",
                                   "light"} <= present
    assert len(MODELS) >= 150
    assert len({m.path for m in MODELS if m.folder == "real"}) == 9  # resolved to light/ files
    built = {m.key for m in PLAN["build"]}
    assert "light/light_densenet121" not in built and "light/light_vgg19" in built
    assert len(PLAN["build"]) >= len(MODELS) - 8


@pytest.mark.slow
@pytest.mark.parametrize("verb", bs.VERBS)
def test_every_backend_model_ends_in_exit_0_1_or_2(verb, tmp_path):
    outcomes = [bs.run_one(m, verb, tmp_path) for m in PLAN[verb]]
    assert not _broken(outcomes), _broken(outcomes)
    rcs = collections.Counter(o.rc for o in outcomes)
    by_model = {o.model: o for o in outcomes}
    # the sweep ran the verbs for real: most models pass, the known refusals are refused
    assert rcs[0] >= 100, rcs
    if verb in ("check", "fix", "build"):
        assert by_model["simple/test_sequence_model1"].rc == 1
        assert by_model["pytorch-converted/test_AvgPool2d"].rc == 0
    if verb == "fix":  # was exit 3 (fold_constants on a sequence value)
        seq = by_model["simple/test_sequence_model1"]
        assert seq.message.startswith("still unsupported: SequenceEmpty#0 (SequenceEmpty)")
    if verb == "build":
        ok = by_model["light/light_vgg19"]
        assert ok.rc == 0 and ok.message.startswith("engine: "), ok.message
        refused = by_model["simple/test_gradient_of_add"]
        assert refused.message.startswith("workbench build: build failed at node 'my_gradient'")


@pytest.mark.slow
def test_the_console_script_gives_users_the_same_outcomes(tmp_path):
    sample = bs.console_sample(MODELS)
    assert {m.folder for m in sample} == {m.folder for m in MODELS}
    assert set(bs.KNOWN_CRASHERS) <= {m.key for m in sample}
    outcomes = []
    for m in sample:
        for verb in bs.VERBS:
            console = bs.run_one(m, verb, tmp_path, console=True)
            inproc = bs.run_one(m, verb, tmp_path)
            assert console.rc == inproc.rc, (m.key, verb, console.stderr, inproc.stderr)
            outcomes.append(console)
    assert not _broken(outcomes), _broken(outcomes)
    assert all(o.via == "console" for o in outcomes)


def test_the_contract_check_catches_what_users_must_never_see():
    """The sweep's own rule (so a green sweep means something)."""
    def o(verb, rc, err):
        return bs.Outcome("m", verb, rc, 0.1, "", err)

    assert o("fix", 3, "workbench fix: internal error: AttributeError: x\n").problems == ["exit 3"]
    assert "traceback on stderr" in o("check", 1, "Traceback (most recent call last):\n").problems
    assert o("check", 2, "workbench check: error: a\nmore\n").problems
    assert o("check", 2, "oops\n").problems  # not the verb's error line
    assert not o("check", 2, "workbench check: error: a (hint)\n").problems
    build_err = ("  0.0% hashing: reading m.onnx\n[TRT error] ModelImporter.cpp:140: x\n"
                 "workbench build: error: m.onnx: no profile (add --profile)\n")
    assert not o("build", 2, build_err).problems
    assert o("build", 2, build_err + "  0.0% hashing: again\n").problems  # error not last
    assert o("build", 2, "[TRT error] a\nb\nworkbench build: error: x\n").problems


# ------------------------------------------------------------------------- causes found
def _sequence_model() -> onnx.ModelProto:
    """y = X + (c1 + c2) + SequenceAt(SequenceInsert(SequenceEmpty(), c1), 0): the sequence
    chain has only constant inputs but its values are lists, never Constants."""
    c1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    c2 = np.full((2, 3), 0.5, dtype=np.float32)
    inits = [numpy_helper.from_array(c1, "c1"), numpy_helper.from_array(c2, "c2"),
             numpy_helper.from_array(np.array(0, dtype=np.int64), "zero")]
    nodes = [
        helper.make_node("SequenceEmpty", [], ["seq0"], name="empty", dtype=TensorProto.FLOAT),
        helper.make_node("SequenceInsert", ["seq0", "c1"], ["seq1"], name="insert"),
        helper.make_node("SequenceAt", ["seq1", "zero"], ["t"], name="at"),
        helper.make_node("Add", ["c1", "c2"], ["s"], name="const_add"),
        helper.make_node("Add", ["X", "s"], ["y1"], name="add_x"),
        helper.make_node("Add", ["y1", "t"], ["y"], name="add_t"),
    ]
    g = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                       [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _ort(m: onnx.ModelProto, feed):
    import onnxruntime as ort

    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def test_fold_constants_folds_around_sequence_values_instead_of_crashing():
    """Was: AttributeError "'list' object has no attribute 'nbytes'" (exit 3 of `fix --auto`
    on onnx's simple/test_sequence_model1): graphsurgeon stored onnxruntime's list value of a
    constant SequenceEmpty as a Constant."""
    from workbench.surgery.recipes.cleanup import fold_constants, foldable_nodes

    m = _sequence_model()
    assert [f["node"] for f in foldable_nodes(m)] == ["const_add"]
    for threshold in (1 << 20, None):  # with and without a size threshold
        out = fold_constants(m, size_threshold=threshold)
        ops = [n.op_type for n in out.graph.node]
        assert ops.count("Add") == 2 and "SequenceEmpty" in ops and "SequenceAt" in ops
        feed = {"X": np.ones((2, 3), np.float32)}
        np.testing.assert_array_equal(_ort(out, feed)[0], _ort(m, feed)[0])


def test_fold_constants_never_freezes_random_values():
    """RandomNormal has no inputs, so graphsurgeon saw it as constant and stored one draw."""
    from workbench.surgery.recipes.cleanup import fold_constants

    nodes = [helper.make_node("RandomNormal", [], ["r"], name="rand", shape=[2, 3],
                              dtype=TensorProto.FLOAT),
             helper.make_node("Add", ["X", "r"], ["y"], name="add")]
    g = helper.make_graph(nodes, "rand", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                        [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out = fold_constants(m)
    assert [n.op_type for n in out.graph.node] == ["RandomNormal", "Add"]
    assert not out.graph.initializer


def test_fix_recipe_fold_constants_on_a_sequence_model_is_kept_and_verified(tmp_path):
    m = _sequence_model()
    src = tmp_path / "seq.onnx"
    onnx.save(m, src)
    rc, out, err = bs.run_inprocess(["fix", str(src), "-o", str(tmp_path / "out.onnx"),
                                     "--recipe", "fold_constants"])
    assert rc == 0, err
    assert "fold_constants: kept" in err
    fixed = onnx.load(tmp_path / "out.onnx")
    assert "const_add" not in {n.name for n in fixed.graph.node}
    assert {"empty", "insert", "at"} <= {n.name for n in fixed.graph.node}


def test_check_no_longer_advises_folding_a_sequence():
    """`check` proposed `--recipe fold_constants` for SequenceEmpty ("replaces it by its
    value"): a value no Constant can hold."""
    seq = next(m for m in MODELS if m.key == "simple/test_sequence_model1")
    rc, out, err = bs.run_inprocess(["check", str(seq.path), "--backend", "tensorrt-rtx"])
    assert rc == 1, err
    assert "SequenceEmpty#0: unroll the sequence into plain tensors" in out
    assert "fold_constants" not in out


def test_build_progress_prints_each_tensorrt_error_on_one_line(monkeypatch):
    """TensorRT's error messages span lines ("In function checkSequenceLength:\\n[8] false");
    each is one line on stderr, so the exit-2/1 message stays the last, whole line."""
    import sys

    from workbench.cli.cmd_build import _StderrProgress

    buf = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buf)
    p = _StderrProgress()
    p({"event": "log", "level": "error",
       "message": "onnxOpCheckers.cpp:1228 In function checkSequenceLength:\n[8] false"})
    p({"event": "log", "level": "warning", "message": "not shown\nat all"})
    assert buf.getvalue() == ("[TRT error] onnxOpCheckers.cpp:1228 In function "
                              "checkSequenceLength: [8] false\n")
