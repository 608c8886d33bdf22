"""Build orchestration: the client side of the worker's `build` op, engine inspection, progress
events and failures. The spec lives in `workbench.engines.spec`, the cache in
`workbench.engines.cache`, the exports in `workbench.engines.export`.

    cfg = BuildConfig(precision="fp16", profiles=[{"input": [[1,3,32,32],[8,3,32,32],[32,3,32,32]]}],
                      target="sm89", builder_optimization_level=1)
    res = build_engine("model.onnx", cfg, on_event=print, timeout=600)
    res.engine_path, res.cache_hit, res.findings, res.export["trtexec"]

Strongly typed route (TensorRT 11, TensorRT-RTX; the default where the STRONGLY_TYPED flag
exists): precision is an ONNX transform first (the precision table's transform, through
`workbench.precision.transform.convert`), stored as a model version in the workspace, then
built as is. Legacy route (TensorRT <= 10 with the table's builder flag, chosen by probing):
builder flags, an entropy calibrator fed from the calibration data, and a calibration cache.
Engines are renamed into the cache only when complete, so a cancelled, failed or timed-out
build leaves nothing behind.

A build runs as stages (`workbench.engines.stages`): resolve -> cache lookup -> prepare ONNX ->
worker request (a typed BuildRequest) and call -> translate -> publish.

WORKBENCH_BUILD_STEP_DELAY=S slows every TensorRT build step by S seconds (IProgressMonitor
backends): for tests and classroom demos of progress and cancel on builds that take 0.1 s.
"""
from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable, Dict, Optional

from workbench.engines.backend import backend_info
from workbench.engines.cache import CACHE_SCHEMA
from workbench.engines.failures import BuildCancelled, BuildFailed, BuildTimeout
from workbench.engines.result import BuildResult
from workbench.engines.spec import BuildConfig, layer_precisions
from workbench.engines.stages.call import call_worker
from workbench.engines.stages.lookup import build_lock, cached_result
from workbench.engines.stages.prepare import prepare_onnx
from workbench.engines.stages.publish import PathLike, publish
from workbench.engines.stages.request import explicit_quantization_flags, worker_request
from workbench.engines.stages.resolve import gpu_support_findings, resolve
from workbench.engines.stages.translate import result_findings
from workbench.core.errors import WorkbenchError
from workbench.core.model import ModelLike
from workbench.worker.protocol import BUILD_BACKENDS

BACKENDS = BUILD_BACKENDS

__all__ = ["BuildCancelled", "BuildConfig", "BuildFailed", "BuildResult", "BuildTimeout",
           "CACHE_SCHEMA", "backend_info", "build_engine", "explicit_quantization_flags",
           "gpu_support_findings", "inspect_engine", "layer_precisions"]

# a node the parser took but the builder has no kernel for (a plugin-backed op such as
# NonMaxSuppression on a TensorRT without that plugin): split off like a parser refusal
BUILDER_REFUSAL = re.compile(r"has no runners|could not find any implementation|"
                             r"no implementation", re.IGNORECASE)


def build_engine(model_or_path: ModelLike, config: Optional[BuildConfig] = None, *,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Optional[threading.Event] = None, timeout: Optional[float] = None,
                 client: Any = None, output: Optional[PathLike] = None,
                 use_cache: bool = True, strict_profiles: bool = False,
                 split_tail: bool = True, onnx_beside: bool = True) -> BuildResult:
    """Build (or fetch from the cache) the engine of `model_or_path` for `config`.

    When the parser refuses nodes that all lie in a tail the split recipe cuts, the largest
    supported prefix becomes the engine and the tail + a chain manifest are written beside it
    (`workbench.engines.tail`; `result.split` says so, a "split-build" finding and a "notice"
    event name the refused nodes); `split_tail=False` makes every refusal a BuildFailed.
    `onnx_beside`: with `output`, an ONNX TensorRT got from the workspace (a precision
    conversion) is copied beside the engine for the equivalent commands
    (`stages.publish.onnx_beside`).
    """
    config = (config or BuildConfig()).validate()
    t0 = time.monotonic()
    kwargs: Dict[str, Any] = dict(cancel=cancel, timeout=timeout, use_cache=use_cache,
                                  strict_profiles=strict_profiles, onnx_beside=onnx_beside)
    try:
        res = _build_whole(model_or_path, config, on_event=on_event, client=client,
                           output=output, **kwargs)
    except (BuildCancelled, BuildTimeout):
        raise
    except BuildFailed as e:
        by_builder = (e.code == "build-failed" and bool(e.node)
                      and BUILDER_REFUSAL.search(e.message) is not None)
        if not split_tail or (e.code != "parse-failed" and not by_builder):
            raise
        from workbench.engines.tail import build_split

        backend = backend_info(config.backend, client)["backend"]  # (memoised)
        if timeout is not None:  # one time limit for the whole model's try and the prefix's
            kwargs["timeout"] = max(0.1, timeout - (time.monotonic() - t0))
        # the prefix's build names OUT.prefix.onnx, or (a precision conversion of it) copies
        # what TensorRT built from beside the engine, as any build does (`onnx_beside`)
        return build_split(model_or_path, config, e, build=build_engine, backend=backend,
                           output=output, client=client, on_event=on_event,
                           by_builder=by_builder, **kwargs)
    if output is not None:
        from workbench.engines.tail import clear_stale_split

        clear_stale_split(output)
    return res


def _build_whole(model_or_path: Any, config: BuildConfig, *,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Optional[threading.Event] = None, timeout: Optional[float] = None,
                 client: Any = None, output: Optional[PathLike] = None,
                 use_cache: bool = True, strict_profiles: bool = False,
                 onnx_beside: bool = True) -> BuildResult:
    """The engine of the whole model (no split), stage by stage (`workbench.engines.stages`).

    Without profiles, dynamic inputs get default ones (`precision.profiles.default_profile`):
    from calibration data, the profile advisor's proposal; a "default-profile" finding (also
    sent as a "notice" event) says what was chosen and the
    flag to set it; `strict_profiles=True` makes it an error naming every dynamic input.
    Raises WorkbenchError for bad input, BuildFailed (with node/op) when TensorRT refuses,
    BuildCancelled / BuildTimeout when stopped; none of them leaves an engine in the cache.
    """
    from workbench.worker.client import default_client

    t0 = time.monotonic()
    config = (config or BuildConfig()).validate()
    job = resolve(model_or_path, config, client=client or default_client(), output=output,
                  on_event=on_event, strict_profiles=strict_profiles, t0=t0)
    with build_lock(job, use_cache=use_cache, cancel=cancel, timeout=timeout):
        if use_cache:
            hit = cached_result(job, output=output, with_onnx=onnx_beside)
            if hit is not None:
                return hit
        prepared = prepare_onnx(job, cancel)
        request, chosen = worker_request(job, prepared)
        out, names = call_worker(job, prepared, request, cancel=cancel, timeout=timeout)
        findings = job.defaulted + prepared.findings + chosen + \
            result_findings(job, out, names)
        return publish(job, prepared, request, out, findings, output=output,
                       with_onnx=onnx_beside, use_cache=use_cache)


def inspect_engine(result: BuildResult, *, client: Any = None,
                   timeout: Optional[float] = 300) -> Dict[str, Any]:
    """The engine inspector's layer JSON where this machine can deserialize the engine
    (`source` "engine-inspector", `info` = the parsed JSON); otherwise the built network's
    per-layer dtypes (`source` "network", with the `reason`), e.g. for a TensorRT-RTX engine
    built ahead of time on a machine without a suitable GPU."""
    from workbench.worker.client import WorkerError, default_client

    client = client or default_client()
    try:
        return client.call("inspect_engine", {
            "engine_path": result.engine_path, "backend": result.backend,
            "onnx_path": result.onnx_path or None,
            "strongly_typed": result.route != "legacy-flags"}, timeout=timeout)
    except WorkerError as e:
        raise WorkbenchError(e.message, file=result.engine_path, hint=e.hint) from None
