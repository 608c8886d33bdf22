"""The comparison core: runners (onnxruntime, float16 reference) and the one output comparison
(metrics, pass rule, sentinel policy, per-precision defaults)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from conftest import SAMPLES
from workbench.runtime import comparison, runners
from workbench.runtime.equivalence import compare_outputs as verdict_of
from workbench.precision.transform import convert

RESNET = SAMPLES / "resnet_tiny.onnx"
OVERFLOW = SAMPLES / "fp16_overflow.onnx"
CALIB = SAMPLES / "calib" / "resnet_tiny.npz"


# ----------------------------------------------------------------------------- metrics
def test_metrics_have_one_relative_definition():
    ref = np.array([[4.0, -2.0, 1.0, 0.0]], np.float32)
    got = np.array([[4.02, -2.0, 1.0, 0.01]], np.float32)
    c = comparison.compare_tensor("y", ref, got, 1e-3, 1e-3, top1=True)
    d = np.abs(got.astype(np.float64) - ref)
    assert c.max_abs == pytest.approx(d.max()) and c.mean_abs == pytest.approx(d.mean())
    assert c.scale == 4.0
    assert c.rel == pytest.approx(d.max() / 4.0) and c.mean_rel == pytest.approx(d.mean() / 4.0)
    cos = float(np.dot(ref.ravel(), got.ravel().astype(np.float64))
                / (np.linalg.norm(ref) * np.linalg.norm(got.astype(np.float64))))
    assert c.cosine == pytest.approx(cos)
    assert c.mismatches == 2 and not c.passed  # 0.02 > 4e-3 and 0.01 > 1e-3 (|ref| = 0)
    assert c.top1 == 1.0 and c.nan == 0 and c.inf == 0 and c.finite
    assert c.to_dict()["rel"] == c.rel


def test_pass_rule_is_polygraphys_elemwise_check():
    """An element fails only when it exceeds atol AND rtol * |ref| (not their sum)."""
    ref = np.array([100.0, 0.0])
    ok = comparison.compare_tensor("y", ref, np.array([100.9, 0.009]), 1e-2, 1e-2)
    assert ok.passed  # 0.9 <= 1e-2 * 100, 0.009 <= atol
    bad = comparison.compare_tensor("y", ref, np.array([100.0, 0.011]), 1e-2, 1e-2)
    assert not bad.passed and bad.mismatches == 1
    # with atol = rtol = tol it is surgery verification's d <= tol * max(1, |ref|)
    a = {"y": np.array([1e6, 1.0], np.float32)}
    assert verdict_of(a, {"y": np.array([1e6 + 1.0, 1.0], np.float32)}).equivalent
    assert not verdict_of(a, {"y": np.array([1e6, 1.0 + 1e-4], np.float32)}).equivalent


def test_sentinels_saturating_in_fp16_still_mask_but_not_in_same_precision_checks():
    ref = np.array([-3.4e38, 1.0, 2.0], np.float32)
    got = np.array([-np.inf, 1.0, 2.0], np.float16)
    c = comparison.compare_tensor("mask", ref, got, 1e-2, 1e-2)
    assert c.passed and c.max_abs == 0 and c.finite and c.inf == 0 and c.scale == 2.0
    strict = comparison.compare_tensor("mask", ref, got, 1e-2, 1e-2, sentinels=False)
    assert not strict.passed and strict.inf == 1 and not strict.finite
    flipped = comparison.compare_tensor("mask", ref, np.array([65504, 1, 2], np.float16),
                                        1e-2, 1e-2)
    assert not flipped.passed  # a sign flip is an error, sentinel or not


def test_nan_and_inf_are_counted_not_hidden():
    ref = np.array([1.0, 2.0, 3.0, np.nan])
    got = np.array([np.nan, np.inf, 3.0, np.nan])
    c = comparison.compare_tensor("y", ref, got, 1e-2, 1e-2)
    assert c.nan == 1 and c.inf == 1 and not c.finite and not c.passed
    assert math.isinf(c.max_abs) and math.isinf(c.rel) and c.to_dict()["max_abs"] == "inf"
    v = verdict_of({"y": ref}, {"y": got})
    assert v.status == "different" and "NaNs appear or disappear" in v.reason


def test_structural_mismatch_is_a_reason_not_a_number():
    ref = {"y": np.zeros((2, 3), np.float32)}
    c = comparison.compare_outputs(ref, {"z": np.zeros((2, 3))}, 1e-3, 1e-3)
    assert not c.passed and "missing" in c.reason
    c = comparison.compare_outputs(ref, {"y": np.zeros((3, 2))}, 1e-3, 1e-3)
    assert not c.passed and "[2, 3] -> [3, 2]" in c.reason
    v = verdict_of(ref, {"z": np.zeros((2, 3))})
    assert v.status == "different" and v.reason == "output 'y' is missing after the change"


def test_default_tolerances_follow_the_candidates_precision():
    fp16 = convert(RESNET, "fp16").proto
    int8 = convert(RESNET, "int8", calibration=CALIB, calibrate_method="minmax",
                   measure=False).proto
    assert comparison.infer_precision(onnx.load(str(RESNET))) == "fp32"
    assert comparison.infer_precision(fp16) == "fp16"
    assert comparison.infer_precision(int8) == "int8"
    from workbench.precision import table

    assert table.tolerances("fp16") == (1e-2, 1e-2)
    assert table.tolerances(None) == table.tolerances("fp32") == (1e-3, 1e-3)
    assert table.tolerances("fp16", atol=1e-4) == (1e-4, 1e-2)


# ----------------------------------------------------------------------------- runners
def test_reference_runner_computes_in_float16_onnxruntime_does_not():
    fp16 = convert(OVERFLOW, "fp16").proto
    feed = {"input": np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)}
    ort = runners.OnnxRuntimeRunner(fp16).infer(feed)["output"]
    ref = runners.ReferenceRunner(fp16).infer(feed)["output"]
    assert np.isfinite(ort).all() and not np.isfinite(ref).all()
    assert runners.make_runner("auto", fp16).name == "emulate"
    assert runners.make_runner("auto", OVERFLOW).name == "onnxruntime"
    emu = runners.EmulatedRunner(fp16).infer(feed)["output"]
    assert not np.isfinite(emu).all()  # the emulation shows the overflow ORT's upcast hides


def test_emulation_rounds_every_stored_tensor_like_float16():
    """The emulated graph computes in FP32 but every FP16 value it stores equals its float16
    rounding (the value a GPU keeps), and values past 65504 saturate to inf."""
    from workbench.runtime.emulation import emulate

    fp16 = convert(RESNET, "fp16", keep_io_types=True).proto
    em = emulate(fp16)
    assert em is not None and em.low and all(t == 10 for t in em.low.values())
    assert not any(t.data_type == 10 for t in em.proto.graph.initializer)
    feed = {"input": np.load(CALIB)["input"][:2]}
    r = runners.EmulatedRunner(fp16, mark_all=True)
    out = r.infer(feed)
    stored = [n for n in r.order if n in em.low and n in out]
    assert len(stored) > 10
    for n in stored:
        v = out[n]
        assert v.dtype == np.float32
        np.testing.assert_array_equal(v, v.astype(np.float16).astype(np.float32))
    # graph outputs are the same tensors the marked run gives
    plain = runners.EmulatedRunner(fp16).infer(feed)
    for k, v in plain.items():
        np.testing.assert_array_equal(v, out[k])


@pytest.mark.parametrize("name,target", [("resnet_tiny", "fp16"), ("bert_tiny", "fp16"),
                                         ("fp16_overflow", "fp16"), ("resnet_tiny", "bf16")])
def test_emulation_skips_only_roundings_that_change_no_bit(name, target):
    """No rounding pair after values already exact in the low type (Relu/Reshape/... of
    rounded inputs, low-float constants) and one Cast fewer after Casts to the low type: every
    marked tensor is bit-identical to the emulation that rounds everything."""
    from workbench.runtime.emulation import emulate
    from workbench.runtime.equivalence import make_inputs

    src = onnx.load(str(SAMPLES / f"{name}.onnx"))
    low = convert(src, target, measure=False).proto
    lean, full = emulate(low), emulate(low, skip_exact=False)
    assert len(lean.proto.graph.node) < len(full.proto.graph.node)
    feed = make_inputs(src, seed=0)
    if name == "fp16_overflow":
        feed = {k: v * 50 for k, v in feed.items()}  # past FP16's range: saturation shows
    a = runners.session(lean.proto, None).run(lean.order, feed)
    b = runners.session(full.proto, None).run(full.order, feed)
    for t, x, y in zip(lean.order, a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True), t
    if name == "fp16_overflow":
        assert any(not np.isfinite(x).all() for x in a)


def test_fast_finite_comparison_matches_the_float64_path():
    """compare_tensor's float32 fast path gives the general (float64) path's figures."""
    rng = np.random.default_rng(0)
    r = rng.standard_normal((4, 3000)).astype(np.float32) * 7
    g = (r + rng.standard_normal(r.shape).astype(np.float32) * 0.03).astype(np.float16)
    fast = comparison.compare_tensor("t", r, g, 1e-2, 1e-2)
    slow = comparison.compare_tensor("t", r.astype(np.float64), g.astype(np.float64), 1e-2, 1e-2)
    assert fast.mismatches == slow.mismatches and fast.passed == slow.passed
    for k in ("max_abs", "mean_abs", "rel", "mean_rel", "scale", "cosine"):
        assert getattr(fast, k) == pytest.approx(getattr(slow, k), rel=1e-6), k
    assert fast.mismatches > 0  # the data straddles the tolerance: the count is exercised


@pytest.mark.parametrize("cand", [np.float32, np.float16])
def test_float32_path_with_an_overflowing_candidate_matches_the_float64_path(cand):
    """A candidate with NaN / inf of its own (FP16 overflow) beside a finite reference stays
    on the float32 path; its figures are the float64 general path's (counts exactly)."""
    rng = np.random.default_rng(3)
    n = 3 * (1 << 16) + 17
    r = (rng.standard_normal(n) * 300).astype(np.float32)
    g = (r + rng.standard_normal(n).astype(np.float32) * 0.5).astype(cand)
    g[rng.integers(1 << 16, n, 300)] = np.inf
    g[rng.integers(1 << 16, n, 90)] = -np.inf
    g[rng.integers(1 << 16, n, 40)] = np.nan
    args = ("t", [n], "x", n, r, g, 1e-2, 1e-2)
    fast = comparison._finite_case(*args, comparison.SENTINEL, None)
    slow = comparison._general_plain("t", [n], "x", n, r.astype(np.float64),
                                     g.astype(np.float64), 1e-2, 1e-2, None)
    assert fast is not None and fast.nan == slow.nan > 0 and fast.inf == slow.inf > 0
    assert fast.mismatches == slow.mismatches and not fast.finite and not fast.passed
    assert fast.max_abs == slow.max_abs == math.inf and fast.mean_abs == math.inf
    for k in ("scale", "cosine"):
        assert getattr(fast, k) == pytest.approx(getattr(slow, k), rel=1e-9), k
    # a reference with NaN, inf or a mask sentinel is left to the general path
    for bad in (np.nan, np.inf, 3.0e38):
        r2 = r.copy()
        r2[n - 5] = bad
        assert comparison._finite_case("t", [n], "x", n, r2, g, 1e-2, 1e-2, comparison.SENTINEL,
                                        None) is None
    # finite values whose difference passes float32's range (no sentinels) are left to it too
    big = np.array([3.0e38, -3.0e38], np.float32)
    assert comparison._finite_case("t", [2], "x", 2, big, -big, 1e-2, 1e-2, math.inf,
                                    None) is None
    c = comparison.compare_tensor("t", big, -big, 1e-2, 1e-2, sentinels=False)
    assert c.max_abs == pytest.approx(6.0e38, rel=1e-6) and c.nan == c.inf == 0


def test_runners_cast_feeds_to_declared_types_and_mark_all():
    io16 = convert(RESNET, "fp16", keep_io_types=False).proto
    feed = {"input": np.load(CALIB)["input"][:2], "unused": np.zeros(1)}
    for r in (runners.OnnxRuntimeRunner(io16), runners.ReferenceRunner(io16)):
        assert r.input_metadata()["input"].dtype == np.float16
        out = r.infer(feed)  # FP32 data in, an FP16 model: cast, extra key dropped
        assert out["logits"].dtype == np.float16 and out["logits"].shape == (2, 10)
    m = runners.OnnxRuntimeRunner(RESNET, mark_all=True)
    out = m.infer(feed)
    assert m.order[-1] == "logits" and set(m.order) <= set(out) and len(m.order) > 20
    plain = runners.run(RESNET, feed)
    assert np.array_equal(plain["logits"], out["logits"])  # marking changes no numbers


def test_limit_samples_spans_batches_in_order():
    feeds = [{"x": np.arange(5)}, {"x": np.arange(5, 10)}]
    got = runners.limit_samples(feeds, 7)
    assert [f["x"].tolist() for f in got] == [[0, 1, 2, 3, 4], [5, 6]]
    assert runners.samples_in(got[1]) == 2


@pytest.mark.parametrize("noise", [0.0, 1e-4, 0.3, 3.0])
def test_fast_path_cosine_keeps_its_distance_from_one(noise):
    """The float32 path's cosine (from the difference's sums) against exactly rounded sums:
    1 - cosine to 1e-4 of itself, for an FP16 rounding (1 - cos ~ 1e-7) and for errors as
    large as the values (cos far from 1)."""
    rng = np.random.default_rng(7)
    n = 3 * (1 << 16) + 123
    r = (rng.standard_normal(n) * 5).astype(np.float32)
    g = (r.astype(np.float16).astype(np.float32)
         + (rng.standard_normal(n) * noise).astype(np.float32))
    c = comparison.compare_tensor("t", r, g, 1e-3, 1e-3)
    R, G = r.astype(np.float64), g.astype(np.float64)  # products of float32 are exact here
    rg, rr, gg = (math.fsum(R * G), math.fsum(R * R), math.fsum(G * G))
    exact = 1.0 - rg / math.sqrt(rr * gg)
    assert exact > 0
    assert abs((1.0 - c.cosine) - exact) <= 1e-4 * exact + 1e-15, (c.cosine, exact)


def test_fp16_tensors_compare_without_a_numpy_warning():
    """Identical FP16 outputs printed 'RuntimeWarning: overflow encountered in cast' (the mask
    sentinel 1e30 compared in float16) into the user's terminal."""
    import warnings

    a = np.linspace(-3, 3, 50).astype(np.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert comparison.compare_tensor("x", a, a.copy(), 0.01, 0.01).passed
        b = a.copy()
        b[3] += np.float16(1)
        assert not comparison.compare_tensor("x", a, b, 0.01, 0.01).passed


def test_top1_of_a_segmentation_map_is_the_class_per_pixel():
    """A [N, C, H, W] segmentation output showed 'top-1 0.822' (the argmax over W); the class
    of each pixel is along the channel axis. [N, C] scores and [N, T, V] logits keep the last."""
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((2, 5, 8, 8)).astype(np.float32)
    got = ref.copy()
    flip = rng.random((2, 8, 8)) < 0.25  # a quarter of the pixels get another class
    n, hh, ww = np.nonzero(flip)
    got[n, (ref.argmax(1)[n, hh, ww] + 1) % 5, hh, ww] += 10.0
    want = float((ref.argmax(1) == got.argmax(1)).mean())
    c = comparison.compare_tensor("seg", [ref], [got], 1e-3, 1e-3, top1=True)
    assert c.top1 == pytest.approx(want) and want == pytest.approx(1 - flip.mean())
    assert c.top1 != pytest.approx(float((ref.argmax(-1) == got.argmax(-1)).mean()))
    assert comparison.class_axis((4, 1000)) == 1 and comparison.class_axis((2, 7, 50)) == 2
    assert comparison.class_axis((2, 5, 8, 8)) == 1 and comparison.class_axis((2, 1, 8, 8)) is None
    assert comparison.class_axis((10,)) is None


def test_a_kv_cache_or_hidden_state_is_no_class_verdict():
    """An INT8 decoder build said 'present.0.key ... top-1 agreement 0.990 ... and the same
    top-1 classes': a [N, heads, T, D] cache read as a class map along the heads."""
    assert comparison.class_scores((4, 1000), "logits")
    assert comparison.class_scores((2, 21, 64, 64), "out")
    for name in ("present.0.key", "present_value_3", "past_key_values.1.value", "kv_cache",
                 "last_hidden_state", "/encoder/hidden_states", "key_cache.2"):
        assert not comparison.class_scores((1, 4, 9, 16), name), name
    assert not comparison.class_scores((2, 7, 50), "logits")  # [N, T, V]: said elsewhere
    from widgets.precision import error_table_html

    row = {"max_abs_err": 0.1, "mean_abs_err": 0.01, "rel_err": 0.02, "cosine": 0.999,
           "top1_agreement": 0.99, "passed": False, "atol": 0.01, "rtol": 0.01}
    html = error_table_html({"present.0.key": {**row, "shape": [1, 4, 9, 16]},
                             "probs": {**row, "shape": [1, 10]}}, "INT8 vs FP32")
    assert html.count("<td>0.990</td>") == 1 and "<td>–</td>" in html


def test_a_mask_constant_of_the_tensors_own_is_not_its_scale():
    """'score' = Where(mask, scores, -1e9): INT8 said 'max abs 0.0418, rel 4.18e-11, cosine
    1.000000' (relative to the -1e9 mask); relative to the scores (|x| <= 0.48) it is 8.7%."""
    rng = np.random.default_rng(0)
    scores = rng.uniform(-0.48, 0.48, (4, 32)).astype(np.float32)
    masked = rng.random((4, 32)) < 0.3
    ref = np.where(masked, np.float32(-1e9), scores)
    got = ref.copy()
    got[~masked] += rng.uniform(-0.0418, 0.0418, (~masked).sum()).astype(np.float32)
    c = comparison.compare_tensor("score", ref, got, 0.01, 0.01)
    assert comparison.data_sentinel(ref.reshape(-1)) == pytest.approx(1e9)
    assert c.scale <= 0.48 and c.rel == pytest.approx(c.max_abs / c.scale) and c.rel > 0.05
    assert not c.passed and c.cosine < 0.9999
    # an FP16 candidate holds the mask saturated (-65504 or -inf): still a mask, no error there
    fp16 = np.where(masked, np.float32(-65504), scores)
    c16 = comparison.compare_tensor("score", ref, fp16, 0.01, 0.01)
    assert c16.max_abs == 0 and c16.passed and c16.scale <= 0.48
    inf16 = np.where(masked, np.float32(-np.inf), scores)  # (a Cast to FP16 of -1e9)
    ci = comparison.compare_tensor("score", ref, inf16, 0.01, 0.01)
    assert ci.passed and ci.inf == 0 and ci.magnitude == pytest.approx(1e9)
    # HF BERT's -10000 mask the same way; a -1e4 the candidate lost (0) is an error
    ref4 = np.where(masked, np.float32(-1e4), scores)
    assert comparison.compare_tensor("s", ref4, ref4 + 0, 0.01, 0.01).scale <= 0.48
    lost = np.where(masked, np.float32(0), scores)
    assert not comparison.compare_tensor("s", ref4, lost, 0.01, 0.01).passed
    # data, not a mask: many distinct large values, or large values close to the rest
    boxes = rng.uniform(0, 1200, (100, 4)).astype(np.float32)
    assert comparison.data_sentinel(boxes.reshape(-1)) is None
    clipped = np.minimum(rng.uniform(0, 2000, 200), 1500).astype(np.float32)
    assert comparison.data_sentinel(clipped) is None  # the rest is not 100x smaller
    assert comparison.data_sentinel(np.full(10, -1e9, np.float32)) is None  # nothing else
    # same-precision checks keep every value as data
    assert comparison.compare_tensor("score", ref, ref.copy(), 0.01, 0.01,
                                     sentinels=False).scale == pytest.approx(1e9)
