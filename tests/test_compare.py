"""Layer-wise comparison against onnxruntime FP32 and the search for nodes to keep in FP32."""
from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import onnx
import pytest

from conftest import SAMPLES
from workbench import compare
from workbench.equivalence import make_inputs
from workbench.precision.transform import convert

OVERFLOW = SAMPLES / "fp16_overflow.onnx"
# sample_models/README.md: the nodes from /scale/Mul through /norm/Div must stay in FP32
OVERFLOW_CHAIN = {"/scale/Mul", "/norm/Mul", "/norm/ReduceSum", "/norm/Sqrt", "/norm/Add",
                  "/norm/Div"}


@pytest.fixture(scope="module")
def overflow_feeds():
    return [make_inputs(onnx.load(str(OVERFLOW)), seed=1)]


def test_fp16_overflow_is_located_at_the_node_that_overflows(overflow_feeds):
    fp16 = convert(OVERFLOW, "fp16").proto
    rep = compare.layerwise(OVERFLOW, fp16, overflow_feeds, atol=1e-2, rtol=1e-2)
    assert rep.candidate_runner == "reference"  # float16 arithmetic, not ORT's FP32 upcast
    assert not rep.outputs_pass
    culprit = rep.culprits()[0]
    assert culprit.node == "/scale/Mul" and not culprit.finite and math.isinf(culprit.added)
    # downstream nodes only pass the infinity on: they are not blamed
    assert [t.node for t in rep.culprits()] == ["/scale/Mul"]
    d = rep.to_dict()
    json.dumps(d)  # JSON-safe (inf written as a string)
    assert d["suggested_exclusions"] == ["/scale/Mul"]


def test_find_exclusions_recovers_the_overflowing_chain(overflow_feeds):
    search = compare.find_exclusions(OVERFLOW, "fp16", feeds=overflow_feeds)
    assert search.passed
    assert set(search.excluded) == OVERFLOW_CHAIN
    assert search.rounds[0]["worst_output_rel"] == "inf"
    fixed = convert(OVERFLOW, "fp16", exclude_nodes=search.excluded).proto
    rep = compare.layerwise(OVERFLOW, fixed, overflow_feeds, atol=1e-2, rtol=1e-2)
    assert rep.outputs_pass and all(t.finite for t in rep.outputs)
    print("worst output rel error after exclusions:", max(t.rel for t in rep.outputs))
    assert max(t.rel for t in rep.outputs) < 1e-2


def test_identical_models_compare_exactly():
    feeds = [make_inputs(onnx.load(str(SAMPLES / "resnet_tiny.onnx")), seed=0)]
    rep = compare.layerwise(SAMPLES / "resnet_tiny.onnx", SAMPLES / "resnet_tiny.onnx", feeds)
    assert rep.outputs_pass and rep.first_divergence is None and not rep.culprits()
    assert len(rep.tensors) > 20 and all(t.max_abs == 0 for t in rep.tensors)


def test_int8_layerwise_on_calibration_data():
    calib = SAMPLES / "calib" / "resnet_tiny.npz"
    int8 = convert(SAMPLES / "resnet_tiny.onnx", "int8", calibration=calib,
                   calibrate_method="minmax").proto
    rep = compare.layerwise(SAMPLES / "resnet_tiny.onnx", int8, calibration=calib,
                            atol=1e-2, rtol=1e-2)
    assert rep.candidate_runner == "onnxruntime" and rep.samples == 8
    logits = rep.outputs[0]
    print(f"INT8 logits: max abs {logits.max_abs:.3g} rel {logits.rel:.3g} cos {logits.cosine:.5f}")
    assert 0 < logits.max_abs and logits.cosine > 0.99
    assert rep.first_divergence is not None  # INT8 is never exact
    conv_errors = [t for t in rep.tensors if t.op == "Conv"]
    assert conv_errors and all(t.max_abs > 0 for t in conv_errors)


def test_bert_fp16_mask_saturation_is_not_blamed():
    calib = SAMPLES / "calib" / "bert_tiny.npz"
    fp16 = convert(SAMPLES / "bert_tiny.onnx", "fp16").proto
    rep = compare.layerwise(SAMPLES / "bert_tiny.onnx", fp16, calibration=calib,
                            atol=1e-2, rtol=1e-2)
    assert rep.outputs_pass
    assert not any(t.op == "Constant" for t in rep.culprits())
    mask = [t for t in rep.tensors if t.tensor == "/encoder/Mul_output_0"]
    assert mask and mask[0].passed


def test_run_results_are_polygraphy_compatible(tmp_path):
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    runs = {"onnxruntime-fp32": [{"y": np.arange(6, dtype=np.float32).reshape(2, 3)}],
            "candidate": [{"y": np.ones((2, 3), np.float16)}]}
    path = compare.save_run_results(tmp_path / "run.json", runs)
    loaded = RunResults.load(str(path))
    assert list(loaded.keys()) == ["onnxruntime-fp32", "candidate"]
    assert np.array_equal(np.asarray(loaded["onnxruntime-fp32"][0]["y"]), runs["onnxruntime-fp32"][0]["y"])
    # and the other way round: a file Polygraphy wrote loads without pickle
    theirs = RunResults()
    theirs.append(("trt-runner", [IterationResult({"out": np.full(4, 2.5, np.float32)},
                                                  runner_name="trt-runner")]))
    theirs.save(str(tmp_path / "theirs.json"))
    back = compare.load_run_results(tmp_path / "theirs.json")
    assert np.array_equal(back["trt-runner"][0]["out"], np.full(4, 2.5, np.float32))


def test_run_results_bad_file_is_a_clear_error(tmp_path):
    from workbench.errors import WorkbenchError

    bad = tmp_path / "bad.json"
    bad.write_text('{"lst": [["x", [{"outputs": {"y": {"array": "!!"}}}]]]}')
    with pytest.raises(WorkbenchError, match="bad.json.*not a RunResults JSON"):
        compare.load_run_results(bad)


def _cli(*args):
    return subprocess.run(["workbench", *args], capture_output=True, text=True, timeout=300)


def test_cli_compare_and_exit_codes(tmp_path):
    fp16 = tmp_path / "o16.onnx"
    onnx.save(convert(OVERFLOW, "fp16").proto, str(fp16))
    np.savez(tmp_path / "in.npz", input=np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32))
    r = _cli("compare", str(OVERFLOW), str(fp16), "--inputs", str(tmp_path / "in.npz"), "--json",
             "--save-results", str(tmp_path / "run.json"))
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    assert d["outputs_pass"] is False and d["culprits"][0]["node"] == "/scale/Mul"
    saved = compare.load_run_results(tmp_path / "run.json")
    assert list(saved) == ["onnxruntime-fp32", "reference-candidate"]
    ref_out = saved["onnxruntime-fp32"][0]["output"]
    assert ref_out.shape == (4, 8) and np.isfinite(ref_out).all()
    assert not np.isfinite(saved["reference-candidate"][0]["output"]).all()  # FP16 overflowed
    r = _cli("compare", str(OVERFLOW), "--to", "fp16", "--inputs", str(tmp_path / "in.npz"), "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["excluded"]) == OVERFLOW_CHAIN
    for bad in (["compare", str(OVERFLOW), str(fp16)],            # no inputs, no --allow-random
                ["compare", str(OVERFLOW), str(fp16), "--to", "fp16", "--allow-random"],
                ["compare", str(tmp_path / "missing.onnx"), "--to", "fp16", "--allow-random"]):
        r = _cli(*bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr
