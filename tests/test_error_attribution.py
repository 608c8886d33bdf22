"""Whose fault is it? Each class of odd model (tests/odd_models.py) through the verbs that meet
it: the exact exit code, the first words of the one line it prints, and the category the
translator (`workbench.core.blame`) gives the failure: the model's structure, its weights, the
inputs, the machine or the tool. Real onnxruntime and TensorRT-RTX (CPU parse and builds);
only the worker-crash case uses a stand-in TensorRT module (it must really die)."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import onnx
import pytest

import odd_models
from test_odd_models import _main
from workbench.core import blame
from workbench.worker.loaders import no_gpu_reason


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Dict[str, Path]:
    return odd_models.make_zoo(tmp_path_factory.mktemp("attr") / "zoo")


def _argv(verb: str, path: Path, out: Path) -> list:
    return {"compare": [verb, path, "--to", "fp16", "--allow-random"],
            "precision": [verb, path, "--to", "fp16", "-o", out / "p.onnx"],
            "build": [verb, path, "-o", out / "e.engine", "--target", "sm89",
                      "--opt-level", "0"],
            "fix": [verb, path, "--auto", "-o", out / "f.onnx"]}.get(verb, [verb, path])


# (model, verb, exit code, first words after "PATH: ", category)
REFUSALS = [
    ("weightless", "check", 2, "the model stores no weights: 2 of 2 initializer(s)", "weights"),
    ("weightless", "build", 2, "the model stores no weights", "weights"),
    ("weightless", "compare", 2, "the model stores no weights", "weights"),
    ("weightless", "precision", 2, "the model stores no weights", "weights"),
    ("weightless", "fix", 2, "the model stores no weights", "weights"),
    ("weightless_qdq", "check", 2, "the model stores no weights: 5 of 5", "weights"),
    ("weightless_qdq", "fix", 2, "the model stores no weights", "weights"),
    ("sparse_initializer", "check", 2, "the model stores weights as sparse tensors ('w')",
     "weights"),
    ("sparse_initializer", "compare", 2, "the model stores weights as sparse tensors",
     "weights"),
    ("sparse_initializer", "build", 2, "the model stores weights as sparse tensors", "weights"),
    ("bf16_compute", "compare", 2, "onnxruntime cannot load the model: Could not find an "
     "implementation for Erf(13)", "structure"),
    ("custom_domain", "compare", 2, "onnxruntime cannot load the model: Fatal error: "
     "com.example:FancyOp(-1) is not a registered function/op", "structure"),
    ("dup_node_names", "compare", 2, "onnxruntime cannot load the model: This is an invalid "
     "model. Error: two nodes with same node name (n)", "structure"),
    ("old_opset", "compare", 2, "onnxruntime cannot load the model: Could not find an "
     "implementation for Add(6)", "structure"),
]


@pytest.mark.parametrize("name,verb,rc,first,category", REFUSALS,
                         ids=[f"{r[0]}-{r[1]}" for r in REFUSALS])
def test_refusal_exit_code_words_and_category(zoo, tmp_path, name, verb, rc, first, category):
    path = zoo[name]
    got, out, err = _main(*_argv(verb, path, tmp_path), "--json")
    assert got == rc, (got, err)
    doc = json.loads(out)
    line = doc["message"]
    assert line.startswith(f"workbench {verb}: error: ") and f"{path}: {first}" in line, line
    assert doc["category"] == category, doc
    assert "these inputs" not in line and "Traceback" not in err
    assert not (tmp_path / "p.onnx").exists() and not (tmp_path / "e.engine").exists()


def test_weightless_inspect_says_the_weights_are_absent(zoo):
    rc, out, _ = _main("inspect", zoo["weightless"], "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["model"]["weights_available"] is False
    [w] = [w for w in doc["warnings"] if w["code"] == "weights-absent"]
    assert w["message"].startswith("the weights are absent: 2 of 2 initializer(s) declare a "
                                   "shape but hold no data (e.g. 'conv.w')")
    assert w["category"] == "weights" and w["tensors"] == ["conv.w", "conv.b"]
    rc, text, _ = _main("inspect", zoo["weightless"])
    assert "[weights missing]" in text and "the weights are absent" in text
    # a model with its weights says nothing of the kind
    rc, out, _ = _main("inspect", zoo["init_as_input"], "--json")
    doc = json.loads(out)
    assert doc["model"]["weights_available"] is True
    assert not [w for w in doc["warnings"] if w["code"] == "weights-absent"]


def test_weightless_next_step_runs(zoo):
    """The step the refusal names (a static check of the structure) runs as printed."""
    rc, _, err = _main("check", zoo["weightless"])
    step = err.split("`")[1].split()
    assert step[:2] == ["workbench", "check"] and "--backend" in step
    rc, out, err = _main(*step[1:], "--json")
    assert rc == 0, err


def test_sparse_initializer_densified_by_the_named_recipe(zoo, tmp_path):
    path = zoo["sparse_initializer"]
    rc, _, err = _main("check", path)
    assert rc == 2
    step = err.split("`")[1].split()
    assert step[:2] == ["workbench", "fix"] and "densify_sparse" in step
    dense = tmp_path / "dense.onnx"
    step[step.index("-o") + 1] = str(dense)
    assert _main(*step[1:])[0] == 0
    m = onnx.load(str(dense))
    assert not m.graph.sparse_initializer
    [w] = [t for t in m.graph.initializer if t.name == "w"]
    assert onnx.numpy_helper.to_array(w).tolist() == [0.0, 1.0, 0.0, 2.0]
    assert _main("check", dense)[0] == 0
    rc, _, err = _main("compare", dense, "--to", "fp16", "--allow-random")
    assert rc == 0, err


def test_onnxruntime_load_refusals_name_the_fix(zoo, tmp_path):
    rc, _, err = _main("compare", zoo["old_opset"], "--to", "fp16", "--allow-random")
    assert rc == 2 and "--recipe opset-upgrade" in err
    step = err.split("`")[1].split()
    up = tmp_path / "up.onnx"
    step[step.index("-o") + 1] = str(up)
    assert _main(*step[1:])[0] == 0
    rc, _, err = _main("compare", up, "--to", "fp16", "--allow-random")
    assert rc == 0, err
    rc, _, err = _main("compare", zoo["bf16_compute"], "--to", "fp16", "--allow-random")
    assert "no kernel for that op with these types (bfloat16)" in err or \
        "no kernel for that op with these types" in err, err


def test_declared_size_zero_axis_is_fed_as_zero(zoo):
    rc, out, err = _main("compare", zoo["zero_size_dim"], "--to", "fp16", "--allow-random",
                         "--json")
    assert rc == 0, err
    from workbench.runtime.equivalence import make_inputs

    feed = make_inputs(onnx.load(str(zoo["zero_size_dim"])))
    assert feed["x"].shape == (0, 4)


def test_unshaped_input_asks_for_its_shape(zoo):
    rc, out, err = _main("compare", zoo["unshaped_input"], "--to", "fp16", "--allow-random",
                         "--json")
    doc = json.loads(out)
    assert rc == 2 and doc["category"] == "inputs" and doc["field"] == "inputs.x"
    assert "input 'x' has no shape (unknown rank): random inputs for it cannot be made up" \
        in doc["message"]
    assert "--inputs PATH" in doc["message"]


def test_sequence_values_are_compared_or_skipped(zoo, tmp_path):
    rc, out, err = _main("compare", zoo["sequence_output"], "--to", "fp16", "--allow-random",
                         "--json")
    assert rc == 0, err
    from workbench.runtime.comparison import compare_outputs

    a = {"seq": [np.ones((2, 1), np.float32), np.ones((2, 3), np.float32)]}
    b = {"seq": [np.ones((2, 1), np.float32), np.full((2, 3), 2.0, np.float32)]}
    c = compare_outputs(a, b, 1e-3, 1e-3)
    assert set(c.outputs) == {"seq[0]", "seq[1]"}
    assert c.outputs["seq[0]"].passed and not c.outputs["seq[1]"].passed
    assert not compare_outputs({"m": {"a": 1}}, {"m": {"a": 2}}, 1e-3, 1e-3).outputs


def test_onnx_sequence_model_compares(tmp_path):
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple"
    rc, _, err = _main("compare", root / "test_sequence_model1" / "model.onnx", "--to", "fp16",
                       "--allow-random")
    assert rc == 0, err  # (was exit 3: 'setting an array element with a sequence')


def test_fp16_type_clash_in_a_function_op_keeps_it_fp32(zoo, tmp_path):
    out = tmp_path / "mvn16.onnx"
    rc, res, err = _main("precision", zoo["mvn"], "--to", "fp16", "-o", out, "--json")
    assert rc == 0, err
    kept = [f for f in json.loads(res)["findings"] if f["code"] == "kept-fp32"]
    assert kept and kept[0]["nodes"] == ["mvn"], kept
    import onnxruntime as ort

    ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])  # it loads
    rc, _, err = _main("compare", zoo["mvn"], "--to", "fp16", "--allow-random")
    assert rc == 0, err


def test_machine_category_for_a_plugin_without_gpu(zoo):
    rc, out, _ = _main("check", zoo["roi_align"], "--json")
    codes = {f["code"]: f for f in json.loads(out)["findings"]}
    if no_gpu_reason():  # this machine: the plugin cannot be created here
        assert rc == 1 and codes["plugin-needs-gpu"]["category"] == "machine"
    else:  # a GPU machine: the parser takes it, nothing blames the machine
        assert all(f.get("category") != "machine" for f in codes.values())


def test_parse_errors_are_the_models_without_cuda_noise(tmp_path):
    from onnx import TensorProto as T, helper as h

    g = h.make_graph([h.make_node("Add", ["x", "y"], ["z"], name="add")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 4]),
                      h.make_tensor_value_info("y", T.FLOAT, [1, 3])],
                     [h.make_tensor_value_info("z", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "badadd.onnx"
    onnx.save(m, str(p))
    rc, out, _ = _main("check", p, "--json")
    assert rc == 1 and "cuda" not in out.lower()
    [f] = [f for f in json.loads(out)["findings"] if f["nodes"] == ["add"]]
    assert f["category"] == "structure" and "broadcast dimensions must be conformable" \
        in f["message"]
    rc, _, err = _main("build", p, "-o", tmp_path / "e.engine", "--target", "sm89")
    assert rc == 1 and "cuda" not in err.lower()
    line = [ln for ln in err.splitlines() if ln.startswith("workbench build:")]
    assert len(line) == 1 and "broadcast dimensions must be conformable" in line[0]


def test_translator_categories():
    """The translator's table, one message per category as onnxruntime and TensorRT word it."""
    assert blame.ort_category("Got invalid dimensions for input: x for the following indices "
                              "index: 0 Got: 2 Expected: 0") == "inputs"
    assert blame.ort_category("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned "
                              "while running Gather node. Name:'g' Status Message: indices "
                              "element out of data bounds") == "inputs"
    assert blame.ort_category("Fatal error: com.x:Op(-1) is not a registered function/op"
                              ) == "structure"
    assert blame.ort_stage("This is an invalid model. Error: two nodes with same node name "
                           "(n).") == "load"
    assert blame.ort_category("Initializer 'w': data field count (0) does not match expected "
                              "count from shape (108)") == "weights"
    assert blame.ort_category("std::bad_alloc") == "machine"
    assert blame.parser_category("Failed to import initializer: In node -1 ... "
                                 "Failed to import initializer: conv.w") == "weights"
    assert blame.parser_category("Invalid Node - add broadcast dimensions") == "structure"
    assert blame.without_gpu_noise(
        "Shape Error (x) [checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime "
        "(cudaError 35: CUDA driver version is insufficient for CUDA runtime version)"
    ).startswith("Shape Error (x)")
    from workbench.runtime.runners import run_error

    class Fail(Exception):
        pass

    Fail.__module__ = "onnxruntime.capi"
    e = run_error(Fail("[ONNXRuntimeError] : 1 : FAIL : Fatal error: com.x:Op(-1) is not a "
                       "registered function/op"), None)
    assert e.category == "structure" and "cannot load the model" in e.message
    e = run_error(Fail("Got invalid dimensions for input: x"), None)
    assert e.category == "inputs" and "on these inputs" in e.message


# ------------------------------------------------------------------ the tool: a crash
def _fake_tensorrt(folder: Path) -> Path:
    """A stand-in `tensorrt` package for the crash plumbing only: its parser logs each node as
    onnx-tensorrt does ("Parsing node: NAME [OP]", verbose), then really dies (SIGSEGV) on
    the op named in $FAKE_TRT_CRASH_OP. Returns an interpreter wrapper whose worker imports
    it (another executable: the worker is started, not forked)."""
    pkg = folder / "tensorrt"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('''
import os, signal
__version__ = "0.0+crash-plumbing"
class ILogger:
    class Severity:
        INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = 0, 1, 2, 3, 4
    def __init__(self):
        pass
class NetworkDefinitionCreationFlag:
    EXPLICIT_BATCH = 0
class _Network:
    num_layers = 0
class Builder:
    def __init__(self, logger):
        self.logger = logger
    def create_network(self, flags=0):
        return _Network()
class OnnxParser:
    num_errors = 0
    def __init__(self, network, logger):
        self.logger = logger
    def parse_from_file(self, path):
        import onnx
        for n in onnx.load(path, load_external_data=False).graph.node:
            self.logger.log(ILogger.Severity.VERBOSE,
                            "ModelImporter.cpp:1: Parsing node: %s [%s]" % (n.name, n.op_type))
            if n.op_type == os.environ["FAKE_TRT_CRASH_OP"]:
                os.kill(os.getpid(), signal.SIGSEGV)
        return True
''')
    py = folder / "python"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return py


@pytest.mark.parametrize("name,op,node", [("opset22", "Selu", "selu"),
                                          ("unnamed_nodes", "Sigmoid", "Sigmoid#0")])
def test_worker_crash_names_the_node_being_parsed(zoo, tmp_path, monkeypatch, name, op, node):
    py = _fake_tensorrt(tmp_path / "fake")
    repo = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("WORKBENCH_TRT_PYTHON", str(py))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "fake"), repo]))
    monkeypatch.setenv("FAKE_TRT_CRASH_OP", op)
    import workbench.worker.client as client

    monkeypatch.setattr(client, "_default", None)  # a worker of the stand-in, for this test
    try:
        path = zoo[name]
        rc, out, err = _main("check", path, "--backend", "tensorrt", "--json")
        doc = json.loads(out)
        assert rc == 2 and doc["node"] == node and doc["category"] == "tool", doc
        assert f"the TensorRT worker died while running 'parse' at" in doc["message"]
        assert "(SIGSEGV)" in doc["message"] and op in doc["message"]
        assert f"TensorRT crashed on {op} node '{node}' instead of refusing it" in doc["hint"]
        # the next step is a record the CLI renders as a command that runs when pasted
        assert [s["command"] for s in doc["next_steps"]] == \
            [f"workbench check {path} --backend static"], doc["next_steps"]
        rc, _, err = _main("build", path, "--backend", "tensorrt", "-o", tmp_path / "e.engine")
        assert rc == 1 and f"build failed at node '{node}'" in err
    finally:
        if client._default is not None:
            client._default.close()


# ------------------------------------------------------------------ the tool: onnxruntime's optimizer
def _fake_onnxruntime(folder: Path) -> Path:
    """A stand-in `onnxruntime` for the probe child's crash plumbing only (no real model
    crashes onnxruntime's optimizer on demand): InferenceSession really dies (SIGSEGV) at the
    levels named in $FAKE_ORT_CRASH_LEVELS and loads at the others."""
    pkg = folder / "onnxruntime"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('''
import os, signal
__version__ = "0.0+crash-plumbing"
class GraphOptimizationLevel:
    ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED, ORT_ENABLE_ALL = 0, 1, 2, 99
class SessionOptions:
    graph_optimization_level = 99
    def add_session_config_entry(self, key, value):
        pass
    def register_custom_ops_library(self, path):
        pass
class InferenceSession:
    def __init__(self, model, so=None, providers=None):
        names = {v: k for k, v in vars(GraphOptimizationLevel).items() if k.startswith("ORT")}
        if names[so.graph_optimization_level] in os.environ["FAKE_ORT_CRASH_LEVELS"].split(","):
            os.kill(os.getpid(), signal.SIGSEGV)
''')
    return folder


@pytest.mark.parametrize("levels,loads", [("ORT_ENABLE_ALL,ORT_ENABLE_EXTENDED",
                                           "ORT_ENABLE_BASIC"), ("", None)])
def test_a_written_model_that_crashes_onnxruntimes_optimizer_is_a_finding(zoo, tmp_path,
                                                                         levels, loads):
    from workbench.runtime.ortchild import OrtChild
    from workbench.runtime.ortprobe import optimizer_crash

    fake = _fake_onnxruntime(tmp_path / "fake")
    repo = str(Path(__file__).resolve().parents[1])
    child = OrtChild(env={"PYTHONPATH": os.pathsep.join([str(fake), repo]),
                          "FAKE_ORT_CRASH_LEVELS": levels})
    try:
        f = optimizer_crash(zoo["mvn"], child=child)
    finally:
        child.close()
    if not levels:
        assert f is None
        return
    assert f.code == "ort-optimizer-crash" and f.category == "tool"
    assert f.message.startswith(f"onnxruntime crashes (SIGSEGV) loading the written model "
                                f"{zoo['mvn']} with its graph optimization level "
                                "ORT_ENABLE_ALL, ORT_ENABLE_EXTENDED (its default); it loads "
                                "with ORT_ENABLE_BASIC"), f.message
    assert "GraphOptimizationLevel.ORT_ENABLE_BASIC" in f.hint
    assert f.extra == {"crashing_levels": ["ORT_ENABLE_ALL", "ORT_ENABLE_EXTENDED"],
                       "loading_level": "ORT_ENABLE_BASIC"}


def test_precision_probes_the_model_it_wrote(zoo, tmp_path):
    """The real onnxruntime loads the lowered model at its default level: no such finding (the
    probe ran: the written file is what it loaded)."""
    out = tmp_path / "m16.onnx"
    rc, res, err = _main("precision", zoo["mvn"], "--to", "fp16", "-o", out, "--json")
    assert rc == 0, err
    assert not [f for f in json.loads(res)["findings"] if f["code"] == "ort-optimizer-crash"]
    from workbench.runtime.ortprobe import optimizer_crash

    assert optimizer_crash(out) is None


def test_random_inputs_a_model_refuses_are_said_to_be_made_up():
    """The inputs' fault, when compare made them up: the refusal says so and how to give real
    ones (onnx's Expand model takes its target shape as an input)."""
    path = Path(onnx.__file__).parent / "backend/test/data/simple/test_expand_shape_model1/model.onnx"
    rc, out, err = _main("compare", path, "--to", "fp16", "--allow-random", "--json")
    doc = json.loads(out)
    assert rc == 2 and doc["category"] == "inputs", doc
    assert "onnxruntime could not run the Expand node on these inputs" in doc["message"]
    assert "the inputs were made up (--allow-random)" in doc["hint"]
