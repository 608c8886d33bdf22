"""The first-divergence finding judged by the outputs' rule and worded by what it means, and the
candidate's runner named in users' terms (notebooks/07_precision_loss.ipynb's panel cell)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from conftest import SAMPLES
from workbench import compare
from workbench.precision.transform import convert

OVERFLOW = SAMPLES / "fp16_overflow.onnx"
CHAIN = ["/scale/Mul", "/norm/Mul", "/norm/Div", "/norm/ReduceSum", "/norm/Sqrt", "/norm/Add"]


@pytest.fixture(scope="module")
def notebook_case():
    """The notebook's panel cell: the model with the searched chain kept in FP32, its inputs."""
    feeds = [{"input": np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)}]
    fixed = convert(OVERFLOW, "fp16", exclude_nodes=CHAIN, measure=False).proto
    return fixed, feeds, compare.layerwise(OVERFLOW, fixed, feeds)


def test_outputs_pass_and_first_divergence_is_information(notebook_case):
    fixed, feeds, rep = notebook_case
    assert rep.outputs_pass and (rep.atol, rep.rtol) == (1e-2, 1e-2)  # fp16's defaults
    fd = rep.first_divergence
    assert fd is not None and fd.tensor == "/proj/MatMul_output_0" and not fd.passed
    found = [f for f in rep.findings if f.code == "first-divergence"]
    assert len(found) == 1
    f = found[0]
    assert f.severity == "info"  # not a warning beside "outputs PASS"
    assert f.message.startswith("outputs within budget (default per output kind, FP16 "
                                "budgets); the first intermediate tensor beyond atol/rtol is "
                                "'/proj/MatMul_output_0' from node '/proj/MatMul' (MatMul): ")
    assert "where error starts, should it grow" in f.message
    # its relative figure is below rtol: the message names what IS beyond tolerance
    assert fd.rel < rep.rtol and 0 < fd.mismatches < fd.size
    assert f"{fd.mismatches} of {fd.size} element(s) differ by more than atol 0.01 and rtol " \
           "0.01 x |reference| (the elementwise rule)" in f.message
    assert f"relative error {fd.rel:.3g} of the tensor's largest |value| {fd.scale:.3g}" \
        in f.message
    assert "first tensor beyond tolerance" not in f.message


def test_beyond_tolerance_is_the_outputs_rule_counted_independently(notebook_case):
    """The element count the finding names, recomputed with numpy from both runs (onnxruntime
    FP32 and the emulated FP16 candidate), at the tolerance the outputs were judged by."""
    fixed, feeds, rep = notebook_case
    fd = rep.first_divergence
    ref = compare.run_all(onnx.load(str(OVERFLOW)), feeds)[0][fd.tensor].astype(np.float64)
    got = compare.run_all(fixed, feeds, "emulate")[0][fd.tensor].astype(np.float64)
    d = np.abs(ref - got)
    beyond = int(np.count_nonzero((d > rep.atol) & (d > rep.rtol * np.abs(ref))))
    assert beyond == fd.mismatches > 0
    assert math.isclose(fd.max_abs, d.max(), rel_tol=1e-5)
    assert math.isclose(fd.rel, d.max() / np.abs(ref).max(), rel_tol=1e-5)
    # and the outputs passed by that same rule
    out = rep.outputs[0]
    r = compare.run_all(onnx.load(str(OVERFLOW)), feeds)[0][out.tensor].astype(np.float64)
    g = compare.run_all(fixed, feeds, "emulate")[0][out.tensor].astype(np.float64)
    e = np.abs(r - g)
    assert not np.any((e > rep.atol) & (e > rep.rtol * np.abs(r))) and out.passed


def test_failing_outputs_keep_first_divergence_a_warning():
    feeds = [{"input": np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)}]
    rep = compare.layerwise(OVERFLOW, convert(OVERFLOW, "fp16", measure=False).proto, feeds)
    assert not rep.outputs_pass
    f = next(f for f in rep.findings if f.code == "first-divergence")
    assert f.severity == "warning" and f.message.startswith("first tensor beyond tolerance: '")
    assert f.message == (
        "first tensor beyond tolerance: '/proj/MatMul_output_0' from node '/proj/MatMul' "
        "(MatMul): 5 of 512 element(s) differ by more than atol 0.01 and rtol 0.01 x "
        "|reference| (the elementwise rule); max abs error 0.317 = relative "
        "error 0.000354 of the tensor's largest |value| 896")
    # the overflow that makes the outputs fail is the error
    assert [(g.severity, g.nodes[0]) for g in rep.findings if g.code == "precision-loss"] == \
        [("error", "/scale/Mul")]


def test_beyond_text_names_non_finite_values():
    t = compare.compare_tensor("x", np.array([1.0, 2.0], np.float32),
                               np.array([np.inf, np.nan], np.float32), 1e-2, 1e-2)
    assert compare.beyond_text(t, 1e-2, 1e-2) == \
        "the candidate holds 1 NaN, 1 inf where the reference is finite"


def test_candidate_runner_in_users_terms(notebook_case):
    _, _, rep = notebook_case
    assert rep.candidate_runner == "emulate"
    assert rep.candidate_words == ("FP16 emulated on onnxruntime CPU (values rounded to FP16 as "
                                   "stored, FP32 arithmetic)")
    assert compare.candidate_words("reference", "fp16") == \
        "FP16 arithmetic on onnx's reference evaluator (CPU)"
    assert compare.candidate_words("onnxruntime", "int8") == "INT8 (Q/DQ) on onnxruntime CPU"
    assert compare.candidate_words("tensorrt-fp16", "fp16") == "the TensorRT FP16 engine on the GPU"
    assert compare.candidate_words("trt-runner-N0", "fp16") == "FP16, run by 'trt-runner-N0'"


def test_panel_status_and_findings_read_consistently(notebook_case):
    from widgets.compare import ComparePanel

    fixed, feeds, _ = notebook_case
    p = ComparePanel(OVERFLOW, fixed, run=False)
    rep = compare.layerwise(OVERFLOW, fixed, feeds)
    p.show(rep)
    assert "outputs PASS" in p.status.value
    assert "candidate: FP16 emulated on onnxruntime CPU" in p.status.value
    assert "run by" not in p.status.value
    html = p.findings_html.value
    assert "first-divergence" in html and "outputs within budget" in html
    row = html[html.index("first-divergence") - 200:html.index("first-divergence")]
    assert ">info<" in row and ">warning<" not in row
    # the worst-tensor table counts the elements beyond tolerance beside the green rel
    fd = rep.first_divergence
    assert "beyond tol" in p.table.value
    assert f">{fd.mismatches}</td></tr>" in p.table.value  # (in the error colour)


def test_with_outputs_within_tolerance_no_finding_says_to_keep_a_node():
    """compare printed outputs PASS beside 'WARNING precision-loss ... keep it in higher
    precision', while the FP32-node search said 0 nodes are needed."""
    q = convert(SAMPLES / "resnet_tiny.onnx", "int8", measure=False,
                calibration=str(SAMPLES / "calib" / "resnet_tiny.npz")).proto
    rep = compare.layerwise(SAMPLES / "resnet_tiny.onnx", q,
                            calibration=str(SAMPLES / "calib" / "resnet_tiny.npz"),
                            atol=0.5, rtol=0.05)  # the outputs meet it; a node adds > rtol
    assert rep.outputs_pass
    loss = [f for f in rep.findings if f.code == "precision-loss"]
    assert loss and all(f.severity == "info" and "nothing needs to stay" in f.message and
               f.hint.startswith("only if you need tighter outputs") for f in loss)
