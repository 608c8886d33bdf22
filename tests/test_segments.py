"""A graph run a segment at a time (`workbench.runtime.segments`, `Runner.stream`): every node once,
the values of one full marked run, only what later segments read held in between; and the
blocked float64 comparison path against the whole-array formulas it replaces."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from conftest import SAMPLES
from workbench.runtime import comparison, runners, segments
from workbench.runtime.ortchild import default_child
from workbench.precision.transform import convert

RESNET = SAMPLES / "resnet_tiny.onnx"
CALIB = SAMPLES / "calib" / "resnet_tiny.npz"


@pytest.fixture(scope="module")
def feeds():
    x = np.load(CALIB)["input"]
    return [{"input": x[:2]}, {"input": x[2:5]}]  # two feeds, different batch sizes


def _groups(names, size):
    return [names[i:i + size] for i in range(0, len(names), size)]


@pytest.mark.parametrize("kind,model", [("onnxruntime", "fp32"), ("emulate", "fp16")])
def test_stream_gives_the_values_of_one_marked_run_each_node_once(feeds, kind, model):
    proto = onnx.load(str(RESNET)) if model == "fp32" else convert(RESNET, "fp16").proto
    full = runners.make_runner(kind, proto, mark_all=True)
    whole = [full.infer(f) for f in feeds]
    names = segments.order_of(proto)
    assert len(names) > 20
    ran: list = []
    r = runners.make_runner(kind, proto, mark_all=True)
    inner = r._run_segment if kind == "onnxruntime" else None

    if inner is not None:  # count the nodes each segment model runs
        def counting(m, outs, fs):
            ran.extend(n.name or n.output[0] for n in m.graph.node)
            return inner(m, outs, fs)
        r._run_segment = counting
    for grp, got in zip(_groups(names, 5), r.stream(feeds, _groups(names, 5))):
        assert len(got) == len(feeds)
        for k, out in enumerate(got):
            assert sorted(out) == sorted(t for t in grp if t in whole[k])
            for t, v in out.items():
                assert v.dtype == whole[k][t].dtype
                np.testing.assert_array_equal(v, whole[k][t])  # bit-identical
    if inner is not None:
        assert sorted(ran) == sorted(n.name or n.output[0] for n in proto.graph.node)


def test_stream_holds_only_what_later_segments_read(feeds):
    """Between segments only the tensors a later node reads are kept: a segment's inputs are
    graph inputs or earlier outputs still needed, never the whole history."""
    proto = onnx.load(str(RESNET))
    names = segments.order_of(proto)
    readers = {}
    for i, n in enumerate(proto.graph.node):
        for x in n.input:
            readers.setdefault(x, set()).add(i)
    seen_inputs = []

    def run(m, outs, fs):
        seen_inputs.append([i.name for i in m.graph.input])
        r = runners.OnnxRuntimeRunner(m, outputs=outs).start()
        try:
            return [r._infer(f, outs) for f in fs]
        finally:
            r.close()
    groups = _groups(names, 3)
    got = list(segments.stream_segments(proto, feeds, groups, run))
    assert len(got) == len(groups) and len(seen_inputs) == len(groups)
    # a segment reads a few boundary tensors, not everything made before it
    assert max(len(x) for x in seen_inputs) <= 4
    made_before = 0
    for grp, ins in zip(groups, seen_inputs):
        for x in ins:
            assert x == "input" or x in names[:made_before]
        made_before += len(grp)


def test_stream_answers_groups_out_of_the_graph_order(feeds):
    """A candidate's graph may order tensors differently: a group asking for a tensor an
    earlier segment already made still gets it; names the graph lacks are left out."""
    proto = onnx.load(str(RESNET))
    names = segments.order_of(proto)
    whole = runners.OnnxRuntimeRunner(proto, mark_all=True).infer(feeds[0])
    groups = [[names[10], "not-a-tensor"], [names[3], names[2]], names[11:]]
    got = list(runners.OnnxRuntimeRunner(proto, mark_all=True).stream(feeds[:1], groups))
    assert sorted(got[0][0]) == [names[10]]
    assert sorted(got[1][0]) == sorted([names[3], names[2]])
    for g, grp in zip(got, groups):
        for t, v in g[0].items():
            np.testing.assert_array_equal(v, whole[t])


def test_layerwise_streams_with_the_same_figures_at_any_budget(feeds):
    from workbench import compare

    fp16 = convert(RESNET, "fp16").proto
    one = compare.layerwise(RESNET, fp16, feeds, memory_budget_mb=1e6)
    many = compare.layerwise(RESNET, fp16, feeds, memory_budget_mb=0.02)
    assert one.chunks == 1 and many.chunks > 5
    assert [t.to_dict() for t in one.tensors] == [t.to_dict() for t in many.tensors]
    assert [t.to_dict() for t in one.outputs] == [t.to_dict() for t in many.outputs]


def test_two_core_comparison_gives_the_one_core_figures(monkeypatch):
    """Large activations are compared on two threads (every other tensor in a helper): the
    same figures, recorded in graph order, as one thread gives."""
    from onnx import TensorProto, helper

    from workbench import compare
    from workbench.compare import layer_compare

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 128, 128])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="square"),
             helper.make_node("Add", ["b", "x"], ["c"], name="add"),
             helper.make_node("Exp", ["c"], ["d"], name="exp"),  # overflows in FP16
             helper.make_node("Sigmoid", ["d"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "big", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [1, 16, 128, 128])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    fp16 = convert(m, "fp16").proto
    feed = [{"x": (np.random.default_rng(0).standard_normal((1, 16, 128, 128)) * 4
                   ).astype(np.float32)}]
    reports = {}
    for cores in (1, 2):
        monkeypatch.setattr(layer_compare, "_cores", lambda: cores)
        reports[cores] = compare.layerwise(m, fp16, feed, memory_budget_mb=1e6).to_dict()
    assert reports[1] == reports[2]
    assert [t["tensor"] for t in reports[2]["tensors"]] == ["a", "b", "c", "d", "y"]
    assert any(t["inf"] for t in reports[2]["tensors"])  # the general path ran in the helper too


def test_segment_sessions_leave_nothing_in_the_child(feeds):
    proto = onnx.load(str(RESNET))
    child = default_child()
    names = segments.order_of(proto)
    list(runners.OnnxRuntimeRunner(proto, mark_all=True).stream(feeds, _groups(names, 4)))
    before = set(child.call("ping")["sessions"])
    files = set(child._models.values())
    list(runners.OnnxRuntimeRunner(proto, mark_all=True).stream(feeds, _groups(names, 4)))
    assert set(child.call("ping")["sessions"]) == before  # every segment session dropped
    assert set(child._models.values()) == files  # and its serialized model removed


def test_segmentable_refuses_sequence_graphs():
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("SplitToSequence", ["x"], ["s"]),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "seq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert not segments.segmentable(m) and segments.segmentable(onnx.load(str(RESNET)))
    # the runner falls back to whole runs and still answers
    x = np.arange(4, dtype=np.float32)
    got = list(runners.OnnxRuntimeRunner(m, mark_all=True).stream([{"x": x}], [["y"]]))
    np.testing.assert_array_equal(got[0][0]["y"], x)


# ----------------------------------------------------------------------------- comparison
def _whole_array(r0, g0, atol, rtol):
    """The general path's figures computed on whole float64 arrays (the formulas of the
    module docstring, written out)."""
    r, g = r0.astype(np.float64).ravel(), g0.astype(np.float64).ravel()
    S, SAT = comparison.SENTINEL, comparison.SATURATED
    same = (np.isnan(r) & np.isnan(g)) | (np.isinf(r) & (r == g))
    same |= (np.abs(r) >= S) & (np.abs(g) >= SAT) & (np.sign(r) == np.sign(g))
    with np.errstate(invalid="ignore"):
        d = np.where(same, 0.0, np.abs(r - g))
    d = np.where(np.isnan(d), np.inf, d)
    normal = np.isfinite(r) & (np.abs(r) < S)
    scale = float(np.abs(r[normal]).max()) if normal.any() else 1.0
    allowed = np.maximum(atol, rtol * np.abs(np.where(normal, r, 0.0)))
    rf, gf = np.where(normal, r, 0.0), np.where(normal & np.isfinite(g), g, 0.0)
    den = math.sqrt(float(rf @ rf)) * math.sqrt(float(gf @ gf))
    return dict(max_abs=float(d.max()),
                mean_abs=float(d.mean()) if np.isfinite(d).all() else math.inf,
                scale=scale or 1.0, mismatches=int(np.count_nonzero(d > allowed)),
                nan=int(np.count_nonzero(np.isnan(r) != np.isnan(g))),
                inf=int(np.count_nonzero(np.isinf(g) & np.isfinite(r) & ~same)),
                cosine=float(rf @ gf) / den if den else 0.0)


@pytest.mark.parametrize("case", ["overflow", "nan", "sentinel-masks", "finite-general"])
def test_blocked_general_path_matches_whole_array_formulas(case):
    rng = np.random.default_rng(3)
    n = 3 * (1 << 16) + 777  # several blocks and a ragged end
    r = (rng.standard_normal(n) * 100).astype(np.float32)
    g = (r + rng.standard_normal(n).astype(np.float32) * 0.5).astype(np.float32)
    if case == "overflow":
        g[rng.integers(0, n, 500)] = np.inf
        g[rng.integers(0, n, 300)] = -np.inf
    elif case == "nan":
        r[rng.integers(0, n, 100)] = np.nan
        g[rng.integers(0, n, 200)] = np.nan
    elif case == "sentinel-masks":
        idx = rng.integers(0, n, 1000)
        r[idx] = -3.4e38
        g[idx] = -np.inf
        r[idx[:10]] = np.inf
        g[idx[:10]] = np.inf
    else:  # finite, but in float64: the general path on finite data
        r, g = r.astype(np.float64), g.astype(np.float64)
    c = comparison.compare_tensor("t", r, g, 1e-2, 1e-2)
    want = _whole_array(r, g, 1e-2, 1e-2)
    for k in ("mismatches", "nan", "inf", "max_abs", "scale"):
        assert getattr(c, k) == want[k], k
    assert c.mean_abs == pytest.approx(want["mean_abs"], rel=1e-12)
    # the float32 path takes the cosine from the difference's sums: 1 - cos to 1e-6 of itself
    assert 1 - c.cosine == pytest.approx(1 - want["cosine"], rel=1e-6, abs=1e-15)
    assert c.finite == (want["nan"] == 0 and want["inf"] == 0)
    if case == "sentinel-masks":
        assert c.inf == 0 and c.nan == 0  # masks held as infinities are no error


def test_ahead_keeps_order_raises_producer_errors_and_stops_early():
    import threading

    assert list(segments.ahead(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise ValueError("segment 2 broke")
    it = segments.ahead(failing())
    assert next(it) == 1
    with pytest.raises(ValueError, match="segment 2 broke"):
        next(it)
    made = []

    def counted():
        for i in range(1000):
            made.append(i)
            yield i
    it = segments.ahead(counted())
    assert next(it) == 0
    it.close()  # the consumer stops: the producer stops too, at most a step or two ahead
    assert len(made) <= 3
    assert not any(t.name == "segments-ahead" for t in threading.enumerate())


def test_ahead_starts_producing_before_the_first_next():
    """Two streams side by side (a reference and a candidate) both start at once: the second
    must not wait until the caller has taken the first one's first item."""
    import threading

    started = [threading.Event(), threading.Event()]

    def made(k):
        started[k].set()
        yield k
    a, b = segments.ahead(made(0)), segments.ahead(made(1))
    assert started[0].wait(5) and started[1].wait(5)  # both, before any next()
    assert (next(a), next(b)) == (0, 1)
    assert list(a) == [] and list(b) == []
    assert not any(t.name == "segments-ahead" for t in threading.enumerate())
    c = segments.ahead(made(0))
    c.close()  # closed before its first next: the thread ends
    assert not any(t.name == "segments-ahead" for t in threading.enumerate())


def test_ahead_holds_at_most_two_items_the_callers_and_the_next():
    """layerwise plans chunks at half the budget for two in flight: a third must not exist."""
    import time

    alive: set = set()
    peak = [0]

    def made():
        for i in range(6):
            alive.add(i)
            peak[0] = max(peak[0], len(alive))
            yield i
    for i in segments.ahead(made()):
        time.sleep(0.05)  # the caller compares slowly: the producer runs ahead as far as it may
        alive.discard(i)
    assert peak[0] == 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64])
@pytest.mark.parametrize("sentinels", [True, False])
def test_plain_reference_path_gives_the_full_general_paths_figures_bit_for_bit(dtype,
                                                                                sentinels):
    """A reference of finite, unmasked values skips the reference-side NaN/inf/mask passes;
    every figure stays the full general path's, bit for bit (candidate inf, NaN, finite)."""
    rng = np.random.default_rng(5)
    n = 2 * (1 << 16) + 321
    r = (rng.standard_normal(n) * 300).astype(dtype)
    g = (r.astype(np.float64) + rng.standard_normal(n)).astype(np.float32)
    g[rng.integers(0, n, 400)] = np.inf
    g[rng.integers(0, n, 200)] = -np.inf
    g[rng.integers(0, n, 100)] = np.nan
    g[: 1 << 16] = np.clip(g[: 1 << 16], -1e4, 1e4)  # a block with finite candidate values
    sentinels = comparison.SENTINEL if sentinels else math.inf  # (the mask limit)
    assert comparison._plain_reference(r, sentinels)
    args = ("t", [n], "x", n, r, g, 1e-2, 1e-2)
    fast = comparison._general_plain(*args, None)
    full = comparison._general_full(*args, sentinels, None)
    assert fast.inf > 0 and fast.nan > 0 and not fast.finite
    for f in comparison.TensorComparison.__dataclass_fields__:
        assert getattr(fast, f) == getattr(full, f), f
    # a candidate finite throughout: the mean is summed too
    g2 = np.nan_to_num(g, posinf=1e4, neginf=-1e4, nan=0.0)
    fast = comparison._general_plain("t", [n], "x", n, r, g2, 1e-2, 1e-2, None)
    full = comparison._general_full("t", [n], "x", n, r, g2, 1e-2, 1e-2, sentinels, None)
    assert math.isfinite(fast.mean_abs)
    for f in comparison.TensorComparison.__dataclass_fields__:
        assert getattr(fast, f) == getattr(full, f), f
    # references with NaN, inf or (with sentinels) masks take the full path
    for bad in (np.nan, np.inf, 3.4e38):
        if np.dtype(dtype).kind == "f" and (bad != 3.4e38 or math.isfinite(sentinels)):
            r2 = r.copy()
            with np.errstate(over="ignore"):
                r2[7] = bad
            assert not comparison._plain_reference(r2, sentinels)


def test_ahead_failure_returns_the_next_error_or_none_and_closes():
    def failing():
        raise ValueError("broke")
        yield 1
    it = segments.ahead(failing())
    err = it.failure(10)
    assert isinstance(err, ValueError) and str(err) == "broke"
    with pytest.raises(StopIteration):
        next(it)
    fine = segments.ahead(iter([1, 2, 3]))
    assert fine.failure(10) is None  # an item, not an error (dropped: the stream is closed)
    with pytest.raises(StopIteration):
        next(fine)
