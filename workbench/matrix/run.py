"""Run a variant matrix: each variant one Ray task (build, accuracy, latency), results saved
per variant as they arrive, finished variants skipped on the next run.

    variants = plan_matrix(["resnet.onnx"], ["fp32", "fp16", "int8"], ["sm89", "sm120"],
                           calibration="calib.npz")
    res = run_matrix(variants, "out/", workers=2)      # a local Ray instance with 2 CPUs
    res.frame()                                         # pandas, one row per variant

Ray schedules: local by default (`ray.init(num_cpus=N)`), a cluster with `ray_address`
("auto" or "HOST:PORT"). A CPU task (TensorRT-RTX ahead-of-time build, accuracy on CPU) asks
for one CPU; a GPU task (`gpu=True`: build and time on the GPU Ray gives it) for one GPU.
The driver writes each result into the output folder as it arrives (tasks on other nodes
need not see that folder; their engines land in the shared engine cache and, on one host or
a shared file system, in DIR/engines). The engine cache is shared and locked
(workbench.engines.cache), so concurrent variants of one model never corrupt it, and a
variant killed half-way leaves nothing there.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from workbench.core.errors import WorkbenchError
from workbench.matrix.latency import add_predicted_latency
from workbench.matrix.plan import NATIVE, Variant, data_for
from workbench.matrix.store import ResultsStore

# environment a task needs from the driver (a Ray worker process may predate this run)
PASS_ENV = ("WORKBENCH_HOME", "WORKBENCH_TRT_PYTHON", "WORKBENCH_ORT_ISOLATE",
            "WORKBENCH_BUILD_STEP_DELAY")
_clients: Dict[Any, Any] = {}


# ------------------------------------------------------------------------------ one variant
def _client(env: Dict[str, str]) -> Any:
    """One TensorRT worker per (interpreter, visible GPUs) in this process: a Ray worker runs
    many tasks, and a GPU task's worker must see the GPU Ray gave that task."""
    from workbench.worker.client import WorkerClient

    key = (env.get("WORKBENCH_TRT_PYTHON") or "", os.environ.get("CUDA_VISIBLE_DEVICES"))
    c = _clients.get(key)
    if c is None:
        c = _clients[key] = WorkerClient(python=env.get("WORKBENCH_TRT_PYTHON") or None)
    return c


def gpu_ids() -> List[str]:
    """The GPUs this task was given (Ray's accelerator ids), [] for a CPU task. The hook for
    GPU / MIG pinning (workbench.fleet.gpus, another part of the fleet work) plugs in here."""
    try:
        import ray

        if ray.is_initialized():
            return [str(g) for g in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:
        pass
    return []


def _latency(engine: str, backend: str, client: Any, options: Dict[str, Any],
             notes: List[str]) -> Dict[str, Any]:
    """P50/P99 and throughput through the worker's profile op (measure.capture)."""
    from workbench.measure.capture import capture

    try:
        cap = capture(engine, backend=backend, client=client, iterations=options.get(
            "iterations", 100), warmup=options.get("warmup", 20), layer_iterations=5,
            batch_sizes="profile", timeout=options.get("timeout"),
            profile_index=options.get("profile_k", -1))
    except Exception as e:
        notes.append("latency not measured: " + " ".join(str(e).split())[:200])
        return {}
    lat = cap.latency or {}
    shapes = cap.raw.get("shapes") or {}
    batch = min((s[0] for s in shapes.values() if s), default=1) or 1
    p50 = lat.get("p50_ms")
    out = {"latency_p50_ms": p50, "latency_p99_ms": lat.get("p99_ms"),
           "latency_batch": batch,
           "throughput_qps": (batch * 1000.0 / p50) if p50 else None,
           "throughput": cap.throughput}
    best = max((t.get("items_per_s") or 0 for t in cap.throughput), default=0)
    if best:
        out["throughput_qps"] = max(out["throughput_qps"] or 0, best)
    return out


def run_variant(variant: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    """Build one variant (through the engine cache), measure its accuracy and, on a GPU,
    its latency. Never raises for a failed build: the result says `status: failed` and why.
    Runs in a Ray task (or in-process for a single variant)."""
    os.environ.update({k: v for k, v in (options.get("env") or {}).items() if v is not None})
    v = Variant.from_dict(variant)
    t0 = time.monotonic()
    out: Dict[str, Any] = {
        "id": v.id, "model": v.model_name, "model_path": v.model, "precision": v.label,
        "fallback": v.fallback, "target": v.target or NATIVE, "profile": v.profile_name,
        "opt_level": v.opt_level,
        "status": "failed", "resumed": False, "host": socket.gethostname(), "pid": os.getpid(),
        "gpus": gpu_ids(), "notes": []}
    notes: List[str] = out["notes"]
    from workbench.engines.engine import BuildFailed, build_engine

    client = _client(options.get("env") or {})
    engine_out = options.get("engine_dir")
    try:
        res = build_engine(v.model, v.config(), client=client, timeout=options.get("timeout"),
                           output=(Path(engine_out) / f"{v.id}.engine") if engine_out else None,
                           onnx_beside=False)  # (one converted ONNX per variant: too much)
    except BuildFailed as e:
        out.update(error=e.one_line(), code=e.code, node=e.node,
                   seconds=time.monotonic() - t0)
        return out
    except WorkbenchError as e:
        out.update(error=e.one_line(), code="bad-input", seconds=time.monotonic() - t0)
        return out
    except Exception as e:  # a bug or a crash: still one result, with where it came from
        out.update(error=f"{type(e).__name__}: {e}", code="internal",
                   traceback=traceback.format_exc()[-2000:], seconds=time.monotonic() - t0)
        return out
    out.update(status="ok", engine_path=res.output_path or res.engine_path,
               cache_path=res.engine_path, cache_key=res.key, size_bytes=res.size_bytes,
               build_seconds=res.build_seconds, cache_hit=res.cache_hit,
               backend=res.backend, backend_version=res.backend_version, route=res.route,
               targets=res.targets, onnx_path=res.onnx_path, dtypes=res.dtype_counts(),
               warnings=[f.message for f in res.findings if f.severity != "info"][:10])
    on_gpu = bool(options.get("gpu"))
    engine_path = out["engine_path"]
    if options.get("profile_index") is not None:  # against the profiles the engine has
        from workbench.engines.card import read_card
        from workbench.precision.profiles import profile_index

        built = (read_card(engine_path) or {}).get("profiles") if engine_path else None
        try:
            options = dict(options, profile_k=profile_index(options["profile_index"],
                                                            built or v.profiles or []))
        except WorkbenchError as e:
            notes.append(f"--profile-index: {e.message}; ran on the profile the feeds fit")
    samples = int(options.get("samples") or 8)
    if samples > 0:
        from workbench.matrix.accuracy import feeds_for, max_batch, measure
        from workbench.runtime.runners import batched_inputs

        try:
            data = data_for(v.model, options.get("inputs")) or v.calibration
            feeds = feeds_for(v.model, data, samples, notes)
            # judged at the target's budgets: an INT8 variant with an FP16 fallback is INT8's
            acc = measure(v.model, res.onnx_path or v.model, v.precision, feeds,
                          engine=engine_path if on_gpu else None, backend=res.backend,
                          profile_index=options.get("profile_k", -1),
                          batch_limit=max_batch(v.profiles, batched_inputs(v.model)),
                          notes=notes)
            out["accuracy"] = acc
            out.update(error_rel=acc["error_rel"], error_max_abs=acc["error_max_abs"],
                       cosine=acc["cosine"], accuracy_passed=acc["passed"],
                       accuracy_verdict=acc["verdict"],
                       accuracy_source=acc["source"])
        except Exception as e:
            notes.append("accuracy not measured: " + " ".join(str(e).split())[:300])
    if on_gpu:
        out.update(_latency(engine_path, res.backend, client, options, notes))
    else:
        notes.append("no latency: a CPU task (engines built ahead of time are timed on a GPU "
                     "with --gpus)")
    out["seconds"] = time.monotonic() - t0
    out["finished"] = time.time()
    return out


# ------------------------------------------------------------------------------ Ray
def start_ray(address: Optional[str] = None, workers: Optional[int] = None,
              gpus: Optional[int] = None) -> bool:
    """Join Ray (`address`: "auto" or HOST:PORT) or start a local instance with `workers`
    CPUs (default: this machine's); a running instance in this process is reused. Returns
    True when this call started or joined it (the caller shuts it down)."""
    try:
        import ray
    except ImportError:
        raise WorkbenchError("the variant matrix needs Ray", field="ray",
                             hint="pip install 'trt-workbench[matrix]' (ray>=2.9)") from None
    if ray.is_initialized():
        return False
    kw: Dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                              configure_logging=False)
    if address:
        kw["address"] = address
    else:
        kw["num_cpus"] = int(workers or os.cpu_count() or 1)
        if gpus is not None:
            kw["num_gpus"] = int(gpus)
    # a local instance, or a cluster at a loopback address (one that a workbench started on
    # this machine): this process joins as a loopback node too, else Ray looks for a raylet
    # at the machine's own address and waits forever
    local = not address or _on_loopback(address)
    if local:
        kw["_node_ip_address"] = LOOPBACK
    last: Optional[BaseException] = None
    for _ in range(3):  # a heavily loaded machine can miss Ray's 30-s node start-up wait
        try:
            with _lean_ray_env(local=not address), _loopback_only(local=local):
                ray.init(**kw)
            return True
        except ConnectionError as e:
            raise WorkbenchError(f"cannot join the Ray cluster at '{address}': {e}",
                                 field="--ray", hint="check the address (ray status), or "
                                 "leave --ray out for a local instance") from None
        except Exception as e:
            last = e
            if "timed out during startup" not in str(e):
                raise
            try:
                ray.shutdown()
            except Exception:
                pass
    raise WorkbenchError(f"Ray did not start: {last}", field="--ray",
                         hint="the machine may be overloaded; try again, or start Ray with "
                         "`ray start --head` and pass --ray auto")


LOOPBACK = "127.0.0.1"


def _on_loopback(address: str) -> bool:
    """Is a Ray address (HOST:PORT, ray://HOST:PORT) on the loopback interface?"""
    host = str(address).split("://", 1)[-1].rsplit(":", 1)[0].strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"
# Ray's switch for a node that serves this machine only: with it off, Ray takes the loopback
# address as the node's (`services.get_node_ip_address`) and its GCS, raylet and workers
# listen on 127.0.0.1 instead of every interface (Ray 2.60: measured with ss/psutil)
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class _NoTokenBanner:
    """A logging filter dropping Ray's "Token authentication is enabled for this Ray cluster"
    notice (authentication stays on; a run need not announce it)."""

    def filter(self, record: Any) -> bool:
        return not str(record.getMessage()).startswith("Token authentication is enabled for")


@contextlib.contextmanager
def _loopback_only(local: bool) -> Iterator[None]:
    """A local instance listens on the loopback interface only (its work never leaves this
    machine) and keeps Ray's token authentication without the banner Ray logs about it on
    every start (a filter on that one logger, for the call). The processes Ray starts read
    the switch from the environment; this process's Ray read it at import, so its module
    constant is set too for the call (probed: left alone where the name is gone). An address
    given with --ray is the user's cluster: nothing changes there, unless it is a loopback
    address (a cluster bound to this machine's loopback, which only a loopback node joins)."""
    if not local:
        yield
        return
    import logging

    banner = logging.getLogger("ray._private.authentication.authentication_token_setup")
    quiet = _NoTokenBanner()
    banner.addFilter(quiet)
    old = os.environ.get(_CLUSTER_SWITCH)
    os.environ[_CLUSTER_SWITCH] = "0"
    consts = sys.modules.get("ray._private.ray_constants")
    had = getattr(consts, "ENABLE_RAY_CLUSTER", None) if consts is not None else None
    if had is not None:
        consts.ENABLE_RAY_CLUSTER = False  # type: ignore[union-attr]
    try:
        yield
    finally:
        banner.removeFilter(quiet)
        if had is not None:
            consts.ENABLE_RAY_CLUSTER = had  # type: ignore[union-attr]
        if old is None:
            os.environ.pop(_CLUSTER_SWITCH, None)
        else:
            os.environ[_CLUSTER_SWITCH] = old


def check_gpus_for_ray(address: Optional[str]) -> None:
    """GPU variants on a local instance need a GPU here: refuse at once, in the shared "no GPU"
    words, rather than let Ray hold the tasks pending for a GPU that does not exist."""
    if address:
        return
    from workbench.fleet.gpus import list_gpus
    from workbench.worker.nogpu import needs_gpu

    if not list_gpus():
        raise WorkbenchError(needs_gpu("matrix --gpus", present=False), field="--gpus",
                             hint="leave --gpus out to build ahead of time on CPUs, or join a "
                             "cluster with GPUs (--ray ADDRESS)")


_STUB = ('raise ImportError("left out of the Ray processes a workbench matrix starts: building '
         'its grammar at import costs seconds of CPU (workbench.matrix.run._lean_ray_env)")\n')


@contextlib.contextmanager
def _lean_ray_env(local: bool) -> Iterator[None]:
    """The environment Ray's own processes start with, for a local instance. Every one of them
    (agents, monitors, workers) imports jsonschema, which imports rfc3987-syntax where it is
    installed (jupyter-events pulls it in) and that builds a Lark grammar at import: 2.8 of
    the 3.7 CPU seconds `import ray` takes here. On a loaded 2-core machine Ray's head then
    misses its fixed 30-s start-up wait (measured 2026-12-01: 3 of 3 starts failed at load 14;
    with this, it started at load 16). So a module of that name that fails to import is put
    first on their PYTHONPATH: jsonschema then only lacks its "iri" format check, which Ray
    never uses. This process's own environment is restored at once. WORKBENCH_RAY_LEAN=0
    turns it off."""
    if not local or os.environ.get("WORKBENCH_RAY_LEAN", "1") == "0":
        yield
        return
    import tempfile

    from workbench.core.fsutil import atomic_write_text

    stub_dir = Path(tempfile.gettempdir()) / f"workbench-ray-env-{os.getuid()}"
    stub = stub_dir / "rfc3987_syntax.py"
    if not stub.is_file() or stub.read_text() != _STUB:
        atomic_write_text(stub, _STUB)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(stub_dir)] + ([old] if old else []))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@dataclass
class MatrixResult:
    """A finished (or stopped) matrix: its results in plan order and where they were written."""

    out_dir: str
    results: List[Dict[str, Any]]
    files: Dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    pareto_note: str = ""

    def frame(self) -> Any:
        from workbench.matrix.table import results_frame

        return results_frame(self.results)

    @property
    def summary(self) -> Dict[str, int]:
        r = self.results
        return {"variants": len(r), "ok": sum(x["status"] == "ok" for x in r),
                "failed": sum(x["status"] != "ok" for x in r),
                "built": sum(x["status"] == "ok" and not x.get("cache_hit") and
                             not x.get("resumed") for x in r),
                "cache_hits": sum(bool(x.get("cache_hit")) and not x.get("resumed") for x in r),
                "resumed": sum(bool(x.get("resumed")) for x in r)}

    def to_dict(self) -> Dict[str, Any]:
        return {"out_dir": self.out_dir, "summary": self.summary, "files": self.files,
                "seconds": round(self.seconds, 3), "pareto_note": self.pareto_note,
                "variants": self.results}


def _failed_task(v: Variant, e: BaseException) -> Dict[str, Any]:
    return {"id": v.id, "model": v.model_name, "model_path": v.model,
            "precision": v.label, "fallback": v.fallback, "target": v.target or NATIVE,
            "profile": v.profile_name,
            "opt_level": v.opt_level, "status": "failed", "resumed": False,
            "code": "task-failed",
            "error": "the Ray task died: " + " ".join(str(e).split())[:300], "notes": []}


def run_matrix(variants: Sequence[Variant], out_dir: Any, *, ray_address: Optional[str] = None,
               workers: Optional[int] = None, gpu: bool = False,
               inputs: Any = None, samples: int = 8, timeout: Optional[float] = None,
               on_result: Optional[Callable[[Dict[str, Any]], None]] = None,
               cancel: Any = None, report: bool = True,
               profile_index: Any = None,
               on_wait: Optional[Callable[[str], None]] = None,
               latency_profiles: Any = None) -> MatrixResult:
    """Run every variant not yet finished in `out_dir` as a Ray task; see the module docstring.
    `inputs`: accuracy data (a path or {model stem: path}; default: the calibration data);
    `samples`: at most this many samples for accuracy (0: skip); `on_result(result)` is
    called in this thread as each variant ends; `cancel` (an Event) stops submitting and
    cancels running tasks. `report`: write results.json/.csv and pareto.html at the end.
    `profile_index`: the optimization profile accuracy and latency run on (an index, or a
    decoder's prefill / decode: `workbench.precision.profiles.profile_index`, per variant).
    `on_wait(line)`: told what the run waits for and since when while no task can start
    (a cluster with no GPU free or none at all; a local instance without a GPU is refused
    before Ray starts).
    `latency_profiles`: a folder of recorded per-layer profiles of the models' uniform engines
    (`workbench.timing.predict.find_profiles`): variants not timed on a GPU get a predicted
    latency from them (`latency_predicted_ms`)."""
    t0 = time.monotonic()
    if latency_profiles is not None:
        from workbench.timing.predict import find_profiles

        find_profiles(latency_profiles)  # (a missing folder is said before any work)
    store = ResultsStore(out_dir)
    options: Dict[str, Any] = {
        "env": {k: os.environ.get(k) for k in PASS_ENV if os.environ.get(k) is not None},
        "engine_dir": str(store.engines_dir.resolve()), "gpu": bool(gpu), "inputs": inputs,
        "samples": int(samples), "timeout": timeout}
    if profile_index is not None:
        options["profile_index"] = str(profile_index)
    store.write_plan(variants, {k: v for k, v in options.items() if k != "env"})
    results: Dict[str, Dict[str, Any]] = {}
    todo: List[Variant] = []
    for v in variants:
        done = store.finished(v.id)
        if done is not None:
            results[v.id] = dict(done, resumed=True)
            if on_result is not None:
                on_result(results[v.id])
        else:
            todo.append(v)
    if todo:
        if gpu:
            check_gpus_for_ray(ray_address)
        started = start_ray(ray_address, workers)
        try:
            _run_tasks(todo, options, store, results, workers if ray_address else None,
                       gpu, on_result, cancel, on_wait)
        finally:
            if started:
                import ray

                ray.shutdown()
    ordered = [results[v.id] for v in variants if v.id in results]
    if latency_profiles is not None:
        add_predicted_latency(ordered, latency_profiles)
    out = MatrixResult(str(store.dir), ordered, seconds=time.monotonic() - t0)
    if report:
        out.files = store.export(ordered)
        out.files.update(write_pareto(store, ordered, out))
    return out


def _run_tasks(todo: List[Variant], options: Dict[str, Any], store: ResultsStore,
               results: Dict[str, Dict[str, Any]], limit: Optional[int], gpu: bool,
               on_result: Optional[Callable[[Dict[str, Any]], None]], cancel: Any,
               on_wait: Optional[Callable[[str], None]] = None) -> None:
    """Submit (at most `limit` in flight on a cluster) and collect as they finish; while
    nothing finishes for WAIT_NOTICE_S, `on_wait` is told what the tasks wait for."""
    import ray

    waiting = _WaitNotice(gpu, on_wait)
    task = ray.remote(run_variant).options(
        num_cpus=1, num_gpus=1 if gpu else 0, max_retries=0, name="workbench-variant")
    queue = list(todo)
    running: Dict[Any, Variant] = {}
    while queue or running:
        if cancel is not None and cancel.is_set():
            for ref in running:
                ray.cancel(ref, force=True)
            break
        while queue and (not limit or len(running) < limit):
            v = queue.pop(0)
            running[task.remote(v.to_dict(), options)] = v
        ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
        waiting.tick(bool(ready), len(running))
        for ref in ready:
            v = running.pop(ref)
            try:
                res = ray.get(ref)
            except Exception as e:  # the task's process died (crash, OOM, killed)
                res = _failed_task(v, e)
            store.save(res)
            results[v.id] = res
            if on_result is not None:
                on_result(res)


WAIT_NOTICE_S = 30.0  # how long without a finished task before saying what the run waits for


class _WaitNotice:
    """Says, every WAIT_NOTICE_S while no task finishes, what the tasks wait for (a GPU the
    cluster has none free of, or CPUs) and since when: no wait is silent."""

    def __init__(self, gpu: bool, on_wait: Optional[Callable[[str], None]]) -> None:
        self.gpu, self.on_wait = gpu, on_wait
        self.since = time.time()
        self.told = time.monotonic()

    def tick(self, progressed: bool, running: int) -> None:
        now = time.monotonic()
        if progressed:
            self.since, self.told = time.time(), now
            return
        if self.on_wait is None or now - self.told < WAIT_NOTICE_S:
            return
        self.told = now
        import ray

        free = ray.available_resources()
        total = ray.cluster_resources()
        what = "GPU" if self.gpu else "CPU"
        have = f"{free.get(what, 0):g} of {total.get(what, 0):g} {what}(s) free"
        since = time.strftime("%H:%M:%S", time.localtime(self.since))
        self.on_wait(f"waiting since {since} for {running} task(s) to finish or start "
                     f"(each needs 1 {what}; the Ray cluster has {have})")


def write_pareto(store: ResultsStore, results: List[Dict[str, Any]],
                 out: Optional[MatrixResult] = None) -> Dict[str, str]:
    """DIR/pareto.html: the Pareto data (workbench.matrix.table) drawn by workbench.render."""
    from workbench.matrix.table import pareto_axes, pareto_front, results_frame
    from workbench.render.matrix_figures import write_pareto_html

    df = results_frame(results)
    axes = pareto_axes(df)
    if out is not None:
        out.pareto_note = axes["note"]
    path = store.dir / "pareto.html"
    write_pareto_html(pareto_front(df, axes["x"]), axes, path, table=df)
    return {"pareto_html": str(path)}
