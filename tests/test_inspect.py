"""workbench.graphs.inspect and `workbench inspect`: values checked against the ONNX protos themselves,
the JSON contract, and every model the onnx package ships for backend tests."""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import H200, POLY, SAMPLES
from workbench.graphs.inspect import (node_detail, node_details, render_attribute,
                               scope_tree, summarize)
from workbench.core.model import open_model, save_model

WORKBENCH = str(Path(sys.executable).with_name("workbench"))
ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
BACKEND_DIRS = ["light", "pytorch-converted", "pytorch-operator", "simple", "real"]


def _strict_json(text: str):
    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=no_constants)


def cli_json(*args: str):
    """Run the CLI in-process (fast) and parse strict JSON from stdout."""
    from workbench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["inspect", "--json", *args])
    return rc, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------------------------
# summary values against the protos


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny", "needs_fixing", "fp16_overflow"])
def test_summary_matches_the_proto(name):
    path = SAMPLES / f"{name}.onnx"
    proto = onnx.load(str(path))
    s = summarize(path)
    assert s.node_count == len(proto.graph.node)
    assert s.initializer_count == len(proto.graph.initializer)
    want_ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                       for n in proto.graph.node)
    assert s.ops == dict(want_ops)
    arrays = [numpy_helper.to_array(t) for t in proto.graph.initializer]
    assert s.parameter_count == sum(a.size for a in arrays)
    assert s.parameter_bytes == sum(a.nbytes for a in arrays)
    assert s.opsets == {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    assert s.ir_version == proto.ir_version and s.producer == proto.producer_name
    assert s.size_bytes == path.stat().st_size
    assert [t.name for t in s.inputs] == [i.name for i in proto.graph.input]
    assert [t.name for t in s.outputs] == [o.name for o in proto.graph.output]
    assert s.shape_inference == "ok"


def test_bert_inputs_outputs_symbolic_dims_and_inferred_shapes():
    s = summarize(SAMPLES / "bert_tiny.onnx")
    ins = {t.name: t for t in s.inputs}
    assert ins["input_ids"].dtype == "int64" and ins["input_ids"].shape == ["batch", "seq"]
    assert ins["attention_mask"].dynamic_dims == [0, 1]
    assert s.dynamic_inputs == ["input_ids", "attention_mask"]
    outs = {t.name: t for t in s.outputs}
    assert outs["last_hidden_state"].shape == ["batch", "seq", 64]
    # shape inference resolved the attention probabilities: [batch, heads, S, S'] where S is a
    # symbol ONNX makes up after Range (a data-dependent length)
    sm = s.shapes["/encoder/layer.0/attention/self/Softmax_output_0"]
    assert sm.dtype == "float32" and sm.shape[:2] == ["batch", 2]
    assert all(isinstance(d, str) for d in sm.shape[2:]) and sm.dynamic_dims == [0, 2, 3]
    assert s.shapes["/embeddings/word_embeddings/Gather_output_0"].shape == ["batch", "seq", 64]
    codes = [w.code for w in s.warnings]
    assert codes.count("dynamic-input") == 2


def test_resnet_inputs_and_inferred_shapes():
    s = summarize(SAMPLES / "resnet_tiny.onnx")
    assert s.inputs[0].to_dict() == {"name": "input", "dtype": "float32",
                                     "shape": ["batch", 3, 32, 32]}
    assert s.shapes["/layer2/0/conv1/conv/Conv_output_0"].shape == ["batch", 32, 16, 16]
    assert s.shapes["/pool/GlobalAveragePool_output_0"].shape == ["batch", 32, 1, 1]


def test_node_detail_attributes_and_tensors():
    m = open_model(SAMPLES / "bert_tiny.onnx")
    details = node_details(m, summarize(m).shapes)
    assert [d.id for d in details] == m.node_ids
    sm = next(d for d in details if d.op == "Softmax")
    assert sm.attributes == {"axis": -1}
    assert sm.scope == "/encoder/layer.0/attention/self"
    assert sm.output_info[0].shape[:2] == ["batch", 2] and len(sm.output_info[0].shape) == 4
    cast = next(d for d in details if d.op == "Cast")
    assert cast.attributes == {"to": TensorProto.FLOAT}
    # a Constant's tensor is summarised with its (small) value, the mask constant included
    consts = [d.attributes["value"]["tensor"] for d in details if d.op == "Constant"]
    assert {"dtype": "float32", "shape": [], "value": [-3.402823e38]} in consts
    ln = node_detail(m, "/encoder/layer.1/output/LayerNorm/LayerNormalization")
    assert ln.attributes == {"axis": -1, "epsilon": 1e-12}
    assert ln.input_info[1].shape == [64] and ln.domain == "ai.onnx"


def test_attribute_rendering_is_safe_json():
    big = numpy_helper.from_array(np.arange(10000, dtype=np.float32).reshape(100, 100), "big")
    node = helper.make_node(
        "Foo", ["x"], ["y"], name="n", domain="custom",
        lo=float("-inf"), hi=float("inf"), nan=float("nan"), many=list(range(100)),
        blob=b"\xff\xfe not utf8", t=big,
        g=helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "body", [], []))
    r = {a.name: render_attribute(a) for a in node.attribute}
    assert r["lo"] == "-inf" and r["hi"] == "inf" and r["nan"] == "nan"
    assert r["many"] == {"first": list(range(32)), "count": 100}
    assert r["t"] == {"tensor": {"dtype": "float32", "shape": [100, 100], "name": "big"}}
    assert r["g"] == {"graph": "body", "nodes": 1}
    assert "\ufffd" in r["blob"]
    text = json.dumps(r, allow_nan=False)  # strict JSON
    assert len(text) < 1000  # the 10k-element tensor is not dumped


def test_scope_tree_of_bert():
    m = open_model(SAMPLES / "bert_tiny.onnx")
    root = scope_tree(m)
    assert root.node_count == len(m.graph.node)
    assert [c.name for c in root.children] == ["embeddings", "encoder", "pooler"]
    att = root.find("/encoder/layer.0/attention/self")
    assert att is not None and att.path == "/encoder/layer.0/attention/self"
    assert att.ops["Softmax"] == 1 and att.ops["MatMul"] == 5  # q,k,v projections + 2 matmuls
    direct = [m.node_by_id(i).name for i in att.nodes]
    assert "/encoder/layer.0/attention/self/Softmax" in direct
    layer1 = root.find("/encoder/layer.1")
    assert layer1.node_count == sum(1 for n in m.graph.node
                                    if n.name.startswith("/encoder/layer.1/"))
    # every node appears exactly once in the tree
    all_ids = [i for s in root.walk() for i in s.nodes]
    assert sorted(all_ids) == sorted(m.node_ids)


def test_missing_external_data_structure_model():
    s = summarize(H200 / "bert_small.structure.onnx")
    assert not s.weights_available
    assert s.warnings[0].code == "external-data-missing"
    proto = onnx.load(str(H200 / "bert_small.structure.onnx"), load_external_data=False)
    want = sum(int(np.prod(t.dims)) for t in proto.graph.initializer)
    assert s.parameter_count == want > 10_000_000
    assert s.shape_inference == "ok"
    assert s.inputs[0].dtype == "int64" and all(isinstance(d, str) for d in s.inputs[0].shape)


def test_shape_inference_resolves_without_weight_bytes(tmp_path):
    """Big weights external and missing, Reshape target inline: shapes still resolve."""
    w = numpy_helper.from_array(np.ones((64, 256), np.float32), "w")
    shape = numpy_helper.from_array(np.array([0, 16, 16], np.int64), "shape")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="/mm/MatMul"),
         helper.make_node("Reshape", ["h", "shape"], ["y"], name="/r/Reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, shape])
    p = save_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                   tmp_path / "m.onnx", external_data=True)
    (tmp_path / "m.onnx.data").unlink()
    s = summarize(p)
    assert not s.weights_available
    assert s.shapes["h"].shape == ["b", 256]
    assert s.outputs[0].shape == ["b", 16, 16]  # filled in from inference
    assert s.parameter_count == 64 * 256 + 3


def test_initializers_listed_as_inputs_are_not_inputs():
    """IR < 4 models list every weight in graph.input: those are not model inputs."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    from workbench.core.model import model_from_proto

    s = summarize(model_from_proto(m))
    assert [t.name for t in s.inputs] == ["x"]
    assert s.parameter_count == 16


def test_custom_and_unknown_ops_are_flagged():
    s = summarize(POLY / "capability.onnx")
    unknown = [w for w in s.warnings if w.code == "unknown-ops"]
    assert len(unknown) == 1 and unknown[0].nodes == ["Fake1", "Fake2", "Fake3"]
    assert "FAKE!" in unknown[0].message and "FAKER!" in unknown[0].message
    assert s.ops == {"FAKE!": 2, "Add": 2, "FAKER!": 1}
    s = summarize(POLY / "custom_op_node.onnx")
    custom = [w for w in s.warnings if w.code == "custom-domain-ops"]
    assert len(custom) == 1 and "ai.onnx.contrib::NegPos" in custom[0].message
    from workbench.core.model import open_model

    m = open_model(POLY / "custom_op_node.onnx")  # the nodes, as unknown-ops names them
    assert custom[0].nodes == [i for i, n in zip(m.node_ids, m.graph.node)
                               if n.op_type == "NegPos"] and len(custom[0].nodes) == 1
    assert s.ops == {"ai.onnx.contrib::NegPos": 1}
    s = summarize(SAMPLES / "resnet_tiny.onnx")
    assert not [w for w in s.warnings if w.code in ("unknown-ops", "custom-domain-ops")]


# --------------------------------------------------------------------------------------------
# the CLI


def test_cli_json_contract_bert():
    r = subprocess.run([WORKBENCH, "inspect", "--json", str(SAMPLES / "bert_tiny.onnx")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = _strict_json(r.stdout)
    proto = onnx.load(str(SAMPLES / "bert_tiny.onnx"))
    assert d["model"]["path"].endswith("bert_tiny.onnx")
    assert d["model"]["opset"] == 17 and d["model"]["ir_version"] == proto.ir_version
    assert d["model"]["producer"] == proto.producer_name
    assert d["model"]["size_bytes"] == (SAMPLES / "bert_tiny.onnx").stat().st_size
    assert len(d["nodes"]) == len(proto.graph.node)
    for n, p in zip(d["nodes"], proto.graph.node):
        assert {"id", "name", "op", "domain", "inputs", "outputs"} <= set(n)
        assert n["name"] == p.name and n["op"] == p.op_type and n["inputs"] == list(p.input)
    assert d["ops"]["MatMul"] == sum(1 for n in proto.graph.node if n.op_type == "MatMul")
    assert d["inputs"] == [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "seq"]},
                           {"name": "attention_mask", "dtype": "int64",
                            "shape": ["batch", "seq"]}]
    assert d["outputs"][1] == {"name": "pooler_output", "dtype": "float32",
                               "shape": ["batch", 64]}
    assert d["parameters"]["count"] == sum(numpy_helper.to_array(t).size
                                           for t in proto.graph.initializer)
    assert isinstance(d["warnings"], list) and d["warnings"][0]["code"] == "dynamic-input"
    assert d["scopes"]["children"][1]["path"] == "/encoder"


def test_cli_human_summary():
    r = subprocess.run([WORKBENCH, "inspect", str(SAMPLES / "needs_fixing.onnx")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "input" in out and "[batch, 4, 12, 12]" in out and "dynamic: batch" in out
    assert "com.microsoft::FastGelu" in out and "CenterCropPad" in out
    assert "ai.onnx 18" in out and "com.microsoft 1" in out


def test_cli_module_imports_no_onnx():
    code = ("import sys, workbench.cli as c; c.build_parser(); "
            "import workbench.cli.cmd_inspect; print('onnx' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


# --------------------------------------------------------------------------------------------
# every model the onnx package ships for backend tests


def _backend_models():
    found = {d: sorted((ONNX_DATA / d).rglob("*.onnx")) for d in BACKEND_DIRS}
    return found


def test_inspect_json_succeeds_on_every_onnx_backend_model():
    found = _backend_models()
    assert all((ONNX_DATA / d).is_dir() for d in BACKEND_DIRS), "onnx test data missing"
    total = sum(len(v) for v in found.values())
    assert total >= 100, {d: len(v) for d, v in found.items()}
    assert len(found["light"]) >= 5 and len(found["pytorch-converted"]) >= 50
    failures = []
    for d, paths in found.items():
        for p in paths:
            rc, out, err = cli_json(str(p))
            if rc != 0:
                failures.append(f"{p.relative_to(ONNX_DATA)}: rc={rc} {err.strip()}")
                continue
            j = _strict_json(out)
            proto = onnx.load(str(p), load_external_data=False)
            if len(j["nodes"]) != len(proto.graph.node) or \
                    sum(j["ops"].values()) != len(proto.graph.node):
                failures.append(f"{p}: node count mismatch")
            for t in j["inputs"] + j["outputs"]:
                if t["shape"] is not None and not all(isinstance(x, (int, str))
                                                      for x in t["shape"]):
                    failures.append(f"{p}: bad shape {t}")
    assert not failures, "\n".join(failures[:20])


def test_inspect_backend_models_via_subprocess():
    picks = [sorted((ONNX_DATA / "light").glob("*.onnx"))[0],
             sorted((ONNX_DATA / "pytorch-converted").rglob("*.onnx"))[0],
             sorted((ONNX_DATA / "simple").rglob("*.onnx"))[-1]]
    for p in picks:
        r = subprocess.run([WORKBENCH, "inspect", "--json", str(p)], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (p, r.stderr)
        d = _strict_json(r.stdout)
        assert d["model"]["path"] == str(p)
        assert len(d["nodes"]) == len(onnx.load(str(p), load_external_data=False).graph.node)


LIGHT_THEN_FULL = r"""
import json, sys
from workbench.core import onnx_light
onnx_light.enable()
from workbench.graphs.inspect import inspect_model
from workbench.core.model import open_model
m = open_model(sys.argv[1])
light = inspect_model(m)
assert onnx_light.light_modules_loaded() is True
assert "numpy" not in sys.modules and "onnx" not in sys.modules
import onnx, onnx.checker, onnx.numpy_helper, onnx.shape_inference
import onnx_graphsurgeon as gs
import onnxruntime as ort
assert type(m.proto) is onnx.ModelProto and onnx.onnx_ml_pb2.ModelProto is onnx.ModelProto
onnx.checker.check_model(m.proto)
assert onnx.numpy_helper.to_array(m.graph.initializer[0]).size > 0
assert len(gs.import_onnx(m.proto).nodes) == len(m.graph.node)
ort.InferenceSession(m.proto.SerializeToString(), providers=["CPUExecutionProvider"])
assert onnx_light.light_modules_loaded() is False
full = inspect_model(open_model(sys.argv[1]))
print(json.dumps({"same": light == full}))
"""


def test_light_onnx_path_matches_full_and_onnx_still_imports_after():
    """The inspect verb avoids importing onnx/numpy; results must equal the full path, and a
    later `import onnx` (and graphsurgeon, onnxruntime) must work on the same classes."""
    r = subprocess.run([sys.executable, "-c", LIGHT_THEN_FULL, str(SAMPLES / "bert_tiny.onnx")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"same": True}


def test_cli_node_and_tree():
    r = subprocess.run([WORKBENCH, "inspect", str(SAMPLES / "bert_tiny.onnx"), "--json",
                        "--node", "/encoder/layer.1/attention/self/Softmax"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = _strict_json(r.stdout)
    assert d["op"] == "Softmax" and d["attributes"] == {"axis": -1}
    assert d["output_info"][0]["shape"][:2] == ["batch", 2]
    r = subprocess.run([WORKBENCH, "inspect", str(SAMPLES / "bert_tiny.onnx"), "--tree", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["/", "/embeddings", "/encoder", "/pooler"]
    r = subprocess.run([WORKBENCH, "inspect", str(SAMPLES / "bert_tiny.onnx"), "--node", "nope"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "no node with id or name 'nope'" in r.stderr and "bert_tiny.onnx" in r.stderr
