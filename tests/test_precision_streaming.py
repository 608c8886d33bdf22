"""FP16 / BF16 conversion streamed tensor by tensor (workbench.precision.streaming): a model with
external data is converted on its structure only, the weights go chunk by chunk from the source
data file to the output's, and the result equals the in-memory conversion and, weight for
weight, onnxconverter-common's."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from workbench.core.errors import WorkbenchError
from workbench.precision import streaming
from workbench.precision.transform import convert

REPO = Path(__file__).resolve().parents[1]


def _lm():
    spec = importlib.util.spec_from_file_location("large_model", REPO / "benchmarks" /
                                                  "large_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["large_model"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def lm():
    return _lm()


@pytest.fixture(scope="module")
def decoder(lm, tmp_path_factory):
    cfg = lm.tiny_decoder_config()
    return cfg, lm.build_decoder(tmp_path_factory.mktemp("dec"), cfg)


def _weights(proto):
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def _run(model, feeds):
    src = model if isinstance(model, str) else model.SerializeToString()
    s = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


@pytest.mark.parametrize("target", ["fp16", "bf16"])
def test_streamed_equals_the_in_memory_conversion(decoder, lm, tmp_path, target):
    cfg, path = decoder
    before = path.with_name(lm.DATA_NAME).read_bytes()
    out = tmp_path / "low.onnx"
    res = convert(str(path), target, output=str(out))
    assert res.path == out and out.exists() and out.with_name("low.onnx.data").exists()
    # the result's proto holds no weight bytes: every large tensor points at the new file
    ext = [t for t in res.proto.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert ext and all(not t.raw_data for t in ext)
    assert {kv.value for t in ext for kv in t.external_data if kv.key == "location"} == \
        {"low.onnx.data"}
    assert not streaming.has_pending(res.proto)
    assert path.with_name(lm.DATA_NAME).read_bytes() == before  # the source is untouched
    ref = convert(onnx.load(str(path)), target)  # in memory, weights loaded
    got = onnx.load(str(out))
    rw, gw = _weights(ref.proto), _weights(got)
    assert rw.keys() == gw.keys()
    for name, a in rw.items():
        assert gw[name].dtype == a.dtype, name
        assert np.array_equal(gw[name].view(np.uint16) if a.dtype.itemsize == 2 else gw[name],
                              a.view(np.uint16) if a.dtype.itemsize == 2 else a), name
    assert [(n.op_type, list(n.input)) for n in got.graph.node] == \
        [(n.op_type, list(n.input)) for n in ref.proto.graph.node]
    low = {"fp16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}[target]
    assert {t.data_type for t in ext} == {low}
    if target == "fp16":  # (onnxruntime CPU has no BF16 MatMul)
        feeds = lm.decoder_feeds(cfg, batch=2, seq=3, past=4, pad=1)
        fp32, streamed = _run(str(path), feeds), _run(str(out), feeds)
        assert streamed["present.1.key"].shape == (2, cfg.kv_heads, 7, cfg.head_dim)
        np.testing.assert_allclose(streamed["logits"], fp32["logits"], atol=2e-2, rtol=0)
        np.testing.assert_array_equal(streamed["logits"], _run(ref.proto, feeds)["logits"])


def test_weights_equal_onnxconverter_common(decoder, tmp_path):
    """onnxconverter-common (what `polygraphy convert --fp-to-fp16` runs), told not to move
    tiny values to 1e-7 nor clip at 1e4, stores the same FP16 weights bit for bit."""
    float16 = pytest.importorskip("onnxconverter_common.float16")
    _, path = decoder
    out = tmp_path / "fp16.onnx"
    convert(str(path), "fp16", output=str(out))
    theirs = float16.convert_float_to_float16(onnx.load(str(path)), keep_io_types=True,
                                              min_positive_val=0.0, max_finite_val=65504.0)
    tw, ow = _weights(theirs), _weights(onnx.load(str(out)))
    lowered = [n for n, a in tw.items() if a.dtype == np.float16]
    assert len(lowered) > 10
    for name in lowered:
        assert ow[name].dtype == np.float16
        assert np.array_equal(ow[name].view(np.uint16), tw[name].view(np.uint16)), name


def _external_matmul(folder: Path, w: np.ndarray) -> Path:
    sys.path.insert(0, str(REPO / "sample_models"))
    from make_samples import ExternalWriter

    writer = ExternalWriter(folder / "w.bin")
    t = writer.write("W", w)
    writer.close()
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
                          initializer=[t])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = folder / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_values_beyond_fp16_saturate_and_are_named(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    w[0, 0], w[1, 1], w[2, 2], w[3, 3] = 1e5, -7e4, np.inf, 3e-8
    path = _external_matmul(tmp_path, w)
    res = convert(str(path), "fp16", output=str(tmp_path / "o.onnx"))
    clip = [f for f in res.findings if f.code == "weight-clipped"]
    assert len(clip) == 1 and clip[0].tensors == ["W"] and clip[0].nodes == ["mm"]
    got = _weights(onnx.load(str(tmp_path / "o.onnx")))["W"]
    assert got[0, 0] == 65504 and got[1, 1] == -65504 and np.isposinf(got[2, 2])
    assert got[3, 3] == np.float16(3e-8)  # rounded to the nearest subnormal, not moved
    ref = _weights(convert(onnx.load(str(path)), "fp16").proto)["W"]
    assert np.array_equal(got.view(np.uint16), ref.view(np.uint16))


def test_missing_data_file_is_a_clear_error(tmp_path):
    path = _external_matmul(tmp_path, np.ones((64, 64), np.float32))
    (tmp_path / "w.bin").unlink()
    with pytest.raises(WorkbenchError) as e:
        convert(str(path), "fp16", output=str(tmp_path / "o.onnx"))
    assert "w.bin" in str(e.value)
    assert not (tmp_path / "o.onnx").exists()


def test_cli_streams_with_bounded_memory(lm, tmp_path):
    """`workbench precision` on a ~40 MB decoder: the process's peak RSS grows by far less than
    the weights while converting (chunks of 1 MB here), and the output loads and runs."""
    cfg = lm.DecoderConfig(vocab=8000, hidden=256, layers=8, heads=8, kv_heads=2, inter=1024,
                           max_pos=256)
    path = lm.build_decoder(tmp_path / "dec", cfg)
    weights = path.with_name(lm.DATA_NAME).stat().st_size
    assert weights > 35e6
    out = tmp_path / "fp16.onnx"
    code = f"""
import json, resource, sys
from workbench.precision import streaming, transform
streaming.CHUNK_BYTES = 1 << 20
import onnx, onnxruntime, numpy
from workbench.core.model import open_model
open_model({str(path)!r})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
transform.convert({str(path)!r}, "fp16", output={str(out)!r})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"grew_kb": after - before}}))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-2000:]
    grew = json.loads(p.stdout.strip().splitlines()[-1])["grew_kb"] * 1024
    assert grew < 0.25 * weights, (grew, weights)
    feeds = lm.decoder_feeds(cfg, batch=1, seq=2, past=3)
    outs = _run(str(out), feeds)
    assert outs["logits"].shape == (1, 2, cfg.vocab) and np.isfinite(outs["logits"]).all()


def test_a_streamed_result_saves_elsewhere_by_streaming(decoder, tmp_path):
    _, path = decoder
    res = convert(str(path), "fp16", output=str(tmp_path / "a.onnx"))
    again = res.save(tmp_path / "b" / "b.onnx", source=path)
    assert again == tmp_path / "b" / "b.onnx"
    a, b = _weights(onnx.load(str(tmp_path / "a.onnx"))), _weights(onnx.load(str(again)))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert res.save(tmp_path / "a.onnx") == tmp_path / "a.onnx"  # already there: not rewritten


def test_calibrated_fp16_streams_and_checks_activations_by_reference(decoder, lm, tmp_path,
                                                                    monkeypatch):
    """With calibration data the FP16 conversion still streams: the FP32 activations are
    checked on the model held by reference, the error measured from the two files."""
    from workbench.core import model as wmodel

    cfg, path = decoder
    calib = tmp_path / "calib.npz"
    np.savez(calib, **lm.decoder_feeds(cfg, batch=2, seq=3, past=4, pad=1))
    mem = convert(onnx.load(str(path)), "fp16", calibration=str(calib))

    def whole(self):
        raise AssertionError("the whole model was loaded")

    monkeypatch.setattr(wmodel.Model, "load_weights", whole)
    res = convert(str(path), "fp16", calibration=str(calib), output=str(tmp_path / "low.onnx"))
    assert res.path == tmp_path / "low.onnx" and not streaming.has_pending(res.proto)
    assert res.report["activation_max_abs"] == mem.report["activation_max_abs"] > 0
    assert sorted(f.code for f in res.findings if f.severity != "info") == \
        sorted(f.code for f in mem.findings if f.severity != "info")
    assert res.report["error"]["logits"]["max_abs_err"] == \
        pytest.approx(mem.report["error"]["logits"]["max_abs_err"], rel=1e-6)
    assert any(f.code == "reference-not-run" for f in res.findings)


def test_int8_of_a_decoder_streams(decoder, lm, tmp_path):
    """INT8 of the KV-cache decoder from its files: every MatMul with a weight gets an INT8
    per-channel weight, the model runs in onnxruntime and stays near FP32."""
    cfg, path = decoder
    calib = tmp_path / "calib.npz"
    feeds = lm.decoder_feeds(cfg, batch=2, seq=3, past=4, pad=1)
    np.savez(calib, **feeds)
    out = tmp_path / "q.onnx"
    res = convert(str(path), "int8", calibration=str(calib), calibrate_method="minmax",
                  output=str(out))
    got = onnx.load(str(out))
    q = [t for t in got.graph.initializer if t.name.endswith("_quantized")]
    assert q and all(t.data_type == TensorProto.INT8 for t in q)
    src = onnx.load(str(path), load_external_data=False)
    weighted = {n.input[1] for n in src.graph.node if n.op_type == "MatMul" and
                n.input[1] in {t.name for t in src.graph.initializer}}
    assert {t.name[:-len("_quantized")] for t in q} == weighted
    assert res.report["error"] is not None
    fp32, int8 = _run(str(path), feeds), _run(str(out), feeds)
    assert np.isfinite(int8["logits"]).all()
    rel = np.abs(int8["logits"] - fp32["logits"]).max() / np.abs(fp32["logits"]).max()
    assert rel < 0.2, rel


def test_a_bounded_run_goes_a_segment_at_a_time_and_gives_the_full_run_values(decoder, lm):
    """`run_bounded` (what the streamed conversions calibrate and measure with) cuts the
    model held by reference where its weights reach the budget; the values are a full run's."""
    from workbench.core import weights
    from workbench.core.graphindex import GraphIndex
    from workbench.runtime.runners import run_bounded
    from workbench.runtime.segments import order_of

    cfg, path = decoder
    held = weights.by_reference(str(path), inline_bytes=1024)
    budget = max(r.nbytes for r in weights.weight_refs(held).values()) * 1.5 / 2 ** 20
    groups = weights.segment_groups(held, order_of(held), budget)
    assert len(groups) >= 4  # (the tiny decoder's weights over a 1.5-weight budget)
    per_node = weights.node_weight_bytes(held)
    made = GraphIndex.of(held).producer
    last = -1
    for g in groups:  # each group's new nodes read at most the budget (one weight excepted)
        end = max(made[x] for x in g)
        new = per_node[last + 1:end + 1]
        assert sum(new) <= budget * 2 ** 20 or sum(1 for b in new if b) == 1
        last = end
    feeds = lm.decoder_feeds(cfg, batch=2, seq=3, past=4, pad=1)
    names = [o.name for o in held.graph.output] + ["input_ids"]
    got = run_bounded(held, [feeds], names, budget_mb=budget)[0]
    full = _run(str(path), feeds)  # (its own graph optimizations: equal to float rounding)
    for o in held.graph.output:
        np.testing.assert_allclose(got[o.name], full[o.name], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(got["input_ids"], feeds["input_ids"])
