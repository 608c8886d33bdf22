"""NMS: NonMaxSuppression (and torchvision's batched_nms trick) is recognised and TensorRT's
EfficientNMS_TRT plugin offered with its differences stated; the split stays the exact way."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from quant_models import detector
from workbench.runtime.chain import ChainedRunner
from workbench.runtime.runners import OnnxRuntimeRunner
from workbench.support import codes
from workbench.support.checker import check
from workbench.surgery.changes import apply_recipe
from workbench.surgery.propose import propose
from workbench.surgery.recipes import get_recipe
from workbench.surgery.recipes.nms import NMS_CODE, find_nms, offers
from workbench.surgery.split import split_model

STATED = ("max_output_boxes=10 per image over all classes", "up to 10 per class",
          "zero-padded past num_detections", "instead of selected_indices",
          "onnxruntime keeps score > threshold", "class_agnostic=0", "box_coding=0",
          "TensorRT-RTX ships no plugins")


def test_nms_is_found_and_offered_with_its_differences():
    m = detector(nms=True)
    (p,) = find_nms(m)
    assert (p.node, p.kind, p.max_per_class, p.iou, p.classes, p.downstream) == \
        ("/post/nms", "onnx", 10, 0.5, 1, 2)
    assert p.score_threshold == pytest.approx(0.3)
    (o,) = offers(m)
    assert o.recipe == "efficient_nms" and not o.auto and o.code == NMS_CODE
    assert o.params == {"node": "/post/nms", "max_output_boxes": 10}
    for words in STATED:
        assert words in o.reason, words
    assert offers(detector()) == []  # no NMS, no offer


def test_efficient_nms_rewrites_nms_and_its_readers_into_the_plugin(tmp_path):
    m = detector(nms=True)
    ch = apply_recipe(m, "efficient_nms", {"node": "/post/nms", "max_output_boxes": 20})
    assert ch.kept and ch.preserves_semantics is False
    out = ch.proto
    plugin = [n for n in out.graph.node if n.op_type == "EfficientNMS_TRT"]
    assert len(plugin) == 1 and plugin[0].domain == "trt.plugins"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in plugin[0].attribute}
    assert attrs["max_output_boxes"] == 20 and attrs["iou_threshold"] == pytest.approx(0.5)
    assert attrs["score_threshold"] == pytest.approx(0.3) and attrs["box_coding"] == 0
    assert attrs["class_agnostic"] == 0 and attrs["background_class"] == -1
    assert {"NonMaxSuppression", "Gather"}.isdisjoint({n.op_type for n in out.graph.node})
    assert [o.name for o in out.graph.output] == ["scores", "num_detections", "detection_boxes",
                                                  "detection_scores", "detection_classes"]
    dims = [[d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim]
            for o in out.graph.output[1:]]
    assert dims == [["B", 1], ["B", 20, 4], ["B", 20], ["B", 20]]
    # TensorRT-RTX has no plugin library: its parser names the plugin node as missing
    path = tmp_path / "enms.onnx"
    onnx.save(out, str(path))
    rep = check(str(path), backend="tensorrt-rtx")
    assert [u["op"] for u in rep.unsupported] == ["EfficientNMS_TRT"]
    assert rep.unsupported[0]["code"] == codes.PLUGIN_MISSING


def _batched_nms():
    """torchvision.ops.batched_nms as exported: boxes + class * (max(boxes) + 1), then NMS."""
    nodes = [h.make_node("ReduceMax", ["boxes"], ["mx"], keepdims=0, name="max_coordinate"),
             h.make_node("Add", ["mx", "one"], ["mx1"], name="plus_one"),
             h.make_node("Cast", ["idxs"], ["idxf"], to=T.FLOAT, name="cast_idxs"),
             h.make_node("Mul", ["idxf", "mx1"], ["off"], name="offsets"),
             h.make_node("Unsqueeze", ["off", "ax1"], ["off2"], name="offsets_col"),
             h.make_node("Add", ["boxes", "off2"], ["shifted"], name="boxes_for_nms"),
             h.make_node("Unsqueeze", ["shifted", "ax0"], ["b3"], name="b3"),
             h.make_node("Reshape", ["scores", "sshape"], ["s3"], name="s3"),
             h.make_node("NonMaxSuppression", ["b3", "s3", "maxk", "iou"], ["sel"], name="nms"),
             h.make_node("Gather", ["sel", "two"], ["keep"], axis=1, name="keep")]
    inits = [nh.from_array(np.float32(1), "one"), nh.from_array(np.array([1], np.int64), "ax1"),
             nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.array([1, 1, 16], np.int64), "sshape"),
             nh.from_array(np.array([100], np.int64), "maxk"),
             nh.from_array(np.array([0.5], np.float32), "iou"),
             nh.from_array(np.int64(2), "two")]
    g = h.make_graph(nodes, "batched", [h.make_tensor_value_info("boxes", T.FLOAT, [16, 4]),
                                        h.make_tensor_value_info("scores", T.FLOAT, [16]),
                                        h.make_tensor_value_info("idxs", T.INT64, [16])],
                     [h.make_tensor_value_info("keep", T.INT64, [None])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def test_batched_nms_is_recognised_offered_and_not_applied():
    m = _batched_nms()
    (p,) = find_nms(m)
    assert p.kind == "batched" and p.node == "nms"
    (o,) = offers(m)
    assert "torchvision's batched_nms" in o.reason and "offered, not applied" in o.reason
    pre = get_recipe("efficient_nms").precondition(m)
    assert not pre.applies and pre.nodes == ["nms"]
    plain = find_nms(detector(nms=True))[0]
    assert plain.kind == "onnx"  # no class offsets there


def test_refusal_after_nms_offers_plugin_and_split_stays_exact(tmp_path):
    """NonZero after the NMS: the plugin is offered (manual) beside the split, and the split
    (with the real RTX build, which has no runner for the NMS layer at sm89) is exact."""
    path = tmp_path / "det_nms.onnx"
    onnx.save(detector(nms=True, nonzero_after=True), str(path))
    rep = check(str(path), backend="tensorrt-rtx")
    assert rep.unsupported_nodes == ["/post/nonzero"]
    props = {(p.recipe, p.node, p.auto) for p in propose(rep, str(path))}
    assert {("efficient_nms", "/post/nms", False), ("split", "/post/nonzero", False)} <= props
    res = split_model(path, build=True)
    assert res.supported and res.report.build["built"]
    assert [r["refused"] for r in res.rounds] == [["/post/nonzero"], ["/post/nms"]]
    assert res.manifest["tail"]["nodes"][0] == "/post/nms"
    assert [o["recipe"] for o in res.manifest["options"]] == ["efficient_nms"]
    assert res.verification.status == "equivalent"
    chain = ChainedRunner(OnnxRuntimeRunner(res.prefix), OnnxRuntimeRunner(res.tail),
                          res.manifest)
    x = {"images": np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    want, got = OnnxRuntimeRunner(str(path)).infer(x), chain.infer(x)
    for k in want:
        assert np.array_equal(want[k], got[k]), k


def test_cli_says_an_unverified_rewrite_once_without_a_missing_figure(tmp_path):
    """efficient_nms changes the outputs, so it is kept unverified: the log said why twice and
    the summary line ended in 'max abs diff None'."""
    import subprocess

    p = tmp_path / "det.onnx"
    onnx.save(detector(nms=True), str(p))
    r = subprocess.run(["workbench", "fix", str(p), "--recipe", "efficient_nms", "-o",
                        str(tmp_path / "e.onnx")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "None" not in out and out.count("the outputs differ") == 1, out
    assert f"wrote {tmp_path / 'e.onnx'}: 1 change(s) kept, 0 not kept; end-to-end unverified\n" \
        in r.stdout
