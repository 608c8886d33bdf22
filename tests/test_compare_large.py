"""compare on models held by reference (`workbench.core.weights`): the structure without weight
bytes, each weight a memmap fed to the segment that reads it. Test-sized decoders stand in for
multi-GB ones with the size threshold lowered to 0 (the route is the same); what is asserted is
what makes a > 2 GB model work: no model is serialized with its weights, no weight is loaded in
the comparing process, each segment maps at most its budget of weights."""
from __future__ import annotations

import os
import subprocess

import numpy as np
import onnx
import pytest

from kv_decoders import make_decoder


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    from kv_decoders import large_model

    # wide enough that most weights are over the inline size (64 KB): held by reference
    cfg = large_model().DecoderConfig(vocab=512, hidden=128, layers=2, heads=4, kv_heads=2,
                                      inter=384, max_pos=128)
    return make_decoder(tmp_path_factory.mktemp("dec"), "optimum", True, config=cfg)


def _data_bytes(path) -> int:
    return os.path.getsize(os.path.join(os.path.dirname(path), "model.onnx_data"))


def test_by_reference_keeps_weights_out_of_the_structure(decoder):
    from workbench.core import weights

    m = weights.by_reference(decoder)
    refs = weights.weight_refs(m)
    assert refs and all(os.path.isabs(r.file) for r in refs.values())
    assert m.ByteSize() < _data_bytes(decoder) / 4  # references, not bytes
    assert sum(r.nbytes for r in refs.values()) > 0.9 * _data_bytes(decoder)
    # a reference reads back as the exact bytes onnx loads
    full = onnx.load(str(decoder))
    name = next(iter(refs))
    want = onnx.numpy_helper.to_array(next(t for t in full.graph.initializer if t.name == name))
    got = refs[name].array()
    assert isinstance(got, np.memmap) and np.array_equal(got, want)


def test_as_inputs_and_restore_round_trip(decoder):
    from workbench.core import weights

    m = weights.by_reference(decoder)
    refs = weights.weight_refs(m)
    before = {t.name for t in m.graph.initializer}
    weights.as_inputs(m)
    ins = {i.name for i in m.graph.input}
    assert set(refs) <= ins and not (set(refs) & {t.name for t in m.graph.initializer})
    weights.restore(m, refs)
    assert {t.name for t in m.graph.initializer} == before
    assert weights.weight_refs(m) == refs


def test_search_by_reference_matches_the_in_memory_search(decoder):
    from workbench.compare import find_exclusions

    a = find_exclusions(str(decoder), "fp16", allow_random=True, stream_weights_mb=0)
    b = find_exclusions(str(decoder), "fp16", allow_random=True, stream_weights_mb=1e6)
    assert a.passed == b.passed
    ra, rb = a.rounds[0]["worst_output_rel"], b.rounds[0]["worst_output_rel"]
    assert ra == pytest.approx(rb, rel=1e-6, abs=1e-9)
    ta = {t.tensor: t.max_abs for t in a.final.tensors}
    tb = {t.tensor: t.max_abs for t in b.final.tensors}
    assert ta.keys() == tb.keys() and len(ta) > 50
    for k in ta:
        assert ta[k] == pytest.approx(tb[k], rel=1e-5, abs=1e-7), k


def test_no_weight_is_loaded_or_serialized_whole(decoder, monkeypatch):
    """Over a whole search: the comparing process loads no weight over the inline size
    (numpy_helper.to_array, external data loads, Model.load_weights all counted) and every
    model handed to onnxruntime is a fraction of the weights (no copy of them in any protobuf:
    what fails past 2 GB)."""
    from onnx import external_data_helper, numpy_helper

    from workbench.core import model as wmodel
    from workbench.runtime import ortchild
    from workbench.core import weights
    from workbench.compare import find_exclusions

    loaded = []
    to_array = numpy_helper.to_array
    load_ext = external_data_helper.load_external_data_for_tensor

    def counted_to_array(t, *a, **k):
        out = to_array(t, *a, **k)
        loaded.append(("to_array", t.name, out.nbytes))
        return out

    def counted_ext(t, base):
        load_ext(t, base)
        loaded.append(("external", t.name, len(t.raw_data)))

    def no_full_load(self):
        raise AssertionError("Model.load_weights called: the whole model loaded")

    monkeypatch.setattr(numpy_helper, "to_array", counted_to_array)
    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", counted_ext)
    monkeypatch.setattr(wmodel.Model, "load_weights", no_full_load)
    sent = []
    load = ortchild.OrtChild.load

    def counted_load(self, model, **kw):
        if isinstance(model, (bytes, bytearray)):
            sent.append(len(model))
        return load(self, model, **kw)

    monkeypatch.setattr(ortchild.OrtChild, "load", counted_load)
    s = find_exclusions(str(decoder), "fp16", allow_random=True, stream_weights_mb=0)
    assert s.rounds
    total = _data_bytes(decoder)
    big = [x for x in loaded if x[2] >= weights.INLINE_BYTES]
    assert not big, big[:3]
    ext = [x[1] for x in loaded if x[0] == "external"]  # the small weights read in: once each
    assert ext and len(ext) == len(set(ext))
    assert sent, "the segments ran in the onnxruntime child"
    assert max(sent) < total / 4, (max(sent), total)


def test_segments_map_at_most_their_weight_budget(decoder):
    from workbench.core import weights
    from workbench.compare.layer_compare import plan_chunks, tensor_weights
    from workbench.runtime.segments import order_of

    m = weights.by_reference(decoder)
    order = order_of(m)
    w = tensor_weights(m, order)
    assert sum(w.values()) == sum(r.nbytes for r in weights.weight_refs(m).values())
    budget = 64 << 10
    chunks = plan_chunks(order, {}, None, 1, w, budget)
    assert len(chunks) > 4
    largest = max(r.nbytes for r in weights.weight_refs(m).values())
    for c in chunks:  # within the budget, or one tensor whose weights exceed it on their own
        assert sum(w.get(t, 0) for t in c) <= max(budget, largest)


def test_cli_compare_to_fp16_by_reference(decoder):
    env = dict(os.environ, WORKBENCH_STREAM_WEIGHTS_MB="0")
    r = subprocess.run(["workbench", "compare", str(decoder), "--to", "fp16", "--allow-random",
                        "--max-memory", "600"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "fp16: within budget" in r.stdout


def test_int8_search_on_a_model_held_by_reference_says_why(decoder, monkeypatch, tmp_path):
    """Quantizing reads every weight: an INT8 search runs in memory while the model fits a
    protobuf, and past that says why it cannot."""
    from workbench.core import weights
    from workbench.compare import find_exclusions
    from workbench.runtime.equivalence import make_inputs
    from workbench.core.errors import WorkbenchError

    data = tmp_path / "calib.npz"
    np.savez(data, **make_inputs(weights.by_reference(decoder), seed=2))
    s = find_exclusions(str(decoder), "int8", calibration=str(data), stream_weights_mb=0,
                        max_rounds=0)
    assert len(s.rounds) == 1
    monkeypatch.setattr(weights, "PROTOBUF_SAFE_MB", 0.0)
    with pytest.raises(WorkbenchError) as e:
        find_exclusions(str(decoder), "int8", allow_random=True, stream_weights_mb=0)
    assert "float targets" in e.value.message and "--to fp16" in e.value.hint


def test_a_weight_over_the_segment_budget_is_said(decoder, monkeypatch):
    from workbench.core import weights
    from workbench.compare import layer_compare

    m = weights.by_reference(decoder)
    assert layer_compare.memory_finding(m, None) is None
    assert layer_compare.memory_finding(m, 4096) is None  # 896 MB a segment: fits
    monkeypatch.setattr(layer_compare, "weight_budget_mb", lambda mb: 0.01)
    f = layer_compare.memory_finding(m, 600)
    assert f is not None and f.code == "over-memory" and "--max-memory" in f.hint
    big = max(weights.weight_refs(m).values(), key=lambda r: r.nbytes)
    assert f.tensors == [big.name]


def test_compare_ref_with_a_large_fp16_candidate_by_reference(decoder, tmp_path):
    """compare REF CAND where the FP16 candidate keeps its weights in external data: both are
    held by reference (the candidate's FP16 weights fed as stored, widened where read), and
    the figures agree with the in-memory run within an FP16 rounding step."""
    from workbench.compare import layerwise
    from workbench.precision.transform import convert

    cand = convert(str(decoder), "fp16", measure=False).proto
    path = tmp_path / "cand.onnx"
    onnx.save(cand, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="cand.data", size_threshold=1024)
    from workbench.core import weights

    held = weights.weight_refs(weights.by_reference(path))
    assert any(r.elem_type == 10 for r in held.values())  # FP16 weights held by reference
    a = layerwise(str(decoder), str(path), allow_random=True, stream_weights_mb=0)
    b = layerwise(str(decoder), str(path), allow_random=True, stream_weights_mb=1e6)
    assert a.candidate_runner == b.candidate_runner == "emulate"
    assert a.outputs_pass == b.outputs_pass and len(a.tensors) == len(b.tensors)
    for x, y in zip(a.outputs, b.outputs):
        assert x.tensor == y.tensor
        # (GEMMs on a weight fed as an input vs a constant accumulate in another order: an
        # FP16 rounding can land one step apart)
        assert x.max_abs == pytest.approx(y.max_abs, rel=0.5, abs=2e-3)


def test_a_whole_run_of_a_model_held_by_reference_feeds_its_weights(decoder, monkeypatch):
    """OnnxRuntimeRunner on a structure held by reference runs it whole (the engine-side
    reference, a selection check): weights fed as memmaps, the model sent without them."""
    from workbench.runtime import ortchild
    from workbench.core import weights
    from workbench.runtime.equivalence import make_inputs
    from workbench.runtime.runners import OnnxRuntimeRunner

    sent = []
    load = ortchild.OrtChild.load

    def counted_load(self, model, **kw):
        if isinstance(model, (bytes, bytearray)):
            sent.append(len(model))
        return load(self, model, **kw)

    monkeypatch.setattr(ortchild.OrtChild, "load", counted_load)
    m = weights.by_reference(decoder)
    feed = make_inputs(m, seed=1)
    got = OnnxRuntimeRunner(m).infer(feed)
    want = OnnxRuntimeRunner(str(decoder)).infer(feed)
    assert sent and max(sent) < _data_bytes(decoder) / 4
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)


def test_in_memory_compare_loads_each_model_once(decoder, tmp_path, monkeypatch):
    """Below the threshold the models are compared in memory: each is loaded with its
    weights once over the run (the search, and compare REF CAND with its sample feeds and
    its look for selection ops), never again to read the graph."""
    from workbench.core import model as wmodel
    from workbench.compare import find_exclusions, layerwise
    from workbench.precision.transform import convert

    calls = []
    load = wmodel.Model.load_weights

    def counted(self):
        calls.append(str(self.path))
        return load(self)

    monkeypatch.setattr(wmodel.Model, "load_weights", counted)
    find_exclusions(str(decoder), "fp16", allow_random=True, stream_weights_mb=1e6)
    assert calls == [str(decoder)]
    cand = tmp_path / "cand.onnx"
    onnx.save(convert(str(decoder), "fp16", measure=False).proto, str(cand))
    calls.clear()
    layerwise(str(decoder), str(cand), allow_random=True, stream_weights_mb=1e6)
    # the candidate embeds its weights: opening it read them, there is nothing more to load
    assert calls == [str(decoder)]


def test_a_weight_beyond_fp16_saturates_as_the_streamed_conversion_stores_it(tmp_path):
    """The candidate over the original weights rounds each weight by the Cast before its
    readers; a finite weight beyond FP16's range is saturated first (as the streamed FP16
    conversion of a large model stores it), where the Cast alone would make it inf."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    w[:, 0] = 1.0e5  # beyond 65504, in every row a Gather picks
    g = helper.make_graph(
        [helper.make_node("Gather", ["w", "ids"], ["e"], name="embed"),
         helper.make_node("Mul", ["e", "scale"], ["y"], name="scale")], "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 256])],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array(0.01, np.float32), "scale")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="m.data", size_threshold=0)
    from workbench.core import weights
    from workbench.compare.layer_compare import _lowered_by_reference
    from workbench.runtime.runners import EmulatedRunner

    cand = _lowered_by_reference(weights.by_reference(path), "fp16", [])
    y = EmulatedRunner(cand).infer({"ids": np.array([0, 7], np.int64)})["y"]
    # 1e5 x 0.01 = 1000 in FP32; 65504 x 0.01 = 655 from the saturated weight (not inf)
    np.testing.assert_allclose(y[:, 0], 655.0, rtol=1e-3)
    np.testing.assert_allclose(y[:, 1:], (w[[0, 7], 1:] * 0.01), rtol=2e-3, atol=1e-4)
