"""The engine the workbench builds and runs, beside PyTorch eager and torch.compile, in one run
on one GPU with the same input data (GPU; torch in this interpreter, the worker's TensorRT e.g.
WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python).

For torchvision ResNet-50 and a BERT-base-sized encoder (12 layers, hidden 768, sequence 128),
both exported here with torch (random init, dynamic batch), at batch 1, 8 and 32:
- the workbench's own loop: build FP16 (tactic sources as WORKBENCH_BENCH_TACTICS), capture a
  profile (`measure.capture`), read the reformat finding's next step (I/O formats), rebuild
  following it, capture again: reformat share before and after (`timing.io_advice.verify`);
- workbench runner (`run_engine` op): plain execute_async_v3 and the same execution replayed
  from a CUDA graph, CUDA-event P50 over ITER runs, for the engine before and after the advice;
- a raw TensorRT loop (execute_async_v3 between CUDA events, in the worker's interpreter);
- Polygraphy's TrtRunner.infer (wall time, host copies included, as it works), FP32-I/O engine;
- torch eager FP32 and FP16, and torch.compile(mode="reduce-overhead") FP16 (channels-last for
  the CNN, SDPA attention for the encoder), CUDA-event P50 over ITER runs.
Last line: JSON with every P50 and the ratios engine (advised, CUDA graph) / torch.compile.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BATCHES = (1, 8, 32)
ITER = int(os.environ.get("WORKBENCH_BENCH_ITER", "200"))
TACTICS = os.environ.get("WORKBENCH_BENCH_TACTICS", "EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
# builder optimization level (TensorRT >= 8.6; 3 is TensorRT's default, 5 searches the most tactics)
OPT_LEVEL = int(os.environ["WORKBENCH_BENCH_OPT_LEVEL"]) if os.environ.get(
    "WORKBENCH_BENCH_OPT_LEVEL") else None
SEQ = 128
TARGET = {"resnet50": 0.6, "bert": 0.8}

RAW = r"""
import ctypes, json, sys, numpy as np, tensorrt as trt
from polygraphy import cuda
path, feeds, iters = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
logger = trt.Logger(trt.Logger.ERROR)
engine = trt.Runtime(logger).deserialize_cuda_engine(open(path, "rb").read())
ctx = engine.create_execution_context()
stream = cuda.Stream(); lib = cuda.wrapper().handle
names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
def ev():
    e = ctypes.c_void_p(); lib.cudaEventCreate(ctypes.byref(e)); return e
s, e = ev(), ev()
out = {}
for b, npz in feeds:
    z = np.load(npz)
    bufs = {}
    for n in names:
        if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT:
            ctx.set_input_shape(n, z[n].shape)
    for n in names:
        shp = [int(d) for d in ctx.get_tensor_shape(n)]
        vd = engine.get_tensor_vectorized_dim(n)
        if vd >= 0:  # a vectorized format: the vectorized axis padded to its component count
            k = engine.get_tensor_components_per_element(n)
            shp[vd] = -(-shp[vd] // k) * k
        dt = np.dtype(trt.nptype(engine.get_tensor_dtype(n)))
        bufs[n] = cuda.DeviceArray(shape=tuple(shp), dtype=dt)
        ctx.set_tensor_address(n, bufs[n].ptr)
    for _ in range(200):
        ctx.execute_async_v3(stream.ptr)
    stream.synchronize()
    lat = []
    for _ in range(iters):
        lib.cudaEventRecord(s, ctypes.c_void_p(stream.ptr)); ctx.execute_async_v3(stream.ptr)
        lib.cudaEventRecord(e, ctypes.c_void_p(stream.ptr)); lib.cudaEventSynchronize(e)
        ms = ctypes.c_float(); lib.cudaEventElapsedTime(ctypes.byref(ms), s, e); lat.append(ms.value)
    out["b%d" % b] = float(np.median(lat))
    for a in bufs.values(): a.free()
print(json.dumps(out))
"""

POLY = r"""
import json, sys, time, numpy as np
from polygraphy.backend.trt import TrtRunner, EngineFromBytes
path, feeds, iters = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
out = {}
with TrtRunner(EngineFromBytes(open(path, "rb").read())) as r:
    meta = r.get_input_metadata()
    for b, npz in feeds:
        z = np.load(npz)
        feed = {n: z[n].astype(meta[n].dtype) for n in meta.keys()}
        for _ in range(20): r.infer(feed)
        lat = []
        for _ in range(max(iters // 2, 20)):
            t = time.perf_counter(); r.infer(feed); lat.append((time.perf_counter() - t) * 1e3)
        out["b%d" % b] = float(np.median(lat))
print(json.dumps(out))
"""


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------ models
def make_torch_model(name: str) -> Any:
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50().eval()
    return _encoder().eval()


def _encoder(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
             vocab: int = 30522) -> Any:
    """A BERT-base-sized encoder in plain torch (embeddings + LayerNorm, 12 post-norm layers
    of multi-head attention and a GELU FFN, additive attention mask): traces with the
    TorchScript ONNX exporter TensorRT 8.6 reads; `sdpa=True` runs attention through
    torch's fused scaled_dot_product_attention (torch at its best), same weights."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def forward(self, x: Any, bias: Any, sdpa: bool) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, hidden // heads).permute(
                2, 0, 3, 1, 4).unbind(0)
            if sdpa:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            else:
                w = torch.matmul(q, k.transpose(-1, -2)) * (hidden // heads) ** -0.5 + bias
                a = torch.matmul(torch.softmax(w, dim=-1), v)
            x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, s, hidden)))
            return self.ln2(x + self.down(F.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(512, hidden)
            self.ln = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.sdpa = False

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            s = input_ids.shape[1]
            pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
            x = self.ln(self.tok(input_ids) + self.pos(pos))
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias, self.sdpa)
            return x

    return Encoder()


def feeds_for(name: str, b: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(b)
    if name == "resnet50":
        return {"input": rng.standard_normal((b, 3, 224, 224)).astype(np.float32)}
    return {"input_ids": rng.integers(0, 30522, (b, SEQ)).astype(np.int64),
            "attention_mask": np.ones((b, SEQ), dtype=np.int64)}


def export(name: str, model: Any, path: Path) -> List[Dict[str, List[List[int]]]]:
    import torch

    f = feeds_for(name, 2)
    args = tuple(torch.from_numpy(v) for v in f.values())
    outs = ["logits"] if name == "resnet50" else ["last_hidden_state"]
    dyn = {n: {0: "batch"} for n in list(f) + outs}
    # the TorchScript exporter (dynamo=False): opset 17, which TensorRT 8.6 parses
    torch.onnx.export(model, args, str(path), input_names=list(f), output_names=outs,
                      dynamic_axes=dyn, opset_version=17, dynamo=False)
    return [{n: [[1] + list(v.shape[1:]), [8] + list(v.shape[1:]), [32] + list(v.shape[1:])]
             for n, v in f.items()}]


# ------------------------------------------------------------------------------------- torch
def torch_times(name: str, model: Any) -> Dict[str, Any]:
    import torch

    out: Dict[str, Any] = {}
    dev = torch.device("cuda")

    def timed(fn: Any, x: Any) -> float:
        with torch.inference_mode():
            for _ in range(20):
                fn(*x)
            torch.cuda.synchronize()
            lat = []
            for _ in range(ITER):
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                fn(*x)
                e.record()
                e.synchronize()
                lat.append(s.elapsed_time(e))
        return float(np.median(lat))

    def inputs(b: int, half: bool) -> List[Any]:
        xs = []
        for v in feeds_for(name, b).values():
            t = torch.from_numpy(v).to(dev)
            if t.is_floating_point() and half:
                t = t.half()
            if name == "resnet50" and half:
                t = t.contiguous(memory_format=torch.channels_last)
            xs.append(t)
        return xs

    m32 = model.to(dev)
    if name == "bert":  # torch at its best: fused SDPA attention (the export used matmuls)
        m32.sdpa = True
    for b in BATCHES:
        out[f"torch_eager_fp32_b{b}"] = timed(m32, inputs(b, False))
    m16 = m32.half()
    if name == "resnet50":
        m16 = m16.to(memory_format=torch.channels_last)
    for b in BATCHES:
        out[f"torch_eager_fp16_b{b}"] = timed(m16, inputs(b, True))
    comp = torch.compile(m16, mode="reduce-overhead")
    for b in BATCHES:
        t0 = time.monotonic()
        try:
            out[f"torch_compile_fp16_b{b}"] = timed(comp, inputs(b, True))
        except Exception as e:  # say so, keep the rest
            out[f"torch_compile_fp16_b{b}"] = None
            out["torch_compile_error"] = f"{type(e).__name__}: {e}"[:300]
        log(f"  torch.compile b{b}: {out[f'torch_compile_fp16_b{b}']} ms "
            f"(compile + timing {time.monotonic() - t0:.0f} s)")
    return out


# ----------------------------------------------------------------------------------- engines
def run_workbench(name: str, onnx_path: Path, profiles: Any, tmp: Path) -> Dict[str, Any]:
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.measure.capture import capture
    from workbench.timing.io_advice import advise, verify
    from workbench.timing.summary import lint, reformat_overhead
    from workbench.worker.client import default_client
    from workbench.worker.protocol import RUN_ENGINE

    out: Dict[str, Any] = {}
    client = default_client()
    npz = {}
    for b in BATCHES:
        npz[b] = str(tmp / f"{name}_in_{b}.npz")
        np.savez(npz[b], **feeds_for(name, b))
    cfg = BuildConfig(precision="fp16", backend="tensorrt", profiles=profiles,
                      tactic_sources=[t for t in TACTICS.split(",") if t] or None,
                      builder_optimization_level=OPT_LEVEL, workspace_bytes=4096 << 20)
    t0 = time.monotonic()
    before = build_engine(onnx_path, cfg, timeout=900)
    log(f"  built {name} FP16 (as built by default) in {time.monotonic() - t0:.0f} s")
    cap_b = capture(before.engine_path, onnx=str(onnx_path), shapes={
        n: v.shape for n, v in feeds_for(name, 8).items()}, iterations=ITER, warmup=20,
        layer_iterations=50, backend="tensorrt")
    findings = lint(cap_b.table)
    step = next((f.extra["next_step"] for f in findings if "next_step" in f.extra), None) \
        or advise(cap_b.table)
    out["advice"] = {k: step[k] for k in ("build", "cli", "time_ms", "pct")} if step else None
    out["findings_before"] = [f"{f.code}: {f.message}" for f in findings
                              if "reformat" in f.code]
    log(f"  advice: {out['advice']}")
    after = before
    cap_a = cap_b
    if step:
        t0 = time.monotonic()
        after = build_engine(onnx_path, cfg.replace(**step["build"]), timeout=900)
        log(f"  rebuilt following the advice in {time.monotonic() - t0:.0f} s")
        cap_a = capture(after.engine_path, onnx=str(onnx_path), shapes={
            n: v.shape for n, v in feeds_for(name, 8).items()}, iterations=ITER, warmup=20,
            layer_iterations=50, backend="tensorrt")
    out["reformat"] = verify(cap_b.table, cap_a.table)
    out["reformat"]["count_before"] = reformat_overhead(cap_b.table)["layers"]
    out["reformat"]["count_after"] = reformat_overhead(cap_a.table)["layers"]
    out["capture_b8"] = {
        "before": {"plain_p50_ms": cap_b.latency.get("p50_ms"),
                   "graph": cap_b.raw.get("latency_graph")},
        "after": {"plain_p50_ms": cap_a.latency.get("p50_ms"),
                  "graph": cap_a.raw.get("latency_graph")}}
    for tag, res in (("default", before), ("advised", after)):
        for b in BATCHES:
            r = client.call(RUN_ENGINE, {"engine_path": res.engine_path, "inputs_npz": [npz[b]],
                                         "out_dir": str(tmp / "out"), "backend": "tensorrt",
                                         "time_iterations": ITER, "time_warmup_ms": 200.0},
                            timeout=600)
            out[f"runner_{tag}_plain_b{b}"] = r["latency"]["p50_ms"]
            g = r.get("latency_graph") or {}
            out[f"runner_{tag}_graph_b{b}"] = g.get("p50_ms")
            if "reason" in g:
                out[f"runner_{tag}_graph_reason"] = g["reason"]
        # outputs agree with the plain run's types: read back through the runner
    feeds = json.dumps([[b, npz[b]] for b in BATCHES])
    py = client.python
    for tag, res in (("default", before), ("advised", after)):
        raw = subprocess.run([py, "-c", RAW, res.engine_path, feeds, str(ITER)],
                             capture_output=True, text=True, timeout=600)
        if raw.returncode == 0:
            for k, v in json.loads(raw.stdout.strip().splitlines()[-1]).items():
                out[f"raw_trt_{tag}_{k}"] = v
        else:
            out[f"raw_trt_{tag}_error"] = raw.stderr[-300:]
    poly = subprocess.run([py, "-c", POLY, before.engine_path, feeds, str(ITER)],
                          capture_output=True, text=True, timeout=600)
    if poly.returncode == 0:
        for k, v in json.loads(poly.stdout.strip().splitlines()[-1]).items():
            out[f"polygraphy_default_wall_{k}"] = v
    else:
        out["polygraphy_error"] = poly.stderr[-300:]
    out["backend_version"] = before.backend_version
    return out


def machine() -> Dict[str, Any]:
    info: Dict[str, Any] = {"python": sys.version.split()[0], "host": platform.node()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.get_device_name(0)
    except Exception as e:
        info["torch"] = f"unavailable: {e}"
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,"
                            "clocks.max.sm,clocks.mem", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        info["nvidia_smi"] = q.stdout.strip()
    except Exception as e:
        info["nvidia_smi"] = f"unavailable: {e}"
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-vs-torch-"))
    result: Dict[str, Any] = {"benchmark": "engine_vs_torch", "iterations": ITER,
                              "tactic_sources": TACTICS, "builder_optimization_level": OPT_LEVEL,
                              "machine": machine(), "models": {}}
    log(json.dumps(result["machine"]))
    for name in args.models.split(","):
        t0 = time.monotonic()
        model = make_torch_model(name)
        onnx_path = tmp / f"{name}.onnx"
        profiles = export(name, model, onnx_path)
        log(f"{name}: exported in {time.monotonic() - t0:.0f} s")
        fig = run_workbench(name, onnx_path, profiles, tmp)
        fig.update(torch_times(name, model))
        ratios = {}
        for b in BATCHES:
            tc = fig.get(f"torch_compile_fp16_b{b}")
            for tag in ("advised_graph", "advised_plain", "default_plain"):
                v = fig.get(f"runner_{tag}_b{b}")
                if tc and v:
                    ratios[f"{tag}_vs_compile_b{b}"] = v / tc
        fig["ratios"] = ratios
        best = [ratios.get(f"advised_graph_vs_compile_b{b}") for b in BATCHES]
        fig["target"] = TARGET[name]
        fig["meets_target"] = all(r is not None and r <= TARGET[name] for r in best)
        result["models"][name] = fig
        for b in BATCHES:
            log(f"{name} b{b}: " + ", ".join(f"{k[:-len(f'_b{b}')]} {v:.4f}" for k, v in
                                             fig.items() if k.endswith(f"_b{b}") and
                                             isinstance(v, float)))
        log(f"{name}: reformat {json.dumps(fig['reformat'])}")
        log(f"{name}: ratios {json.dumps(ratios)}")
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
