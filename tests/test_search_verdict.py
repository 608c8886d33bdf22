"""The FP32-node search (`compare --to`, `find_exclusions`) and the bisection (`bisect_exclusions`
with `onnx_evaluator`) stop by the verdict `compare REF CAND` gives (`workbench.runtime.verdict`),
not by the elementwise atol/rtol rule: FP16 logits of scale ~100 whose near-zero elements fail
atol pass with nothing kept in FP32, as `compare` on the converted model says; --atol/--rtol
given still ask for the elementwise rule; --metric/--budget (a callable too) judge the search."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import SAMPLES
from workbench import compare
from workbench.compare.bisect import bisect_exclusions, onnx_evaluator
from workbench.precision.transform import convert
from workbench.runtime.equivalence import make_inputs

OVERFLOW = SAMPLES / "fp16_overflow.onnx"
OVERFLOW_CHAIN = {"/scale/Mul", "/norm/Mul", "/norm/ReduceSum", "/norm/Sqrt", "/norm/Add",
                  "/norm/Div"}  # (sample_models/README.md: the planted nodes)
CLASSIFIER = ["/fc1/MatMul", "/relu", "/fc2/MatMul"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """(model path, inputs .npz, feeds): x [8, 64] -> MatMul 512 -> Relu -> MatMul -> logits
    [8, 100] of scale ~117. In FP16 the hidden values (~200, stored with a spacing of 0.125)
    make an error of ~0.05 on every logit: 4.6e-4 of the scale, the same classes, yet beyond
    atol 0.01 on the logits near zero."""
    d = tmp_path_factory.mktemp("search_verdict")
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 8.0, (64, 512)).astype(np.float32)
    w2 = rng.normal(0, 0.03, (512, 100)).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "W1"], ["a"], name="/fc1/MatMul"),
                      h.make_node("Relu", ["a"], ["r"], name="/relu"),
                      h.make_node("MatMul", ["r", "W2"], ["logits"], name="/fc2/MatMul")],
                     "classifier", [h.make_tensor_value_info("x", T.FLOAT, ["N", 64])],
                     [h.make_tensor_value_info("logits", T.FLOAT, ["N", 100])],
                     [nh.from_array(w1, "W1"), nh.from_array(w2, "W2")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = d / "classifier.onnx"
    onnx.save(m, str(path))
    x = rng.normal(0, 1, (8, 64)).astype(np.float32)
    np.savez(d / "x.npz", x=x)
    return str(path), str(d / "x.npz"), [{"x": x}]


def _cli(args, capsys):
    from workbench.cli import main

    rc = main([str(a) for a in args])
    return rc, capsys.readouterr().out


def test_fp16_logits_pass_the_search_by_the_verdict_with_nothing_kept(classifier):
    model, data, _ = classifier
    s = compare.find_exclusions(model, "fp16", calibration=data)
    r0 = s.rounds[0]
    # the verdict passes the logits as converted: the same classes, the error 0.05% of the
    # scale ...
    assert s.passed and s.excluded == [] and len(s.rounds) == 1 and r0["outputs_pass"]
    assert 1e-4 < r0["worst_output_rel"] < 1e-3
    # ... where the elementwise rule fails them near zero (its diagnostic says so)
    assert r0["elementwise_passed"] is False and r0["elements_beyond"] > 0
    v = r0["verdict"]
    assert v["rule"] == s.rule == "default per output kind, FP16 budgets"
    assert v["outputs"]["logits"]["kind"] == "logits" and v["outputs"]["logits"]["passed"]
    assert v["outputs"]["logits"]["figures"]["top1"] == 1.0
    assert "top-1 8/8" in r0["verdict_words"]
    # `compare REF CAND` on the same conversion gives the same verdict
    from workbench.cli.cmd_compare import output_verdict

    rep = compare.layerwise(model, convert(model, "fp16").proto, calibration=data)
    assert not rep.elementwise_pass and output_verdict(rep).passed and rep.outputs_pass
    # ... and its findings say so: information, not a precision-loss error
    assert not [f for f in rep.findings if f.severity == "error"]


def test_explicit_atol_rtol_still_judge_the_search_elementwise(classifier):
    model, data, _ = classifier
    s = compare.find_exclusions(model, "fp16", calibration=data, atol=1e-2, rtol=1e-2)
    assert not s.passed and s.elementwise and s.rule == "elementwise atol 0.01 rtol 0.01"
    assert s.rounds[0]["outputs_pass"] is False
    assert s.rounds[0]["verdict"]["outputs"]["logits"]["metric"] == "elementwise atol/rtol"
    assert "relax the tolerance (atol 0.01, rtol 0.01: --atol/--rtol)" in s.why_stopped()


def test_cli_search_exits_0_and_prints_the_verdict_per_round(classifier, capsys):
    model, data, _ = classifier
    rc, out = _cli(["compare", model, "--to", "fp16", "--inputs", data], capsys)
    assert rc == 0, out
    line = next(ln for ln in out.splitlines() if ln.startswith("round 0:"))
    assert "logits: top-1 8/8" in line and "<= 0.01  PASS" in line
    assert "(elementwise atol/rtol: " in line and "element(s) beyond)" in line
    assert ("fp16: within budget (default per output kind, FP16 budgets) with 0 node(s) "
            "kept in FP32 on 8 sample(s)") in out
    rc, out = _cli(["compare", model, "--to", "fp16", "--inputs", data, "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["passed"] and d["rule"] == "default per output kind, FP16 budgets"
    assert d["rounds"][0]["verdict"]["passed"] is True and d["verdict"]["passed"] is True
    assert d["final"]["outputs_pass"] is False  # (the report's elementwise figure, beside it)
    assert d["rounds"][0]["elementwise_passed"] is False
    # --atol/--rtol given: the elementwise rule, said so, and what to relax names them
    rc, out = _cli(["compare", model, "--to", "fp16", "--inputs", data, "--atol", "0.01",
                    "--rtol", "0.01"], capsys)
    assert rc == 1 and "fp16: NOT within budget (elementwise atol 0.01 rtol 0.01)" in out
    assert "element(s) beyond" not in out.splitlines()[0]  # (its words say the count)
    assert "of 800 beyond atol 0.01 rtol 0.01  FAIL" in out


def test_the_metric_and_budget_judge_the_search(classifier, capsys):
    model, data, _ = classifier
    tight = compare.find_exclusions(model, "fp16", calibration=data, metric="cosine",
                                    budget=1e-9)
    assert not tight.passed and tight.rule == "metric cosine <= 1e-09"
    assert "relax the budget (metric cosine <= 1e-09: --budget)" in tight.why_stopped()
    assert "--atol" not in tight.why_stopped()
    loose = compare.find_exclusions(model, "fp16", calibration=data, metric="cosine",
                                    budget="0.01%")
    assert loose.passed and loose.excluded == [] and loose.rule == "metric cosine <= 0.0001"
    rc, out = _cli(["compare", model, "--to", "fp16", "--inputs", data, "--metric", "cosine",
                    "--budget", "1e-9"], capsys)
    assert rc == 1 and "NOT within budget (metric cosine <= 1e-09)" in out
    assert "--budget), or judge by the metric that matters to you (--metric)" in out


def test_a_cosine_budget_keeps_the_planted_fp16_overflow_in_fp32():
    feeds = [make_inputs(onnx.load(str(OVERFLOW)), seed=1)]
    s = compare.find_exclusions(OVERFLOW, "fp16", feeds=feeds, check_range=False,
                                metric="cosine", budget=1e-3)
    assert s.passed and set(s.excluded) == OVERFLOW_CHAIN
    assert s.rounds[0]["outputs_pass"] is False and s.rounds[0]["worst_output_rel"] == "inf"
    assert s.rounds[-1]["verdict"]["rule"] == "metric cosine <= 0.001"


def test_a_callable_metric_judges_the_search(classifier, tmp_path, monkeypatch, capsys):
    model, data, _ = classifier

    def max_abs(ref, got):
        return max(float(np.abs(ref[k] - got[k]).max()) for k in ref)

    # the largest error is ~0.05 (see the fixture): beyond 0.01, within 0.5
    assert not compare.find_exclusions(model, "fp16", calibration=data, metric=max_abs,
                                       budget=0.01).passed
    ok = compare.find_exclusions(model, "fp16", calibration=data, metric=max_abs, budget=0.5)
    assert ok.passed and ok.rule == "metric max_abs <= 0.5"
    (tmp_path / "my_search_metric.py").write_text(
        "import numpy as np\n\n\ndef max_abs(ref, got):\n"
        "    return max(float(np.abs(ref[k] - got[k]).max()) for k in ref)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for budget, rc_want in (("0.01", 1), ("0.5", 0)):
        rc, out = _cli(["compare", model, "--to", "fp16", "--inputs", data, "--metric",
                        "my_search_metric:max_abs", "--budget", budget], capsys)
        assert rc == rc_want and f"(metric max_abs <= {budget})" in out, out


def test_a_selecting_model_is_judged_by_the_tensors_feeding_its_selection(tmp_path):
    """scores [4, 50] -> TopK: the selected values and indices swap near-tied rows under any
    rounding; the verdict reads the scores feeding TopK as a plain tensor (rel and cosine)."""
    rng = np.random.default_rng(1)
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["scores"], name="/head"),
                      h.make_node("TopK", ["scores", "k"], ["values", "indices"], name="/topk")],
                     "sel", [h.make_tensor_value_info("x", T.FLOAT, [4, 16])],
                     [h.make_tensor_value_info("values", T.FLOAT, [4, 5]),
                      h.make_tensor_value_info("indices", T.INT64, [4, 5])],
                     [nh.from_array(rng.normal(0, 1, (16, 50)).astype(np.float32), "W"),
                      nh.from_array(np.array([5], np.int64), "k")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "sel.onnx"
    onnx.save(m, str(path))
    x = rng.normal(0, 1, (4, 16)).astype(np.float32)
    s = compare.find_exclusions(str(path), "fp16", feeds=[{"x": x}])
    v = s.rounds[0]["verdict"]
    assert s.passed and s.excluded == [] and set(s.selected) == {"values", "indices"}
    assert set(v["outputs"]) == {"scores"} and v["outputs"]["scores"]["kind"] == "tensor"
    assert v["outputs"]["scores"]["metric"] == "rel and cosine"
    assert "the tensors feeding the selection: rel and cosine at FP16 budgets" in v["rule"]


def test_bisection_on_the_cpu_passes_by_the_verdict(classifier):
    model, _, feeds = classifier
    ev = onnx_evaluator(model, feeds, "fp16")
    first = ev([])
    assert first.passed and not first.comparison.passed  # the verdict, not the elementwise rule
    res = bisect_exclusions(CLASSIFIER, ev)
    assert res.passed and res.excluded == [] and "with nothing in FP32" in res.message
    e0 = res.evaluations[0]
    assert e0["passed"] is True and e0["elementwise_passed"] is False
    assert e0["rule"] == "default per output kind, FP16 budgets" and "top-1 8/8" in e0["verdict"]
    # atol/rtol given: the elementwise rule judges the same bisection, which keeps nodes
    strict = bisect_exclusions(CLASSIFIER, onnx_evaluator(model, feeds, "fp16", atol=1e-2,
                                                          rtol=1e-2))
    assert strict.evaluations[0]["passed"] is False and strict.excluded
    # a metric and budget: the cosine of FP16 here is ~1 - 2e-7
    tight = onnx_evaluator(model, feeds, "fp16", metric="cosine", budget=1e-9)
    assert not tight([]).passed and tight([]).verdict.rule == "metric cosine <= 1e-09"


def test_a_round_line_says_the_failing_outputs_first_and_counts_the_rest():
    """A decoder judges dozens of outputs: the round's line names the failing ones first, at
    most three, and counts the others."""
    from workbench.cli.cmd_compare import _round_line

    outs = {f"present.{i}.key": {"passed": True, "words": f"cosine ok {i}"} for i in range(5)}
    outs["logits"] = {"passed": False, "words": "top-1 6/8"}
    line = _round_line({"round": 2, "excluded": ["a"], "worst_output_rel": 0.5,
                        "outputs_pass": False, "elementwise_passed": False,
                        "elements_beyond": 7,
                        "verdict": {"passed": False, "rule": "default", "outputs": outs}})
    assert line.startswith("round 2: 1 node(s) in FP32, worst output relative error 0.5; "
                           "logits: top-1 6/8; present.0.key: cosine ok 0; ")
    assert "3 more output(s) judged  FAIL (elementwise atol/rtol: 7 element(s) beyond)" in line


def test_a_metric_tighter_than_atol_rtol_still_finds_nodes_to_keep():
    """With the planted chain kept, FP16 outputs are within atol/rtol everywhere, so no tensor
    is beyond them and the layer-wise compare names no culprit by that rule; a cosine budget
    tighter than what FP16 reaches still fails. The search then keeps the nodes adding the
    most error next, instead of stopping with nothing to blame."""
    feeds = [{"input": np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)}]
    base = compare.find_exclusions(OVERFLOW, "fp16", feeds=feeds, check_range=False,
                                   start=sorted(OVERFLOW_CHAIN), max_rounds=0)
    r0 = base.rounds[0]
    assert base.passed and r0["elementwise_passed"]  # (the default verdict: within budget)
    loss = 1 - r0["verdict"]["outputs"]["output"]["figures"]["cosine"]
    assert loss > 0  # FP16 is not bit-exact: a budget below it fails
    tight = compare.find_exclusions(OVERFLOW, "fp16", feeds=feeds, check_range=False,
                                    start=sorted(OVERFLOW_CHAIN), metric="cosine",
                                    budget=loss / 10, max_rounds=3)
    first = tight.rounds[0]
    assert first["outputs_pass"] is False and first["elementwise_passed"] is True
    assert tight.stopped != "no-culprit" and len(tight.rounds) >= 2
    added = set(tight.rounds[1]["excluded"]) - OVERFLOW_CHAIN
    assert added, tight.rounds[1]  # a node beyond the chain kept in FP32 next
