"""A split build whose refused node reads graph inputs of its own (a RoiAlign's rois and
batch_indices, a ScatterND's indices and updates): the user's profile and calibration data
name every input of the model, the engine's prefix takes only some of them. The prefix gets
the profile entries and calibration arrays of its own inputs; the tail's inputs are checked
against the full model and used for the chain check. Real TensorRT-RTX parser and CPU builds,
onnxruntime for the chain."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import REPO
from workbench.engines.engine import BuildConfig, build_engine
from workbench.runtime.chain import ChainedRunner
from workbench.runtime.equivalence import make_inputs, make_inputs_at
from workbench.core.errors import WorkbenchError
from workbench.runtime.runners import OnnxRuntimeRunner

PROFILE = {"x": [[1, 4], [4, 4], [8, 4]], "idx": [[1, 1], [3, 1], [6, 1]],
           "upd": [[1, 4], [3, 4], [6, 4]]}
CFG = BuildConfig(precision="fp16", target="sm89", builder_optimization_level=0)


def scatter_mul_model() -> onnx.ModelProto:
    """x [N, 4] -> MatMul -> Relu -> ScatterND(reduction=mul) with graph inputs idx [K, 1],
    upd [K, 4] -> Sigmoid. TensorRT-RTX's parser refuses ScatterND with a reduction (it names
    the node); no recipe rewrites 'mul' (decompose takes 'add', a one-hot product)."""
    w = nh.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"], name="/mm"),
             h.make_node("Relu", ["mm"], ["r"], name="/relu"),
             h.make_node("ScatterND", ["r", "idx", "upd"], ["s"], name="/scatter",
                         reduction="mul"),
             h.make_node("Sigmoid", ["s"], ["y"], name="/sig")]
    g = h.make_graph(nodes, "scatter_mul", [
        h.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
        h.make_tensor_value_info("idx", T.INT64, ["K", 1]),
        h.make_tensor_value_info("upd", T.FLOAT, ["K", 4])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], initializer=[w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def roialign_model() -> onnx.ModelProto:
    """image [batch, 3, h, w] -> Conv -> RoiAlign(rois [R, 4], batch_indices [R])."""
    w = nh.from_array(np.full((2, 3, 1, 1), 0.5, np.float32), "w")
    nodes = [h.make_node("Conv", ["image", "w"], ["feat"], name="/conv"),
             h.make_node("RoiAlign", ["feat", "rois", "batch_indices"], ["pooled"],
                         name="/roi", output_height=2, output_width=2, sampling_ratio=2)]
    g = h.make_graph(nodes, "roi", [
        h.make_tensor_value_info("image", T.FLOAT, ["batch", 3, "h", "w"]),
        h.make_tensor_value_info("rois", T.FLOAT, ["R", 4]),
        h.make_tensor_value_info("batch_indices", T.INT64, ["R"])],
        [h.make_tensor_value_info("pooled", T.FLOAT, ["R", 2, 2, 2])], initializer=[w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 16)])
    m.ir_version = 8
    return m


@pytest.fixture()
def scatter_path(tmp_path):
    p = tmp_path / "scatter.onnx"
    onnx.save(scatter_mul_model(), str(p))
    return p


def _feed(n: int, k: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 4)).astype(np.float32),
            "idx": rng.integers(0, n, (k, 1)).astype(np.int64),
            "upd": rng.standard_normal((k, 4)).astype(np.float32)}


def test_a_profile_naming_the_tails_inputs_builds_the_prefix_on_its_own_entries(
        scatter_path, tmp_path):
    engine = tmp_path / "out" / "s.engine"
    events = []
    res = build_engine(scatter_path, CFG.replace(profiles=[PROFILE]), output=engine,
                       on_event=events.append)
    s = res.split
    assert s["refused"] == [{"node": "/scatter", "op": "ScatterND"}]
    assert s["verification"].startswith("equivalent"), s["verification"]
    assert s["tail_profile_inputs"] == ["idx", "upd"]
    # the engine was built for x alone, at the user's x range
    assert res.config["profiles"] == [{"x": PROFILE["x"]}]
    assert "--minShapes=x:1x4 " in res.export["trtexec"] and "idx" not in res.export["trtexec"]
    note = next(e["message"] for e in events if e.get("event") == "notice"
                and e["finding"]["code"] == "split-build")
    assert "'idx', 'upd' feed the tail, so the engine's profile leaves them out" in note
    chain = ChainedRunner.from_folder(s["manifest"])
    original = OnnxRuntimeRunner(str(scatter_path))
    for n, k in ((1, 1), (4, 3), (8, 6)):
        feed = _feed(n, k)
        want, got = original.infer(feed), chain.infer(feed)
        np.testing.assert_array_equal(want["y"], got["y"])


def test_a_profile_wrong_for_a_tail_input_is_refused_against_the_full_model(scatter_path,
                                                                            tmp_path):
    bad = dict(PROFILE, upd=[[1, 5], [3, 5], [6, 5]])
    with pytest.raises(WorkbenchError) as e:
        build_engine(scatter_path, CFG.replace(profiles=[bad]), output=tmp_path / "b.engine")
    assert e.value.field == "profiles.upd" and "fixed to 4 by the model" in e.value.message
    assert e.value.file == str(scatter_path)


def test_calibration_data_for_every_input_calibrates_the_prefix_on_its_own_arrays(
        scatter_path, tmp_path):
    cal = tmp_path / "cal.npz"
    np.savez(cal, **_feed(8, 6, seed=5))
    cfg = BuildConfig(precision="int8", target="sm89", builder_optimization_level=0,
                      calibration=str(cal))
    res = build_engine(scatter_path, cfg, output=tmp_path / "q.engine")
    assert res.split and res.split["verification"].startswith("equivalent")
    used = res.config["calibration"]
    assert used != str(cal) and "prefix-" in used  # the prefix's arrays, in the workspace
    files = sorted(p.name for p in Path(used).iterdir())
    assert files == ["batch_0000.npz"]
    with np.load(f"{used}/batch_0000.npz", allow_pickle=False) as z:
        assert z.files == ["x"]
        np.testing.assert_array_equal(z["x"], np.load(cal)["x"])
    assert any(f.code == "split-build" for f in res.findings)
    again = build_engine(scatter_path, cfg, output=tmp_path / "q2.engine")
    assert again.cache_hit  # the prefix's calibration is the same bytes: the same engine
    # data missing an input of the full model is refused naming the file and the input
    short = tmp_path / "short.npz"
    np.savez(short, x=np.ones((2, 4), np.float32), idx=np.zeros((1, 1), np.int64))
    with pytest.raises(WorkbenchError) as e:
        build_engine(scatter_path, cfg.replace(calibration=str(short)),
                     output=tmp_path / "q3.engine")
    assert e.value.field == "upd" and "missing input 'upd'" in e.value.message


def test_the_cli_split_build_with_profile_and_calibration_exits_0(scatter_path, tmp_path):
    cal = tmp_path / "cal.npz"
    np.savez(cal, **_feed(8, 6, seed=5))
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "build", str(scatter_path),
                        "-o", str(tmp_path / "c.engine"), "--precision", "fp16",
                        "--target", "sm89", "--profile", "x:1x4:4x4:8x4",
                        "--profile", "idx:1x1:3x1:6x1", "--profile", "upd:1x4:3x4:6x4",
                        "--calib", str(cal), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["split"]["verification"].startswith("equivalent")
    assert d["split"]["tail_profile_inputs"] == ["idx", "upd"]


def test_the_chain_check_feeds_index_inputs_in_range(scatter_path, tmp_path):
    """At opt x of 1 row (as the default profile has it: 1..1..16, opt 1) the chain check put
    index 1 into it: 'unverified ... out of range'. Index inputs take values valid for what
    they index, so the chain is checked."""
    one_row = dict(PROFILE, x=[[1, 4], [1, 4], [8, 4]], idx=[[1, 1], [6, 1], [6, 1]],
                   upd=[[1, 4], [6, 4], [6, 4]])
    res = build_engine(scatter_path, CFG.replace(profiles=[one_row]),
                       output=tmp_path / "d.engine")
    assert res.split["verification"].startswith("equivalent"), res.split["verification"]
    res = build_engine(scatter_path, CFG, output=tmp_path / "e.engine")  # the default profile
    assert res.split["verification"].startswith("equivalent"), res.split["verification"]


def test_sample_index_inputs_stay_within_what_they_index():
    m = roialign_model()
    runner = OnnxRuntimeRunner(m)
    for batch, r in ((1, 1), (1, 16), (3, 8), (16, 16)):
        feed = make_inputs_at(m, {"image": (batch, 3, 8, 8), "rois": (r, 4),
                                  "batch_indices": (r,)})
        assert feed["batch_indices"].min() >= 0 and feed["batch_indices"].max() < batch
        assert runner.infer(feed)["pooled"].shape == (r, 2, 2, 2)
    big = make_inputs_at(m, {"image": (16, 3, 8, 8), "rois": (64, 4), "batch_indices": (64,)})
    assert big["batch_indices"].max() > 1  # the whole batch, not only images 0 and 1
    s = scatter_mul_model()
    for n in (1, 2, 5):
        feed = make_inputs_at(s, {"x": (n, 4), "idx": (7, 1), "upd": (7, 4)})
        assert feed["idx"].max() < n
        OnnxRuntimeRunner(s).infer(feed)
    assert make_inputs(m)["batch_indices"].max() < 2  # (the default batch of 2)


def test_a_file_of_images_and_rois_gets_flags_that_keep_each_others_axes(tmp_path):
    """One .npz of 2 images and 6 ROIs: two batch-from-default findings each suggested a flag
    that undid the other's axis. The ROI axis (R, beside the images' batch) is a count of items
    in one sample (`inputs.leading_axes`), measured from the data; its fixed-axis flag widens R
    and keeps the images' batch, and every flag validates."""
    from workbench.precision.calibration import load_calibration
    from workbench.precision.profiles import advise, parse_profiles, validate_profiles

    m = roialign_model()
    rng = np.random.default_rng(0)
    data = {"image": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
            "rois": np.tile(np.array([[0, 0, 4, 4]], np.float32), (6, 1)),
            "batch_indices": np.array([0, 0, 0, 1, 1, 1], np.int64)}
    [prof], findings = advise(m, load_calibration(data, m))
    assert not [f for f in findings if f.code == "batch-from-default"]
    assert prof["image"][1][0] == 2 and prof["rois"][0][0] == prof["rois"][2][0] == 6
    (na,) = [f for f in findings if f.code == "not-a-batch"]
    assert "'rois', 'batch_indices' (R)" in na.message
    (r_axis,) = [f for f in findings if f.code == "fixed-axis" and "'rois' axis 0" in f.message]
    flag = r_axis.hint.split("e.g. ", 1)[1]
    [wide] = validate_profiles(m, parse_profiles([flag[len("--profile "):]]))
    assert wide["image"][1][0] == 2 and wide["rois"][0][0] < 6 < wide["rois"][2][0]
    assert wide["batch_indices"][2][0] == wide["rois"][2][0]  # (they share R)
