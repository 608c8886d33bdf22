"""Engine-side layer compare on CPU: the same code paths as on the GPU, with
onnxruntime / onnx's reference evaluator standing in for the engine, and the TensorRT side
(marked, chunked builds; the run_engine protocol) through the real TensorRT-RTX builder."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import H200, SAMPLES
from workbench.compare.bisect import bisect_exclusions, onnx_evaluator
from workbench.compare.bisect import suspects as bisect_suspects
from workbench.compare.engine_compare import (boundary_tensors, compare_tensors,
                                              engine_layerwise, onnx_candidate)
from workbench.compare.layer_compare import plan_chunks, tensor_bytes
from workbench.runtime.equivalence import make_inputs
from workbench.core.model import as_model
from workbench.precision.transform import convert
from workbench.runtime.runners import OnnxRuntimeRunner

OVERFLOW = SAMPLES / "fp16_overflow.onnx"
RESNET = SAMPLES / "resnet_tiny.onnx"
# sample_models/README.md: the nodes from /scale/Mul through /norm/Div must stay in FP32
OVERFLOW_CHAIN = {"/scale/Mul", "/norm/Mul", "/norm/ReduceSum", "/norm/Sqrt", "/norm/Add",
                  "/norm/Div"}


def _resnet_feeds(n=2, batch=2):
    x = np.load(SAMPLES / "calib" / "resnet_tiny.npz")["input"]
    return [{"input": x[k * batch:(k + 1) * batch]} for k in range(n)]


@pytest.fixture(scope="module")
def overflow_feeds():
    return [make_inputs(onnx.load(str(OVERFLOW)), seed=1),
            make_inputs(onnx.load(str(OVERFLOW)), seed=2)]


def test_chunks_hold_the_memory_budget():
    ref = as_model(RESNET).with_weights()
    names = compare_tensors(ref)
    sizes = tensor_bytes(ref, _resnet_feeds(1, batch=4)[0], names)
    # input 4x3x32x32; the stem conv makes 4x16x32x32 floats = 256 KiB
    assert sizes["/stem/conv/Conv_output_0"] == 4 * 16 * 32 * 32 * 4
    budget = 1024 * 1024
    chunks = plan_chunks(names, sizes, budget)
    assert len(chunks) > 2 and [n for c in chunks for n in c] == names
    for c in chunks:
        assert len(c) == 1 or 2 * sum(sizes[n] for n in c) <= budget
    assert plan_chunks(names, sizes, None) == [names]


def test_engine_layerwise_finds_the_overflow_streams_stats_and_aggregates_samples(
        overflow_feeds, tmp_path):
    cand = convert(OVERFLOW, "fp16", measure=False).proto
    names = compare_tensors(OVERFLOW)
    stats = tmp_path / "stats.jsonl"
    rep = engine_layerwise(OVERFLOW, onnx_candidate(cand), overflow_feeds, tensors=names,
                           memory_budget_mb=0.004, stats_path=stats, keep=["/scale/Mul_output_0"],
                           keep_dir=tmp_path / "keep", precision="fp16")
    assert len(rep.chunks) > 1 and rep.samples == 2 * len(overflow_feeds[0]["input"])
    assert not rep.outputs_pass
    lines = [json.loads(x) for x in stats.read_text().splitlines()]
    assert [x["tensor"] for x in lines] == [t.tensor for t in rep.tensors]
    assert {x["chunk"] for x in lines} == set(range(len(rep.chunks)))
    assert rep.culprits()[0].node in OVERFLOW_CHAIN and not math.isfinite(rep.culprits()[0].added)
    codes = {f.code for f in rep.findings}
    assert "fp16-range" in codes and "precision-loss" in codes
    assert "/scale/Mul_output_0" in rep.fp16_range
    # the reference evaluator is deterministic: marking changes nothing
    assert all(o["identical"] for o in rep.observer) and not rep.marking_changed_outputs
    ref_kept = np.load(rep.kept["/scale/Mul_output_0"][0])
    want = np.concatenate([OnnxRuntimeRunner(OVERFLOW, mark_all=True).infer(f)
                           ["/scale/Mul_output_0"] for f in overflow_feeds])
    assert np.allclose(ref_kept, want)
    assert rep.peak_rss_mb > 0 and rep.to_dict()["chunks"] == [len(c) for c in rep.chunks]


def test_observer_check_says_when_marking_changed_the_answer(overflow_feeds):
    fp16 = convert(OVERFLOW, "fp16", measure=False).proto
    fp32 = onnx_candidate(OVERFLOW, "onnxruntime")
    half = onnx_candidate(fp16)

    def marking_changes_precision(names):  # like a marked build whose fusions broke
        return fp32(names) if names else half(names)

    rep = engine_layerwise(OVERFLOW, marking_changes_precision, overflow_feeds,
                           tensors=compare_tensors(OVERFLOW)[:3], precision="fp16")
    assert rep.marking_changed_outputs
    f = next(f for f in rep.findings if f.code == "marking-changed-outputs")
    assert f.severity == "error" and "changed the engine's answer" in f.message


def test_boundaries_from_real_h200_layer_info_keep_fusions():
    from workbench.timing.layers import load_layers

    proto = onnx.load(str(H200 / "resnet50.structure.onnx"), load_external_data=False)
    layers = load_layers(H200 / "resnet50_fp16.layers.json")
    outs = [t.name for ly in layers.layers if not ly.is_constant for t in ly.outputs]
    bounds = boundary_tensors(proto, outs)
    every = compare_tensors(proto)
    assert 10 < len(bounds) < len(every)
    assert "/relu/Relu_output_0" in bounds  # conv1+bn+relu is one engine layer
    assert "/conv1/Conv_output_0" in every and "/conv1/Conv_output_0" not in bounds


def test_bisection_on_the_stand_in_finds_the_planted_nodes(overflow_feeds):
    from workbench.render import bisect_figure

    cand = convert(OVERFLOW, "fp16", measure=False).proto
    rep = engine_layerwise(OVERFLOW, onnx_candidate(cand), overflow_feeds,
                           tensors=compare_tensors(OVERFLOW), precision="fp16")
    suspects = bisect_suspects(rep, OVERFLOW)
    assert suspects[0] == "/scale/Mul" and OVERFLOW_CHAIN <= set(suspects)
    suspects += ["/proj/MatMul", "/head/MatMul"]  # harmless ones: bisection must drop them
    ev = onnx_evaluator(OVERFLOW, overflow_feeds, "fp16")
    res = bisect_exclusions(suspects, ev, latency=lambda excl: 1.0 + 0.1 * len(excl))
    assert res.passed and res.excluded and set(res.excluded) <= OVERFLOW_CHAIN
    assert ev(res.excluded).passed and not ev([]).passed
    assert [len(r["excluded"]) for r in res.rows] == list(range(len(res.excluded) + 1))
    assert res.rows[-1]["passed"] and not res.rows[0]["passed"]
    assert res.rows[1]["cost_ms"] == pytest.approx(0.1)
    assert "P50 ms" in res.table()
    fig = bisect_figure(res)
    assert len(fig.data[0].x) == len(res.rows)


def test_bisection_says_when_the_suspects_cannot_meet_the_budget(overflow_feeds):
    ev = onnx_evaluator(OVERFLOW, overflow_feeds, "fp16")
    res = bisect_exclusions(["/head/MatMul"], ev)
    assert not res.passed and "even with all 1 suspects" in res.message


def test_engine_runs_round_trip_through_polygraphy(overflow_feeds, tmp_path):
    from polygraphy.comparator import RunResults

    from workbench.compare import save_run_results

    cand = convert(OVERFLOW, "fp16", measure=False).proto
    rep = engine_layerwise(OVERFLOW, onnx_candidate(cand), overflow_feeds,
                           tensors=compare_tensors(OVERFLOW)[:2], precision="fp16")
    path = save_run_results(tmp_path / "run.json", {"onnxruntime-fp32": rep.runs["reference"],
                                                    "tensorrt-fp16": rep.runs["candidate"]})
    loaded = RunResults.load(str(path))
    assert len(loaded["tensorrt-fp16"]) == len(overflow_feeds)
    assert np.array_equal(np.asarray(loaded["onnxruntime-fp32"][1]["output"]),
                          rep.runs["reference"][1]["output"])


# ----------------------------------------------------------------------------- TensorRT-RTX
@pytest.fixture(scope="module")
def rtx():
    pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.engines.engine import BuildConfig

    return BuildConfig(precision="fp16", target="sm89", backend="tensorrt-rtx",
                       builder_optimization_level=0)


def _has_gpu():
    from workbench.worker.client import WorkerError, default_client

    try:
        default_client().call("cuda_info", timeout=120)
        return True
    except WorkerError:
        return False


def test_rtx_builds_marked_chunks_under_a_budget(rtx):
    from workbench.measure.enginedebug import engine_candidate, layer_boundaries, with_feed_profile

    feeds = _resnet_feeds(1, batch=2)
    ref = as_model(RESNET).with_weights()
    cfg = with_feed_profile(ref, rtx, feeds)
    assert cfg.profiles == [{"input": [[2, 3, 32, 32]] * 3}]
    from workbench.engines.engine import build_engine

    findings = []
    bounds = boundary_tensors(ref, layer_boundaries(build_engine(ref, cfg), findings=findings))
    if not _has_gpu():  # the engine does not deserialize: unfused network layers, said so
        assert [f.code for f in findings] == ["no-fusion-info"]
    assert "/stem/conv/Conv_output_0" in bounds
    sizes = tensor_bytes(ref, feeds[0], bounds)
    chunks = plan_chunks(bounds, sizes, 2 * 1024 * 1024)
    assert len(chunks) >= 2
    built = []
    make = engine_candidate(ref, cfg, on_build=lambda names, res: built.append((names, res)))
    for c in chunks[:2]:
        make(c)
    for names, res in built:
        graph_outputs = [o.name for o in onnx.load(res.onnx_path,
                                                   load_external_data=False).graph.output]
        assert graph_outputs == ["logits"] + names  # marked as outputs, in order
        layer_outputs = {o["name"] for ly in res.layers for o in ly["outputs"]}
        assert set(names) <= layer_outputs  # TensorRT's network has them
    assert built[0][1].engine_path != built[1][1].engine_path


def test_tensorrt_runner_protocol_without_a_gpu(rtx, tmp_path):
    from workbench.engines.engine import build_engine
    from workbench.measure.enginedebug import with_feed_profile
    from workbench.runtime.trtrunner import TensorRTRunner
    from workbench.worker.client import WorkerError, default_client

    feeds = _resnet_feeds(2, batch=2)
    res = build_engine(RESNET, with_feed_profile(RESNET, rtx, feeds))
    runner = TensorRTRunner(res.engine_path, model=RESNET, backend="tensorrt-rtx")
    with pytest.raises(WorkerError) as e:  # the op checks its arguments before the GPU
        default_client().call("run_engine", {"engine_path": str(tmp_path / "none.engine"),
                                             "inputs_npz": [], "out_dir": str(tmp_path)})
    assert e.value.code == "not-found"
    if _has_gpu():
        pytest.skip("a GPU is here: tests/gpu/test_engine_compare.py runs engines")
    with pytest.raises(WorkerError) as e:
        runner.infer_all(feeds)
    assert e.value.code == "no-gpu" and "\n" not in str(e.value)


def test_cli_engine_side_errors_are_one_line(rtx, tmp_path, capsys):
    from workbench.cli import main as cli_main

    cal = str(SAMPLES / "calib" / "resnet_tiny.npz")
    rc = cli_main(["compare", str(RESNET), str(tmp_path / "none.engine"), "--inputs", cal])
    err = capsys.readouterr().err
    assert rc == 2 and "engine file not found" in err and "none.engine" in err
    rc = cli_main(["compare", str(RESNET), str(RESNET), "--engine-from-build", "--inputs", cal])
    assert rc == 2 and "--engine-from-build" in capsys.readouterr().err
    if _has_gpu():
        return
    rc = cli_main(["compare", str(RESNET), "--engine-from-build", "--backend", "tensorrt-rtx",
                   "--target", "sm89", "--opt-level", "0", "--inputs", cal, "--samples", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "needs an NVIDIA GPU" in err[0]


def test_cli_compares_a_polygraphy_recorded_run(tmp_path, capsys):
    """Polygraphy RunResults in: a run saved by Polygraphy's own classes (here the FP16 model's
    every tensor, as `polygraphy run --trt-outputs mark all --save-outputs` records) is compared
    tensor by tensor with onnxruntime FP32 on the same inputs."""
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    from workbench.cli import main as cli_main
    from workbench.compare.engine_compare import mark_outputs
    from workbench.runtime.runners import ReferenceRunner

    x = make_inputs(onnx.load(str(OVERFLOW)), seed=1)["input"]
    np.savez(tmp_path / "in.npz", input=x)
    fp16 = convert(OVERFLOW, "fp16", measure=False).proto
    every = compare_tensors(OVERFLOW)
    outs = ReferenceRunner(mark_outputs(fp16, every)).infer({"input": x})
    theirs = RunResults()
    theirs.append(("trt-runner-N0", [IterationResult(outs, runner_name="trt-runner-N0")]))
    theirs.save(str(tmp_path / "theirs.json"))
    capsys.readouterr()  # (Polygraphy's own log lines)
    rc = cli_main(["compare", str(OVERFLOW), "--candidate-results", str(tmp_path / "theirs.json"),
                   "--inputs", str(tmp_path / "in.npz"), "--json", "--stats",
                   str(tmp_path / "s.jsonl")])
    d = json.loads(capsys.readouterr().out)
    assert rc == 1 and d["marking"] == "recorded" and d["candidate_runner"] == "trt-runner-N0"
    assert d["culprits"][0]["node"] in OVERFLOW_CHAIN and d["observer"] == []
    assert len(d["tensors"]) == len(every) and not d["outputs_pass"]
    assert (tmp_path / "s.jsonl").read_text().count("\n") == len(every)
    rc = cli_main(["compare", str(OVERFLOW), "--candidate-results", str(tmp_path / "theirs.json"),
                   "--results-runner", "nope", "--inputs", str(tmp_path / "in.npz")])
    assert rc == 2 and "trt-runner-N0" in capsys.readouterr().err


def test_a_marked_build_that_fails_is_split_and_unmarkable_tensors_are_named(overflow_feeds):
    """TensorRT 8.6 refuses to build BERT with every tensor marked (Myelin's ForeignNode has no
    implementation once its insides are outputs). A failing marked build is retried as halves;
    tensors whose marking alone breaks the build are named in a finding, the rest compared."""
    from workbench.core.errors import WorkbenchError

    cand = convert(OVERFLOW, "fp16", measure=False).proto
    names = compare_tensors(OVERFLOW)
    poison = names[2]
    inner = onnx_candidate(cand)
    builds = []

    def flaky(marked):
        builds.append(list(marked))
        if poison in marked:
            raise WorkbenchError("TensorRT failed to build the engine: Could not find any "
                                 "implementation for node {ForeignNode[...]}")
        return inner(marked)

    rep = engine_layerwise(OVERFLOW, flaky, overflow_feeds, tensors=names, precision="fp16")
    assert rep.unmarkable == [poison]
    compared = {t.tensor for t in rep.tensors}
    assert poison not in compared and compared == set(names) - {poison}
    assert sum(len(c) for c in rep.chunks) == len(names) - 1
    f = [x for x in rep.findings if x.code == "marking-breaks-build"]
    assert len(f) == 1 and poison in f[0].tensors and "--mark boundaries" in f[0].hint
    assert len(builds) <= 2 + 2 * 3 + 1  # unmarked + first try + at most 3 levels of halves


def test_bisection_table_shows_whole_node_names_and_cuts_visibly():
    """The 'last added' column holds a fused layer's nodes whole (the rig's run printed
    '/planted/sq + /planted/sum + /planted/sq', a cut that reads as another node); names
    beyond its width end in '...'."""
    from workbench.compare.bisect import BisectResult

    fused = "/planted/sq + /planted/sum + /planted/sqrt"
    huge = " + ".join(f"/encoder/layer.{i}/attention/output/dense/MatMul" for i in range(3))
    rows = [{"excluded": [], "added": None, "worst_rel": "inf", "passed": False,
             "p50_ms": 0.0663, "cost_ms": None},
            {"excluded": ["a", "b", "c"], "added": fused, "worst_rel": 0.004, "passed": True,
             "p50_ms": 0.074, "cost_ms": 0.0077},
            {"excluded": ["a", "b", "c", "d"], "added": huge, "worst_rel": 0.003,
             "passed": True, "p50_ms": 0.075, "cost_ms": 0.001}]
    text = BisectResult("fp16", "legacy-flags", ["a", "b", "c", "d"], True, rows=rows).table()
    lines = text.splitlines()
    assert fused in lines[2] and lines[2].split()[0] == "3"
    assert huge not in text and huge[:69] + "..." in lines[3]
    assert len({len(ln) for ln in lines}) == 1  # the columns line up


def test_an_engine_fused_into_one_region_says_how_to_see_inside():
    """On TensorRT 8.6 a BERT engine's layer boundaries expose none of its intermediate
    tensors (one Myelin ForeignNode): compare printed '0 tensors compared' and an empty table,
    with no word of why. Real H200 layer information: BERT-small gets the finding with the
    way forward, ResNet-50 (fusions, but many boundaries) does not."""
    from workbench.measure.enginedebug import few_boundaries_finding
    from workbench.timing.layers import load_layers

    def bounds(name, layers):
        proto = onnx.load(str(H200 / f"{name}.structure.onnx"), load_external_data=False)
        outs = [t.name for ly in load_layers(H200 / layers).layers if not ly.is_constant
                for t in ly.outputs]
        return proto, boundary_tensors(proto, outs)

    proto, b = bounds("bert_small", "bert_small_fp16.layers.json")
    f = few_boundaries_finding(proto, b, "fp16")
    assert f is not None and f.code == "few-boundaries" and f.severity == "info"
    assert f"end at {len(b)} of the model's {len(compare_tensors(proto))}" in f.message
    assert "ForeignNode" in f.message and "--to fp16 --inputs DATA" in f.hint
    assert "--mark T1,T2" in f.hint
    assert "--to fp32" not in few_boundaries_finding(proto, [], "fp32").hint
    proto, b = bounds("resnet50", "resnet50_fp16.layers.json")
    assert few_boundaries_finding(proto, b, "fp16") is None


def test_an_engine_built_from_another_onnx_is_rebuilt_from_that_onnx(tmp_path):
    """`compare model.onnx model.int8.engine` where the engine was built from the INT8 Q/DQ
    ONNX: the marked builds rebuilt the FP32 reference (another engine: 'MARKING CHANGED THE
    ANSWER', labelled tensorrt-fp32 at FP32 tolerances, on the H200). Its card names its
    source: the marked builds use it, judged as INT8. (Plumbing: which ONNX and precision;
    running the engines needs the GPU.)"""
    import shutil

    from workbench.engines.card import write_card
    from workbench.engines.engine import BuildConfig
    from workbench.measure.enginedebug import built_from

    ref = tmp_path / "resnet_tiny.onnx"
    shutil.copy(SAMPLES / "resnet_tiny.onnx", ref)
    q = tmp_path / "r8.onnx"
    onnx.save(convert(ref, "int8", measure=False,
                      calibration=str(SAMPLES / "calib" / "resnet_tiny.npz")).proto, str(q))
    engine = tmp_path / "r8.engine"
    engine.write_bytes(b"engine")
    card = {"kind": "trt-workbench-engine", "schema": 1, "model_path": str(q),
            "precision": {"precision": "fp32"}, "profiles": [], "backend": "tensorrt"}
    from workbench.worker.card import CARD_KIND, CARD_SCHEMA

    card.update(kind=CARD_KIND, schema=CARD_SCHEMA)
    write_card(engine, card)
    found = []
    src, judged = built_from(str(ref), str(engine), BuildConfig(precision="fp32"), found)
    assert Path(src) == q and judged == "int8"
    assert found and found[0].code == "engine-source" and "r8.onnx" in found[0].message
    card["model_path"] = str(ref)  # built from the reference itself: as before
    write_card(engine, card)
    assert built_from(str(ref), str(engine), BuildConfig(precision="fp16"), []) == \
        (str(ref), "fp16")
