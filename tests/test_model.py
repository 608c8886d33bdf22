"""workbench.core.model: bad files give one-line errors naming the file (through the real CLI),
missing external data stays inspectable, saves are atomic and never touch the original, node ids
are stable and unique."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import H200, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.core.model import model_from_proto, open_model, save_model, stable_node_ids

RESNET = SAMPLES / "resnet_tiny.onnx"


WORKBENCH = str(Path(sys.executable).with_name("workbench"))  # the installed console script


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Run the real `workbench` command in a fresh process."""
    return subprocess.run([WORKBENCH, *args], capture_output=True, text=True, timeout=120)


def assert_bad_input(path: Path, *words: str) -> str:
    r = run_cli("inspect", "--json", str(path))
    assert r.returncode == 2, (r.returncode, r.stdout[:300], r.stderr)
    err = r.stderr.strip()
    # --json: the failure is one JSON object on stdout too, with the same line
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["message"] == err, r.stdout
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert str(path) in err or path.name in err, err
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


def _external_model(tmp_path: Path, location: str, name: str = "m.onnx") -> Path:
    """A one-MatMul model whose weight points at `location` (written by hand, no save helper)."""
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", "64")):
        e = w.external_data.add()
        e.key, e.value = k, v
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / name
    p.write_bytes(m.SerializeToString())
    return p


# --------------------------------------------------------------------------------------------
# bad input through the real CLI: exit 2, one line, names the file


@pytest.mark.parametrize("case", ["empty", "truncated", "truncated_early", "corrupt_header",
                                  "png", "text", "json", "missing", "folder"])
def test_bad_files_exit_2_with_one_line(tmp_path, case):
    data = RESNET.read_bytes()
    p = tmp_path / f"{case}.onnx"
    if case == "empty":
        p.write_bytes(b"")
        words = ["empty"]
    elif case == "truncated":
        p.write_bytes(data[: len(data) // 2])
        words = ["not a readable onnx"]
    elif case == "truncated_early":
        p.write_bytes(data[:37])
        words = []
    elif case == "corrupt_header":
        p.write_bytes(bytes(range(200, 256)) * 4 + data[224:])
        words = []
    elif case == "png":
        p = tmp_path / "picture.png"
        p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08"
                      b"\x02\x00\x00\x00\x90\x91h6" + bytes(64))
        words = []
    elif case == "text":
        p = tmp_path / "notes.txt"
        p.write_text("this is not a model\nat all\n")
        words = []
    elif case == "json":
        p.write_text('{"graph": {"node": []}, "ir_version": 8}')
        words = []
    elif case == "missing":
        p = tmp_path / "nope.onnx"
        words = ["not found"]
    else:
        p = tmp_path / "model_dir.onnx"
        p.mkdir()
        words = ["folder"]
    assert_bad_input(p, *words)


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink", "nested_parent"])
def test_external_data_escaping_the_folder_exits_2(tmp_path, where):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    outside = tmp_path / "secret.bin"
    outside.write_bytes(bytes(64))
    if where == "parent":
        loc = "../secret.bin"
    elif where == "absolute":
        loc = str(outside)
    elif where == "nested_parent":
        loc = "sub/../../secret.bin"
    else:
        (model_dir / "weights.bin").symlink_to(outside)
        loc = "weights.bin"
    p = _external_model(model_dir, loc)
    err = assert_bad_input(p, "outside the model folder")
    assert "'w'" in err  # names the tensor
    with pytest.raises(WorkbenchError, match="outside the model folder"):
        open_model(p)


def test_truncated_external_data_warns_and_load_weights_fails(tmp_path):
    p = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(bytes(40))  # needs 64
    m = open_model(p)
    assert [w.code for w in m.warnings] == ["external-data-truncated"]
    with pytest.raises(WorkbenchError, match="too short"):
        m.load_weights()


def test_opset_less_model_is_rejected(tmp_path):
    m = onnx.load(str(RESNET))
    del m.opset_import[:]
    p = tmp_path / "no_opset.onnx"
    p.write_bytes(m.SerializeToString())
    assert_bad_input(p, "opset")


# --------------------------------------------------------------------------------------------
# missing external data: inspectable with a warning; weights work fails clearly


def test_missing_external_data_is_inspectable_via_cli(tmp_path):
    src = H200 / "resnet50.structure.onnx"
    p = tmp_path / src.name
    shutil.copy(src, p)
    r = run_cli("inspect", "--json", str(p))
    assert r.returncode == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    codes = [w["code"] for w in d["warnings"]]
    assert "external-data-missing" in codes
    assert d["model"]["weights_available"] is False
    assert d["ops"]["Conv"] == sum(1 for n in onnx.load(str(src), load_external_data=False)
                                   .graph.node if n.op_type == "Conv")
    assert d["parameters"]["count"] > 25_000_000  # ResNet-50 from dims alone
    assert d["inputs"][0]["shape"][0] == "N"


def test_missing_external_data_load_weights_fails_clearly():
    for name in ("resnet50.structure.onnx", "bert_small.structure.onnx"):
        m = open_model(H200 / name)
        assert not m.weights_available
        assert m.warnings and m.warnings[0].code == "external-data-missing"
        with pytest.raises(WorkbenchError) as e:
            m.load_weights()
        msg = str(e.value)
        assert name in msg and "missing" in msg and "\n" not in msg
        with pytest.raises(WorkbenchError):
            m.save(Path(os.environ["WORKBENCH_HOME"]) / "copy.onnx")


def test_external_data_roundtrip_loads_real_weights(tmp_path):
    orig = onnx.load(str(RESNET))
    p = save_model(orig, tmp_path / "ext.onnx", external_data=True)
    assert (tmp_path / "ext.onnx.data").is_file()
    m = open_model(p)
    assert m.weights_available and m.external_files == [(tmp_path / "ext.onnx.data").resolve()]
    # the opened proto holds no weight bytes for the big tensors
    ext = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert ext and all(not t.raw_data for t in ext)
    full = m.load_weights()
    want = {t.name: numpy_helper.to_array(t) for t in orig.graph.initializer}
    got = {t.name: numpy_helper.to_array(t) for t in full.graph.initializer}
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])
    # the opened model was not changed by loading weights
    assert all(t.data_location == TensorProto.EXTERNAL for t in ext)


# --------------------------------------------------------------------------------------------
# saving: never over the source, atomic


def test_save_never_overwrites_the_source(tmp_path):
    p = tmp_path / "model.onnx"
    shutil.copy(RESNET, p)
    before = p.read_bytes()
    m = open_model(p)
    with pytest.raises(WorkbenchError, match="refusing to overwrite"):
        m.save(p)
    link = tmp_path / "alias.onnx"
    link.symlink_to(p)
    with pytest.raises(WorkbenchError, match="refusing to overwrite"):
        m.save(link)
    with pytest.raises(WorkbenchError, match="refusing to overwrite"):
        m.save(tmp_path / "sub" / ".." / "model.onnx")
    assert p.read_bytes() == before
    out = m.save(tmp_path / "copy.onnx")
    assert onnx.load(str(out)).SerializeToString() == onnx.load(str(p)).SerializeToString()
    assert p.read_bytes() == before


def test_save_is_atomic_when_the_write_fails(tmp_path, monkeypatch):
    out = tmp_path / "out.onnx"
    out.write_bytes(b"previous version")
    m = open_model(RESNET)
    import workbench.core.fsutil as fsutil

    def boom(src, dst):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(fsutil.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        m.save(out)
    assert out.read_bytes() == b"previous version"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.onnx"]  # no temp left behind


# --------------------------------------------------------------------------------------------
# stable node ids


def _graph_named(names):
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=n)
             for i, n in enumerate(names)]
    return helper.make_graph(nodes, "g",
                             [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1])],
                             [helper.make_tensor_value_info(f"t{len(names)}", TensorProto.FLOAT,
                                                            [1])])


def test_node_ids_unique_and_stable_with_duplicate_and_empty_names(tmp_path):
    names = ["a", "a", "", "Relu#0", "", "b", "a"]
    g = _graph_named(names)
    ids = stable_node_ids(g)
    assert ids == ["a#0", "a#1", "Relu#1", "Relu#0", "Relu#2", "b", "a#2"]
    assert len(set(ids)) == len(ids)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m = model_from_proto(model)
    assert m.node_by_id("Relu#2") is m.graph.node[4]
    with pytest.raises(WorkbenchError, match="no node with id"):
        m.node_by_id("zzz")
    assert m.node_by_id("b") is m.graph.node[5]
    with pytest.raises(WorkbenchError, match=r"used by 3 nodes.*a#0, a#1, a#2"):
        m.node_by_id("a")
    # same ids after a save and re-open
    p = save_model(model, tmp_path / "dups.onnx")
    assert open_model(p).node_ids == ids
    # appending a node leaves earlier ids alone
    g2 = _graph_named(names + [""])
    assert stable_node_ids(g2)[: len(ids)] == ids


def test_content_hash_covers_external_data(tmp_path):
    p = save_model(onnx.load(str(RESNET)), tmp_path / "h.onnx", external_data=True)
    h1 = open_model(p).content_hash
    data = tmp_path / "h.onnx.data"
    b = bytearray(data.read_bytes())
    b[-1] ^= 0xFF
    data.write_bytes(bytes(b))
    assert open_model(p).content_hash != h1


def test_save_never_overwrites_the_sources_external_data(tmp_path):
    src = save_model(onnx.load(str(RESNET)), tmp_path / "a.onnx", external_data=True)
    # make the source's data file be named like the one a save to "b.onnx" would write
    os.replace(tmp_path / "a.onnx.data", tmp_path / "b.onnx.data")
    m = onnx.load(str(src), load_external_data=False)
    for t in m.graph.initializer:
        for kv in t.external_data:
            if kv.key == "location":
                kv.value = "b.onnx.data"
    src.write_bytes(m.SerializeToString())
    data_before = (tmp_path / "b.onnx.data").read_bytes()
    opened = open_model(src)
    with pytest.raises(WorkbenchError, match="data file"):
        save_model(opened.load_weights(), tmp_path / "b.onnx", source=src, external_data=True)
    assert (tmp_path / "b.onnx.data").read_bytes() == data_before
    assert not (tmp_path / "b.onnx").exists()
