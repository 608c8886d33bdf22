"""Stage 4b, the worker call: send the BuildRequest and wait, with the time limit that is
left, the caller's cancel, and the work that runs beside TensorRT: the graph's load and name
index (the log's findings need it as soon as the build returns) and, for a build of the
user's own FP32 file, the profile check (a failure stops the build and is what the user
sees). An engine that is not complete (cancelled, failed, timed out) is removed; failures
come back through the translate stage.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from workbench.engines.stages import profiles
from workbench.engines.stages.prepare import PreparedOnnx
from workbench.engines.stages.request import graph_of
from workbench.engines.stages.resolve import BuildJob
from workbench.engines.stages.translate import cancelled, timed_out, worker_failure
from workbench.core.errors import WorkbenchError
from workbench.worker.build_request import BuildRequest


class AnyEvent:
    """Set when any of its events is (the worker client only asks is_set())."""

    def __init__(self, *events: Optional[threading.Event]) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class _Beside:
    """The thread beside the build: the speculative profile check, then the name index.
    `invalid` is set when the check failed (the build is then cancelled); `sent` when the
    request is out (protobuf's import holds the GIL for ms at a time: it waits for that)."""

    def __init__(self, job: BuildJob, prepared: PreparedOnnx) -> None:
        self.job, self.prepared = job, prepared
        self.found: Dict[str, Any] = {}  # names, invalid, error
        self.invalid = threading.Event()
        self.sent = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:  # graph load, profile check, name index: beside TensorRT
        self.sent.wait(5.0)
        if self.prepared.speculative:
            try:
                profiles.validate_profiles(self.job.ref, self.job.config)
            except WorkbenchError as e:
                self.found["invalid"] = e
                self.invalid.set()
                return
        try:
            import workbench.engines.export  # noqa: F401  (needed as soon as the build returns)
            from workbench.core.trtlog import NameIndex

            self.found["names"] = NameIndex.from_graph(graph_of(self.prepared.path,
                                                                self.job.ref))
        except BaseException as e:
            self.found["error"] = e

    def raise_if_invalid(self) -> None:
        """The check's failure, once the thread is done (it overrides the build's answer)."""
        self.sent.set()  # (the request may never have gone out)
        self.thread.join()
        if "invalid" in self.found:
            raise self.found["invalid"]

    def names(self) -> Any:
        """The graph's name index (re-raises what went wrong making it)."""
        self.thread.join()
        if "error" in self.found:
            raise self.found["error"]
        return self.found["names"]


def call_worker(job: BuildJob, prepared: PreparedOnnx, request: BuildRequest, *,
                cancel: Optional[threading.Event], timeout: Optional[float]
                ) -> Tuple[Dict[str, Any], Any]:
    """(the worker's result, the graph's name index) for `request`; raises the translated
    failure, and removes the partial engine when the build did not complete."""
    from workbench.worker.client import WorkerCancelled, WorkerError, WorkerTimeout

    remaining = None if timeout is None else max(0.1, timeout - (time.monotonic() - job.t0))
    beside = _Beside(job, prepared)
    done = False
    try:
        out = job.client.call("build", request.to_args(), timeout=remaining,
                              on_event=job.on_event, cancel=AnyEvent(cancel, beside.invalid),
                              sent=beside.sent)
        beside.raise_if_invalid()
        done = True  # complete: published under its key with its card (publish_engine)
    except WorkerTimeout as e:
        beside.raise_if_invalid()
        raise timed_out(job, e, timeout) from None
    except WorkerCancelled:
        beside.raise_if_invalid()
        raise cancelled(job) from None
    except WorkerError as e:
        beside.raise_if_invalid()
        raise worker_failure(job, e) from None
    finally:
        if not done:  # the partial engine and the worker's own temp file, if any
            tmp = Path(request.engine_path)
            for stale in job.ws.engines_dir.glob(tmp.name + "*"):
                try:
                    stale.unlink()
                except OSError:
                    pass
    return out, beside.names()
