"""A model onnxruntime loads but cannot run on the user's inputs (a size the export fixed)
fails in the user's terms: exit 2, the node and op named, and what to do next; the FP16
overflow check says the same as a finding instead of blaming the model's parse."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture()
def baked(tmp_path):
    """x [batch, seq, 4] -> Reshape to the constant [1, 3, 2, 2] (seq = 3 traced into it)."""
    shape = numpy_helper.from_array(np.array([1, 3, 2, 2], np.int64), "/att/Constant_output_0")
    nodes = [helper.make_node("Reshape", ["x", "/att/Constant_output_0"], ["r"], name="/att/Reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="/act/Relu")]
    g = helper.make_graph(nodes, "baked",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "baked.onnx"
    onnx.save(m, str(path))
    data = tmp_path / "x.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((1, 5, 4)).astype(np.float32))
    return path, data


def _cli(*args):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("how", [["--to", "fp16"], ["SELF"]])
def test_compare_names_the_node_a_fixed_size_stops(baked, how):
    path, data = baked
    args = [path, path] if how == ["SELF"] else [path, *how]
    r = _cli("compare", *args, "--inputs", data)
    assert r.returncode == 2, (r.returncode, r.stderr)
    line = r.stderr.strip().splitlines()[-1]
    assert "internal error" not in line and "Traceback" not in r.stderr
    assert "node '/att/Reshape'" in line and "the Reshape node" in line
    assert "{1,5,4}" in line and "{1,3,2,2}" in line
    assert "fixed when the model was exported" in line and "dynamic" in line


def test_the_fp16_overflow_check_names_the_node_and_the_fix(baked, tmp_path):
    from workbench.precision import convert

    path, data = baked
    res = convert(str(path), "fp16", calibration=str(data))
    f = next(f for f in res.findings if f.code == "overflow-check-failed")
    assert f.nodes == ["/att/Reshape"] and "fixed when the model was exported" in f.hint
    assert "workbench fix" not in f.hint


@pytest.mark.parametrize("isolated", [True, False])
def test_panels_word_the_refusal_as_the_cli_does(baked, isolated):
    """The runners raise onnxruntime's own text (explanations such as `verify` quote it); a
    panel's error line is the CLI's, naming the node and the fix."""
    from widgets.base import error_text
    from workbench.runtime.runners import OnnxRuntimeRunner

    path, data = baked
    with pytest.raises(Exception) as e:
        OnnxRuntimeRunner(str(path), isolated=isolated).infer(dict(np.load(data)))
    assert "[ONNXRuntimeError]" in str(e.value)
    text = error_text(e.value)
    assert "node '/att/Reshape'" in text and "fixed when the model was exported" in text


def test_profiles_runs_each_shape_and_names_the_node_a_fixed_size_stops(baked):
    """`profiles` said 'profile #1 valid' for shapes the model cannot run; it now runs the
    model on onnxruntime at min, opt and max and says which shape fails where."""
    path, _ = baked
    r = _cli("profiles", path, "--profile", "x:1x3x4:1x3x4:1x5x4")
    assert r.returncode == 1, r.stderr
    assert r.stdout.startswith("profile #1 cannot run (below): x:1x3x4:1x3x4:1x5x4")
    errs = [ln for ln in r.stdout.splitlines() if "profile-cannot-run" in ln]
    assert len(errs) == 1 and "[/att/Reshape]" in errs[0] and "its max shapes (x:1x5x4)" in errs[0]
    assert "fixed when the model was exported" in errs[0]
    ok = _cli("profiles", path, "--profile", "x:1x3x4:1x3x4:1x3x4")
    assert ok.returncode == 0 and ok.stdout.startswith(
        "profile #1 valid (the model ran on onnxruntime at its min, opt and max)")


def test_profiles_run_a_model_with_external_data_and_say_when_it_is_missing(tmp_path):
    """torch's dynamo export writes its weights beside the model: the run loaded a copy
    without them ('External data path does not exist: /dev/shm/...') and failed every shape."""
    w = numpy_helper.from_array(np.ones((64, 8), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="/fc/MatMul")],
                          "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    r = _cli("profiles", path, "--profile", "x:1x64:8x64:32x64")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("profile #1 valid (the model ran on onnxruntime")
    (tmp_path / "ext.onnx.data").unlink()
    gone = _cli("profiles", path, "--profile", "x:1x64:8x64:32x64")
    assert gone.returncode == 0 and "profile-not-run" in gone.stdout
    assert "external-data file(s) are missing (ext.onnx.data)" in gone.stdout


def test_profiles_of_a_model_onnxruntime_cannot_load_stay_valid_and_say_why_not_run(tmp_path):
    """A TensorRT plugin op onnxruntime has no kernel for: the profile is valid for TensorRT;
    the run is skipped with the reason, not made an error."""
    g = helper.make_graph([helper.make_node("MyPlugin", ["x"], ["y"], domain="trt.plugins",
                                            name="/p")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    path = tmp_path / "plug.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                  helper.make_opsetid("trt.plugins", 1)]),
              str(path))
    r = _cli("profiles", path, "--profile", "x:1x4:2x4:4x4")
    assert r.returncode == 0 and r.stdout.startswith("profile #1 valid: x:1x4:2x4:4x4")
    assert "INFO profile-not-run" in r.stdout and "MyPlugin" in r.stdout


def test_the_precision_panels_profile_editor_runs_the_model_at_its_shapes(baked):
    """The panel's profile editor only validated the text; its 'Run at min/opt/max' runs the
    model as `workbench profiles` does and names the node that stops the max shape."""
    from widgets.precision import PrecisionPanel

    path, _ = baked
    panel = PrecisionPanel(str(path))
    panel.profile_text.value = "x:1x3x4:1x3x4:1x5x4"
    assert "1 valid profile(s)" in panel.profile_status.value  # the text alone is fine
    found = panel.run_profiles(block=True)
    bad = [f for f in found if f.severity == "error"]
    assert len(bad) == 1 and bad[0].nodes == ["/att/Reshape"]
    assert "1 of 2 shape(s) cannot run" in panel.profile_run_html.value
    assert "fixed when the model was exported" in panel.profile_run_html.value
    panel.profile_text.value = "x:1x3x4:1x3x4:1x3x4"
    assert panel.run_profiles(block=True) == []
    assert "ran at 1 shape(s) on onnxruntime" in panel.profile_run_html.value
    panel.profile_text.value = "x:1x3"  # invalid text: said, not run
    panel._guard(lambda: panel.run_profiles(block=True))
    assert "not valid" in panel.status.value


def test_a_recurrent_state_fixed_at_export_is_named_and_a_proposal_that_cannot_run_says_so(
        tmp_path):
    """A GRU whose initial state was traced at batch 2 (a constant [1, 2, H]) runs at batch 2
    only: the run error says the state was fixed at export and how to re-export, and
    `profiles --calib` no longer presents a proposal the model cannot run as valid."""
    rng = np.random.default_rng(0)
    H, I = 3, 4
    inits = [numpy_helper.from_array(rng.standard_normal((1, 3 * H, I)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 3 * H, H)).astype(np.float32), "R"),
             numpy_helper.from_array(np.zeros((1, 2, H), np.float32), "h0")]
    nodes = [helper.make_node("GRU", ["x", "W", "R", "", "", "h0"], ["y", "yh"], hidden_size=H,
                              name="/rnn/GRU")]
    g = helper.make_graph(nodes, "gru",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, "batch", I])],
                          [helper.make_tensor_value_info("yh", TensorProto.FLOAT, None)],
                          initializer=inits)
    path = tmp_path / "gru.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    data = tmp_path / "x.npz"
    np.savez(data, x=rng.standard_normal((5, 8, I)).astype(np.float32))
    r = _cli("profiles", path, "--profile", "x:5x1x4:5x2x4:5x4x4")
    line = next(ln for ln in r.stdout.splitlines() if "profile-cannot-run" in ln)
    assert "[/rnn/GRU]" in line and "initial_h is made inside the model" in line
    assert "fixed when the model was exported" in line and "x.size(0)" in line
    p = _cli("profiles", path, "--calib", data)
    assert p.returncode == 1
    assert p.stdout.startswith("proposed, but the model cannot run at it (below): --profile x:")
    assert "proposed profile #1: the model cannot run" in p.stdout


def test_a_profile_past_the_position_table_says_how_long_the_axis_can_be():
    """bert_tiny's position table holds 64 rows: a profile to seq 512 failed with onnxruntime's
    'idx=64 must be within the inclusive range [-64,63]' and 'check the inputs' shapes'. The
    hint says what the table is and how long the axis may be."""
    from pathlib import Path

    bert = Path(__file__).resolve().parents[1] / "sample_models" / "bert_tiny.onnx"
    r = _cli("profiles", bert, "--profile",
             "input_ids:1x1:1x32:16x512,attention_mask:1x1:1x32:16x512")
    assert r.returncode != 0
    err = [ln for ln in r.stdout.splitlines() if "profile-cannot-run" in ln]
    assert err and all("max shapes" in ln for ln in err), r.stdout  # min and opt run
    assert "/embeddings/position_embeddings/Gather" in err[0]
    assert "a table of 64 rows" in err[0] and "at most 64 long" in err[0]
    ok = _cli("profiles", bert, "--profile",
              "input_ids:1x1:1x32:16x64,attention_mask:1x1:1x32:16x64")
    assert ok.returncode == 0 and "profile-cannot-run" not in ok.stdout, ok.stdout


def test_calibration_data_the_model_cannot_run_is_said_as_such(tmp_path, capfd):
    """Token ids beyond the vocabulary: INT8 failed 'in onnxruntime' with a hint to try
    --calib-method minmax or exclude the node (both fail the same), after a raw red
    onnxruntime log line. It says the data does not run through the model, and why."""
    from workbench.core.errors import WorkbenchError
    from workbench.precision import convert

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="/emb/Gather"),
             helper.make_node("MatMul", ["e", "W"], ["y"], name="/fc/MatMul")]
    g = helper.make_graph(nodes, "emb",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(
                              rng.standard_normal((10, 8)).astype(np.float32), "table"),
                              numpy_helper.from_array(
                              rng.standard_normal((8, 8)).astype(np.float32), "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = tmp_path / "ids.npz"
    np.savez(data, ids=np.full((4, 4), 50, np.int64))
    capfd.readouterr()
    with pytest.raises(WorkbenchError) as e:
        convert(m, "int8", calibration=str(data))
    assert "calibration could not run the model on the calibration data" in e.value.message
    assert e.value.node == "/emb/Gather" and "a table of 10 rows" in e.value.hint
    assert "minmax" not in e.value.hint
    assert "[E:onnxruntime" not in capfd.readouterr().err
    np.savez(data, ids=np.full((4, 4), 3, np.int64))
    assert convert(m, "int8", calibration=str(data)).proto is not None  # in range: it runs


@pytest.mark.parametrize("isolated", [True, False])
def test_a_model_stamped_with_a_newer_ir_than_onnxruntime_reads_still_runs(tmp_path, isolated):
    """onnx 1.19 writes IR 14; the GPU rig's onnxruntime reads up to 13: 'Unsupported model IR
    version: 14, max supported IR version: 13' stopped every reference run of a model the
    user's own exporter made. The graph runs stamped with the newest IR it reads, said so."""
    import onnx
    from onnx import TensorProto, helper

    from workbench.runtime.runners import OnnxRuntimeRunner

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 99
    path = tmp_path / "ir99.onnx"
    onnx.save(m, str(path))
    r = OnnxRuntimeRunner(path, isolated=isolated)
    out = r.infer({"x": np.array([-1.0, 2.0], np.float32)})
    assert out["y"].tolist() == [0.0, 2.0]
    assert r.ir_note.startswith("the model's IR version 99 is newer than this onnxruntime reads")
    assert onnx.load(str(path)).ir_version == 99  # the user's file is not touched
