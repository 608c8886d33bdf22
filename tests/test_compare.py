"""Layer-wise comparison against onnxruntime FP32 and the search for nodes to keep in FP32."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import SAMPLES
from workbench import compare
from workbench.runtime.equivalence import make_inputs
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
    assert rep.candidate_runner == "emulate"  # FP16 storage emulated, not ORT's FP32 upcast
    assert not rep.outputs_pass
    culprit = rep.culprits()[0]
    assert culprit.node == "/scale/Mul" and not culprit.finite and math.isinf(culprit.added)
    # downstream nodes only pass the infinity on: they are not blamed
    assert [t.node for t in rep.culprits()] == ["/scale/Mul"]
    d = rep.to_dict()
    json.dumps(d)  # JSON-safe (inf written as a string)
    assert d["suggested_exclusions"] == ["/scale/Mul"]


def test_find_exclusions_recovers_the_overflowing_chain(overflow_feeds):
    # the search alone (no range pre-pass): it bisects its way to the same chain
    search = compare.find_exclusions(OVERFLOW, "fp16", feeds=overflow_feeds, check_range=False)
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
    from workbench.core.errors import WorkbenchError

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
    assert list(saved) == ["onnxruntime-fp32", "emulate-candidate"]
    ref_out = saved["onnxruntime-fp32"][0]["output"]
    assert ref_out.shape == (4, 8) and np.isfinite(ref_out).all()
    assert not np.isfinite(saved["emulate-candidate"][0]["output"]).all()  # FP16 overflowed
    r = _cli("compare", str(OVERFLOW), "--to", "fp16", "--inputs", str(tmp_path / "in.npz"), "--json")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)["excluded"]) == OVERFLOW_CHAIN
    for bad in (["compare", str(OVERFLOW), str(fp16)],            # no inputs, no --allow-random
                ["compare", str(OVERFLOW), str(fp16), "--to", "fp16", "--allow-random"],
                ["compare", str(tmp_path / "missing.onnx"), "--to", "fp16", "--allow-random"]):
        r = _cli(*bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- one comparison core
RESNET = SAMPLES / "resnet_tiny.onnx"
RESNET_CAL = SAMPLES / "calib" / "resnet_tiny.npz"


def _cli_json(args, capsys):
    from workbench.cli import main as cli_main

    rc = cli_main(args)
    return rc, json.loads(capsys.readouterr().out)


def _figures(d):
    """(max_abs, mean_abs, rel, cosine, passed) from a precision entry or a compare tensor."""
    if "max_abs_err" in d:
        return (d["max_abs_err"], d["mean_abs_err"], d["rel_err"], d["cosine"], d["passed"])
    return (d["max_abs"], d["mean_abs"], d["rel"], d["cosine"], d["passed"])


def test_fp16_pair_reports_identical_figures_in_all_five_places(tmp_path, capsys):
    """`precision`, `compare REF CAND`, `compare --to`, PrecisionPanel and ComparePanel show the
    same error figures and the same pass/fail at the defaults for one FP16 pair."""
    from widgets.compare import ComparePanel
    from widgets.precision import PrecisionPanel

    cand = tmp_path / "resnet_tiny.fp16.onnx"
    rc, prec = _cli_json(["precision", str(RESNET), "--to", "fp16", "--calib", str(RESNET_CAL),
                          "-o", str(cand), "--json"], capsys)
    assert rc == 0
    # FP16 storage emulated on onnxruntime, the runner `compare` picks for FP16 graphs
    fig_precision = _figures(prec["error_reference"]["logits"])

    rc, pair = _cli_json(["compare", str(RESNET), str(cand), "--inputs", str(RESNET_CAL),
                          "--json"], capsys)
    assert rc == 0 and pair["outputs_pass"] and pair["precision"] == "fp16"
    assert pair["candidate_runner"] == "emulate" and (pair["atol"], pair["rtol"]) == (1e-2, 1e-2)
    fig_pair = _figures(pair["outputs"][0])

    rc, search = _cli_json(["compare", str(RESNET), "--to", "fp16", "--inputs", str(RESNET_CAL),
                            "--json"], capsys)
    assert rc == 0 and search["passed"] and search["excluded"] == []
    assert (search["final"]["atol"], search["final"]["rtol"]) == (1e-2, 1e-2)
    fig_to = _figures(search["final"]["outputs"][0])

    pp = PrecisionPanel(RESNET, calibration=str(RESNET_CAL), output=str(tmp_path / "pp.onnx"))
    res = pp.convert(block=True)
    fig_ppanel = _figures(res.report["error_reference"]["logits"])
    assert f"{fig_ppanel[2]:.3g}" in pp.report_html.value and "PASS" in pp.report_html.value

    cp = ComparePanel(RESNET, cand, inputs=RESNET_CAL)
    cp.wait(300)
    assert cp.error is None
    fig_cpanel = cp.report.outputs[0].figures()
    assert f"rel {fig_cpanel[2]:.3g}" in cp.status.value and "outputs PASS" in cp.status.value

    print("\nFP16 resnet_tiny logits (max abs, mean abs, rel, cosine, pass):", fig_precision)
    assert fig_precision[4] is True and 0 < fig_precision[0] < 1e-2
    assert fig_precision == fig_pair == fig_to == fig_ppanel == fig_cpanel


def test_compare_pair_passes_like_to_and_never_blames_a_pass_through_op(tmp_path, capsys):
    """The FP16 pair `compare --to fp16` passes, passes `compare REF CAND` too (same defaults),
    and even at a strict tolerance no Relu (which does no rounding) is suggested for exclusion."""
    cand = tmp_path / "r16.onnx"
    onnx.save(convert(RESNET, "fp16").proto, str(cand))
    rc, d = _cli_json(["compare", str(RESNET), str(cand), "--inputs", str(RESNET_CAL), "--json"],
                      capsys)
    assert rc == 0 and d["outputs_pass"] and d["suggested_exclusions"] == []
    # float16 arithmetic (the reference evaluator) at a strict tolerance: Relus whose relative
    # figure rises show up on this data
    rc, strict = _cli_json(["compare", str(RESNET), str(cand), "--inputs", str(RESNET_CAL),
                            "--atol", "1e-3", "--rtol", "1e-3", "--runner", "reference",
                            "--json"], capsys)
    assert rc == 1 and not strict["outputs_pass"]  # FP16 is not within 1e-3 of FP32 everywhere
    ops = {t["node"]: t["op"] for t in strict["tensors"]}
    assert not any(ops[n] in compare.PASS_THROUGH_OPS for n in strict["suggested_exclusions"])
    assert not any(f["code"] == "precision-loss" and f["op"] == "Relu" for f in strict["findings"])
    relus = [t for t in strict["tensors"] if t["op"] == "Relu"]
    # a Relu's relative figure can rise by more than rtol (it drops the negative half and the
    # scale with it): output-rel-minus-input-rel, the old rule, blamed it ...
    pairs = zip(strict["tensors"], strict["tensors"][1:])  # each Relu follows its producer here
    assert any(t["rel"] - prev["rel"] > 1e-3 for prev, t in pairs if t["op"] == "Relu")
    # ... but its absolute error never grows: it adds nothing
    assert relus and all(t["added"] <= 0 for t in relus)


def test_widget_and_cli_use_public_names_only():
    import ast

    from conftest import REPO

    for path in (REPO / "widgets" / "compare.py", REPO / "workbench" / "cli" / "cmd_compare.py"):
        tree = ast.parse(path.read_text())
        private = [f"{n.value.id}.{n.attr}" for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                   and n.value.id in ("compare", "comparison", "runners", "equivalence")
                   and n.attr.startswith("_")]
        private += [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("workbench") for a in n.names
                    if a.name.startswith("_")]
        assert not private, (path.name, private)


# ----------------------------------------------------------------------------- bounded memory
def test_memory_budget_splits_marked_tensors_into_chunks_with_the_same_figures(tmp_path):
    """A tiny budget fetches the marked tensors a chunk at a time (more runs, less held at
    once): every figure is the same as one run with everything marked; figures stream to disk."""
    fp16 = convert(RESNET, "fp16").proto
    feeds = [{"input": np.load(RESNET_CAL)["input"][:4]}]
    one = compare.layerwise(RESNET, fp16, feeds, memory_budget_mb=1e6)
    stats = tmp_path / "stats.jsonl"
    many = compare.layerwise(RESNET, fp16, feeds, memory_budget_mb=0.05, stats_path=stats)
    assert one.chunks == 1 and many.chunks > 3
    assert [t.tensor for t in one.tensors] == [t.tensor for t in many.tensors]
    for a, b in zip(one.tensors, many.tensors):
        assert a.figures() == b.figures() and a.added == b.added
    assert [t.figures() for t in one.outputs] == [t.figures() for t in many.outputs]
    lines = [json.loads(x) for x in stats.read_text().splitlines()]
    assert [d["tensor"] for d in lines] == [t.tensor for t in many.tensors]


def test_plan_chunks_respects_the_budget():
    sizes = {f"t{i}": 100 for i in range(10)}
    chunks = compare.plan_chunks([f"t{i}" for i in range(10)], sizes, 450, copies=2)
    assert [len(c) for c in chunks] == [2, 2, 2, 2, 2]
    assert sum(chunks, []) == [f"t{i}" for i in range(10)]
    # one tensor bigger than the budget still gets its own chunk
    assert compare.plan_chunks(["a", "b"], {"a": 10_000, "b": 1}, 100, 2) == [["a"], ["b"]]


# ----------------------------------------------------------------------------- hopeless FP16
def test_range_prepass_seeds_the_search_with_the_overflowing_block(overflow_feeds):
    """FP32 activations past 65504 are found before any search: their producers and consumers
    start in FP32, so the search passes in its first round."""
    s = compare.find_exclusions(OVERFLOW, "fp16", feeds=overflow_feeds)
    assert s.passed and not s.hopeless and len(s.rounds) == 1
    assert OVERFLOW_CHAIN <= set(s.excluded)
    assert any(f.code == "fp16-range" and f.severity == "info" for f in s.findings)


def test_hopeless_fp16_answers_at_once_with_the_range_finding():
    """onnx's light_inception_v1 (constant weights): most FP32 activations exceed FP16's range.
    No search is run; the error names the first tensors, the largest value and what to do."""
    import time

    light = Path(onnx.__file__).parent / "backend/test/data/light/light_inception_v1.onnx"
    t0 = time.perf_counter()
    s = compare.find_exclusions(light, "fp16", allow_random=True)
    took = time.perf_counter() - t0
    assert s.hopeless and not s.passed and s.rounds == [] and s.final is None
    err = [f for f in s.findings if f.code == "fp16-range"]
    assert len(err) == 1 and err[0].severity == "error"
    assert "no search run" in err[0].message and "--to bf16" in err[0].hint
    assert err[0].extra["nodes"] > 16 and err[0].tensors
    print(f"\nhopeless FP16 answer on light_inception_v1 in {took:.2f} s")


def test_weights_made_at_run_time_are_not_compared():
    """onnx's light models make every weight with ConstantOfShape: those outputs are weights,
    not activations - counted, not compared (their rounding shows in the Conv reading them)."""
    light = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"
    m = onnx.load(str(light))
    consts = compare.constant_tensors(m)
    cos = [o for n in m.graph.node if n.op_type == "ConstantOfShape" for o in n.output]
    assert cos and set(cos) <= consts
    assert not any(o in consts for n in m.graph.node if n.op_type == "Conv" for o in n.output)
    rep = compare.layerwise(m, convert(m, "fp16").proto, allow_random=True, max_samples=1)
    compared = {t.tensor for t in rep.tensors}
    assert rep.constants == len(consts) and not (compared & consts)
    assert any(t.op == "Conv" for t in rep.tensors)


def _underflow_model() -> onnx.ModelProto:
    """x -> Mul 1e-9 ('shrink': |values| ~1e-9, below FP16's smallest 6e-8) -> Relu -> Mul 1e9
    -> Add x: in FP32 the output is relu(x) + x; in FP16 'shrink' becomes zeros and the output
    only x."""
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["t"], name="shrink"),
         helper.make_node("Relu", ["t"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "g"], ["u"], name="grow"),
         helper.make_node("Add", ["u", "x"], ["y"], name="add")],
        "underflow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [numpy_helper.from_array(np.array(1e-9, np.float32), "s"),
         numpy_helper.from_array(np.array(1e9, np.float32), "g")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_fp16_underflow_is_named_at_once_and_its_nodes_start_in_fp32():
    """Activations entirely below FP16's smallest subnormal become zeros: the range pre-pass
    names the tensors and the node, the search starts with their producers/consumers in FP32,
    and the result meets the budget (the same model without that start does not)."""
    m = _underflow_model()
    feeds = [{"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32) + 2.0}]
    nodes, found, hopeless = compare.range_prepass(m, feeds, "fp16")
    under = [f for f in found if f.code == "fp16-underflow"]
    assert not hopeless and len(under) == 1 and under[0].severity == "warning"
    assert under[0].tensors[:2] == ["t", "r"] and "'shrink' (Mul)" in under[0].message
    assert "all zeros" in under[0].message and "--exclude shrink" in under[0].hint
    assert {"shrink", "relu", "grow"} <= set(nodes)
    s = compare.find_exclusions(m, "fp16", feeds=feeds)
    assert s.passed and {"shrink", "relu"} <= set(s.excluded)
    plain = compare.find_exclusions(m, "fp16", feeds=feeds, check_range=False, max_rounds=0)
    assert not plain.passed  # without the pre-pass the FP16 model loses relu(x) entirely


def _relu_then(op: str) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r"),
                           helper.make_node(op, ["y"], ["z"], name="n2")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_refused_candidate_is_named_by_the_label_it_was_given():
    """find_exclusions compares in-memory conversions: a refusal names the user's file and
    the conversion (`labels`), not the graph's internal name; without labels, the graph's."""
    from workbench.core.errors import WorkbenchError

    feeds = [{"x": np.ones((2, 3), np.float32)}]
    with pytest.raises(WorkbenchError) as e:
        compare.layerwise(_relu_then("Relu"), _relu_then("NoSuchOp"), feeds,
                          labels=(None, "m.onnx converted to fp16"))
    line = e.value.one_line()
    assert line.startswith("m.onnx converted to fp16: onnxruntime cannot load")
    assert "NoSuchOp" in line
    with pytest.raises(WorkbenchError) as e:
        compare.layerwise(_relu_then("Relu"), _relu_then("NoSuchOp"), feeds)
    assert "model 'g'" in e.value.one_line()


def test_find_exclusions_names_its_conversions_after_the_user_file(tmp_path, monkeypatch):
    """Every round's comparison is labelled with the user's file and the conversion, so an
    error in any round names them (wiring of `labels`; the real comparison still runs)."""
    from workbench.compare import layer_compare

    path = tmp_path / "m.onnx"
    onnx.save(_relu_then("Relu"), str(path))
    seen = []
    real = layer_compare.layerwise

    def spy(*a, **k):
        seen.append(k.get("labels"))
        return real(*a, **k)
    monkeypatch.setattr(layer_compare, "layerwise", spy)
    feeds = [{"x": np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)}]
    res = compare.find_exclusions(str(path), "fp16", feeds=feeds)
    assert res.passed and seen
    assert all(s == (str(path), f"{path} converted to fp16") for s in seen)
    seen.clear()
    compare.find_exclusions(_relu_then("Relu"), "fp16", feeds=feeds)  # in memory: no file
    assert seen and all(s == (None, None) for s in seen)


def test_string_outputs_are_saved_without_pickle(tmp_path):
    """onnxruntime returns string tensors as arrays of Python str: --save-results writes
    them as fixed-width unicode (bytes as fixed-width bytes) that load back without pickle;
    other Python objects are a one-line error naming the output."""
    from workbench.core.errors import WorkbenchError

    names = np.array(["cat", "bird"], dtype=object)
    raw = np.array([b"\x00a", b"bc"], dtype=object)
    path = compare.save_run_results(tmp_path / "r.json",
                                    {"ort": [{"label": names, "raw": raw,
                                              "y": np.ones(2, np.float32)}]})
    back = compare.load_run_results(path)["ort"][0]
    assert back["label"].dtype.kind == "U" and back["label"].tolist() == ["cat", "bird"]
    assert back["raw"].dtype.kind == "S" and back["raw"].tolist() == [b"\x00a", b"bc"]
    assert back["y"].dtype == np.float32
    with pytest.raises(WorkbenchError, match="ort output 'odd' holds Python objects"):
        compare.save_run_results(tmp_path / "o.json",
                                 {"ort": [{"odd": np.array([1, "a"], dtype=object)}]})
    assert not (tmp_path / "o.json").exists()


def test_random_inputs_are_said_in_the_text_output_of_the_search_too(tmp_path):
    """`compare --to fp16 --allow-random` printed the range finding and the rounds, and its
    warning of random inputs only under --json (the help promises a warning)."""
    text = _cli("compare", str(OVERFLOW), "--to", "fp16", "--allow-random")
    assert text.returncode == 0, text.stderr
    warn = [ln for ln in text.stdout.splitlines() if ln.startswith("WARNING random-inputs")]
    assert len(warn) == 1 and "compared on random inputs" in warn[0], text.stdout
    d = json.loads(_cli("compare", str(OVERFLOW), "--to", "fp16", "--allow-random", "--json").stdout)
    assert [f["code"] for f in d["findings"]].count("random-inputs") == 1
    np.savez(tmp_path / "in.npz",
             input=np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32))
    real = _cli("compare", str(OVERFLOW), "--to", "fp16", "--inputs", str(tmp_path / "in.npz"))
    assert real.returncode == 0 and "random-inputs" not in real.stdout, real.stdout


def test_string_tensors_are_named_string_live_and_loaded_back():
    """A string output compared live (onnxruntime's Python objects) and from saved results
    (fixed-width unicode) reads dtype "string", as the model declares it, not numpy's
    "object" or "<U4"; numbers keep numpy's names."""
    from workbench.runtime.comparison import compare_tensor

    live = np.array(["cat", "bird"], dtype=object)
    saved = np.array(["cat", "bird"])
    assert saved.dtype.str.endswith("U4")
    for ref, got in ((live, live), (live, saved), (saved, saved)):
        c = compare_tensor("label", ref, got, 1e-3, 1e-3)
        assert c.dtype == "string" and c.passed
    bad = compare_tensor("label", live, np.array(["cat", "dog"], dtype=object), 1e-3, 1e-3)
    assert bad.dtype == "string" and not bad.passed
    y = compare_tensor("y", np.ones(3, np.float32), np.ones(3, np.float16), 1e-3, 1e-3)
    assert y.dtype == "float32 -> float16"


def test_an_input_the_model_fixes_is_not_cut_as_if_it_held_samples():
    """x [batch, 4] and idx [3] (indices the model fixes): the samples were counted over both
    (3 per batch of 8) and idx cut to [2] to fit the sample limit ('Got invalid dimensions for
    input: idx'). Only inputs with a batch axis hold samples."""
    from onnx import TensorProto as T, helper as h

    from workbench.compare import layerwise
    from workbench.runtime.runners import batched_inputs, limit_samples, samples_in

    g = h.make_graph([h.make_node("Gather", ["x", "idx"], ["y"], axis=1, name="/pick/Gather"),
                      h.make_node("Relu", ["y"], ["z"], name="/act/Relu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, ["batch", 4]),
                      h.make_tensor_value_info("idx", T.INT64, [3])],
                     [h.make_tensor_value_info("z", T.FLOAT, ["batch", 3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    feeds = [{"x": np.ones((8, 4), np.float32), "idx": np.array([0, 2, 3])} for _ in range(2)]
    assert batched_inputs(m) == {"x"}
    assert samples_in(feeds[0], {"x"}) == 8 and samples_in(feeds[0]) == 3
    cut = limit_samples(feeds, 10, {"x"})
    assert [f["x"].shape[0] for f in cut] == [8, 2] and all(len(f["idx"]) == 3 for f in cut)
    rep = layerwise(m, m, feeds, max_samples=10)
    assert rep.samples == 10 and rep.samples_available == 16 and rep.outputs_pass


def test_compare_json_findings_name_the_users_files_as_the_text_does(tmp_path):
    """The text output fills MODEL / DATA into the commands findings name; --json printed the
    placeholders (seen on the H200: `workbench precision MODEL --to int8 ... --calib DATA`)."""
    import json
    import subprocess

    from workbench.precision import convert

    data = tmp_path / "d.npz"
    np.savez(data, input=np.random.default_rng(7).standard_normal((4, 64)).astype(np.float32))
    cand = tmp_path / "o16.onnx"
    onnx.save(convert(SAMPLES / "fp16_overflow.onnx", "fp16").proto, str(cand))
    ref = SAMPLES / "fp16_overflow.onnx"
    r = subprocess.run(["workbench", "compare", str(ref), str(cand), "--inputs", str(data),
                        "--json"], capture_output=True, text=True, timeout=300)
    d = json.loads(r.stdout)
    hints = [f["hint"] for f in d["findings"] if f.get("hint") and "workbench precision" in f["hint"]]
    assert hints, d["findings"]
    assert all(str(ref) in h and str(data) in h and "MODEL" not in h and "DATA" not in h
               for h in hints), hints


def test_the_search_verdict_says_how_many_samples_it_judged():
    """`compare --to int8` printed 'within tolerance with 0 node(s) kept' judged on 8 of 64
    samples, while precision on all 64 warned: the verdict says its sample count."""
    r = subprocess.run(["workbench", "compare", str(SAMPLES / "resnet_tiny.onnx"), "--to", "fp16",
                        "--inputs", str(SAMPLES / "calib" / "resnet_tiny.npz")],
                       capture_output=True, text=True, timeout=300)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("fp16: "))
    assert line.endswith("on 8 of 32 samples (--samples 32 judges them all)"), line
    r = subprocess.run(["workbench", "compare", str(SAMPLES / "resnet_tiny.onnx"), "--to", "fp16",
                        "--inputs", str(SAMPLES / "calib" / "resnet_tiny.npz"), "--samples", "32"],
                       capture_output=True, text=True, timeout=300)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("fp16: "))
    assert line.endswith("on 32 sample(s)"), line
