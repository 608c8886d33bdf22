"""Worker op `run_engine`: run a serialized engine on named inputs and hand the outputs back.

The client (`workbench.runtime.trtrunner.TensorRTRunner`) writes one .npz per sample batch (keys = the
engine's input names); this op binds them one batch at a time (`ops_profile._Runner`: one
execution context, device buffers reused across batches), executes with `execute_async_v3`,
copies the outputs asked for (all I/O outputs by default) to the host and writes them to one
.npz per batch in `out_dir`, so nothing but file names crosses the JSON protocol and the worker
holds at most one batch of outputs in host memory. Feeds are cast to the engine's dtypes
(TensorRT 8.6 takes INT32 where the ONNX said INT64).

It also says which debug-tensor API this TensorRT has (`INetworkDefinition.mark_debug`,
`mark_unfused_tensors_as_debug_tensors`, `IDebugListener`: TensorRT 10+ and TensorRT-RTX),
probed with getattr and reported; the client marks tensors as network outputs, the route every
version has (8.6 has no debug tensors). Python 3.9, stdlib + numpy + tensorrt + polygraphy only.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, List, Optional

import numpy as np

from workbench.worker import loaders as L
from workbench.worker.cuda import Cuda
from workbench.worker.iolayout import from_engine
from workbench.worker.ops_profile import (WARMUP_MS, _feed, _graph_stats, _graph_summary,
                                          _np_dtype, _Runner, _stats)
from workbench.worker.protocol import RUN_ENGINE
from workbench.worker.registry import Context, OpError, op


def debug_api(trt: Any) -> Dict[str, bool]:
    """Which debug-tensor entry points this TensorRT module has (no version strings)."""
    net = getattr(trt, "INetworkDefinition", None)
    return {"mark_debug": net is not None and hasattr(net, "mark_debug"),
            "mark_unfused": net is not None and hasattr(
                net, "mark_unfused_tensors_as_debug_tensors"),
            "debug_listener": hasattr(trt, "IDebugListener")}


def _load_feed(path: str, inputs: List[str]) -> Dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise OpError("input file not found: %s" % path, code="not-found")
    with np.load(path, allow_pickle=False) as z:
        feed = {k: z[k] for k in z.files}
    missing = [n for n in inputs if n not in feed]
    if missing:
        raise OpError("input '%s' is missing from %s" % (missing[0], os.path.basename(path)),
                      node=missing[0], code="bad-input",
                      hint="engine inputs: %s" % ", ".join(inputs))
    return feed


def _to_host(runner: Any, name: str) -> np.ndarray:
    """One output buffer copied to a new host array (DeviceArray.copy_to: every polygraphy),
    in numpy's linear layout also where the engine's output is vectorized (HWC8...)."""
    buf = runner.buffers[name]
    host = np.empty(tuple(int(d) for d in buf.shape), dtype=buf.dtype)
    buf.copy_to(host, stream=runner.stream)
    runner.stream.synchronize()
    layout = runner.layouts.get(name)
    if layout is None:
        return host
    if host.size == 0:
        return np.empty(tuple(runner.logical[name]), dtype=host.dtype)
    return from_engine(host, runner.logical[name], layout)


@op(RUN_ENGINE)
def run_engine(ctx: Context, engine_path: str, inputs_npz: List[str], out_dir: str,
               outputs: Optional[List[str]] = None, backend: str = "auto",
               profile_index: int = -1, time_iterations: int = 0,
               time_warmup_ms: float = WARMUP_MS, cuda_graph: bool = True) -> Dict[str, Any]:
    """Run `engine_path` on each .npz in `inputs_npz`; write `out_dir/outputs_K.npz` each.
    time_iterations > 0: also time that many executions of the last batch (CUDA events,
    after `time_warmup_ms` of warm-up: ops_profile._Runner.timed). profile_index < 0: each
    .npz runs on the first optimization profile that holds its shapes (`profiles_used`)."""
    if not os.path.isfile(engine_path):
        raise OpError("engine file not found: %s" % engine_path, code="not-found")
    if not isinstance(inputs_npz, list) or not inputs_npz:
        raise OpError("inputs_npz must be a non-empty list of .npz paths", code="bad-args")
    name, trt = L.load_backend(backend)
    probe = debug_api(trt)
    cuda = Cuda("running an engine")
    logger = L.make_logger(trt, ctx)
    engine, reason = L.deserialize(trt, logger, L.read_engine(engine_path))
    if engine is None:
        raise OpError("could not deserialize the engine (%s)" % reason,
                      code="cannot-deserialize",
                      hint="engines only run with the TensorRT version and GPU family that "
                           "built them; rebuild it here")
    runner = _Runner(trt, cuda, engine, int(profile_index))
    try:
        want = list(outputs) if outputs else list(runner.outputs)
        unknown = [n for n in want if n not in runner.outputs]
        if unknown:
            raise OpError("the engine has no output '%s'" % unknown[0], node=unknown[0],
                          code="bad-input", hint="engine outputs: %s" % ", ".join(runner.outputs))
        os.makedirs(out_dir, exist_ok=True)
        paths, shapes, dtypes, used = [], [], {}, []
        t0 = time.monotonic()
        for k, path in enumerate(inputs_npz):
            ctx.check_cancel()
            feed = _load_feed(path, runner.inputs)
            feed = {n: _feed(feed[n], _np_dtype(trt, engine.get_tensor_dtype(n)), n)
                    for n in runner.inputs}
            runner.set_inputs(feed)
            used.append(runner.profile_index)
            try:
                runner.run()
            except OpError as e:  # say which inputs, which profile, and TensorRT's words
                said = [m["message"] for m in getattr(logger, "messages", [])
                        if m.get("level") == "error"][-3:]
                shapes_now = {n: list(a.shape) for n, a in feed.items()}
                raise OpError(f"{e} on {os.path.basename(path)} (input shapes {shapes_now}, "
                              f"optimization profile {runner.profile_index})"
                              + (": " + " | ".join(said) if said else ""), code=e.code,
                              hint="run the same shapes with trtexec (--loadEngine, --shapes) "
                                   "to see TensorRT's log") from None
            runner.stream.synchronize()
            host = {n: _to_host(runner, n) for n in want}
            dtypes = {n: str(a.dtype) for n, a in host.items()}
            shapes.append({n: list(a.shape) for n, a in host.items()})
            out = os.path.join(out_dir, "outputs_%d.npz" % k)
            np.savez(out + ".tmp.npz", **host)
            os.replace(out + ".tmp.npz", out)
            paths.append(out)
            del host
            ctx.progress("run", (k + 1) / len(inputs_npz), os.path.basename(path))
        latency = graph = None
        if int(time_iterations) > 0:
            latency = _stats(runner.timed(int(time_iterations), 10, ctx, "latency",
                                          float(time_warmup_ms)))
            if cuda_graph:  # the same execution replayed from a CUDA graph, beside it
                graph = _graph_summary(_graph_stats(runner.graph_timed(
                    int(time_iterations), ctx, "cuda graph")))
        return {"latency": latency, "latency_graph": graph, "backend": name,
                "backend_version": L.version_of(trt),
                "outputs": paths,
                "names": want, "engine_inputs": runner.inputs,
                "engine_outputs": runner.outputs, "dtypes": dtypes, "shapes": shapes,
                "profiles_used": used, "n_profiles": len(runner.ranges),
                "seconds": time.monotonic() - t0, "debug_api": probe}
    finally:
        runner.free()
