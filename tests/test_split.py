"""The split: the largest prefix TensorRT-RTX takes (really parsed and built) + an ONNX tail,
run prefix-then-tail by the chained runner, equal to the original model."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import POLY, REPO
from quant_models import detector
from workbench.runtime.chain import ChainedRunner, read_manifest
from workbench.core.errors import WorkbenchError
from workbench.runtime.runners import OnnxRuntimeRunner, Runner
from workbench.support.checker import check
from workbench.surgery.propose import propose
from workbench.surgery.split import split_model

TAIL = ["/post/nonzero", "/post/squeeze", "/post/gather_boxes", "/post/gather_scores"]


def _feeds(n=6):
    rng = np.random.default_rng(7)
    return [{"images": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def _same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, k
        diff = np.abs(a[k].astype(np.float64) - b[k].astype(np.float64))
        assert np.max(diff, initial=0) <= 1e-5, k


@pytest.fixture(scope="module")
def det_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("det") / "det.onnx"
    onnx.save(detector(), str(p))
    return p


def test_split_detector_prefix_builds_with_rtx_and_chain_equals_original(det_path):
    """Acceptance: NonZero (refused by TensorRT-RTX) and what follows become the ONNX tail; the
    prefix really builds with the RTX builder; prefix-then-tail equals the original."""
    assert not check(str(det_path), backend="tensorrt-rtx").supported
    res = split_model(det_path, backend="tensorrt-rtx", build=True)
    assert res.supported and res.report.build["built"] is True
    assert res.report.build["engine_bytes"] > 0
    assert [r["refused"] for r in res.rounds] == [["/post/nonzero"]]
    assert res.manifest["tail"]["nodes"] == TAIL
    assert set(res.manifest["cut"]) == {"mask", "boxes", "scores"}
    assert res.manifest["prefix"]["outputs"][0] == "scores"  # an original output it makes
    assert "NonZero" not in {n.op_type for n in res.prefix.graph.node}
    assert res.verification.status == "equivalent" and res.verification.max_abs_diff == 0
    chain = ChainedRunner(OnnxRuntimeRunner(res.prefix), OnnxRuntimeRunner(res.tail),
                          res.manifest)
    original = OnnxRuntimeRunner(str(det_path))
    counts = set()
    for feed in _feeds():
        want = original.infer(feed)
        _same(want, chain.infer(feed))
        counts.add(want["kept_boxes"].shape[0])
    assert len(counts) > 1  # data-dependent shapes really vary across the feeds


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import run; "
                           "sys.argv[0]='workbench'; run()", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_cli_split_writes_prefix_tail_manifest(det_path, tmp_path):
    out = tmp_path / "split"
    r = _cli("fix", det_path, "-o", out, "--auto", "--split", "--build", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["supported"] is False  # the whole model still is not
    assert any(p["recipe"] == "split" and not p["auto"] for p in rep["proposals"])
    assert rep["split"]["supported"] is True
    assert rep["split"]["support"]["build"]["built"] is True
    assert sorted(p.name for p in out.iterdir()) == ["prefix.onnx", "split.json", "tail.onnx"]
    man = read_manifest(out)
    assert man["tail"]["nodes"] == TAIL and man["backend"]["name"] == "tensorrt-rtx"
    assert man["verification"]["status"] == "equivalent"
    assert check(str(out / "prefix.onnx"), backend="tensorrt-rtx").supported
    chain = ChainedRunner.from_folder(out)
    original = OnnxRuntimeRunner(str(det_path))
    for feed in _feeds(3):
        _same(original.infer(feed), chain.infer(feed))
    human = _cli("fix", det_path, "-o", tmp_path / "again", "--split")
    assert human.returncode == 0, human.stderr
    assert "tail.onnx (4 nodes for onnxruntime, from /post/nonzero)" in human.stdout
    assert "mask, boxes, scores" in human.stdout
    bad = _cli("fix", det_path, "-o", tmp_path / "x.onnx", "--auto", "--build")
    assert bad.returncode == 2 and "--build goes with --split" in bad.stderr


class _Int32Prefix(Runner):
    """A prefix the way TensorRT 8.6 returns it: INT64 outputs come back as INT32."""

    name = "int32-prefix"

    def __init__(self, model):
        super().__init__(model)
        self.inner = OnnxRuntimeRunner(model)

    def _start(self):
        self.inner.start()

    def input_metadata(self):
        return self.inner.input_metadata()

    def _infer(self, feed, names=None):
        return {k: (v.astype(np.int32) if v.dtype == np.int64 else v)
                for k, v in self.inner.infer(feed).items()}


def _argmax_gather():
    """ArgMax (int64) crosses the cut into a NonZero tail."""
    g = h.make_graph([h.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0, name="argmax"),
                      h.make_node("NonZero", ["am"], ["nz"], name="nonzero"),
                      h.make_node("Cast", ["nz"], ["y"], to=T.FLOAT, name="cast")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [6, 5])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, None])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_chained_runner_hands_the_tail_its_declared_dtypes():
    m = _argmax_gather()
    res = split_model(m, backend="tensorrt-rtx")
    assert res.manifest["cut"] == ["am"] and res.manifest["tail"]["nodes"][0] == "nonzero"
    chain = ChainedRunner(_Int32Prefix(res.prefix), OnnxRuntimeRunner(res.tail), res.manifest)
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    _same(OnnxRuntimeRunner(m).infer({"x": x}), chain.infer({"x": x}))


def test_split_of_a_supported_model_has_no_tail(tmp_path):
    fp = tmp_path / "ok.onnx"
    m = detector()
    onnx.save(split_model(m).prefix, str(fp))  # the prefix alone is supported
    res = split_model(fp)
    assert res.supported and res.tail is None and res.manifest["tail"] is None
    paths = res.save(tmp_path / "s")
    assert "tail" not in paths
    chain = ChainedRunner.from_folder(tmp_path / "s")
    feed = _feeds(1)[0]
    _same(OnnxRuntimeRunner(str(fp)).infer(feed), chain.infer(feed))


def test_split_refuses_when_nothing_is_left_for_the_engine():
    g = h.make_graph([h.make_node("NonZero", ["x"], ["y"], name="first")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4])],
                     [h.make_tensor_value_info("y", T.INT64, [1, None])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with pytest.raises(WorkbenchError, match="nothing of the model is left") as e:
        split_model(m)
    assert e.value.node == "first"


def test_split_is_offered_only_where_onnxruntime_can_run_the_tail(det_path):
    rep = check(str(det_path), backend="tensorrt-rtx")
    props = [p for p in propose(rep, str(det_path)) if p.recipe == "split"]
    assert len(props) == 1 and not props[0].auto and props[0].node == "/post/nonzero"
    assert "3 node(s) after it" in props[0].reason
    fake = check(str(POLY / "fake_op_model.onnx"), backend="tensorrt-rtx")
    assert not [p for p in propose(fake, str(POLY / "fake_op_model.onnx")) if p.recipe == "split"]
    from workbench.surgery.changes import apply_recipe

    with pytest.raises(WorkbenchError, match="run fix --split with -o a folder"):
        apply_recipe(str(det_path), "split")


def test_read_manifest_errors_are_one_line(tmp_path):
    with pytest.raises(WorkbenchError, match="split manifest not found"):
        read_manifest(tmp_path)
    (tmp_path / "split.json").write_text("{}")
    with pytest.raises(WorkbenchError, match="has no 'inputs'"):
        read_manifest(tmp_path)
