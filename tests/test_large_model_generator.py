"""benchmarks/large_model.py's generators: a tiny decoder with the exported structure runs in
onnxruntime with a growing KV cache, and decoding from the cache gives prefill's logits."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lm():
    spec = importlib.util.spec_from_file_location("large_model", REPO / "benchmarks" /
                                                  "large_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["large_model"] = mod   # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tiny(lm, tmp_path_factory):
    cfg = lm.tiny_decoder_config()
    path = lm.build_decoder(tmp_path_factory.mktemp("dec"), cfg)
    return cfg, path


def test_decoder_has_the_exported_interface(lm, tiny):
    cfg, path = tiny
    m = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(str(path))
    ins = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
           for i in m.graph.input}
    outs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
            for o in m.graph.output}
    assert ins["input_ids"] == ["batch_size", "sequence_length"]
    assert ins["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert ins["position_ids"] == ["batch_size", "sequence_length"]
    assert ins["past_key_values.1.value"] == ["batch_size", cfg.kv_heads, "past_sequence_length",
                                              cfg.head_dim]
    assert outs["logits"] == ["batch_size", "sequence_length", cfg.vocab]
    assert outs["present.0.key"] == ["batch_size", cfg.kv_heads, "total_sequence_length",
                                     cfg.head_dim]
    names = {n.name for n in m.graph.node}
    assert "/model/layers.0/self_attn/q_proj/MatMul" in names
    assert {"Pow", "ReduceMean", "Sqrt", "Expand", "Where"} <= {n.op_type for n in m.graph.node}
    # every large weight lives in the one data file, none inline
    ext = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert {e.value for t in ext for e in t.external_data if e.key == "location"} == \
        {lm.DATA_NAME}
    assert sum(int(np.prod(t.dims)) for t in ext) >= cfg.params() - 4 * cfg.layers * cfg.hidden
    assert any(t.name == "model.rotary_emb.cos_cached" for t in ext)


def test_decoder_runs_and_the_cache_grows(lm, tiny):
    cfg, path = tiny
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    for past, seq in ((0, 5), (5, 1), (12, 3)):
        outs = dict(zip(out_names, sess.run(None, lm.decoder_feeds(cfg, batch=2, seq=seq,
                                                                    past=past, pad=1))))
        assert outs["logits"].shape == (2, seq, cfg.vocab)
        assert outs["present.1.key"].shape == (2, cfg.kv_heads, past + seq, cfg.head_dim)
        assert all(np.isfinite(v).all() for v in outs.values())


def test_decoding_from_the_cache_matches_prefill(lm, tiny):
    cfg, path = tiny
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out_names = [o.name for o in sess.get_outputs()]
    ids = np.random.default_rng(3).integers(0, cfg.vocab, (1, 7), dtype=np.int64)

    def call(tok, past_len, cache):
        n = tok.shape[1]
        feeds = {"input_ids": tok, "attention_mask": np.ones((1, past_len + n), np.int64),
                 "position_ids": np.arange(past_len, past_len + n, dtype=np.int64)[None]}
        feeds.update(cache)
        return dict(zip(out_names, sess.run(None, feeds)))

    empty = lm.decoder_feeds(cfg, batch=1, seq=1, past=0)
    empty = {k: v for k, v in empty.items() if k.startswith("past_key_values")}
    full = call(ids, 0, empty)
    first = call(ids[:, :6], 0, empty)
    cache = {f"past_key_values.{k[len('present.'):]}": v for k, v in first.items()
             if k.startswith("present.")}
    step = call(ids[:, 6:], 6, cache)
    np.testing.assert_allclose(step["logits"][:, 0], full["logits"][:, 6], atol=1e-5)
    np.testing.assert_allclose(step["present.1.value"], full["present.1.value"], atol=1e-5)
    # a padded-out position changes the logits (the mask takes part)
    padded = lm.decoder_feeds(cfg, batch=1, seq=7, past=0, pad=2)
    padded["input_ids"] = ids
    out = dict(zip(out_names, sess.run(None, padded)))
    assert not np.allclose(out["logits"][:, 6], full["logits"][:, 6], atol=1e-4)


def test_size_targets_and_encoder(lm, tmp_path):
    cfg = lm.DecoderConfig.for_size(3.2e9)
    assert 3.2e9 <= cfg.fp32_bytes() < 3.6e9 and cfg.kv_heads < cfg.heads
    small = dict(vocab=512, hidden=64, heads=4, inter=128, layers=2, max_pos=64)
    path = lm.build_encoder(tmp_path / "enc", small)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids = np.ones((2, 9), np.int64)
    hidden, pooled = sess.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert hidden.shape == (2, 9, 64) and pooled.shape == (2, 64)
    assert np.isfinite(hidden).all()
    assert lm.BERT_LARGE["layers"] == 24 and lm.BERT_LARGE["hidden"] == 1024
