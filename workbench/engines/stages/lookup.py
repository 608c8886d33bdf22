"""Stage 2, cache lookup: one build per key at a time, and the cached engine when there is one.

Across threads and processes (two notebooks, a matrix, a resumed run beside a killed one's
orphan), a second build of the same engine waits for the first under the key's lock, then
finds its engine in the cache instead of building it again. A cache hit is answered with this
run's findings and commands: the cached commands name the engine path of the build that made
them, this run's lines name this run's output.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any, Optional

from workbench.core.version import __version__
from workbench.engines.cache import load_cached, result_from_meta
from workbench.engines.failures import BuildCancelled, BuildTimeout
from workbench.engines.result import BuildResult
from workbench.engines.stages.progress import emit, waiting_for_twin
from workbench.engines.stages.publish import PathLike, copy_out, onnx_beside
from workbench.engines.stages.resolve import BuildJob
from workbench.core.errors import Finding
from workbench.core.fsutil import LockWaitStopped, single_flight


def build_lock(job: BuildJob, *, use_cache: bool, cancel: Optional[threading.Event],
               timeout: Optional[float]) -> contextlib.ExitStack:
    """The key's single-flight lock, held (entered) when the cache is used; raises
    BuildCancelled / BuildTimeout when the wait for a twin build is stopped."""
    flight = contextlib.ExitStack()
    if not use_cache:
        return flight
    try:
        flight.enter_context(single_flight(
            job.ws.build_lock_path(job.key), cancel=cancel,
            deadline=None if timeout is None else job.t0 + timeout,
            on_wait=lambda: waiting_for_twin(job.on_event)))
    except LockWaitStopped as e:
        if e.reason == "cancelled":
            raise BuildCancelled("the build was cancelled while it waited for another "
                                 "build of the same engine", code="cancelled") from None
        raise BuildTimeout(f"the time limit of {timeout:g} s passed while another build "
                           "of the same engine was still running; nothing was built",
                           code="timeout", hint="raise --timeout, or run again once the "
                           "other build is done (its engine is then a cache hit)") from None
    return flight


def cached_result(job: BuildJob, *, output: Optional[PathLike], with_onnx: bool
                  ) -> Optional[BuildResult]:
    """The BuildResult of the engine cached under `job.key` (copied to `output`), or None."""
    meta = load_cached(job.engine, job.meta_path, job.key, job.ws)
    if meta is None:
        return None
    from workbench.engines.card import card_from_meta, card_path, write_card
    from workbench.engines.export import export_for

    engine, config = job.engine, job.config
    if not os.path.isfile(card_path(str(engine))):  # cached before engines had cards
        with job.ws.lock():
            write_card(engine, card_from_meta(meta, engine))
    res = result_from_meta(meta, engine, time.monotonic() - job.t0, cache_hit=True)
    res.findings = job.defaulted + [f for f in res.findings if f.code != "default-profile"]
    made_by = meta.get("workbench_version")
    if made_by != __version__:  # its findings are what that version said
        res.findings.append(_other_version(made_by))
    if output is not None:
        res.output_path = copy_out(engine, output, job.ref.path, meta)
    shown, note = onnx_beside(meta.get("onnx_path"), output if with_onnx else None, job.ref,
                              config)
    res.export = export_for(config, onnx_path=shown, engine_path=str(output or engine),
                            backend=meta["backend"], route=meta.get("route"),
                            calib_cache=meta.get("calib_cache"))
    if note:
        res.export["notes"].insert(0, note)
    emit(job.on_event, "cache-hit", 1.0, str(engine))
    job.ws.append_history({"action": "build", "cache_hit": True, "key": job.key,
                           "config_hash": config.config_hash, "engine": str(engine)})
    return res


def _other_version(made_by: Any) -> Finding:
    """The finding that a cached engine's findings are another workbench version's."""
    return Finding(
        "info", "cached-by-other-version",
        "this engine was built by " + (f"workbench {made_by}" if made_by
                                       else "an earlier workbench") +
        f" (this is {__version__}): its findings are that version's",
        hint="build with --no-cache (use_cache=False) for this version's checks",
        source="build")
