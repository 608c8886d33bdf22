"""The precision planner on CPU: regions kept in FP32 where the planted FP16 overflow is, the
budget checked on held-back samples only, a user's metric honoured, the answer as ONNX node
lists that `workbench precision --exclude` turns into the same model bit for bit."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, SAMPLES
from workbench.planner import plan

OVERFLOW = SAMPLES / "fp16_overflow.onnx"  # /scale and /norm overflow FP16, /proj, /head not
PLANTED = ["/scale/Mul", "/norm/Mul", "/norm/ReduceSum", "/norm/Sqrt", "/norm/Add", "/norm/Div"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    x = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    np.savez(d / "x.npz", input=x)
    # every 4th sample (3, 7, 11, 15) is held back; scaled down, the others never overflow
    tame = x.copy()
    tame[[i for i in range(16) if i % 4 != 3]] *= 1e-4
    np.savez(d / "tame.npz", input=tame)
    return d


def test_the_planted_overflow_regions_and_nothing_else_stay_fp32(data):
    p = plan(OVERFLOW, data / "x.npz", budget="1%")
    assert p.passed and p.held_loss == 0.0 and p.target == "fp16"
    assert p.fp32_nodes == PLANTED
    assert [r[0].rsplit("/", 1)[0] for r in p.kept_regions] == ["/scale", "/norm"]
    assert p.low_nodes == ["/proj/MatMul", "/proj/Add", "/head/MatMul"]
    assert p.samples == {"search": [0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14],
                         "held_back": [3, 7, 11, 15]}
    assert 0 < p.evaluations <= p.max_builds
    sens = dict(zip([r[0].split("/")[1] for r in p.regions], p.sensitivity))
    assert sens["scale"] == sens["norm"] == 1.0 and sens["proj"] == sens["head"] == 0.0
    assert "nodes_to_exclude" in " ".join(p.commands) and str(PLANTED) == \
        p.commands["autocast_nodes_to_exclude"]


def test_the_budget_is_checked_on_held_back_samples_not_the_search_set(data):
    """On the search set (scaled down) FP16 never overflows: all-FP16 passes there. The held-
    back samples overflow; a planner checking the budget on search data would answer
    all-FP16; this one keeps the planted regions."""
    p = plan(OVERFLOW, data / "tame.npz", budget="1%")
    all16 = next(c for c in p.front if not c.kept)
    assert all16.search_loss <= p.budget and all16.held_loss is not None and \
        all16.held_loss > p.budget
    assert p.passed and p.fp32_nodes == PLANTED and p.held_loss <= p.budget


def test_a_callable_metric_is_honoured(data):
    calls = []

    def never_mind(ref, got):  # the user's task says any answer is fine
        calls.append(next(iter(ref.values())).shape[0])
        return 0.0

    p = plan(OVERFLOW, data / "x.npz", metric=never_mind, budget=0.0)
    assert p.fp32_nodes == [] and p.passed and p.metric == "never_mind"
    assert set(calls) == {12, 4}  # search set and held-back set, all samples at once

    p = plan(OVERFLOW, data / "x.npz", metric=lambda r, g: 1.0, budget="1%")
    assert not p.passed and len(p.fp32_nodes) == 9  # nothing meets it: all FP32, said so
    assert any("no fp16 plan met the budget" in n for n in p.notes)


@pytest.mark.parametrize("to", [[], ["--to", "int8", "--fallback", "fp16"]],
                         ids=["fp16", "int8+fp16"])
def test_cli_plan_round_trips_through_precision_exclude(data, tmp_path, to):
    """`workbench plan -o` writes the planned model; `workbench precision --exclude` with the
    printed list makes the same file bit for bit. INT8 with the FP16 fallback: the MatMuls in
    INT8, the bias Add in FP16, the planted overflow regions in FP32 (FP16 would overflow
    there as it does without Q/DQ)."""
    out = tmp_path / "planned.onnx"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "plan", str(OVERFLOW), "--data",
                        str(data / "x.npz"), "--budget", "1%", "--metric", "top1", "-o",
                        str(out), "--json"] + to, capture_output=True, text=True, cwd=REPO,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["nodes"]["fp32"] == PLANTED and d["passed"]
    if to:
        assert d["fallback"] == "fp16" and d["nodes"]["int8"] == ["/proj/MatMul", "/head/MatMul"]
        assert d["nodes"]["fp16"] == ["/proj/Add"]
        assert "--to int8 --fallback fp16 " in d["commands"]["precision"]
        assert "--to int8 --fallback fp16 " in d["commands"]["reproduce"]
        from workbench.precision.spec import recorded_spec

        import onnx

        made = recorded_spec(onnx.load(str(out)))
        assert made.fallback == "fp16" and made.exclude_nodes == PLANTED
        assert any(n.op_type == "DequantizeLinear" for n in onnx.load(str(out)).graph.node)
    line = d["commands"]["precision"].replace("OUT.onnx", str(tmp_path / "again.onnx"))
    assert line.startswith("workbench precision ")
    import shlex

    r2 = subprocess.run([sys.executable, "-m", "workbench.cli"] + shlex.split(line)[1:],
                        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r2.returncode == 0, r2.stderr
    assert out.read_bytes() == (tmp_path / "again.onnx").read_bytes()
    bad = subprocess.run([sys.executable, "-m", "workbench.cli", "plan", str(OVERFLOW),
                          "--data", str(data / "x.npz"), "--metric", "nope"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert bad.returncode == 2 and "unknown metric 'nope'" in bad.stderr + bad.stdout


def _resnet50_with_weights(path, size=32):
    """The recorded H200 engines' ResNet-50 graph (its node names are the engines' Metadata)
    with random weights, at a small input size so FP16 emulation is quick on CPU."""
    import onnx
    from onnx import numpy_helper

    from conftest import H200

    m = onnx.load(str(H200 / "resnet50.structure.onnx"), load_external_data=False)
    rng = np.random.default_rng(0)
    for i, t in enumerate(m.graph.initializer):
        dims = list(t.dims)
        a = (np.zeros(dims, np.float32) if len(dims) <= 1 else
             (rng.standard_normal(dims) / np.sqrt(np.prod(dims[1:]))).astype(np.float32))
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
    d = m.graph.input[0].type.tensor_type.shape.dim
    d[2].dim_value = d[3].dim_value = size
    onnx.save(m, str(path))
    return path


def test_planner_on_recorded_h200_resnet50_profiles_predicts_latency(tmp_path):
    """The whole planner on the recorded TensorRT 8.6 H200 ResNet-50 FP32/FP16 profiles:
    regions from the engine's fused layers, latency predicted (and said so), accuracy by
    FP16 emulation on held-back samples, evaluations within --max-builds."""
    from conftest import H200
    from workbench.timing.predict import LatencyModel

    model = _resnet50_with_weights(tmp_path / "resnet50.onnx")
    np.savez(tmp_path / "x.npz", input=np.random.default_rng(1).standard_normal(
        (8, 3, 32, 32)).astype(np.float32))
    p = plan(model, tmp_path / "x.npz", budget=1e-3, metric="cosine", latency_profiles=H200,
             max_builds=12)
    assert p.region_source == "engine layers" and p.evaluations <= 12
    assert p.uniform_ms["fp32"] == pytest.approx(2.934, abs=1e-3)
    assert p.uniform_ms["fp16"] == pytest.approx(0.879, abs=1e-3)
    assert p.passed and p.held_loss <= 1e-3 and "predicted" in p.latency_note
    lats = [c.latency_ms for c in p.front]
    assert lats[0] == pytest.approx(p.uniform_ms["fp32"]) and lats == sorted(lats, reverse=True)
    lm = LatencyModel.from_dir(H200, str(model), onnx=str(model))
    assert p.latency_ms == pytest.approx(lm.predict({n: "fp32" for n in p.fp32_nodes},
                                                    default="fp16"))
    assert p.latency_ms < p.uniform_ms["fp32"]
    d = p.to_dict()
    assert d["latency"] == "predicted" and d["samples"]["held_back"] == [3, 7]
    assert all(n.startswith("/") for n in d["nodes"]["fp16"])  # ONNX node names, no indices


def test_plan_panel_shows_the_plan_and_its_front(data):
    from widgets import PlanPanel

    panel = PlanPanel(OVERFLOW, data=data / "x.npz", budget="1%")
    panel.run()
    p = panel.wait(300)
    assert panel.task.error is None and p is not None and p.fp32_nodes == PLANTED
    assert "within budget" in panel.status.value and "4 held-back sample(s)" in \
        panel.status.value
    assert "/norm/ReduceSum" in panel.nodes_html.value and "autocast" in panel.nodes_html.value
    front = [t for t in panel.figure.data if t.name == "front"]
    assert len(front) == 1 and len(front[0].x) == len(p.front)
    star = [t for t in panel.figure.data if t.name == "plan"]
    # no recorded profiles: x is the number of regions in FP16; the plan keeps 2 of 4
    assert list(star[0].x) == [2] and list(star[0].customdata) == [p.chosen]
    assert "no latency predicted" in panel.figure.layout.xaxis.title.text


def test_clicking_a_front_point_colours_its_precisions_in_the_graph_view(data):
    """The plan arrives coloured in the graph view (its FP32 regions red, the rest FP16 blue);
    a click on another point of the front colours that candidate instead."""
    from plotly.callbacks import InputDeviceState, Points

    from widgets import GraphView, PlanPanel
    from workbench.timing.colours import precision_colour

    gv = GraphView(OVERFLOW, expand_all=True)
    panel = PlanPanel(OVERFLOW, data=data / "x.npz", budget="1%", graph_view=gv)
    panel.run()
    p = panel.wait(300)
    assert panel.task.error is None and p is not None and panel.shown == p.chosen
    red, blue = precision_colour("fp32"), precision_colour("fp16")
    assert red != blue

    def colour(node):
        return gv.colors[gv.data.index(node)]

    assert [colour(n) for n in PLANTED] == [red] * len(PLANTED)
    assert [colour(n) for n in p.low_nodes] == [blue] * len(p.low_nodes)
    assert gv.legend == [["FP32", red], ["FP16", blue]]
    # the all-FP32 candidate (the front's first point), clicked
    front = next(t for t in panel.figure.data if t.name == "front")
    assert list(front.customdata) == list(range(len(p.front))) and not p.front[0].step.startswith("+")
    front._dispatch_on_click(Points(point_inds=[0], xs=[], ys=[], trace_name="front",
                                    trace_index=0), InputDeviceState())
    assert panel.shown == 0
    assert {colour(n) for n in PLANTED + p.low_nodes} == {red}
    assert gv.legend == [["FP32", red]] and "candidate 0 (all FP32)" in panel.shown_html.value
    with pytest.raises(Exception, match="no candidate 99"):
        panel.show_candidate(99)


def test_an_int8_plan_over_regions_with_nothing_to_quantize(data):
    """/scale and /norm hold no Conv/MatMul: alone in INT8 they are the FP32 model (loss 0,
    no evaluation spent), where converting them failed with 'nothing to quantize'."""
    p = plan(OVERFLOW, data / "x.npz", target="int8", budget="1%", max_builds=12)
    sens = dict(zip([r[0].split("/")[1] for r in p.regions], p.sensitivity))
    assert sens["scale"] == sens["norm"] == 0.0
    assert p.target == "int8" and p.passed and p.held_loss <= p.budget
    # evaluations: only candidates with a MatMul in INT8 ran (/proj, /head alone, the greedy's)
    assert 2 <= p.evaluations <= 12


def test_plan_panel_colours_int8_fp16_and_fp32_with_a_fallback(data):
    """A plan INT8 with the FP16 fallback, in the panel and the graph view: the MatMuls INT8,
    the bias Add FP16, the planted regions FP32, each in its own colour and listed."""
    from widgets import GraphView, PlanPanel
    from workbench.timing.colours import precision_colour

    gv = GraphView(OVERFLOW, expand_all=True)
    panel = PlanPanel(OVERFLOW, data=data / "x.npz", budget="1%", target="int8",
                      fallback="fp16", graph_view=gv, max_builds=12)
    panel.run()
    p = panel.wait(300)
    assert panel.task.error is None and p is not None and p.fallback == "fp16"
    prec = panel.precisions_of(p.chosen)
    assert {n: prec[n] for n in ("/proj/MatMul", "/head/MatMul", "/proj/Add")} == \
        {"/proj/MatMul": "int8", "/head/MatMul": "int8", "/proj/Add": "fp16"}
    assert all(prec[n] == "fp32" for n in PLANTED)
    colours = {q: precision_colour(q) for q in ("int8", "fp16", "fp32")}
    assert len(set(colours.values())) == 3
    for n, q in prec.items():
        assert gv.colors[gv.data.index(n)] == colours[q], n
    assert "fp16 nodes (fallback)" in panel.nodes_html.value
    assert "/ FP16" in panel.shown_html.value
