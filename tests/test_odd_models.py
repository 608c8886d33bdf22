"""Unusual but legitimate (or plausibly broken) ONNX files through every verb (tests/odd_models.py
makes them): exit 0/1/2, never 3; one line naming file/node/field and the next step; --json
output valid JSON on failure too; the input files never change."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shlex
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import pytest

import odd_models
from workbench.cli import main


def _main(*argv) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:  # argparse usage errors
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Dict[str, Path]:
    return odd_models.make_zoo(tmp_path_factory.mktemp("odd") / "zoo")


def _error_line(rc: int, err: str) -> str:
    """The one line a failure prints (progress lines of build come before it)."""
    assert rc in (0, 1, 2), (rc, err)
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("workbench ")]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------ every model, cheap verbs
@pytest.mark.parametrize("verb", ["inspect", "check", "precision"])
def test_every_odd_model_exits_0_1_or_2_with_json(zoo, tmp_path, verb):
    folder = next(iter(zoo.values())).parent
    before = _digest(folder)
    for name, path in zoo.items():
        argv = [verb, path, "--json"]
        if verb == "precision":
            argv += ["--to", "fp16", "-o", tmp_path / f"{name}.fp16.onnx"]
        rc, out, err = _main(*argv)
        assert rc in (0, 1, 2), (name, rc, err)
        assert "Traceback" not in err and "internal error" not in err, (name, err)
        doc = json.loads(out)  # valid JSON, failure or not
        if rc == 2:
            assert doc["ok"] is False and doc["exit_code"] == 2, (name, doc)
            assert doc["message"] == _error_line(rc, err), name
    assert _digest(folder) == before  # nothing wrote into the users' folder


# ------------------------------------------------------------------ --json on failure
def test_json_failure_is_one_object_naming_the_file(zoo):
    path = zoo["truncated"]
    rc, out, err = _main("inspect", path, "--json")
    doc = json.loads(out)
    assert rc == 2 and doc["ok"] is False and doc["exit_code"] == 2 and doc["verb"] == "inspect"
    assert doc["file"] == str(path) and "truncated" in doc["hint"]
    assert doc["message"] == err.strip()
    rc, out, err = _main("build", path, "--json")  # usage error (no -o): JSON as well
    doc = json.loads(out)
    assert rc == 2 and doc["exit_code"] == 2 and "-o/--output" in doc["message"]
    rc, out, _ = _main("inspect", path)  # without --json stdout stays empty
    assert rc == 2 and out == ""


# ------------------------------------------------------------------ external data
@pytest.mark.parametrize("verb", ["inspect", "check", "fix", "precision", "build"])
def test_external_data_outside_the_folder_is_refused_naming_the_path(zoo, tmp_path, verb):
    path = zoo["ext_outside"]
    argv = {"fix": ["--auto", "-o", tmp_path / "f.onnx"],
            "precision": ["--to", "fp16", "-o", tmp_path / "p.onnx"],
            "build": ["-o", tmp_path / "e.engine", "--target", "sm89"]}.get(verb, [])
    rc, _, err = _main(verb, path, *argv)
    line = _error_line(rc, err)
    assert rc == 2 and "'../outside_w.bin'" in line and "conv.w" in line
    assert "field 'external_data.location'" in line and str(path) in line
    assert not (tmp_path / "f.onnx").exists() and not (tmp_path / "p.onnx").exists()


def test_missing_external_data_names_the_file(zoo, tmp_path):
    rc, _, err = _main("precision", zoo["ext_missing"], "--to", "fp16", "-o", tmp_path / "p.onnx")
    line = _error_line(rc, err)
    assert rc == 2 and "gone.bin" in line and "missing" in line


# ------------------------------------------------------------------ strings
def test_string_output_compares_by_equality(zoo, tmp_path):
    from workbench.runtime.comparison import compare_tensor

    cand = tmp_path / "s.onnx"
    assert _main("precision", zoo["string_input"], "--to", "fp16", "-o", cand)[0] == 0
    rc, out, err = _main("compare", zoo["string_input"], cand, "--allow-random", "--json")
    assert rc == 0, err
    assert json.loads(out)["outputs_pass"] is True
    a = np.array(["a", "b", "c"])
    same = compare_tensor("t", a, a.copy(), 1e-3, 1e-3)
    diff = compare_tensor("t", a, np.array(["a", "x", "y"]), 1e-3, 1e-3)
    assert same.passed and same.mismatches == 0
    assert not diff.passed and diff.mismatches == 2 and diff.max_abs == float("inf")


def test_unsupported_input_dtype_names_the_tensor(zoo):
    rc, out, _ = _main("check", zoo["string_input"], "--json")
    assert rc == 1
    (row,) = json.loads(out)["unsupported"]
    assert "graph input 'x' has type STRING" in row["reason"] and row["tensor"] == "x"


# ------------------------------------------------------------------ dims TensorRT reads as 0
def test_output_without_shape_converts(zoo, tmp_path):
    # odd_dims declares its output with no shape: onnx's checker refuses the FP32 model too,
    # so the conversion is not to blame (was exit 2 'the FP16 lowering made invalid ONNX')
    rc, _, err = _main("precision", zoo["odd_dims"], "--to", "fp16", "-o", tmp_path / "p.onnx")
    assert rc == 0, err


def test_empty_dim_param_is_named_and_the_hint_works(zoo, tmp_path):
    path = zoo["odd_dims"]
    rc, out, _ = _main("check", path, "--json")
    warn = [f for f in json.loads(out)["findings"] if f["code"] == "zero-size-input-axis"]
    assert rc == 0 and len(warn) == 1 and "input 'x' axis 0" in warn[0]["message"]
    rc, _, err = _main("build", path, "-o", tmp_path / "e.engine", "--target", "sm89",
                       "--opt-level", "0")
    line = _error_line(rc, err)
    assert rc == 2 and "input 'x' axis 0 has an empty dim_param" in line
    assert "field 'inputs.x'" in line and "set_input_shapes" in line
    # the next step it names, as printed: then the build succeeds
    step = shlex.split(line.split("`")[1])
    fixed = tmp_path / "FIXED.onnx"
    step[step.index("-o") + 1] = str(fixed)
    assert _main(*step[1:])[0] == 0
    rc, _, err = _main("build", fixed, "-o", tmp_path / "e.engine", "--target", "sm89",
                       "--opt-level", "0")
    assert rc == 0, err


# ------------------------------------------------------------------ onnxruntime refusals
def test_duplicate_node_names_name_the_users_file_and_the_recipe(zoo, tmp_path):
    path = zoo["dup_node_names"]
    # check warns before anything fails: TensorRT parses it, onnxruntime will not load it
    rc, out, _ = _main("check", path, "--json")
    assert rc == 0, out
    dup = [f for f in json.loads(out)["findings"] if f["code"] == "duplicate-node-name"]
    assert len(dup) == 1 and dup[0]["severity"] == "warning", dup
    import onnx

    k = sum(nd.name == "n" for nd in onnx.load(str(path)).graph.node)
    assert k >= 2
    assert dup[0]["nodes"] == [f"n#{i}" for i in range(k)], dup
    assert f"'n' is used by {k} nodes" in dup[0]["message"]
    (fix,) = dup[0]["next_steps"]
    assert fix["command"].startswith(f"workbench fix {path} --recipe rename_duplicates -o ")
    rc, _, err = _main("compare", path, "--to", "fp16", "--allow-random")  # (was exit 3)
    line = _error_line(rc, err)
    assert rc == 2 and "/dev/shm" not in line
    assert "same node name (n)" in line and "--recipe rename_duplicates" in line
    assert f"`workbench fix {path} --recipe rename_duplicates -o " in line  # (runs as printed)
    cand = tmp_path / "c.onnx"
    rc, _, err = _main("precision", path, "--to", "fp16", "-o", cand)
    assert rc == 0 and "/dev/shm" not in err  # its warnings say why nothing was measured
    rc, _, err = _main("compare", path, cand, "--allow-random")
    line = _error_line(rc, err)
    assert rc == 2 and str(path) in line and "/dev/shm" not in line
    assert f"`workbench fix {path} --recipe rename_duplicates" in line
    fixed = tmp_path / "renamed.onnx"
    assert _main("fix", path, "--recipe", "rename_duplicates", "-o", fixed)[0] == 0
    rc, _, err = _main("compare", fixed, "--to", "fp16", "--allow-random")
    assert rc == 0, err


def test_op_without_kernel_names_the_op_and_what_to_do(zoo, tmp_path):
    cand = tmp_path / "c.onnx"
    assert _main("precision", zoo["custom_domain"], "--to", "fp16", "-o", cand)[0] == 0
    rc, _, err = _main("compare", zoo["custom_domain"], cand, "--allow-random")
    line = _error_line(rc, err)
    assert rc == 2 and "FancyOp" in line and "custom-op library" in line
    assert str(zoo["custom_domain"]) in line


def test_ml_domain_op_runs_in_the_onnxruntime_tail(zoo, tmp_path):
    out = tmp_path / "ml.engine"
    rc, res, err = _main("build", zoo["ml_domain"], "-o", out, "--target", "sm89",
                         "--opt-level", "0", "--json")
    assert rc == 0, err
    assert (tmp_path / "ml.tail.onnx").exists() and (tmp_path / "ml.split.json").exists()
    assert json.loads(res)["ok"] is not False


# ------------------------------------------------------------------ odd but fine
@pytest.mark.parametrize("name", ["init_as_input", "ext_subfolder", "zero_node", "unused_input",
                                  "scalar_input", "shared_symbolic", "local_function",
                                  "if_outer_scope", "loop", "bf16_initializers",
                                  "many_ext_files", "unicode_names"])
def test_legitimate_odd_models_build_in_fp16(zoo, tmp_path, name):
    rc, _, err = _main("build", zoo[name], "--precision", "fp16", "--target", "sm89",
                       "--opt-level", "0", "-o", tmp_path / "m.engine")
    assert rc == 0, err
    assert (tmp_path / "m.engine").stat().st_size > 0


# ------------------------------------------------------------------ fix --split
def test_split_of_a_zero_node_graph_is_all_engine(zoo, tmp_path):
    rc, out, err = _main("fix", zoo["zero_node"], "--split", "-o", tmp_path / "s", "--json")
    assert rc == 0, err  # was exit 2: 'nothing of the model is left for the engine'
    split = json.loads(out)["split"]
    assert split["supported"] is True and split["tail"] is None and split["prefix"]["nodes"] == 0


def test_split_refusal_names_the_users_model(zoo, tmp_path):
    path = zoo["string_input"]
    rc, _, err = _main("fix", path, "--split", "-o", tmp_path / "s")
    line = _error_line(rc, err)
    assert rc == 2 and line.startswith(f"workbench fix: error: {path}: ")  # (was a hash)
    assert "graph input 'x' has type STRING" in line


def test_a_stale_value_info_is_named_and_the_printed_fix_replaces_it(zoo, tmp_path):
    """The file declares 'a' as [1, 7, 2]; Relu of a [1, 4] input makes it [1, 4]. inspect
    says so (it showed the file's shape silently) and its command re-infers the real one."""
    path = zoo["wrong_value_info"]
    rc, out, _ = _main("inspect", path, "--json")
    assert rc == 0, out
    doc = json.loads(out)
    stale = [w for w in doc["warnings"] if w["code"] == "declared-shape-conflict"]
    assert stale and stale[0]["nodes"] == ["relu"] and stale[0]["op"] == "Relu", stale
    assert "differ in rank: (2) vs (3)" in stale[0]["message"]
    (fix,) = stale[0]["next_steps"]
    assert fix["command"] == f"workbench fix {path} --recipe infer_shapes -o " + \
        str(path).replace(".onnx", ".fixed.onnx")
    fixed = tmp_path / "fixed.onnx"
    assert _main("fix", path, "--recipe", "infer_shapes", "-o", fixed)[0] == 0
    rc, out, _ = _main("inspect", fixed, "--json")
    doc = json.loads(out)
    assert not [w for w in doc["warnings"] if w["code"] == "declared-shape-conflict"], doc
    import onnx

    vi = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
          for v in onnx.load(str(fixed)).graph.value_info}
    assert vi["a"] == [1, 4], vi
    # a consistent file gets no such warning (strict inference is the only run there)
    rc, out, _ = _main("inspect", zoo["shared_symbolic"], "--json")
    assert not [w for w in json.loads(out)["warnings"] if w["code"] == "declared-shape-conflict"]
