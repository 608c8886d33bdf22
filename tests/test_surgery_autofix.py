"""Auto-fix and the `workbench fix` verb against the real TensorRT-RTX 1.7 parser."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

from conftest import POLY, REPO, SAMPLES
from workbench.surgery.history import History
from workbench.support.checker import check
from workbench.surgery.changes import parse_recipe_arg
from workbench.surgery.propose import propose
from workbench.surgery.session import auto_fix

NF = SAMPLES / "needs_fixing.onnx"


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import run; "
                           "sys.argv[0]='workbench'; run()", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300, env=env)


def test_cli_auto_fix_needs_fixing_reaches_supported(tmp_path):
    """Acceptance: `workbench fix sample_models/needs_fixing.onnx --auto` reaches `supported`
    under the real TensorRT-RTX parser with a verified max abs difference below 1e-5."""
    out = tmp_path / "fixed.onnx"
    before = NF.read_bytes()
    r = _cli("fix", NF, "-o", out, "--auto", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["support_before"]["supported"] is False
    assert {u["node"] for u in rep["support_before"]["unsupported"]} == {
        "/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu"}
    assert rep["supported"] is True and rep["support_after"]["supported"] is True
    backend = rep["support_after"]["backend"]
    assert (backend["name"] if isinstance(backend, dict) else backend) == "tensorrt-rtx"
    assert rep["verification"]["status"] == "equivalent"
    assert rep["verification"]["max_abs_diff"] < 1e-5
    assert {a["recipe"] for a in rep["applied"]} == {"decompose", "fold_constants"}
    for a in rep["applied"]:
        assert a["verification"]["max_abs_diff"] < 1e-5 and a["diff"]["summary"]
    # the written file is what the parser accepted, and the original is untouched
    assert check(str(out), backend="tensorrt-rtx").supported
    assert NF.read_bytes() == before
    assert len(rep["versions"]) == len(rep["applied"]) + 1


def test_cli_recipes_check_exit_codes(tmp_path):
    out = tmp_path / "o.onnx"
    r = _cli("fix", NF, "-o", out, "--recipe", "decompose:node=/act/FastGelu", "--check", "--json")
    assert r.returncode == 1, r.stderr  # still unsupported
    rep = json.loads(r.stdout)
    assert rep["supported"] is False and [a["recipe"] for a in rep["applied"]] == ["decompose"]
    assert {(p["recipe"], p["node"]) for p in rep["proposals"]} >= {
        ("decompose", "/crop/CenterCropPad"), ("fold_constants", "/flatten/Compress")}
    r = _cli("fix", NF, "-o", out, "--recipe", "fold_constants:size_threshold=4096")
    assert r.returncode == 0, r.stderr  # no check asked
    assert onnx.load(str(out)).graph.node
    # bad input: exit 2, one line, nothing written over the model
    for args in (["-o", NF, "--auto"], ["-o", out, "--recipe", "nope"],
                 ["-o", out, "--recipe", "decompose:node=/fc/Gemm"],
                 ["-o", out, "--recipe", "fold_constants:size_threshold=big"], ["-o", out]):
        r = _cli("fix", NF, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = _cli("fix", tmp_path / "missing.onnx", "-o", out, "--auto")
    assert r.returncode == 2 and "file not found" in r.stderr


def test_cli_verifies_on_given_inputs(tmp_path):
    import numpy as np

    x = np.random.default_rng(5).standard_normal((3, 4, 12, 12)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    r = _cli("fix", NF, "-o", tmp_path / "o.onnx", "--auto", "--inputs", tmp_path / "in.npz", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["verification"]["input_shapes"] == {"input": [3, 4, 12, 12]}
    assert all(a["verification"]["input_shapes"] == {"input": [3, 4, 12, 12]} for a in rep["applied"])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    r = _cli("fix", NF, "-o", tmp_path / "o.onnx", "--auto", "--inputs", tmp_path / "bad.npz")
    assert r.returncode == 2 and "cannot read inputs" in r.stderr


def test_auto_fix_fixtures_dup_names_and_qdq():
    for name, recipe in (("bad_graph_with_dup_value_info.onnx", "rename_duplicates"),
                         ("qdq_conv.onnx", "symmetric_qdq")):
        res = auto_fix(POLY / name, backend="tensorrt-rtx")
        assert res.supported, (name, res.remaining)
        assert [s["recipe"] for s in res.steps] == [recipe]


def test_auto_fix_stops_when_out_of_proposals():
    res = auto_fix(POLY / "capability.onnx", backend="tensorrt-rtx")
    assert not res.supported and res.stop_reason == "no more proposals" and not res.steps
    props = propose(res.support_after, History(POLY / "capability.onnx").current_proto())
    assert {p.node for p in props} == {"Fake1", "Fake2", "Fake3"}
    assert all(p.recipe == "replace_with_plugin" and not p.auto for p in props)


def test_parse_recipe_arg():
    assert parse_recipe_arg("extract_subgraph:inputs=a;b,outputs=c") == (
        "extract_subgraph", {"inputs": ["a", "b"], "outputs": ["c"]})
    assert parse_recipe_arg("set_input_shapes:shapes=input/Nx3x32x32") == (
        "set_input_shapes", {"shapes": {"input": "Nx3x32x32"}})
    assert parse_recipe_arg("insert_cast:tensor=a,to=float16,round_trip=true")[1]["round_trip"] is True


def test_cli_list_recipes_and_human_output(tmp_path):
    r = _cli("fix", "--list-recipes", "--json")
    assert r.returncode == 0
    names = {x["name"] for x in json.loads(r.stdout)}
    assert {"fold_constants", "decompose", "symmetric_qdq", "replace_with_plugin"} <= names
    r = _cli("fix", NF, "-o", tmp_path / "o.onnx", "--auto")
    assert r.returncode == 0, r.stderr
    assert "supported by tensorrt-rtx: True" in r.stdout and "end-to-end equivalent" in r.stdout
    assert "decompose on /act/FastGelu: kept" in r.stderr
