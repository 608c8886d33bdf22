"""The same model timed in PyTorch, beside the engine, in this process and run: eager FP32,
eager FP16 and `torch.compile(mode="reduce-overhead")` FP16, CUDA-event P50 on a GPU (wall
clock on a CPU), on the feeds the engine was timed with.

The torch model comes from where the user has it: a module path `pkg.mod:factory` (called
with no arguments; it returns an `nn.Module`), a TorchScript file (`torch.jit.load`) or an
exported program (`.pt2`, `torch.export.load`). torch is optional: without it, or without a
torch model, `compare` says so in its result instead of timing anything. Every figure carries
where it came from: machine, GPU, clocks (nvidia-smi, when it answers) and versions.
"""
from __future__ import annotations

import importlib
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import torch

from workbench.core.errors import WorkbenchError

MODES = ("eager_fp32", "eager_fp16", "compile_fp16")
HALF_MODES = {"eager_fp16", "compile_fp16"}  # torch runs these with .half() weights and inputs


def torch_available() -> Optional[str]:
    """None when torch imports here, else why not (the line the panel and CLI show)."""
    try:
        import torch  # noqa: F401
    except Exception as e:
        return (f"torch is not installed in this Python ({sys.executable}): "
                f"{type(e).__name__}: {e}")
    return None


def load_torch_model(spec: str) -> Any:
    """An `nn.Module` (or scripted/exported module) from `pkg.mod:factory`, a TorchScript
    file or an exported program (.pt2); a WorkbenchError names what is wrong."""
    import torch

    path = Path(spec)
    if path.suffix in (".pt2",) and path.is_file():
        return torch.export.load(str(path)).module()
    if path.suffix in (".pt", ".pth", ".ts", ".jit") and path.is_file():
        try:
            return torch.jit.load(str(path), map_location="cpu")
        except Exception as e:
            raise WorkbenchError(f"not a TorchScript file ({type(e).__name__}: {e})",
                                 file=str(path), field="--torch-model",
                                 hint="save it with torch.jit.script(m).save(PATH), or pass "
                                      "pkg.module:factory") from None
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise WorkbenchError(f"torch model '{spec}' is neither a file nor pkg.module:factory",
                             field="--torch-model",
                             hint="e.g. torchvision.models:resnet50, model.pt (TorchScript), "
                                  "model.pt2 (torch.export)")
    try:
        factory = getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as e:
        raise WorkbenchError(f"cannot load '{spec}': {type(e).__name__}: {e}",
                             field="--torch-model",
                             hint="the module must import in this Python (PYTHONPATH)") from None
    return factory() if callable(factory) and not isinstance(factory, torch.nn.Module) \
        else factory


def provenance() -> Dict[str, Any]:
    """Where numbers come from: host, Python, torch/CUDA versions, GPU and its clocks."""
    out: Dict[str, Any] = {"host": platform.node(), "python": platform.python_version()}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = getattr(torch.version, "cuda", None)
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            q = subprocess.run([smi, "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
                                "clocks.mem", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=20)
            if q.returncode == 0 and q.stdout.strip():
                out["clocks"] = q.stdout.strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    out.setdefault("clocks", "not readable (no nvidia-smi answer)")
    return out


def _timer(device: str) -> Callable[[Callable[[], Any], int], List[float]]:
    import torch

    def cuda_events(fn: Callable[[], Any], n: int) -> List[float]:
        out = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            out.append(float(s.elapsed_time(e)))
        return out

    def wall(fn: Callable[[], Any], n: int) -> List[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e3)
        return out

    return cuda_events if device == "cuda" else wall


def time_torch(model: "torch.nn.Module", feeds: Dict[str, np.ndarray], *, iterations: int = 100,
               warmup: int = 10, modes: Optional[List[str]] = None,
               device: Optional[str] = None) -> Dict[str, Any]:
    """P50 (ms) of `model(*feeds.values())` per mode; a mode that fails gives its reason.
    FP16 modes cast float feeds and the model to half (CUDA only: CPU half is not what a
    deployment runs); compile uses mode="reduce-overhead" (CUDA graphs) on CUDA."""
    import torch

    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    timer = _timer(dev)
    rows: Dict[str, Any] = {}
    base = model.eval() if hasattr(model, "eval") else model
    for mode in modes or list(MODES):
        half = mode in HALF_MODES
        if half and dev != "cuda":
            rows[mode] = {"reason": "FP16 is timed on CUDA only (no GPU for torch here)"}
            continue
        try:
            m = base.to(dev)
            m = m.half() if half else m.float()
            xs = []
            for v in feeds.values():
                t = torch.from_numpy(np.ascontiguousarray(v)).to(dev)
                xs.append(t.half() if half and t.is_floating_point() else t)
            fn_model = torch.compile(m, mode="reduce-overhead" if dev == "cuda" else "default") \
                if mode.startswith("compile") else m
            with torch.inference_mode():
                t0 = time.monotonic()
                for _ in range(max(warmup, 3 if mode.startswith("compile") else 1)):
                    fn_model(*xs)
                warm_s = time.monotonic() - t0
                if dev == "cuda":
                    torch.cuda.synchronize()
                lat = timer(lambda f=fn_model, a=tuple(xs): f(*a), int(iterations))
            rows[mode] = {"p50_ms": float(np.median(lat)), "p99_ms": float(np.percentile(lat, 99)),
                          "n": len(lat), "device": dev, "warmup_s": warm_s,
                          "timer": "CUDA events" if dev == "cuda" else "wall clock"}
        except Exception as e:  # one mode failing (e.g. no compiler) keeps the others
            rows[mode] = {"reason": f"{type(e).__name__}: {str(e)[:300]}"}
    return rows


def compare(engine_latency: Dict[str, Any], engine_graph: Optional[Dict[str, Any]],
            feeds: Dict[str, np.ndarray], torch_model: Optional[str], *,
            iterations: int = 100, engine_source: Optional[Dict[str, Any]] = None
            ) -> Dict[str, Any]:
    """The comparison rows: the engine (plain enqueue, CUDA graph) and torch's modes, each
    with its P50 and source, ratios engine/torch.compile; `available` False with `reason`
    when torch is missing or no torch model was named."""
    rows = [{"what": "TensorRT engine, plain enqueue", "p50_ms": engine_latency.get("p50_ms"),
             "source": engine_source or {}}]
    if engine_graph:
        rows.append({"what": "TensorRT engine, CUDA graph", "p50_ms": engine_graph.get("p50_ms"),
                     "reason": engine_graph.get("reason"), "source": engine_source or {}})
    out: Dict[str, Any] = {"rows": rows, "shapes": {k: list(v.shape) for k, v in feeds.items()}}
    why = torch_available()
    if why is None and not torch_model:
        why = ("no torch model given: pass --torch-model pkg.module:factory, a TorchScript "
               "file or a .pt2 exported program")
    if why:
        out.update(available=False, reason=why)
        return out
    model = load_torch_model(str(torch_model))
    src = provenance()
    for mode, r in time_torch(model, feeds, iterations=iterations).items():
        rows.append({"what": f"torch {mode.replace('_', ' ')}", "mode": mode,
                     "p50_ms": r.get("p50_ms"), "reason": r.get("reason"),
                     "source": {**src, **{k: r[k] for k in ("device", "timer") if k in r}}})
    tc = next((r["p50_ms"] for r in rows if r.get("mode") == "compile_fp16" and r["p50_ms"]),
              None)
    if tc:
        for r in rows:
            if r["what"].startswith("TensorRT") and r.get("p50_ms"):
                r["vs_torch_compile"] = r["p50_ms"] / tc
    out.update(available=True, torch_model=str(torch_model), source=src)
    return out


def lines(cmp: Dict[str, Any]) -> List[str]:
    """The comparison as text lines (CLI)."""
    out = []
    for r in cmp["rows"]:
        p = r.get("p50_ms")
        fig = f"P50 {p:.4f} ms" if isinstance(p, (int, float)) else f"not timed ({r.get('reason')})"
        ratio = f"  ({r['vs_torch_compile']:.2f}x torch.compile)" if "vs_torch_compile" in r else ""
        out.append(f"  {r['what']}: {fig}{ratio}")
    if not cmp.get("available"):
        out.append(f"  torch: {cmp.get('reason')}")
    else:
        s = cmp.get("source", {})
        out.append(f"  torch numbers from {s.get('host')} ({s.get('gpu', 'CPU')}; torch "
                   f"{s.get('torch')}, CUDA {s.get('cuda')}; clocks {s.get('clocks')})")
    return out


def feeds_for(shapes: Dict[str, List[int]], inputs: Optional[str] = None,
              onnx: Any = None) -> Dict[str, np.ndarray]:
    """The feeds torch gets: the user's .npz when given (what the engine was timed on), else
    data like the worker's synthetic feeds at the timed `shapes` (floats: standard normal,
    seeded per input; integers: ones), dtypes from the ONNX when given."""
    if inputs:
        with np.load(inputs, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        return {k: data[k] for k in shapes if k in data} or data
    dtypes: Dict[str, Any] = {}
    if onnx is not None:
        from workbench.core.model import as_model
        from workbench.runtime.runners import input_metadata_of

        dtypes = {k: m.dtype for k, m in input_metadata_of(as_model(onnx).proto).items()}
    out = {}
    for i, (name, shape) in enumerate(shapes.items()):
        dt = np.dtype(dtypes.get(name) or np.float32)
        if np.issubdtype(dt, np.floating):
            out[name] = np.random.default_rng(i).standard_normal(shape).astype(dt)
        else:
            out[name] = np.ones(shape, dtype=dt)
    return out
