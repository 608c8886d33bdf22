"""The workbench's TensorRT runner vs a raw execute_async_v3 loop vs Polygraphy's TrtRunner vs
PyTorch eager FP32/FP16 (where torch imports), ResNet-50 at batch 1/8/32, side by side in one
run (GPU; the worker's TensorRT, e.g. WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python).

- workbench: `run_engine` (the TensorRTRunner's op) timing its own execute loop with CUDA
  events (`time_iterations`), plus the end-to-end wall time of `TensorRTRunner.infer` (feeds and
  outputs through .npz files);
- raw: a bare loop in the worker's interpreter: set shapes/addresses once, execute_async_v3 between
  two CUDA events, P50;
- polygraphy: `TrtRunner.infer` on the same engine (host copies included, as it works);
- torch: torchvision ResNet-50 eager (random weights) FP32 and FP16 where torch imports.
Last line: one JSON object with P50s and the ratios runner/raw (goal <= 1.05).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BATCHES = (1, 8, 32)
ITER = 200
TACTICS = os.environ.get("WORKBENCH_BENCH_TACTICS", "EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")

RAW = r'''
import json, sys, numpy as np, tensorrt as trt
from polygraphy import cuda
from polygraphy.backend.trt import TrtRunner, EngineFromBytes
path, batches, iters = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
logger = trt.Logger(trt.Logger.ERROR)
engine = trt.Runtime(logger).deserialize_cuda_engine(open(path, "rb").read())
ctx = engine.create_execution_context()
stream = cuda.Stream()
lib = cuda.wrapper().handle
import ctypes
out = {}
def ev():
    e = ctypes.c_void_p(); lib.cudaEventCreate(ctypes.byref(e)); return e
for b in batches:
    bufs = {}
    for i in range(engine.num_io_tensors):
        n = engine.get_tensor_name(i)
        if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT:
            ctx.set_input_shape(n, (b, 3, 224, 224))
    for i in range(engine.num_io_tensors):
        n = engine.get_tensor_name(i)
        shp = tuple(ctx.get_tensor_shape(n))
        bufs[n] = cuda.DeviceArray(shape=shp, dtype=np.dtype(trt.nptype(engine.get_tensor_dtype(n))))
        ctx.set_tensor_address(n, bufs[n].ptr)
    for _ in range(20):
        ctx.execute_async_v3(stream.ptr)
    stream.synchronize()
    s, e, lat = ev(), ev(), []
    for _ in range(iters):
        lib.cudaEventRecord(s, ctypes.c_void_p(stream.ptr)); ctx.execute_async_v3(stream.ptr)
        lib.cudaEventRecord(e, ctypes.c_void_p(stream.ptr)); lib.cudaEventSynchronize(e)
        ms = ctypes.c_float(); lib.cudaEventElapsedTime(ctypes.byref(ms), s, e); lat.append(ms.value)
    out["raw_b%d" % b] = float(np.median(lat))
    for a in bufs.values(): a.free()
del ctx
with TrtRunner(EngineFromBytes(open(path, "rb").read())) as r:
    name = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)
            if engine.get_tensor_mode(engine.get_tensor_name(i)) == trt.TensorIOMode.INPUT][0]
    for b in batches:
        x = np.random.default_rng(0).standard_normal((b, 3, 224, 224)).astype(np.float32)
        for _ in range(10): r.infer({name: x})
        lat = []
        for _ in range(max(iters // 4, 20)):
            t = __import__("time").perf_counter(); r.infer({name: x}); lat.append((__import__("time").perf_counter() - t) * 1e3)
        out["polygraphy_b%d" % b] = float(np.median(lat))
try:
    import torch, torchvision
    m = torchvision.models.resnet50().eval().cuda()
    for dt, tag in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        mm = m.to(dt)
        for b in batches:
            x = torch.randn(b, 3, 224, 224, device="cuda", dtype=dt)
            with torch.inference_mode():
                for _ in range(10): mm(x)
                torch.cuda.synchronize(); lat = []
                for _ in range(max(iters // 4, 20)):
                    s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
                    s.record(); mm(x); e.record(); e.synchronize(); lat.append(s.elapsed_time(e))
            out["torch_%s_b%d" % (tag, b)] = float(np.median(lat))
except Exception as ex:
    out["torch"] = "unavailable: %s" % ex
print(json.dumps(out))
'''


def _model(tmp: Path) -> Path:
    """ResNet-50: the H200 fixture's exact graph (torchvision's, exported by torch) with random
    weights, as tests/gpu/test_engine_compare.py makes it (no torch needed here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gpu_engine_compare", REPO / "tests" / "gpu" / "test_engine_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    import onnx

    m = mod._with_random_weights(mod.H200 / "resnet50.structure.onnx")
    p = tmp / "resnet50.onnx"
    onnx.save(m, str(p))
    return p


def _torch_here() -> dict:
    try:
        import torch
        import torchvision
    except Exception as e:
        return {"torch_here": f"unavailable: {e}"}
    if not torch.cuda.is_available():
        return {"torch_here": "unavailable: no CUDA in this interpreter's torch"}
    out = {}
    m = torchvision.models.resnet50().eval().cuda()
    for dt, tag in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        mm = m.to(dt)
        for b in BATCHES:
            x = torch.randn(b, 3, 224, 224, device="cuda", dtype=dt)
            with torch.inference_mode():
                for _ in range(10):
                    mm(x)
                torch.cuda.synchronize()
                lat = []
                for _ in range(max(ITER // 4, 20)):
                    s = torch.cuda.Event(enable_timing=True)
                    e = torch.cuda.Event(enable_timing=True)
                    s.record()
                    mm(x)
                    e.record()
                    e.synchronize()
                    lat.append(s.elapsed_time(e))
            out[f"torch_{tag}_b{b}"] = float(np.median(lat))
    return out


def main() -> None:
    from workbench.build.engine import BuildConfig, build_engine
    from workbench.trtrunner import TensorRTRunner
    from workbench.worker.client import default_client
    from workbench.worker.protocol import RUN_ENGINE

    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-runner-"))
    onnx_path = _model(tmp)
    cfg = BuildConfig(precision="fp16", backend="tensorrt",
                      profiles=[{"input": [[1, 3, 224, 224], [8, 3, 224, 224], [32, 3, 224, 224]]}],
                      tactic_sources=[t for t in TACTICS.split(",") if t] or None,
                      workspace_bytes=2048 << 20)
    t0 = time.monotonic()
    res = build_engine(onnx_path, cfg, timeout=1800)
    print(f"built {res.engine_path} in {time.monotonic() - t0:.1f} s ({res.route})", flush=True)
    client = default_client()
    figures = {}
    for b in BATCHES:
        x = np.random.default_rng(0).standard_normal((b, 3, 224, 224)).astype(np.float32)
        npz = tmp / f"in_{b}.npz"
        np.savez(npz, input=x)
        r = client.call(RUN_ENGINE, {"engine_path": res.engine_path, "inputs_npz": [str(npz)],
                                     "out_dir": str(tmp / "out"), "backend": "tensorrt",
                                     "time_iterations": ITER}, timeout=900)
        figures[f"workbench_b{b}"] = r["latency"]["p50_ms"]
        runner = TensorRTRunner(res.engine_path, model=onnx_path, backend="tensorrt")
        runner.infer({"input": x})
        lat = []
        for _ in range(10):
            t = time.perf_counter()
            runner.infer({"input": x})
            lat.append((time.perf_counter() - t) * 1e3)
        figures[f"workbench_infer_wall_b{b}"] = float(np.median(lat))
        print(f"batch {b}: workbench P50 {figures[f'workbench_b{b}']:.4f} ms, infer() wall "
              f"{figures[f'workbench_infer_wall_b{b}']:.2f} ms", flush=True)
    py = client.python
    out = subprocess.run([py, "-c", RAW, res.engine_path, json.dumps(list(BATCHES)), str(ITER)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        print(out.stderr[-3000:])
        raise SystemExit(f"raw/polygraphy loop failed in {py}")
    figures.update(json.loads(out.stdout.strip().splitlines()[-1]))
    if "torch" in figures:  # not in the worker's interpreter: try this one
        figures.update(_torch_here())
    for b in BATCHES:
        figures[f"ratio_workbench_raw_b{b}"] = figures[f"workbench_b{b}"] / figures[f"raw_b{b}"]
        print(f"batch {b}: " + ", ".join(f"{k} {v:.4f}" for k, v in figures.items()
                                         if k.endswith(f"_b{b}") and isinstance(v, float)))
    worst = max(figures[f"ratio_workbench_raw_b{b}"] for b in BATCHES)
    print(json.dumps({"benchmark": "engine_runner", "model": "resnet50", "precision": "fp16",
                      "backend_version": res.backend_version, "p50_ms": figures,
                      "worst_ratio_vs_raw": worst, "goal": 1.05, "passed": worst <= 1.05}))


if __name__ == "__main__":
    main()
