"""`workbench check` end to end with the real TensorRT-RTX parser: JSON, tables, exit codes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import onnx
import pytest

import single_op_models as S
from conftest import POLY
from workbench.cli import main

EXPECTED = {  # shared/fixtures/README.md: model -> [(node, op)]; every other model parses
    "capability.onnx": [("Fake1", "FAKE!"), ("Fake2", "FAKE!"), ("Fake3", "FAKER!")],
    "custom_op_node.onnx": [("NegPos#0", "NegPos")],
    "fake_op_model.onnx": [("Fake#0", "Fake")],
    "qdq_conv.onnx": [("onnx_graphsurgeon_node_1", "QuantizeLinear")],
    "loop.onnx": [("cond___while_Less", "Less")],
    "bad_graph_with_dup_value_info.onnx": [(None, None)],
}
FIXTURES = sorted(p.name for p in POLY.glob("*.onnx"))
CLI = [sys.executable, "-c", "from workbench.cli import run; run()"]


def _run(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse usage errors exit 2 by themselves
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("name", FIXTURES)
def test_check_json_reproduces_known_results(capsys, name):
    rc, out, err = _run(capsys, "check", str(POLY / name), "--backend", "tensorrt-rtx", "--json")
    d = json.loads(out)
    assert d["backend"]["name"] == "tensorrt-rtx" and d["backend"]["version"]
    assert [(u["node"], u["op"]) for u in d["unsupported"]] == EXPECTED.get(name, [])
    assert rc == (1 if name in EXPECTED else 0) and d["supported"] is (rc == 0)
    for u in d["unsupported"]:
        assert set(u) >= {"node", "op", "reason", "source"} and u["source"] == "parser"
    assert isinstance(d["findings"], list) and "partition" in d
    if name == "capability.onnx":
        assert "FAKE!" in err or err == ""  # nothing but the report on stdout
        assert any(s["nodes"] == ["Add1"] for s in d["partition"]["subgraphs"])


def test_dup_name_reason_in_json(capsys):
    rc, out, _ = _run(capsys, "check", str(POLY / "bad_graph_with_dup_value_info.onnx"),
                      "--backend", "tensorrt-rtx", "--json")
    assert rc == 1
    reason = json.loads(out)["unsupported"][0]["reason"]
    assert "ONNX graph has duplicate tensor name: inp" in reason


def test_human_table_names_nodes_reasons_and_next_steps(capsys):
    rc, out, _ = _run(capsys, "check", str(POLY / "qdq_conv.onnx"), "--backend", "tensorrt-rtx")
    assert rc == 1
    assert "NOT SUPPORTED" in out and "Next steps:" in out
    assert "onnx_graphsurgeon_node_1" in out and "QuantizeLinear" in out
    step = [ln for ln in out.splitlines() if ln.strip().startswith("onnx_graphsurgeon_node_1:")]
    assert step and "--recipe symmetric_qdq:node=onnx_graphsurgeon_node_1" in step[0]
    rc, out, _ = _run(capsys, "check", str(POLY / "conv.onnx"), "--backend", "tensorrt-rtx")
    assert rc == 0 and "SUPPORTED" in out and "NOT" not in out


def test_static_backend_json(capsys):
    rc, out, _ = _run(capsys, "check", str(POLY / "custom_op_node.onnx"), "--backend", "static",
                      "--json")
    d = json.loads(out)
    assert rc == 1 and d["backend"]["name"] == "static" and d["mode"] == "static"
    assert d["unsupported"][0]["code"] == "custom-op" and "--plugin" in d["unsupported"][0]["hint"]
    rc, out, _ = _run(capsys, "check", str(POLY / "conv.onnx"), "--backend", "static", "--json")
    assert rc == 0 and json.loads(out)["supported"] is True


def test_check_build_catches_build_time_only_failure(capsys, tmp_path):
    p = tmp_path / "topk.onnx"
    onnx.save(S.topk(5000), str(p))
    rc, out, _ = _run(capsys, "check", str(p), "--backend", "tensorrt-rtx", "--json")
    d = json.loads(out)
    assert rc == 0 and d["supported"]  # the parser alone accepts it...
    assert any(f["code"] == "topk-k-limit" and f["severity"] == "warning" for f in d["findings"])
    rc, out, _ = _run(capsys, "check", str(p), "--backend", "tensorrt-rtx", "--build", "--json")
    d = json.loads(out)
    assert rc == 1 and d["mode"] == "parser+build" and d["build"]["built"] is False
    u = d["unsupported"][0]
    assert (u["node"], u["op"], u["source"]) == ("TopK", "TopK", "build")
    assert "3840" in u["reason"]


def test_bad_input_exits_2_with_one_line(capsys, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file at all")
    for argv in (["check", str(tmp_path / "missing.onnx")], ["check", str(bad)],
                 ["check", str(POLY / "conv.onnx"), "--backend", "nope"],
                 ["check", str(POLY / "conv.onnx"), "--backend", "tensorrt-rtx", "--plugin",
                  str(tmp_path / "libnope.so")],
                 # build's spelling works for check too (it was 'unrecognized arguments')
                 ["check", str(POLY / "conv.onnx"), "--backend", "tensorrt-rtx", "--plugins",
                  str(tmp_path / "libnope.so")]):
        rc, out, err = _run(capsys, *argv)
        assert rc == 2, argv
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        if "libnope.so" in argv[-1]:
            assert "plugin library not found" in err, err


def test_backend_unavailable_exits_2_saying_how_to_install(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = dict(os.environ, WORKBENCH_TRT_PYTHON=str(venv / "bin" / "python"))
    for backend in ("tensorrt", "tensorrt-rtx"):
        r = subprocess.run([*CLI, "check",
                            str(POLY / "conv.onnx"), "--backend", backend, "--json"],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        doc = json.loads(r.stdout)  # --json: the failure as one JSON object too
        assert doc["ok"] is False and doc["exit_code"] == 2
        assert doc["message"] == r.stderr.strip()
        assert "WORKBENCH_TRT_PYTHON" in r.stderr and "install" in r.stderr
        assert backend in r.stderr
    # auto falls back to static rules, says so, and still answers
    r = subprocess.run([*CLI, "check", str(POLY / "qdq_conv.onnx"),
                        "--json"], capture_output=True, text=True, env=env, timeout=120)
    d = json.loads(r.stdout)
    assert r.returncode == 1 and d["backend"]["name"] == "static"
    assert "no TensorRT module" in d["notes"][0]


def test_named_plugin_library_is_loaded_and_reported(capsys):
    import ctypes.util
    from pathlib import Path

    name = ctypes.util.find_library("m")  # a real shared library (not a TensorRT plugin)
    lib = next((d / name for d in map(Path, ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                                "/lib64", "/usr/lib64", "/lib", "/usr/lib"))
                if name and (d / name).is_file()), None)
    assert lib is not None, "no libm found to stand in as a named library"
    rc, out, _ = _run(capsys, "check", str(POLY / "conv.onnx"), "--backend", "tensorrt-rtx",
                      "--plugin", str(lib), "--json")
    d = json.loads(out)
    assert rc == 0 and any(str(lib.resolve()) in n and "loaded" in n for n in d["notes"])


def test_list_rules_shows_tables_and_measured_disagreements(capsys):
    rc, out, _ = _run(capsys, "check", "--list-rules", "--json")
    d = json.loads(out)
    assert rc == 0 and set(d["tables"]) == {"tensorrt", "tensorrt-rtx"}
    assert "NonZero" in d["tables"]["tensorrt-rtx"]["plugin_ops"]
    assert any(x["op"] == "Resize" and "cubic" in x["tensorrt-rtx"] for x in d["disagreements"])
    rc, out, _ = _run(capsys, "check", "--list-rules")
    assert rc == 0 and "departs from the published matrix" in out
    rc, out, err = _run(capsys, "check")
    assert rc == 2 and "no MODEL given" in err and len(err.strip().splitlines()) == 1


def test_build_with_profile(capsys, tmp_path):
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "relu.onnx"
    onnx.save(m, str(p))
    rc, out, _ = _run(capsys, "check", str(p), "--backend", "tensorrt-rtx", "--build",
                      "--profile", "x:1x8:4x8:16x8", "--json")
    d = json.loads(out)
    assert rc == 0 and d["build"]["built"] and not any("dynamic input" in n for n in d["notes"])
    rc, out, err = _run(capsys, "check", str(p), "--backend", "tensorrt-rtx", "--build",
                        "--profile", "x:1x8x2:4x8:16x8")
    assert rc == 2 and "rank" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run(capsys, "check", str(p), "--profile", "x:1x8:4x8:16x8")
    assert rc == 2 and "--build" in err


def test_a_node_the_parser_reports_several_times_is_one_problem(tmp_path):
    """A BatchNormalization exported in training mode: TensorRT's parser reports its mode and
    each extra output, and check said '6 problem(s)' for 2 nodes, each listed 3 times."""
    import onnx
    import numpy as np
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    from workbench.support import check

    inits = [nh.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    bn = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                     training_mode=1, name="/bn/BatchNormalization")
    g = h.make_graph([bn, h.make_node("Relu", ["y"], ["z"], name="/act/Relu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4, 4])],
                     [h.make_tensor_value_info("z", T.FLOAT, [2, 3, 4, 4]),
                      h.make_tensor_value_info("rm", T.FLOAT, [3]),
                      h.make_tensor_value_info("rv", T.FLOAT, [3])], initializer=inits)
    path = tmp_path / "bn.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 15)]), str(path))
    rep = check(str(path), backend="tensorrt-rtx")
    assert not rep.supported
    assert [u["node"] for u in rep.unsupported] == ["/bn/BatchNormalization"]
    assert "training mode" in rep.unsupported[0]["reason"]


def test_a_split_that_leaves_most_of_the_model_out_of_the_engine_says_so():
    from workbench.engines.tail import split_notice

    info = {"refused": [{"op": "BatchNormalization", "node": "/bn"}], "backend": "tensorrt-rtx",
            "engine_nodes": 1, "onnxruntime_nodes": 7, "tail": "m.tail.onnx",
            "manifest": "m.split.json", "prefix": "m.prefix.onnx", "verification": "equivalent",
            "run": "ChainedRunner(...)"}
    assert "MOST OF THE MODEL IS NOT IN THE ENGINE (7 of 8 nodes" in split_notice(info)
    info.update(engine_nodes=50, onnxruntime_nodes=3)
    assert "MOST OF" not in split_notice(info)


def test_a_node_the_builder_has_no_kernel_for_is_said_in_users_terms():
    """check --build on a YOLO export: the parser takes NonMaxSuppression, tensorrt-rtx's
    builder has none: the reason said TensorRT's tactic-supply assertion and nothing else."""
    from workbench.support.checker import _build_reason

    raw = ("[tacticSupply.cpp::getSupportedFormats::48] Error Code 2: Internal Error (Assertion "
           "!layerImpls.empty() failed. /NonMaxSuppression_191 has no runners that implement it "
           "In getSupportedFormats at /_src/optimizer/builder/tacticSupply.cpp:48)")
    r = _build_reason(raw, "NonMaxSuppression", "tensorrt-rtx")
    assert r.startswith("the parser took this NonMaxSuppression but tensorrt-rtx's builder has "
                        "no kernel for it on this target")
    assert "/NonMaxSuppression_191 has no runners" in r and "tacticSupply.cpp" not in r
    assert _build_reason("Some other failure", "Conv", "tensorrt") == "Some other failure"
