"""The verdict by metric (`workbench.runtime.verdict`): healthy FP16 logits of a ResNet-50's scale (~100)
pass `compare` and `matrix` by default, though the elementwise atol/rtol rule fails them on
near-zero elements; a candidate whose top-1 classes change fails; a user's metric decides."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.runtime import verdict
from workbench.runtime.comparison import compare_outputs
from workbench.core.errors import WorkbenchError

CLASSES, FEATURES, SAMPLES = 1000, 64, 16


def _logits_model(path, weights, noise=None, fp16_out=False):
    """x [N, 64] -> MatMul -> logits [N, 1000] (scale ~100); `noise` added as a constant and a
    round trip through float16 make an FP16-like candidate (its graph computes in FP16)."""
    inits = [numpy_helper.from_array(weights.astype(np.float32), "W")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="fc")]
    last = "mm"
    if noise is not None:
        inits.append(numpy_helper.from_array(noise.astype(np.float32), "noise"))
        nodes.append(helper.make_node("Add", [last, "noise"], ["noisy"], name="err"))
        last = "noisy"
    if fp16_out:
        nodes += [helper.make_node("Cast", [last, ], ["h"], to=TensorProto.FLOAT16, name="to16"),
                  helper.make_node("Cast", ["h"], ["back"], to=TensorProto.FLOAT, name="to32")]
        last = "back"
    nodes.append(helper.make_node("Identity", [last], ["logits"], name="out"))
    g = helper.make_graph(nodes, "logits", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", FEATURES])], [helper.make_tensor_value_info(
            "logits", TensorProto.FLOAT, ["N", CLASSES])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(reference, healthy FP16-like candidate, broken candidate, inputs .npz)."""
    d = tmp_path_factory.mktemp("verdict")
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1.6, (FEATURES, CLASSES))
    x = rng.normal(0, 1, (SAMPLES, FEATURES)).astype(np.float32)
    # FP16-sized error as measured on the H100 (max abs 0.0954 on logits of scale ~112):
    # noise up to 0.06 plus float16 rounding of values ~100 (spacing 0.0625)
    noise = rng.uniform(-0.06, 0.06, (1, CLASSES))
    ref = _logits_model(d / "ref.onnx", w)
    good = _logits_model(d / "fp16.onnx", w, noise, fp16_out=True)
    broken = _logits_model(d / "broken.onnx", np.roll(w, 7, axis=1), None, fp16_out=True)
    np.savez(d / "x.npz", x=x)
    return ref, good, broken, str(d / "x.npz"), x


def _run(model, x):
    import onnxruntime as ort

    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return [{"logits": s.run(None, {"x": x[i:i + 1]})[0]} for i in range(len(x))]


def test_fp16_sized_logit_error_fails_elementwise_but_passes_the_default_verdict(pair):
    ref, good, _, _, x = pair
    r, g = _run(ref, x), _run(good, x)
    c = compare_outputs(r, g, 1e-2, 1e-2)
    t = c.outputs["logits"]
    assert 50 < t.scale < 200 and 0.03 < t.max_abs < 0.2 and t.rel < 2e-3  # as on the GPU
    assert not c.passed and t.mismatches > 0  # the elementwise rule: near-zero logits fail
    v = verdict.judge(c, "fp16", ref=r, got=g)
    o = v.outputs["logits"]
    assert v.passed and o.kind == "logits" and o.figures["top1_decisive_flips"] == 0.0
    assert o.elementwise is False and not v.elementwise_passed  # still reported beside it
    assert "top-1" in o.words and "rel" in o.words


def test_changed_top1_classes_fail_every_verdict(pair):
    ref, _, broken, _, x = pair
    r, g = _run(ref, x), _run(broken, x)
    c = compare_outputs(r, g, 1e-2, 1e-2)
    v = verdict.judge(c, "fp16", ref=r, got=g)
    assert not v.passed and v.outputs["logits"].figures["top1_decisive_flips"] > 0.5
    assert not verdict.judge(c, "fp16", metric="top1", budget="1%", ref=r, got=g).passed
    # the same candidate measured by rel alone at a budget it meets would pass: the metric
    # named decides
    assert verdict.judge(c, "fp16", metric="rel", budget=10.0, ref=r, got=g).passed


def test_a_callable_metric_decides_and_module_func_loads():
    ref = [{"y": np.array([[1.0, 2.0, 3.0]], np.float32)}]
    got = [{"y": np.array([[1.0, 2.5, 3.0]], np.float32)}]
    c = compare_outputs(ref, got, 1e-3, 1e-3)
    seen = []

    def my_metric(r, g):
        seen.append((sorted(r), r["y"].shape))
        return float(np.abs(r["y"] - g["y"]).sum())

    assert verdict.judge(c, metric=my_metric, budget=0.6, ref=ref, got=got).passed
    assert not verdict.judge(c, metric=my_metric, budget=0.4, ref=ref, got=got).passed
    assert seen[0] == (["y"], (1, 3))
    f = verdict.resolve_metric("numpy:linalg.norm".replace("linalg.norm", "mean"))
    assert f is np.mean
    with pytest.raises(WorkbenchError, match="--metric"):
        verdict.resolve_metric("no_such_module_xyz:f")
    with pytest.raises(WorkbenchError, match="unknown metric"):
        verdict.resolve_metric("accuracy")
    assert verdict.parse_budget("1%") == pytest.approx(0.01)
    with pytest.raises(WorkbenchError, match="--budget"):
        verdict.parse_budget("one")


@pytest.mark.parametrize("name,shape,kind", [
    ("logits", [8, 1000], "logits"), ("pooler_output", [8, 768], "embedding"),
    ("last_hidden_state", [8, 128, 768], "embedding"), ("boxes", [8, 100, 4], "boxes"),
    ("masks", [8, 1, 64, 64], "mask"), ("out", [8, 21, 64, 64], "logits"),
    ("y", [8], "tensor")])
def test_output_kinds(name, shape, kind):
    assert verdict.output_kind(name, shape) == kind


def test_embeddings_judged_by_cosine_boxes_by_iou():
    rng = np.random.default_rng(1)
    e = rng.normal(size=(4, 256)).astype(np.float32)
    e[:, 0] = 0.0
    close = e + rng.normal(0, 1e-3, e.shape).astype(np.float32)
    r, g = [{"pooler_output": e}], [{"pooler_output": close}]
    c = compare_outputs(r, g, 1e-4, 1e-4)
    v = verdict.judge(c, "fp16", ref=r, got=g)
    assert not c.passed and v.passed and v.outputs["pooler_output"].metric == "cosine"
    boxes = np.array([[[10, 10, 50, 50], [0, 0, 20, 40]]], np.float32)
    moved = boxes + np.array([[[15, 0, 15, 0], [0, 0, 0, 0]]], np.float32)
    r, g = [{"boxes": boxes}], [{"boxes": moved}]
    v = verdict.judge(compare_outputs(r, g, 1e-2, 1e-2), "fp16", ref=r, got=g)
    assert not v.passed and v.outputs["boxes"].metric == "box IoU"
    assert 0.6 < v.outputs["boxes"].figures["iou"] < 0.9


def _cli(args, capsys):
    from workbench.cli import main

    rc = main(args)
    return rc, capsys.readouterr().out


def test_compare_cli_passes_fp16_sized_logits_and_fails_changed_classes(pair, capsys):
    ref, good, broken, data, _ = pair
    rc, out = _cli(["compare", ref, good, "--inputs", data, "--samples", "16", "--json"],
                   capsys)
    d = json.loads(out)
    assert rc == 0 and d["verdict"]["passed"] and not d["verdict"]["elementwise_passed"]
    assert d["precision"] == "fp16"
    rc, out = _cli(["compare", ref, good, "--inputs", data, "--samples", "16"], capsys)
    line = next(ln for ln in out.splitlines() if ln.startswith("outputs: "))
    assert rc == 0 and "PASS" in line and "beyond atol/rtol" in line and "FAIL" not in line
    rc, out = _cli(["compare", ref, broken, "--inputs", data, "--samples", "16"], capsys)
    assert rc == 1 and "FAIL" in out
    # explicit tolerances ask for the elementwise rule; --metric names another
    rc, _ = _cli(["compare", ref, good, "--inputs", data, "--atol", "1e-2", "--rtol", "1e-2"],
                 capsys)
    assert rc == 1
    rc, out = _cli(["compare", ref, good, "--inputs", data, "--metric", "cosine", "--budget",
                    "1e-4", "--json"], capsys)
    v = json.loads(out)["verdict"]
    assert rc == 0 and v["rule"].startswith("metric cosine")
    assert 0 < v["outputs"]["logits"]["loss"] < 1e-4


def test_matrix_accuracy_passes_fp16_sized_logits(pair):
    from workbench.matrix.accuracy import measure

    ref, good, broken, _, x = pair
    feeds = [{"x": x}]
    acc = measure(ref, good, "fp16", feeds)
    assert acc["passed"] is True and acc["elementwise_passed"] is False
    assert 0 < acc["error_rel"] < 2e-3 and "top-1" in acc["verdict"]
    bad = measure(ref, broken, "fp16", feeds)
    assert bad["passed"] is False


def test_a_missing_output_fails_any_metric_with_its_reason():
    ref = [{"y": np.ones((1, 3), np.float32), "z": np.ones((1, 3), np.float32)}]
    got = [{"y": np.ones((1, 3), np.float32)}]
    c = compare_outputs(ref, got, 1e-3, 1e-3)
    for m in (None, "top1", "cosine", lambda r, g: 0.0):
        v = verdict.judge(c, "fp16", metric=m, ref=ref, got=got)
        assert not v.passed and "missing" in v.reason
