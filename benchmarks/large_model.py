"""Large models: generate LLM-style decoders (with a KV cache) and a BERT-Large-sized encoder.

The decoder is written the way Optimum / torch.onnx export a Llama-style model: scoped node names
(`/model/layers.0/self_attn/q_proj/MatMul`), `input_ids` / `attention_mask` / `position_ids` /
`past_key_values.N.key|value` in, `logits` / `present.N.key|value` out, dims `batch_size`,
`sequence_length`, `past_sequence_length`, `total_sequence_length`, RMSNorm as primitive ops
(Pow, ReduceMean, Add, Sqrt, Div, Mul), RoPE cos/sin tables gathered by `position_ids`,
grouped-query attention (K/V heads expanded to the query heads) and a float32-min additive
causal + padding mask. Weights go to one external-data file (`model.onnx_data`), tensor by
tensor as they are drawn: the whole model never sits in memory and no > 2 GB protobuf is built.

    python benchmarks/large_model.py generate -o /tmp/large-dec --size-gb 3.2
    python benchmarks/large_model.py generate -o /tmp/large-enc --kind encoder
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OPSET = 17
DATA_NAME = "model.onnx_data"   # Optimum's name for the one external-data file
FMIN = np.finfo(np.float32).min
BERT_LARGE = dict(vocab=30522, hidden=1024, heads=16, inter=4096, layers=24, max_pos=512)


def _builders():
    """GraphBuilder / ExternalWriter from sample_models/make_samples.py (one writer for all)."""
    sys.path.insert(0, str(REPO / "sample_models"))
    from make_samples import ExternalWriter, GraphBuilder  # noqa: E402
    return GraphBuilder, ExternalWriter


@dataclass(frozen=True)
class DecoderConfig:
    """A Llama-style decoder's shape (heads share `kv_heads` K/V heads: grouped-query attention)."""

    vocab: int = 32000
    hidden: int = 2048
    layers: int = 16
    heads: int = 32
    kv_heads: int = 4
    inter: int = 5632
    max_pos: int = 2048
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def layer_params(self) -> int:
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return 2 * h * h + 2 * h * kv + 3 * h * self.inter + 2 * h

    def params(self) -> int:
        """Number of weights (embedding + layers + final norm + lm_head; RoPE tables excluded)."""
        return 2 * self.vocab * self.hidden + self.layers * self.layer_params() + self.hidden

    def fp32_bytes(self) -> int:
        return 4 * (self.params() + 2 * self.max_pos * self.head_dim)

    @classmethod
    def for_size(cls, size_bytes: float) -> "DecoderConfig":
        """A TinyLlama-shaped decoder (hidden 2048, GQA 32/4) with as many layers as it takes to
        reach `size_bytes` of FP32 weights; below ~0.6 GB a narrower one (hidden 512/1024)."""
        for base in (cls(), cls(hidden=1024, heads=16, kv_heads=4, inter=2816, vocab=32000),
                     cls(hidden=512, heads=8, kv_heads=2, inter=1408, vocab=16000)):
            fixed = base.fp32_bytes() - 4 * base.layers * base.layer_params()
            layers = math.ceil((size_bytes - fixed) / (4 * base.layer_params()))
            if layers >= 2 or base.hidden == 512:
                return cls(**{**asdict(base), "layers": max(1, layers)})
        raise AssertionError("unreachable")


def tiny_decoder_config() -> DecoderConfig:
    """A few-MB decoder with the same structure (for tests)."""
    return DecoderConfig(vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, inter=128,
                         max_pos=128)


def _weight(rng: np.random.Generator, shape, std: float) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


def _rms_norm(b, x: str, scope: str, wname: str, c: DecoderConfig) -> str:
    """RMSNorm as torch exports it: x * 1/sqrt(mean(x^2) + eps) * weight."""
    b.init(wname, (1.0 + 0.1 * b.rng.standard_normal(c.hidden, dtype=np.float32)))
    p = b.op("Pow", scope, [x, b.const(scope, np.array(2.0, np.float32))])
    m = b.op("ReduceMean", scope, [p], axes=[-1], keepdims=1)
    m = b.op("Add", scope, [m, b.const(scope, np.array(c.eps, np.float32))])
    r = b.op("Sqrt", scope, [m])
    r = b.op("Div", scope, [b.const(scope, np.array(1.0, np.float32)), r])
    y = b.op("Mul", scope, [x, r])
    return b.op("Mul", scope, [wname, y])


class _Linear:
    """Bias-free Linear layers as torch.onnx exports them: MatMul by a transposed weight named
    `onnx::MatMul_<n>` (the exporter's name for a weight it had to transpose)."""

    def __init__(self, b, start: int = 3000) -> None:
        self.b, self.n = b, start

    def __call__(self, x: str, scope: str, cin: int, cout: int, std: float = 0.02) -> str:
        self.n += 1
        w = f"onnx::MatMul_{self.n}"
        self.b.init(w, _weight(self.b.rng, (cin, cout), std))
        return self.b.op("MatMul", scope, [x, w])


def _rotate_half(b, x: str, scope: str, half: int) -> str:
    x1 = b.op("Slice", scope, [x, b.const(scope, np.array([0], np.int64)),
                               b.const(scope, np.array([half], np.int64)),
                               b.const(scope, np.array([-1], np.int64)),
                               b.const(scope, np.array([1], np.int64))])
    x2 = b.op("Slice", scope, [x, b.const(scope, np.array([half], np.int64)),
                               b.const(scope, np.array([np.iinfo(np.int64).max], np.int64)),
                               b.const(scope, np.array([-1], np.int64)),
                               b.const(scope, np.array([1], np.int64))])
    return b.op("Concat", scope, [b.op("Neg", scope, [x2]), x1], axis=-1)


def _rope(b, x: str, scope: str, cos: str, sin: str, half: int) -> str:
    a = b.op("Mul", scope, [x, cos])
    r = b.op("Mul", scope, [_rotate_half(b, x, scope, half), sin])
    return b.op("Add", scope, [a, r])


def build_decoder(folder: Path, config: DecoderConfig, seed: int = 0,
                  name: str = "model.onnx"):
    """Write `folder/name` + `folder/model.onnx_data` for `config`; returns the model path.

    Weights are drawn and written one tensor at a time (the protobuf holds only references)."""
    import onnx
    from onnx import TensorProto, helper

    GraphBuilder, ExternalWriter = _builders()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    c = config
    H, NH, KV, hd = c.hidden, c.heads, c.kv_heads, c.head_dim
    writer = ExternalWriter(folder / DATA_NAME)
    try:
        b = GraphBuilder(seed=seed, external=writer)
        lin = _Linear(b)
        # token embedding
        b.init("model.embed_tokens.weight", _weight(b.rng, (c.vocab, H), 0.02))
        x = b.op("Gather", "/model/embed_tokens", ["model.embed_tokens.weight", "input_ids"])
        # additive mask [batch, 1, seq, total]: float32 min where the key is padding or in the
        # future of the query (query i sits at absolute position past + i)
        s = "/model"
        ids_shape = b.op("Shape", s, ["input_ids"])
        seq = b.op("Gather", s, [ids_shape, b.const(s, np.array(1, np.int64))], axis=0)
        m_shape = b.op("Shape", s, ["attention_mask"])
        total = b.op("Gather", s, [m_shape, b.const(s, np.array(1, np.int64))], axis=0)
        past = b.op("Sub", s, [total, seq])
        one = b.const(s, np.array(1, np.int64))
        q_pos = b.op("Range", s, [past, total, one])
        k_pos = b.op("Range", s, [b.const(s, np.array(0, np.int64)), total, one])
        q_col = b.op("Unsqueeze", s, [q_pos, b.const(s, np.array([1], np.int64))])
        future = b.op("Greater", s, [k_pos, q_col])                       # [seq, total]
        pad = b.op("Equal", s, ["attention_mask", b.const(s, np.array(0, np.int64))])
        pad = b.op("Unsqueeze", s, [pad, b.const(s, np.array([1, 2], np.int64))])
        hidden_out = b.op("Or", s, [pad, future])                         # [batch, 1, seq, total]
        mask = b.op("Where", s, [hidden_out, b.const(s, np.array(FMIN, np.float32)),
                                 b.const(s, np.array(0.0, np.float32))])
        # RoPE tables, gathered by position_ids -> [batch, 1, seq, head_dim]
        inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        ang = np.outer(np.arange(c.max_pos, dtype=np.float64), inv)
        emb = np.concatenate([ang, ang], axis=-1)
        b.init("model.rotary_emb.cos_cached", np.cos(emb).astype(np.float32))
        b.init("model.rotary_emb.sin_cached", np.sin(emb).astype(np.float32))
        s = "/model/rotary_emb"
        ax1 = b.const(s, np.array([1], np.int64))
        cos = b.op("Unsqueeze", s, [b.op("Gather", s, ["model.rotary_emb.cos_cached",
                                                        "position_ids"]), ax1])
        sin = b.op("Unsqueeze", s, [b.op("Gather", s, ["model.rotary_emb.sin_cached",
                                                        "position_ids"]), ax1])
        q_heads = b.const("/model", np.array([0, 0, NH, hd], np.int64))
        kv_heads = b.const("/model", np.array([0, 0, KV, hd], np.int64))
        merge = b.const("/model", np.array([0, 0, H], np.int64))
        inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                                ["batch_size", "sequence_length"]),
                  helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                                ["batch_size", "total_sequence_length"]),
                  helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                ["batch_size", "sequence_length"])]
        outputs = []
        for i in range(c.layers):
            L, W = f"/model/layers.{i}", f"model.layers.{i}"
            h = _rms_norm(b, x, f"{L}/input_layernorm", f"{W}.input_layernorm.weight", c)
            a = f"{L}/self_attn"

            def proj(kind: str, cout: int, shape: str) -> str:
                t = lin(h, f"{a}/{kind}_proj", H, cout)
                t = b.op("Reshape", a, [t, shape])
                return b.op("Transpose", a, [t], perm=[0, 2, 1, 3])

            q = _rope(b, proj("q", H, q_heads), a, cos, sin, hd // 2)
            k = _rope(b, proj("k", KV * hd, kv_heads), a, cos, sin, hd // 2)
            v = proj("v", KV * hd, kv_heads)
            pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
            k = b.rename_output(b.op("Concat", a, [pk, k], axis=2), f"present.{i}.key")
            v = b.rename_output(b.op("Concat", a, [pv, v], axis=2), f"present.{i}.value")
            for nm in (pk, pv):
                inputs.append(helper.make_tensor_value_info(
                    nm, TensorProto.FLOAT, ["batch_size", KV, "past_sequence_length", hd]))
            for nm in (k, v):
                outputs.append(helper.make_tensor_value_info(
                    nm, TensorProto.FLOAT, ["batch_size", KV, "total_sequence_length", hd]))

            def repeat_kv(t: str) -> str:   # [b, kv, T, hd] -> [b, heads, T, hd]
                t = b.op("Unsqueeze", a, [t, b.const(a, np.array([2], np.int64))])
                t = b.op("Expand", a, [t, b.const(a, np.array([1, 1, NH // KV, 1, 1], np.int64))])
                return b.op("Reshape", a, [t, b.const(a, np.array([0, NH, -1, hd], np.int64))])

            kt = b.op("Transpose", a, [repeat_kv(k)], perm=[0, 1, 3, 2])
            scores = b.op("MatMul", a, [q, kt])
            scores = b.op("Div", a, [scores, b.const(a, np.array(math.sqrt(hd), np.float32))])
            scores = b.op("Add", a, [scores, mask])
            probs = b.op("Softmax", a, [scores], axis=-1)
            ctx = b.op("MatMul", a, [probs, repeat_kv(v)])
            ctx = b.op("Transpose", a, [ctx], perm=[0, 2, 1, 3])
            ctx = b.op("Reshape", a, [ctx, merge])
            x = b.op("Add", L, [x, lin(ctx, f"{a}/o_proj", H, H)])
            h = _rms_norm(b, x, f"{L}/post_attention_layernorm",
                          f"{W}.post_attention_layernorm.weight", c)
            m = f"{L}/mlp"
            gate = lin(h, f"{m}/gate_proj", H, c.inter)
            gate = b.op("Mul", f"{m}/act_fn", [gate, b.op("Sigmoid", f"{m}/act_fn", [gate])])
            up = lin(h, f"{m}/up_proj", H, c.inter)
            x = b.op("Add", L, [x, lin(b.op("Mul", m, [gate, up]), f"{m}/down_proj", c.inter, H)])
        x = _rms_norm(b, x, "/model/norm", "model.norm.weight", c)
        logits = b.rename_output(lin(x, "/lm_head", H, c.vocab), "logits")
        outputs.insert(0, helper.make_tensor_value_info(
            logits, TensorProto.FLOAT, ["batch_size", "sequence_length", c.vocab]))
        model = b.model("main_graph", inputs, outputs,
                        f"Llama-style decoder with KV cache: {json.dumps(asdict(c))}",
                        opsets={"": OPSET})
        model.producer_name, model.producer_version = "pytorch", "2.1.0"
    finally:
        writer.close()
    path = folder / name
    tmp = path.with_suffix(".tmp")
    onnx.save(model, tmp)   # structure only: every weight is already in the data file
    tmp.replace(path)
    return path


def build_encoder(folder: Path, config: Optional[Dict[str, int]] = None, seed: int = 2,
                  name: str = "model.onnx") -> Path:
    """A BERT-Large-sized encoder (24 layers, hidden 1024; 1.34 GB FP32) with external data."""
    import onnx

    sys.path.insert(0, str(REPO / "sample_models"))
    from make_samples import ExternalWriter, make_bert  # noqa: E402

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    writer = ExternalWriter(folder / DATA_NAME)
    try:
        model = make_bert(config or BERT_LARGE, name="bert_large", seed=seed, external=writer)
    finally:
        writer.close()
    path = folder / name
    onnx.save(model, path)
    return path


def decoder_feeds(config: DecoderConfig, batch: int = 1, seq: int = 8, past: int = 0,
                  seed: int = 0, pad: int = 0) -> Dict[str, np.ndarray]:
    """Inputs a decoder call gets: `past` cached positions, `seq` new tokens, the mask as long as
    past + new (the first `pad` positions padded out), positions continuing after the cache."""
    rng = np.random.default_rng(seed)
    total = past + seq
    mask = np.ones((batch, total), np.int64)
    mask[:, :pad] = 0
    feeds = {"input_ids": rng.integers(0, config.vocab, (batch, seq), dtype=np.int64),
             "attention_mask": mask,
             "position_ids": np.tile(np.arange(past, total, dtype=np.int64), (batch, 1))}
    for i in range(config.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal(
                (batch, config.kv_heads, past, config.head_dim), dtype=np.float32)
    return feeds


def _cmd_generate(args: argparse.Namespace) -> None:
    if args.kind == "encoder":
        path = build_encoder(args.output)
        info = {"kind": "encoder", **BERT_LARGE}
    else:
        cfg = tiny_decoder_config() if args.tiny else DecoderConfig.for_size(args.size_gb * 1e9)
        path = build_decoder(args.output, cfg)
        info = {"kind": "decoder", **asdict(cfg), "params": cfg.params()}
    data = Path(path).parent / DATA_NAME
    print(json.dumps({**info, "model": str(path), "data_bytes": data.stat().st_size}))


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a decoder or encoder with external data")
    g.add_argument("-o", "--output", type=Path, required=True, help="folder to write into")
    g.add_argument("--kind", choices=("decoder", "encoder"), default="decoder")
    g.add_argument("--size-gb", type=float, default=3.2, help="decoder FP32 weights, GB")
    g.add_argument("--tiny", action="store_true", help="a few-MB decoder (for tests)")
    g.set_defaults(func=_cmd_generate)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
