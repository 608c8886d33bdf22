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

`bench` generates a decoder (or takes `--model`), then times every workbench verb on it and,
side by side, Polygraphy (`inspect model`, `convert --fp-to-fp16`, `run --onnxrt`) and
onnxconverter-common's FP16 conversion, each as a separate process. Peak memory is the peak of
the summed RSS of the command's whole process tree (the command and every descendant, polled
from /proc every 20 ms), and at least the largest single process's ru_maxrss. The last line
of output is one JSON object with the figures.

    python benchmarks/large_model.py bench --size-gb 3.2 --work /tmp/large-bench
    python benchmarks/large_model.py bench --model /tmp/large-enc/model.onnx   # the encoder
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

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


# --------------------------------------------------------------------------- measuring
_RUNNER = """import os, sys, time
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, st, ru = os.wait4(pid, 0)
sys.stderr.write("\\n@@BENCH %d %d %.6f\\n" % (os.waitstatus_to_exitcode(st), ru.ru_maxrss,
                                                time.perf_counter() - t))
"""


def _children() -> Dict[int, List[int]]:
    """Parent pid -> child pids, from /proc (one pass)."""
    import os

    kids: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_kb(root: int) -> int:
    """Summed RSS (kB) of `root` and all its descendants right now."""
    kids = _children()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss_kb(pid)
        todo.extend(kids.get(pid, ()))
    return total


def measure(cmd: List[str], timeout: float = 1800, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> Dict[str, object]:
    """Run `cmd` under a tiny fork/wait4 runner; wall seconds, exit code and peak RSS (MB) of
    its whole process tree (polled), never below its largest process's ru_maxrss."""
    import subprocess
    import threading
    import time

    p = subprocess.Popen([sys.executable, "-I", "-S", "-c", _RUNNER, *cmd], cwd=cwd, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    peak = [0]
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(p.pid))
            done.wait(0.02)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        import signal

        os.killpg(p.pid, signal.SIGKILL)  # (the runner's session: the whole tree)
        out, err = p.communicate()
        timed_out = True
    done.set()
    th.join()
    text = err.decode(errors="replace")
    tail = [ln for ln in text.splitlines() if ln.startswith("@@BENCH ")]
    rc, maxrss, wall = (tail[-1].split()[1:] if tail else ("-9", "0", "nan"))
    return {"rc": int(rc), "wall_s": round(float(wall), 2),
            "peak_mb": round(max(peak[0], int(maxrss)) / 1024.0, 1),
            "timed_out": timed_out, "stdout_tail": out.decode(errors="replace")[-600:],
            "stderr_tail": "\n".join(ln for ln in text.splitlines()
                                     if not ln.startswith("@@BENCH"))[-1200:]}


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


def config_of(model: Path) -> Optional[DecoderConfig]:
    """The DecoderConfig a generated decoder records in its doc string (None for others)."""
    import onnx

    doc = onnx.load(str(model), load_external_data=False).doc_string
    if ": {" not in doc:
        return None
    return DecoderConfig(**json.loads(doc[doc.index(": {") + 2:]))


def generic_feeds(model: Path, seq: int = 128, seed: int = 0) -> Dict[str, np.ndarray]:
    """Inputs for a model that is not a generated decoder (the encoder): batch 1, other
    symbolic dims `seq`; integer inputs 1 (valid token ids and a full mask), floats normal."""
    import onnx
    from onnx import helper

    rng = np.random.default_rng(seed)
    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (1 if i == 0 else seq)
                for i, d in enumerate(tt.shape.dim)]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        feeds[vi.name] = (np.ones(dims, dtype) if np.issubdtype(dtype, np.integer)
                          else rng.standard_normal(dims).astype(dtype))
    return feeds


def _workbench() -> List[str]:
    import shutil

    exe = shutil.which("workbench")
    return [exe] if exe else [sys.executable, "-m", "workbench.cli"]


def _ort_run_script(model: Path, feeds: Path) -> str:
    """Load a model in onnxruntime from its path and run one decoder call (exit 1 if not
    finite)."""
    return f"""
import sys, numpy as np, onnxruntime as ort
s = ort.InferenceSession({str(model)!r}, providers=["CPUExecutionProvider"])
f = dict(np.load({str(feeds)!r}))
out = s.run(None, f)
print("logits", out[0].shape, out[0].dtype, "finite", bool(np.isfinite(out[0]).all()))
sys.exit(0 if all(np.isfinite(o).all() for o in out) else 1)
"""


def _onnxconverter_script(src: Path, out: Path) -> str:
    """onnxconverter-common's FP16 conversion, told to round as IEEE does (no move of tiny
    values to 1e-7, no clip at 1e4): the reference the workbench's weights are compared to."""
    return f"""
import onnx
from onnxconverter_common import float16
m = onnx.load({str(src)!r})
# (its shape inference serializes the model, which fails past 2 GB)
big = sum(len(t.raw_data) for t in m.graph.initializer) > 2**31 - 2**26
m = float16.convert_float_to_float16(m, keep_io_types=True, min_positive_val=0.0,
                                     max_finite_val=65504.0, disable_shape_infer=big)
onnx.save_model(m, {str(out)!r}, save_as_external_data=True, all_tensors_to_one_file=True,
                location={out.name + '.data'!r})
"""


def verbs(model: Path, work: Path, feeds: Path, cfg: Optional[DecoderConfig]
          ) -> List[Tuple[str, str, List[str]]]:
    """(tool, verb, command) for every measured command, workbench's first."""
    wb = _workbench()
    out, keep = work / "out", work / "keep"
    with np.load(feeds) as f:
        shapes = ["--input-shapes"] + [f"{k}:[{','.join(str(d) for d in f[k].shape)}]"
                                       for k in f.files]
    m = str(model)
    return [
        ("workbench", "inspect", wb + ["inspect", m, "--json"]),
        ("workbench", "check", wb + ["check", m]),
        ("workbench", "graph", wb + ["graph", m, "-o", str(out / "graph.json")]),
        ("workbench", "fix --auto", wb + ["fix", m, "--auto", "-o", str(out / "fixed.onnx")]),
        ("workbench", "precision --to fp16",
         wb + ["precision", m, "--to", "fp16", "-o", str(keep / "wb_fp16.onnx")]),
        ("workbench", "precision --to int8 --allow-random",
         wb + ["precision", m, "--to", "int8", "--allow-random", "-o",
               str(out / "wb_int8.onnx")]),
        ("workbench", "precision --to int8 --calib",
         wb + ["precision", m, "--to", "int8", "--calib", str(feeds), "-o",
               str(keep / "wb_int8.onnx")]),
        ("workbench", "precision --to int8 --fallback fp16 --calib",
         wb + ["precision", m, "--to", "int8", "--fallback", "fp16", "--calib", str(feeds),
               "-o", str(keep / "wb_int8_fp16.onnx")]),
        ("workbench", "compare --to fp16 --allow-random",
         wb + ["compare", m, "--to", "fp16", "--allow-random"]),
        ("workbench", "compare --to fp16 --inputs",
         wb + ["compare", m, "--to", "fp16", "--inputs", str(feeds)]),
        ("workbench", "profiles", wb + ["profiles", m]),
        ("workbench", "build --precision fp16",
         wb + ["build", m, "--precision", "fp16", "-o", str(out / "model.engine")]),
        ("polygraphy", "inspect model", ["polygraphy", "inspect", "model", m]),
        ("polygraphy", "convert --fp-to-fp16",
         ["polygraphy", "convert", m, "--fp-to-fp16", "-o", str(out / "poly_fp16.onnx")]),
        ("polygraphy", "run --onnxrt", ["polygraphy", "run", m, "--onnxrt"] + shapes),
        ("onnxconverter-common", "convert_float_to_float16",
         [sys.executable, "-c", _onnxconverter_script(model, keep / "occ_fp16.onnx")]),
        ("check", "workbench's FP16 output runs in onnxruntime",
         [sys.executable, "-c", _ort_run_script(keep / "wb_fp16.onnx", feeds)]),
        ("check", "workbench's INT8 output runs in onnxruntime",
         [sys.executable, "-c", _ort_run_script(keep / "wb_int8.onnx", feeds)]),
        ("check", "workbench's INT8+FP16 output runs in onnxruntime",
         [sys.executable, "-c", _ort_run_script(keep / "wb_int8_fp16.onnx", feeds)]),
    ]


def _fp16_matches(wb_out: Path, ref_out: Path) -> Optional[bool]:
    """Do two FP16 models hold the same FP16 weights (bit for bit), tensor by tensor?"""
    import onnx
    from onnx import numpy_helper

    if not (wb_out.exists() and ref_out.exists()):
        return None
    a = onnx.load(str(wb_out), load_external_data=False)
    b = onnx.load(str(ref_out), load_external_data=False)
    bt = {t.name: t for t in b.graph.initializer if t.data_type == 10}
    from onnx.external_data_helper import load_external_data_for_tensor

    n = 0
    for t in a.graph.initializer:
        if t.data_type != 10 or t.name not in bt:
            continue
        for x, base in ((t, wb_out.parent), (bt[t.name], ref_out.parent)):
            if x.data_location == 1:
                load_external_data_for_tensor(x, str(base))
        same = np.array_equal(numpy_helper.to_array(t).view(np.uint16),
                              numpy_helper.to_array(bt[t.name]).view(np.uint16))
        t.ClearField("raw_data")
        bt[t.name].ClearField("raw_data")
        if not same:
            return False
        n += 1
    return n > 0


def _cmd_bench(args: argparse.Namespace) -> None:
    import shutil

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.model:
        model = Path(args.model)
    else:
        model = work / "model" / "model.onnx"
        if not model.exists():
            build_decoder(model.parent, DecoderConfig.for_size(args.size_gb * 1e9))
    cfg = config_of(model)
    weights = sum(p.stat().st_size for p in model.parent.iterdir()
                  if p.is_file() and p != model)
    feeds = work / "feeds.npz"
    np.savez(feeds, **(decoder_feeds(cfg, batch=1, seq=8, past=8) if cfg is not None
                       else generic_feeds(model)))
    out, keep = work / "out", work / "keep"
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    rows = []
    for tool, verb, cmd in verbs(model, work, feeds, cfg):
        key = f"{tool}:{verb}"
        if (only and not any(o in key for o in only)) or any(k in key for k in skip):
            continue
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        home = work / "home"   # a fresh workspace per command: first-use costs, then removed
        shutil.rmtree(home, ignore_errors=True)
        r = measure(cmd, timeout=args.timeout, env={**os.environ, "WORKBENCH_HOME": str(home)})
        shutil.rmtree(home, ignore_errors=True)
        rows.append({"tool": tool, "verb": verb, **r})
        print(f"{tool:22s} {verb:36s} rc={r['rc']:<3d} {r['wall_s']:8.2f} s "
              f"{r['peak_mb']:9.1f} MB", flush=True)
        if r["rc"] not in (0, 1, 2) or (r["rc"] != 0 and tool != "workbench"):
            print("   " + (r["stderr_tail"] or r["stdout_tail"]).replace("\n", "\n   "),
                  flush=True)
    shutil.rmtree(out, ignore_errors=True)
    same = _fp16_matches(keep / "wb_fp16.onnx", keep / "occ_fp16.onnx")
    shutil.rmtree(keep, ignore_errors=True)
    by = {(r["tool"], r["verb"]): r for r in rows}
    wb_fp16 = by.get(("workbench", "precision --to fp16"))
    poly = by.get(("polygraphy", "convert --fp-to-fp16"))
    doc: Dict[str, object] = {
        "model": str(model), "weights_bytes": weights,
        "config": asdict(cfg) if cfg is not None else None,
        "results": [{k: v for k, v in r.items() if not k.endswith("_tail")} for r in rows]}
    wb_rows = [r for r in rows if r["tool"] == "workbench"]
    doc["workbench_exit_codes_ok"] = all(r["rc"] in (0, 1, 2) for r in wb_rows)
    doc["fp16_weights_equal_onnxconverter_common"] = same
    if wb_fp16 and poly and poly["rc"] == 0:
        doc["fp16_time_ratio_vs_polygraphy"] = round(wb_fp16["wall_s"] / poly["wall_s"], 3)
        doc["fp16_peak_ratio_vs_polygraphy"] = round(wb_fp16["peak_mb"] / poly["peak_mb"], 3)
        doc["fp16_acceptance"] = (doc["fp16_time_ratio_vs_polygraphy"] <= 0.5 and
                                  doc["fp16_peak_ratio_vs_polygraphy"] <= 0.25)
    if not args.keep_model and not args.model:
        shutil.rmtree(model.parent, ignore_errors=True)
    print(json.dumps(doc))


def main(argv: Optional[List[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write a decoder or encoder with external data")
    g.add_argument("-o", "--output", type=Path, required=True, help="folder to write into")
    g.add_argument("--kind", choices=("decoder", "encoder"), default="decoder")
    g.add_argument("--size-gb", type=float, default=3.2, help="decoder FP32 weights, GB")
    g.add_argument("--tiny", action="store_true", help="a few-MB decoder (for tests)")
    g.set_defaults(func=_cmd_generate)
    b = sub.add_parser("bench", help="time every verb on a generated decoder, side by side "
                       "with Polygraphy and onnxconverter-common")
    b.add_argument("--work", type=Path, default=Path("/tmp/large-bench"),
                   help="folder for the model and outputs (outputs removed after each command)")
    b.add_argument("--size-gb", type=float, default=3.2, help="decoder FP32 weights, GB")
    b.add_argument("--model", help="an existing model instead of generating one")
    b.add_argument("--keep-model", action="store_true", help="keep the generated model")
    b.add_argument("--only", help="comma-separated substrings of 'tool:verb' to run")
    b.add_argument("--skip", help="comma-separated substrings of 'tool:verb' to leave out")
    b.add_argument("--timeout", type=float, default=1800, help="seconds per command")
    b.set_defaults(func=_cmd_bench)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
