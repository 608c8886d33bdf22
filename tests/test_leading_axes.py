"""Axis 0 that is not a batch (points [num_points, 4], rois [num_rois, 4]): one predicate
(`workbench.core.inputs.leading_axes`) that compare, precision, profiles, calibration and build all
read, so a point cloud is one sample everywhere and is never cut into "samples"."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from workbench.core.errors import WorkbenchError
from workbench.core import inputs
from workbench.core.inputs import model_inputs
from workbench.precision.calibration import load_calibration
from workbench.precision.profiles import (advise, check_samples, default_profile,
                                          run_at_profiles)
from workbench.runtime.runners import batched_inputs, limit_samples, samples_in

N_POINTS = 700


def _points_model(path, w_scale: float = 1.0, dim: str = "num_points", out0=1) -> str:
    """points [dim, 4] and pillar_idx int64 [dim] -> max over the points of
    Relu(points @ W) + table[pillar_idx]: out [1, 8] (no batch anywhere)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((4, 8)) * w_scale).astype(np.float32)
    table = rng.standard_normal((64, 8)).astype(np.float32)
    g = h.make_graph(
        [h.make_node("MatMul", ["points", "W"], ["mm"], name="mm"),
         h.make_node("Relu", ["mm"], ["r"], name="relu"),
         h.make_node("Gather", ["table", "pillar_idx"], ["emb"], name="gather"),
         h.make_node("Add", ["r", "emb"], ["s"], name="add"),
         h.make_node("ReduceMax", ["s"], ["out"], axes=[0], keepdims=1, name="max")],
        "pillars",
        [h.make_tensor_value_info("points", T.FLOAT, [dim, 4]),
         h.make_tensor_value_info("pillar_idx", T.INT64, [dim])],
        [h.make_tensor_value_info("out", T.FLOAT, [out0, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(table, "table")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return str(path)


def _cloud(n: int = N_POINTS, seed: int = 1) -> dict:
    """One point cloud whose largest points come last (a cut to the first 8 misses them)."""
    rng = np.random.default_rng(seed)
    grow = np.linspace(0.1, 3, n, dtype=np.float32)[:, None]
    pts = rng.standard_normal((n, 4)).astype(np.float32) * grow
    return {"points": pts, "pillar_idx": rng.integers(0, 64, n).astype(np.int64)}


def _roi_model(path, rois_dim: str = "num_rois") -> str:
    """image [batch, 3, 8, 8], rois [rois_dim, 4], batch_indices [rois_dim] -> RoiAlign."""
    g = h.make_graph(
        [h.make_node("RoiAlign", ["image", "rois", "batch_indices"], ["pooled"],
                     output_height=2, output_width=2, sampling_ratio=2, name="roi")],
        "roi",
        [h.make_tensor_value_info("image", T.FLOAT, ["batch", 3, 8, 8]),
         h.make_tensor_value_info("rois", T.FLOAT, [rois_dim, 4]),
         h.make_tensor_value_info("batch_indices", T.INT64, [rois_dim])],
        [h.make_tensor_value_info("pooled", T.FLOAT, [rois_dim, 3, 2, 2])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 16)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def _ort(path: str, feed: dict) -> dict:
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


# ----------------------------------------------------------------------------- the predicate
@pytest.mark.parametrize("dim,kind", [
    ("batch", "batch"), ("batch_size", "batch"), ("N", "batch"), ("n", "batch"), ("bs", "batch"),
    ("B", "batch"), ("num_points", "count"), ("n_points", "count"), ("points", "count"),
    ("rois", "count"), ("numRois", "count"), ("box_count", "count"), ("nodes", "count"),
    ("edges", "count"), ("tokens", "count"), ("detections", "count"), ("npoints", "count"),
    ("seq_len", "count"), ("s0", "generic"), ("unk__7", "generic"), (None, "generic"),
    ("height", "generic")])
def test_dim_names_say_batch_or_count(dim, kind):
    assert inputs.dim_kind(dim) == kind


def test_leading_axes_from_names_and_structure(tmp_path):
    pts = inputs.leading_axes(_points_model(tmp_path / "p.onnx"))
    assert pts.batch == frozenset() and not pts.splits
    assert dict(pts.items) == {"points": "num_points", "pillar_idx": "num_points"}
    assert "'points', 'pillar_idx' (num_points) is not a batch" in pts.note()
    roi = inputs.leading_axes(_roi_model(tmp_path / "r.onnx"))
    assert roi.batch == {"image"} and dict(roi.items) == {"rois": "num_rois",
                                                          "batch_indices": "num_rois"}
    # a name that says nothing: beside a named batch under another name it is none
    assert inputs.leading_axes(_roi_model(tmp_path / "r2.onnx", "k")).batch == {"image"}
    # dynamo's s0 shared by both inputs: every output fixed at axis 0 -> no batch ...
    assert not inputs.leading_axes(_points_model(tmp_path / "s.onnx", dim="s0")).splits
    # ... an output carrying s0 at axis 0 -> a batch
    both = inputs.leading_axes(_points_model(tmp_path / "s2.onnx", dim="s0", out0="s0"))
    assert both.batch == {"points", "pillar_idx"} and both.splits and both.note() is None


# ----------------------------------------------------------------------------- samples
def test_a_cloud_is_one_sample_never_cut(tmp_path):
    model = _points_model(tmp_path / "p.onnx")
    feed = _cloud()
    batched = batched_inputs(model)
    assert batched == set() and samples_in(feed, batched) == 1
    got = limit_samples([feed, _cloud(300, 2), _cloud(500, 3)], 2, batched)
    assert [len(f["points"]) for f in got] == [N_POINTS, 300]  # two files, each whole
    from workbench.matrix.accuracy import _chunks, max_batch

    assert [len(f["points"]) for f in _chunks([feed], 16, batched)] == [N_POINTS]
    assert max_batch([{"points": [[1, 4], [8, 4], [16, 4]]}], batched) is None


def test_compare_and_precision_judge_the_whole_cloud_alike(tmp_path):
    from workbench import compare
    from workbench.precision.transform import convert

    ref = _points_model(tmp_path / "p.onnx")
    cand = _points_model(tmp_path / "c.onnx", w_scale=1.01)
    np.savez(tmp_path / "cloud.npz", **_cloud())
    rep = compare.layerwise(ref, cand, calibration=str(tmp_path / "cloud.npz"))
    assert rep.samples == 1 and rep.samples_available == 1
    assert any(f.code == "not-a-batch" for f in rep.findings)
    full_ref, full_cand = _ort(ref, _cloud())["out"], _ort(cand, _cloud())["out"]
    out = rep.outputs[0]
    assert out.max_abs == pytest.approx(float(np.abs(full_ref - full_cand).max()), rel=1e-5)
    first8 = {k: v[:8] for k, v in _cloud().items()}  # what the old cut compared
    assert out.max_abs != pytest.approx(
        float(np.abs(_ort(ref, first8)["out"] - _ort(cand, first8)["out"]).max()), rel=1e-3)
    # precision judges the same data: its INT8 error equals compare's on its output
    res = convert(ref, "int8", calibration=str(tmp_path / "cloud.npz"))
    onnx.save(res.proto, str(tmp_path / "q.onnx"))
    q = compare.layerwise(ref, str(tmp_path / "q.onnx"), calibration=str(tmp_path / "cloud.npz"))
    assert q.outputs[0].rel == pytest.approx(res.report["error"]["out"]["rel_err"], rel=1e-6)
    assert any(f.code == "not-a-batch" for f in res.findings)


def test_cli_compare_says_one_sample(tmp_path):
    ref = _points_model(tmp_path / "p.onnx")
    cand = _points_model(tmp_path / "c.onnx", w_scale=1.01)
    np.savez(tmp_path / "cloud.npz", **_cloud())
    r = subprocess.run(["workbench", "compare", ref, cand, "--inputs", str(tmp_path / "cloud.npz")],
                       capture_output=True, text=True, timeout=300)
    assert "samples: 1  atol" in r.stdout and "of 700" not in r.stdout, r.stdout + r.stderr
    assert "INFO not-a-batch: axis 0 of 'points', 'pillar_idx' (num_points)" in r.stdout


def test_rois_beside_images_stay_whole(tmp_path):
    from workbench import compare

    model = _roi_model(tmp_path / "r.onnx")
    rng = np.random.default_rng(0)
    data = {"image": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
            "rois": np.array([[0, 0, 4, 4], [1, 1, 6, 6], [2, 0, 7, 5]] * 2, np.float32),
            "batch_indices": np.array([0, 0, 0, 1, 1, 1], np.int64)}
    np.savez(tmp_path / "d.npz", **data)
    rep = compare.layerwise(model, model, calibration=str(tmp_path / "d.npz"), max_samples=1)
    assert rep.samples == 1
    pooled = rep.runs["reference"][0]["pooled"]
    np.testing.assert_allclose(pooled, _ort(model, data)["pooled"], rtol=1e-6)
    assert pooled.shape == (6, 3, 2, 2)  # every roi of both images, not the first one


# ----------------------------------------------------------------------------- profiles
def test_profile_advisor_measures_a_count_axis_from_the_data(tmp_path):
    model = _points_model(tmp_path / "p.onnx")
    np.savez(tmp_path / "cloud.npz", **_cloud())
    samples = load_calibration(str(tmp_path / "cloud.npz"), model)
    [prof], findings = advise(model, samples)
    assert prof["points"] == ((700, 4), (700, 4), (700, 4))
    assert prof["pillar_idx"] == ((700,), (700,), (700,))
    codes = [f.code for f in findings]
    assert "not-a-batch" in codes and "batch-from-default" not in codes
    fixed = next(f for f in findings if f.code == "fixed-axis")
    assert fixed.extra["axis"] == 0 and fixed.extra["value"] == 700
    assert "points:350x4:700x4:1400x4,pillar_idx:350:700:1400" in fixed.hint
    cannot, runs = run_at_profiles(model, [prof])
    assert not cannot and runs == 1
    folder = tmp_path / "clouds"
    folder.mkdir()
    for i, n in enumerate((300, 500, 786)):
        np.savez(folder / f"c{i}.npz", **_cloud(n, i))
    samples = load_calibration(str(folder), model)
    [prof], findings = advise(model, samples)
    assert prof["points"] == ((300, 4), (504, 4), (786, 4))
    assert not [f for f in check_samples([prof], samples, batch=()) if f.severity == "error"]
    cannot, runs = run_at_profiles(model, [prof])
    assert not cannot and runs == 3


def test_default_profile_gives_a_count_axis_a_range(tmp_path):
    model = _points_model(tmp_path / "p.onnx")
    prof, rules = default_profile(model)
    assert prof["points"] == ((1, 4), (128, 4), (1024, 4))
    assert prof["pillar_idx"] == ((1,), (128,), (1024,))
    assert "not a batch" in rules["num_points"]
    cannot, runs = run_at_profiles(model, [prof])
    assert not cannot and runs == 3
    roi = _roi_model(tmp_path / "r.onnx")
    prof, _ = default_profile(roi, max_batch=4)
    assert prof["image"][2][0] == 4 and prof["rois"][2][0] == 1024
    cannot, runs = run_at_profiles(roi, [prof])  # batch_indices 0 exist at batch 1
    assert not cannot and runs == 3


def test_build_default_from_calibration_keeps_the_cloud_size(tmp_path):
    from workbench.engines.stages.profiles import advised

    model = _points_model(tmp_path / "p.onnx")
    np.savez(tmp_path / "cloud.npz", **_cloud())
    prof, rules = advised(model, str(tmp_path / "cloud.npz"), *default_profile(model))
    assert prof["points"] == ((700, 4), (700, 4), (700, 4))  # not widened as if a batch
    assert "batch max" not in rules["num_points"]


# ----------------------------------------------------------------------------- calibration
def test_calibration_never_cuts_a_cloud_into_batches(tmp_path):
    model = _points_model(tmp_path / "p.onnx")
    np.savez(tmp_path / "cloud.npz", **_cloud())
    small = {"points": ((1, 4), (8, 4), (16, 4)), "pillar_idx": ((1,), (8,), (16,))}
    with pytest.raises(WorkbenchError, match=r"'points' axis 0 is 700, outside the profile "
                                             r"range 1\.\.16"):
        load_calibration(str(tmp_path / "cloud.npz"), model, profile=small)
    wide = {"points": ((1, 4), (128, 4), (1024, 4)), "pillar_idx": ((1,), (128,), (1024,))}
    got = load_calibration(str(tmp_path / "cloud.npz"), model, profile=wide)
    assert [b["points"].shape for b in got] == [(700, 4)]
    assert [s.name for s in model_inputs(model)] == ["points", "pillar_idx"]
