"""The model zoo (tests/data/zoo): real exports kept as structure + statistics, re-made runnable."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from zoo_models import ZOO, manifest, materialize, names, sample_inputs, structure_path

CATEGORIES = {"classification", "detection", "segmentation", "video", "audio", "encoder",
              "decoder"}
# under ~10 M parameters: materialized and run in onnxruntime in CI (the rest by benchmarks/zoo.py)
MID = sorted(n for n, r in manifest().items() if r["params"] < 10_000_000)


def test_the_zoo_spans_twenty_plus_architectures_with_dynamic_batch():
    m = manifest()
    assert len(m) >= 20
    assert {r["category"] for r in m.values()} == CATEGORIES
    for name, r in m.items():
        assert r["attempts"][-1]["status"] == "ok", name
        assert r["attempts"][-1]["exporter"] == r["exporter"]
        assert r["exporter"] in ("torch.onnx.export(default)", "torch.onnx.export(dynamo=False)")
        # the fallback is only ever taken after the default exporter failed
        if "dynamo=False" in r["exporter"]:
            assert any(a["status"] == "failed" and "default" in a["exporter"]
                       for a in r["attempts"]), name
        assert all(isinstance(dims[0], str) for _, dims in r["inputs"]), name  # dynamic batch
    assert sum((ZOO / f).stat().st_size for f in [p.name for p in ZOO.iterdir() if p.is_file()]) \
        < 10 * 2**20


@pytest.mark.parametrize("name", names())
def test_every_stripped_tensor_has_sane_statistics(name):
    model = onnx.load(str(structure_path(name)), load_external_data=False)
    stats = json.loads((ZOO / f"{name}.stats.json").read_text())
    stripped = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert stripped and {t.name for t in stripped} <= set(stats)
    for t in stripped:
        st = stats[t.name]
        assert list(t.dims) == st["shape"], t.name
        assert st["min"] <= st["mean"] <= st["max"] and st["std"] >= 0, t.name
    assert [i.name for i in model.graph.input] == [i for i, _ in manifest()[name]["inputs"]]


def test_materialize_is_deterministic_per_seed_and_keeps_ranges(tmp_path):
    a = materialize("squeezenet1_1", 0, tmp_path / "a")
    b = materialize("squeezenet1_1", 0, tmp_path / "b")
    c = materialize("squeezenet1_1", 1, tmp_path / "c")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    stats = json.loads((ZOO / "squeezenet1_1.stats.json").read_text())
    for t in onnx.load(str(a)).graph.initializer:
        if t.name in stats:
            arr = onnx.numpy_helper.to_array(t)
            st = stats[t.name]
            assert arr.min() >= st["min"] and arr.max() <= st["max"], t.name
            assert abs(arr.mean() - st["mean"]) <= 0.1 * st["std"] + 1e-6, t.name


def test_batchnorm_variances_stay_positive(tmp_path):
    """BatchNorm's running_var (input 4) must stay > 0 for sane outputs."""
    model = onnx.load(str(materialize("resnet50", 0, tmp_path)))
    inits = {t.name: t for t in model.graph.initializer}
    bn = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    for n in bn:
        assert (onnx.numpy_helper.to_array(inits[n.input[4]]) > 0).all(), n.name
    assert bn or not any(n.op_type == "BatchNormalization" for n in model.graph.node)


@pytest.mark.parametrize("name", MID)
def test_materialized_model_runs_in_onnxruntime_with_finite_outputs(name, tmp_path):
    path = materialize(name, 0, tmp_path)
    onnx.checker.check_model(str(path))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, sample_inputs(name, batch=1))
    floats = [o for o in outs if o.dtype.kind == "f"]
    assert floats and all(np.isfinite(o).all() for o in floats)
    expected = manifest()[name]["ort_full_weights"]["batch1"]  # same shapes as the real weights
    if manifest()[name]["category"] != "detection":  # box counts depend on the weights
        assert [list(o.shape) for o in outs] == [s for s, _ in expected]
