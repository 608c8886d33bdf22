"""Build orchestration: the client side of the worker's `build` op, engine inspection, progress
events and failures. The spec lives in `workbench.build.spec`, the cache in
`workbench.build.cache`, the exports in `workbench.build.export`.

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

WORKBENCH_BUILD_STEP_DELAY=S slows every TensorRT build step by S seconds (IProgressMonitor
backends): for tests and classroom demos of progress and cancel on builds that take 0.1 s.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from workbench.build.cache import (CACHE_SCHEMA, ModelRef, cache_key, hash_calibration,
                                   load_cached, publish_engine, reads_calibration,
                                   result_from_meta)
from workbench.build import io_formats
from workbench.build.options import Render, worker_args
from workbench.build.result import BuildResult
from workbench.build.spec import BuildConfig, layer_precisions, resolve_route
from workbench import __version__
from workbench.errors import Finding, WorkbenchError
from workbench.findings import step
from workbench.fsutil import LockWaitStopped, single_flight
from workbench.model import ModelLike
from workbench.precision import table
from workbench.worker.protocol import BAD_INPUT_CODES, BUILD_BACKENDS

BACKENDS = BUILD_BACKENDS
_backend_lock = threading.Lock()
_backend_memo: Dict[Tuple[str, str], Dict[str, Any]] = {}

PathLike = Union[str, "os.PathLike[str]"]
__all__ = ["BuildCancelled", "BuildConfig", "BuildFailed", "BuildResult", "BuildTimeout",
           "CACHE_SCHEMA", "backend_info", "build_engine", "inspect_engine"]


class BuildFailed(WorkbenchError):
    """TensorRT could not parse or build the model (CLI exit 1); names the node/layer."""

    def __init__(self, message: str, *, node: Optional[str] = None, op: Optional[str] = None,
                 hint: Optional[str] = None, code: str = "build-failed",
                 log: Optional[List[Dict[str, str]]] = None,
                 findings: Optional[List[Finding]] = None, file: Optional[str] = None,
                 next_steps: Optional[List[Any]] = None) -> None:
        super().__init__(message, node=node, hint=hint, file=file, next_steps=next_steps)
        self.op = op
        self.code = code
        self.log = log or []
        self.findings = findings or []


# a node the parser took but the builder has no kernel for (a plugin-backed op such as
# NonMaxSuppression on a TensorRT without that plugin): split off like a parser refusal
BUILDER_REFUSAL = re.compile(r"has no runners|could not find any implementation|"
                             r"no implementation", re.IGNORECASE)


class BuildCancelled(BuildFailed):
    pass


class BuildTimeout(BuildFailed):
    pass


# --------------------------------------------------------------------------------------------
# backend
# --------------------------------------------------------------------------------------------
def backend_info(backend: str = "auto", client: Any = None) -> Dict[str, Any]:
    """Name, version and capabilities of the worker's TensorRT (memoised per interpreter)."""
    from workbench.worker.client import WorkerError, default_client

    client = client or default_client()
    key = (client.python, backend)
    with _backend_lock:
        if key in _backend_memo:
            return _backend_memo[key]
    try:
        info = getattr(client, "preloaded_backend_info", lambda b: None)(backend) or \
            client.call("backend_info", {"backend": backend}, timeout=120)
    except WorkerError as e:
        raise WorkbenchError(str(e.message), field="backend", hint=e.hint) from None
    with _backend_lock:
        _backend_memo[key] = info
    return info


def _emit(on_event: Optional[Callable[[Dict[str, Any]], None]], phase: str,
          fraction: Optional[float] = None, message: str = "") -> None:
    if on_event is not None:
        on_event({"event": "progress", "phase": phase, "fraction": fraction,
                  "message": message})


def _waiting_for_twin(on_event: Optional[Callable[[Dict[str, Any]], None]]) -> None:
    """Tell the user why nothing moves: the same engine is being built elsewhere."""
    if on_event is not None:
        on_event({"event": "notice", "message": "another build of this engine (same model and "
                  "settings) is running; waiting for it, then using its engine"})
    _emit(on_event, "waiting", None, "another build of the same engine is running")


def _readable_progress(on_event: Optional[Callable[[Dict[str, Any]], None]], model: str,
                       engine: str, names: Dict[str, str]
                       ) -> Optional[Callable[[Dict[str, Any]], None]]:
    """Progress events as a person reads them: the model's and the engine's file names, never
    the workspace's hash-named files, and a message for every phase. `names["parsed"]`, set
    once the route is known, says which ONNX TensorRT parses (e.g. the model's fp16 version)."""
    if on_event is None:
        return None
    fixed = {"hashing": f"reading {model}", "writing": engine, "done": f"{engine} ready",
             "cache-hit": f"{engine} from the cache (built before with the same model and "
             "settings)"}

    def relay(ev: Dict[str, Any]) -> None:
        if ev.get("event") == "progress":
            phase, msg = ev.get("phase"), str(ev.get("message") or "")
            parsed = names.get("parsed", model)
            if phase in fixed:
                msg = fixed[str(phase)]
            elif phase == "parsing":
                msg = parsed
            elif phase == "building" and not msg:
                msg = f"TensorRT builder started on {parsed}"
            elif phase == "precision":
                msg = f"{msg} ({model})" if msg else model
            ev = dict(ev, message=msg)
        on_event(ev)

    return relay


def _copy_out(src: Path, dst: PathLike, model_path: Optional[Path],
              meta: Optional[Dict[str, Any]] = None) -> str:
    """Copy the engine `src` to `dst` with its card (written first; made from `meta` when the
    cached engine has none)."""
    from workbench.build.card import copy_card

    out = Path(dst)
    if model_path is not None and out.resolve() == model_path.resolve():
        raise WorkbenchError("refusing to write the engine over the model", file=str(out),
                             hint="choose another -o path")
    out.parent.mkdir(parents=True, exist_ok=True)
    copy_card(src, out, meta)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return str(out)


_VIOLATION = re.compile(r"(kMIN|kOPT|kMAX) values for profile (\d+) violate shape "
                        r"constraints: (?:\w+ )?(\S+?):? ")
_VOLUME = re.compile(r"reshape would change volume (\d+) to (\d+)")


def _profile_violation(message: str, config: BuildConfig, model: str = "MODEL"
                       ) -> Optional[Tuple[str, str]]:
    """(what happened, what to do) for TensorRT's "kOPT values for profile 0 violate shape
    constraints": the graph fixes a size that a dynamic input's profile varies (a tracing
    export froze an axis, e.g. the sequence length, into a Reshape); else None."""
    m = _VIOLATION.search(message or "")
    if m is None:
        return None
    which = {"kMIN": "min", "kOPT": "opt", "kMAX": "max"}[m.group(1)]
    k = int(m.group(2))
    prof = config.profiles[k] if k < len(config.profiles) else None
    shapes = (", ".join(f"{n}:{'x'.join(str(d) for d in v[('min', 'opt', 'max').index(which)])}"
                        for n, v in prof.items()) if prof else "")
    at = f"at the profile's {which} shapes ({shapes})" if shapes else \
        f"at the {which} shapes of the profile it was given (the default one, if none was)"
    v = _VOLUME.search(message)
    vol = (f": it would reshape {v.group(1)} values into {v.group(2)}, a size fixed in the "
           "graph" if v else "")
    return (f"the model does not run {at}: layer {m.group(3)} cannot take them{vol}. An "
            "input axis declared dynamic is fixed inside the graph (a traced export often "
            "freezes the sequence length or batch into a Reshape)",
            f"build at the sizes the graph was exported with (`workbench profiles {model} --calib "
            "DATA` proposes a profile from your data; or --profile with min = opt = max at "
            "the export size), or re-export with the axis really dynamic (torch.onnx.export "
            "with dynamic_axes / dynamo=True and no size read as a Python int)")


def _onnx_beside(onnx_path: Any, output: Optional[PathLike], ref: ModelRef,
                 config: BuildConfig) -> Tuple[str, Optional[str]]:
    """The ONNX the trtexec/polygraphy lines and the script read, and a note: TensorRT built
    from a file of the workspace (the precision conversion, or an in-memory model), which the
    user should not have to dig out, so with an engine output it is copied beside the engine
    (`OUT.engine.onnx`, atomically, never over the model) and the lines name that copy."""
    src = Path(str(onnx_path)) if onnx_path else None
    if output is None or src is None or not src.is_file() or \
            (ref.path is not None and src.resolve() == ref.path.resolve()):
        return str(onnx_path or ""), None
    if src.parent.name == "transformed":  # saved with external data (over 2 GB): left there
        return str(src), None
    out = Path(output)
    tag = config.entry.kind != "none"
    # named for the engine, like its card: `net.engine.onnx`, never a name users give their
    # own conversions (`net.fp16.onnx` is what `workbench precision -o` is usually told)
    dst = out.with_name(f"{out.name}.onnx")
    if ref.path is not None and dst.resolve() == ref.path.resolve():
        dst = out.with_name(f"{out.name}.built.onnx")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    what = (f"the {config.precision.upper()} ONNX TensorRT built from (the workbench's "
            "conversion of your model)" if tag else "the ONNX TensorRT built from")
    return str(dst), f"{dst}: {what}, written beside the engine; the lines above read it"


def _transformed_onnx(ref: ModelRef, config: BuildConfig, ws: Any, on_event: Any
                      ) -> Tuple[Optional[Path], List[Finding]]:
    """The ONNX that goes to TensorRT: the original (FP32) or the precision transform."""
    from workbench.model import save_model

    if config.entry.kind == "none":
        if ref.path is not None:
            return ref.path, []
        data = ref.model.proto.SerializeToString()
        return ws.version_path(ws.add_version(data)), []
    from workbench.precision.transform import convert

    _emit(on_event, "precision", None, f"converting to {config.precision}")
    kwargs: Dict[str, Any] = config.spec.convert_kwargs()
    if config.profiles and config.calibration is not None:
        try:
            import workbench.precision.profiles  # noqa: F401  (calibration checks shapes against it)

            kwargs["profile"] = [{k: tuple(v) for k, v in p.items()} for p in config.profiles]
        except ImportError:
            pass
    model = ref.model
    if model.external_files and model.path is not None:  # weights streamed to the data file
        out = ws.dir / "transformed" / f"{ref.content_hash[:12]}-{config.config_hash}.onnx"
        res = convert(model, config.precision, output=out, **kwargs)
        return res.path, list(res.findings)
    res = convert(model, config.precision, **kwargs)
    try:
        data = res.proto.SerializeToString()
    except ValueError:  # over 2 GB: external data beside it
        out = ws.dir / "transformed" / f"{ref.content_hash[:12]}-{config.config_hash}.onnx"
        return save_model(res.proto, out), list(res.findings)
    vid = ws.add_version(data)
    ws.append_history({"action": "precision", "target": config.precision, "version": vid,
                       "config_hash": config.config_hash})
    return ws.version_path(vid), list(res.findings)


def _io_cast_onnx(onnx_path: Path, config: BuildConfig, ws: Any) -> Tuple[Path, List[str]]:
    """The ONNX with the requested float I/O types (Casts at the I/O: `io_formats.cast_io`),
    saved as a workspace version; the same path when nothing changes. The user's model is
    never written."""
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        raise WorkbenchError("I/O types on a strongly typed build of a model with external "
                             "data are not supported yet", file=str(onnx_path),
                             field="input_io_formats", hint="add Casts at the I/O in the ONNX "
                             "yourself, or build without --input-io-formats/--output-io-formats")
    proto, changed = io_formats.cast_io(proto, config.input_io_formats,
                                        config.output_io_formats)
    if not changed:
        return onnx_path, []
    vid = ws.add_version(proto.SerializeToString())
    ws.append_history({"action": "io-types", "version": vid, "changes": changed,
                       "config_hash": config.config_hash})
    return ws.version_path(vid), changed


def _write_calibration(ref: ModelRef, config: BuildConfig, ws: Any, calib_hash: str,
                       backend: str, version: str) -> Tuple[str, str]:
    """Legacy INT8: validated batches -> one .npz the worker reads (keys 'b<i>:<input>')."""
    import numpy as np

    from workbench.precision.calibration import load_calibration
    from workbench.fsutil import atomic_write_bytes

    batches = load_calibration(config.calibration, ref.model)
    shapes = {n: a.shape for n, a in batches[0].items()}
    for i, b in enumerate(batches):
        for n, a in b.items():
            if a.shape != shapes[n]:
                raise WorkbenchError(
                    f"calibration batch {i} input '{n}' has shape {list(a.shape)} but batch 0 "
                    f"has {list(shapes[n])}; the builder-flag calibrator needs one shape",
                    file=config.calibration, field=n, hint="pad or bucket the batches")
    import io

    buf = io.BytesIO()
    np.savez(buf, **{f"b{i}:{n}": a for i, b in enumerate(batches) for n, a in b.items()})
    d = ws.dir / "calibration"
    npz = d / f"{calib_hash[:16]}.npz"
    if not npz.exists():
        atomic_write_bytes(npz, buf.getvalue())
    cache = d / f"{calib_hash[:16]}-{backend}-{version}-{config.calibrate_method}.cache"
    return str(npz), str(cache)


def _expand_exclude_ops(ref: ModelRef, config: BuildConfig) -> List[str]:
    names = list(config.exclude_nodes)
    if config.exclude_ops:
        ops = set(config.exclude_ops)
        names += [n.name for n in ref.model.graph.node if n.op_type in ops and n.name]
    return names


def _parse_causes(ref: Any, backend: str) -> Dict[str, Dict[str, Any]]:
    """By node, the static rules that say in the model's terms why the parser refuses it
    (`workbench.support.checker.parse_causes`)."""
    from workbench.support.checker import parse_causes

    try:
        return parse_causes(ref.model, backend)
    except WorkbenchError:  # no rule table for this backend: TensorRT's words stand alone
        return {}


def _parser_words(err: Dict[str, Any], backend: str) -> Optional[str]:
    """The parser error's reason as `check` words it (`checker.parser_words`), or None."""
    from workbench.support.checker import parser_words

    try:
        return parser_words(err, backend)[0] or None
    except Exception:  # (a record of unexpected shape: TensorRT's own words stand)
        return None


def _plugin_needs_gpu(err: Dict[str, Any], backend: str) -> Optional[Tuple[str, str]]:
    """(reason, hint) where the importer has its plugin but the worker has no GPU to create
    it on (`workbench.support.checker.plugin_gpu_reason`), else None."""
    from workbench.support.checker import plugin_gpu_reason
    from workbench.support.rules import backend_table

    if not err.get("plugin_needs_gpu"):
        return None
    try:
        short = backend_table(backend)["short"]
    except WorkbenchError:
        short = backend
    return plugin_gpu_reason(err, short)


def _attributed_errors(ref: Any, errors: List[Dict[str, Any]], backend: str
                       ) -> List[Dict[str, Any]]:
    """Parser errors that name no node, given the node(s) the static rules flag for them
    (`workbench.support.checker.attribute_errors`)."""
    from workbench.support.checker import attribute_errors

    try:
        return attribute_errors(ref.model, errors, backend)
    except WorkbenchError:  # no rule table for this backend: the error stays graph-level
        return errors


def _node_for_index(ref: ModelRef, idx: Any) -> Optional[str]:
    try:
        i = int(idx)
        if i < 0:  # the parser's "no node" (a graph-level error)
            return None
        node = ref.model.graph.node[i]
        return node.name or ref.model.node_ids[i]
    except (TypeError, ValueError, IndexError):
        return None


def build_engine(model_or_path: ModelLike, config: Optional[BuildConfig] = None, *,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Optional[threading.Event] = None, timeout: Optional[float] = None,
                 client: Any = None, output: Optional[PathLike] = None,
                 use_cache: bool = True, strict_profiles: bool = False,
                 split_tail: bool = True, onnx_beside: bool = True) -> BuildResult:
    """Build (or fetch from the cache) the engine of `model_or_path` for `config`.

    When the parser refuses nodes that all lie in a tail the split recipe cuts, the largest
    supported prefix becomes the engine and the tail + a chain manifest are written beside it
    (`workbench.build.tail`; `result.split` says so, a "split-build" finding and a "notice"
    event name the refused nodes); `split_tail=False` makes every refusal a BuildFailed.
    `onnx_beside`: with `output`, an ONNX TensorRT got from the workspace (a precision
    conversion) is copied beside the engine for the equivalent commands (`_onnx_beside`).
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
        from workbench.build.tail import build_split

        backend = backend_info(config.backend, client)["backend"]  # (memoised)
        if timeout is not None:  # one time limit for the whole model's try and the prefix's
            kwargs["timeout"] = max(0.1, timeout - (time.monotonic() - t0))
        # the prefix's build names OUT.prefix.onnx, or (a precision conversion of it) copies
        # what TensorRT built from beside the engine, as any build does (`_onnx_beside`)
        return build_split(model_or_path, config, e, build=build_engine, backend=backend,
                           output=output, client=client, on_event=on_event,
                           by_builder=by_builder, **kwargs)
    if output is not None:
        from workbench.build.tail import clear_stale_split

        clear_stale_split(output)
    return res


def gpu_support_findings(config: BuildConfig, backend: str) -> List[Finding]:
    """A precision only newer GPUs compute (the table's `min_sm`: FP8 from Ada, sm89; BF16
    from Ampere, sm80) against the build's targets: a --target below it is an error before
    TensorRT starts; TensorRT-RTX's portable default (Ampere and later, sm86 included) a warning."""
    need = config.entry.min_sm
    if not need:
        return []
    name, cc = config.precision.upper(), f"{need // 10}.{need % 10}"
    targets = [t for t in (config.target or "").split(",") if t.startswith("sm")]
    low = [t for t in targets if int(t[2:]) < need]
    if low:
        raise WorkbenchError(f"{name} needs a GPU of compute capability {cc} or later; "
                             f"--target {', '.join(low)} has no {name}", field="target",
                             hint=f"build {name} for sm{need} or later (e.g. --target "
                                  f"sm{max(need, 89)}), or choose another precision for "
                                  f"{low[0]}")
    if not targets and backend == "tensorrt-rtx" and need > 86:
        return [Finding(
            "warning", "precision-needs-gpu",
            f"{name} needs a GPU of compute capability {cc} or later; without --target the "
            f"engine is built portable across Ampere-and-later GPUs, and Ampere (sm86) has no "
            f"{name}", source="build",
            hint=f"build for the GPUs you serve: --target sm{need} (or sm90, sm120; several "
                 "as sm89,sm120)")]
    return []


def _build_whole(model_or_path: Any, config: BuildConfig, *,
                 on_event: Optional[Callable[[Dict[str, Any]], None]] = None,
                 cancel: Optional[threading.Event] = None, timeout: Optional[float] = None,
                 client: Any = None, output: Optional[PathLike] = None,
                 use_cache: bool = True, strict_profiles: bool = False,
                 onnx_beside: bool = True) -> BuildResult:
    """The engine of the whole model (no split).

    Without profiles, dynamic inputs get default ones (`precision.profiles.default_profile`):
    from calibration data, the profile advisor's proposal; a "default-profile" finding (also
    sent as a "notice" event) says what was chosen and the
    flag to set it; `strict_profiles=True` makes it an error naming every dynamic input.
    Raises WorkbenchError for bad input, BuildFailed (with node/op) when TensorRT refuses,
    BuildCancelled / BuildTimeout when stopped; none of them leaves an engine in the cache.
    """
    from workbench.worker.client import (WorkerCancelled, WorkerError, WorkerTimeout,
                                         default_client)

    t0 = time.monotonic()
    config = (config or BuildConfig()).validate()
    client = client or default_client()
    ref = ModelRef(model_or_path)
    if output is not None and ref.path is not None and \
            Path(output).resolve() == Path(ref.path).resolve():  # before any work, not after
        raise WorkbenchError("refusing to write the engine over the model", file=str(output),
                             field="output", hint="choose another -o path (e.g. "
                             f"{Path(ref.path).with_suffix('.engine').name})")
    model_name = ref.path.name if ref.path is not None else "the in-memory model"
    missing = getattr(ref.model, "missing_external", None)
    if missing:  # before TensorRT's own words ('WeightsContext ... Failed to import initializer')
        raise WorkbenchError(
            "external-data file(s) missing: " + ", ".join(sorted(set(missing))[:4]),
            file=str(ref.path) if ref.path is not None else None,
            hint="TensorRT reads the weights from them: put the data file(s) next to the model", category="weights")
    if hasattr(ref.model, "require_weights"):
        ref.model.require_weights("a build")
    names: Dict[str, str] = {}
    on_event = _readable_progress(on_event, model_name, Path(output).name if output is not None
                                  else f"the cached engine of {model_name}", names)
    defaulted: List[Finding] = []
    if not config.profiles:  # dynamic inputs get default profiles, or (strict) one error
        _refuse_zero_size_axes(ref)  # (first: no default profile for an axis fixed at 0)
        config, defaulted = _default_profiles(ref, config, strict_profiles)
        if defaulted and on_event is not None:
            on_event({"event": "notice", "message": str(defaulted[0]),
                      "finding": defaulted[0].to_dict()})
    # start the worker (and learn its TensorRT) while this process hashes the model
    box: Dict[str, Any] = {}

    def _fetch() -> None:
        try:
            box["info"] = backend_info(config.backend, client)
        except BaseException as e:  # re-raised on the calling thread
            box["error"] = e

    with _backend_lock:
        cold = (client.python, config.backend) not in _backend_memo
    fetcher = threading.Thread(target=_fetch, daemon=True)
    fetcher.start()
    _emit(on_event, "hashing", 0.0, str(ref.path or "<in-memory model>"))
    try:
        model_hash = ref.content_hash
        if cold:
            ref.workspace()  # while TensorRT may still be importing
    finally:
        fetcher.join()
    if "error" in box:
        raise box["error"]
    info = box["info"]
    backend, version = info["backend"], info["version"]
    defaulted += gpu_support_findings(config, backend)
    route = resolve_route(config, info.get("capabilities", {}))
    if route == "strongly-typed" and config.entry.kind != "none":
        names["parsed"] = f"{model_name} ({config.precision} version)"
    entry = config.entry
    calib_hash = hash_calibration(config.calibration) if reads_calibration(config) else None
    if entry.needs_calibration and calib_hash is None and not (
            config.allow_random_calibration and route == "strongly-typed"):
        raise WorkbenchError(f"{config.precision.upper()} needs calibration data",
                             field="calibration", hint="pass --calib PATH (.npz/.npy or a "
                             "folder of representative inputs)")
    key, key_doc = cache_key(model_hash, config, route, backend, version, calib_hash)
    ws = ref.workspace()
    engine = ws.engines_dir / f"{key[:32]}.engine"
    meta_path = ws.engines_dir / f"{key[:32]}.json"

    # One build per key at a time, across threads and processes (two notebooks, a matrix, a
    # resumed run beside a killed one's orphan): a second build of the same engine waits for
    # the first, then finds its engine in the cache instead of building it again.
    flight = contextlib.ExitStack()
    if use_cache:
        try:
            flight.enter_context(single_flight(
                ws.build_lock_path(key), cancel=cancel,
                deadline=None if timeout is None else t0 + timeout,
                on_wait=lambda: _waiting_for_twin(on_event)))
        except LockWaitStopped as e:
            if e.reason == "cancelled":
                raise BuildCancelled("the build was cancelled while it waited for another "
                                     "build of the same engine", code="cancelled") from None
            raise BuildTimeout(f"the time limit of {timeout:g} s passed while another build "
                               "of the same engine was still running; nothing was built",
                               code="timeout", hint="raise --timeout, or run again once the "
                               "other build is done (its engine is then a cache hit)") from None
    with flight:
        if use_cache:
            meta = load_cached(engine, meta_path, key, ws)
            if meta is not None:
                from workbench.build.card import card_from_meta, card_path, write_card

                if not os.path.isfile(card_path(str(engine))):  # cached before engines had cards
                    with ws.lock():
                        write_card(engine, card_from_meta(meta, engine))
                res = result_from_meta(meta, engine, time.monotonic() - t0, cache_hit=True)
                res.findings = defaulted + [f for f in res.findings if f.code != "default-profile"]
                made_by = meta.get("workbench_version")
                if made_by != __version__:  # its findings are what that version said
                    res.findings.append(Finding(
                        "info", "cached-by-other-version",
                        "this engine was built by " + (f"workbench {made_by}" if made_by
                                                       else "an earlier workbench") +
                        f" (this is {__version__}): its findings are that version's",
                        hint="build with --no-cache (use_cache=False) for this version's "
                        "checks", source="build"))
                if output is not None:
                    res.output_path = _copy_out(engine, output, ref.path, meta)
                # the cached commands name the engine path of the build that made them: this
                # run's lines name this run's output
                from workbench.build.export import export_for

                shown, note = _onnx_beside(meta.get("onnx_path"), output if onnx_beside else
                                           None, ref, config)
                res.export = export_for(config, onnx_path=shown,
                                        engine_path=str(output or engine),
                                        backend=meta["backend"], route=meta.get("route"),
                                        calib_cache=meta.get("calib_cache"))
                if note:
                    res.export["notes"].insert(0, note)
                _emit(on_event, "cache-hit", 1.0, str(engine))
                ws.append_history({"action": "build", "cache_hit": True, "key": key,
                                   "config_hash": config.config_hash, "engine": str(engine)})
                return res

        # The profile check needs the graph (protobuf import + parse: tens of ms on a cold CLI).
        # When TensorRT gets the user's own FP32 file, the build starts at once and the check runs
        # beside it: a failing check stops the build and is what the user sees; nothing is cached.
        speculative = (ref.path is not None and entry.kind == "none" and
                       not config.exclude_ops)
        if not speculative:
            _validate_profiles(ref, config)
        findings: List[Finding] = list(defaulted)
        if route == "strongly-typed":  # precision lives in the ONNX TensorRT gets
            onnx_path, pfind = _transformed_onnx(ref, config, ws, on_event)
        else:  # legacy flags: the builder lowers precision; TensorRT gets the FP32 model
            onnx_path, pfind = _transformed_onnx(ref, config.replace(precision=table.BASE), ws,
                                                 on_event)
        findings += pfind
        if route == "strongly-typed" and (config.input_io_formats or config.output_io_formats):
            onnx_path, io_changed = _io_cast_onnx(Path(str(onnx_path)), config, ws)
            if io_changed:
                findings.append(Finding(
                    "info", "io-types", "I/O types in the ONNX TensorRT built from (a strongly "
                    "typed network takes them from there): " + "; ".join(io_changed),
                    source="build"))
        if cancel is not None and cancel.is_set():
            raise BuildCancelled("the build was cancelled before TensorRT started",
                                 code="cancelled")

        timing_cache = config.timing_cache or str(
            ws.timing_caches_dir / f"{backend}-{version}.cache")
        args: Dict[str, Any] = dict(
            onnx_path=str(Path(str(onnx_path)).resolve()),  # (the worker's folder may differ)
            backend=config.backend if config.backend != "auto" else
            backend, route=route, precision=config.precision, profiles=config.profiles,
            timing_cache=timing_cache, report_layers=True,
            **worker_args(config, Render(route, backend)),  # every build option's fields
            test_step_delay=float(os.environ.get("WORKBENCH_BUILD_STEP_DELAY", "0") or 0))
        if route == "legacy-flags":  # the table names the flag and the calibrator; the worker obeys
            args["builder_flag"] = entry.builder_flag
            args["calibrate"] = bool(entry.flag_calibrator)
            # Q/DQ nodes already in the ONNX (a quantized model): TensorRT <= 10 builds explicit
            # quantization only with the INT8 (FP8) flag set ("Int8 precision has been set for
            # a layer ... but int8 is not configured in the builder")
            need = [f for f in explicit_quantization_flags(_graph_of(onnx_path, ref))
                    if f != (entry.builder_flag or "").upper() and f not in args["extra_flags"]]
            if need:
                args["extra_flags"] = list(args["extra_flags"]) + need
                findings.append(Finding(
                    "info", "explicit-quantization",
                    f"the model carries {'/'.join(need)} Q/DQ nodes: built with the "
                    f"{', '.join(need)} builder flag{'s' if len(need) > 1 else ''} TensorRT "
                    "needs for them (the scales come from the Q/DQ nodes, no calibration)",
                    source="build"))
            lp = layer_precisions(config, _expand_exclude_ops(ref, config))
            if lp:
                args["layer_precisions"] = lp
                args["precision_constraints"] = config.layer_precision or "obey"
            if entry.flag_calibrator:
                args["calib_npz"], args["calib_cache"] = _write_calibration(
                    ref, config, ws, calib_hash or "", backend, version)
                args["calibrate_method"] = config.calibrate_method
        tmp = ws.engines_dir / f".{key[:32]}.{os.getpid()}.{threading.get_ident()}.partial"
        args["engine_path"] = str(tmp)
        remaining = None if timeout is None else max(0.1, timeout - (time.monotonic() - t0))
        side: Dict[str, Any] = {}  # what the thread beside the build found: names, invalid, error
        invalid = threading.Event()  # the speculative profile check failed: stop the build
        sent = threading.Event()

        def _during_build() -> None:  # graph load, profile check, name index: beside TensorRT
            # after the request is out: protobuf's import holds the GIL for ms at a time
            sent.wait(5.0)
            if speculative:
                try:
                    _validate_profiles(ref, config)
                except WorkbenchError as e:
                    side["invalid"] = e
                    invalid.set()
                    return
            try:
                import workbench.build.export  # noqa: F401  (needed as soon as the build returns)
                from workbench.trtlog import NameIndex

                side["names"] = NameIndex.from_graph(_graph_of(onnx_path, ref))
            except BaseException as e:
                side["error"] = e

        def _raise_if_invalid() -> None:
            sent.set()  # (the request may never have gone out)
            prefetch.join()
            if "invalid" in side:
                raise side["invalid"]

        prefetch = threading.Thread(target=_during_build, daemon=True)
        prefetch.start()
        done = False
        try:
            out = client.call("build", args, timeout=remaining, on_event=on_event,
                              cancel=_AnyEvent(cancel, invalid), sent=sent)
            _raise_if_invalid()
            done = True  # complete: published under its key with its card (publish_engine)
        except WorkerTimeout as e:
            _raise_if_invalid()
            _failed(ws, key, config, "timeout")
            raise BuildTimeout(f"the build exceeded its time limit of {timeout:g} s and was "
                               "stopped; nothing was cached", code="timeout", hint=e.hint,
                               log=[{"level": "info", "message": e.log_tail}]) from None
        except WorkerCancelled:
            _raise_if_invalid()
            _failed(ws, key, config, "cancelled")
            raise BuildCancelled("the build was cancelled; nothing was cached",
                                 code="cancelled") from None
        except WorkerError as e:
            _raise_if_invalid()
            from workbench.trtlog import NameIndex, findings_from_log
            from workbench.support.checker import in_users_terms, named_crash

            if e.code == "worker-crashed" and ref.path is not None:
                named_crash(e, ref.model)  # (the node and next step in the model's terms)

            if e.code in BAD_INPUT_CODES:  # the user's input is wrong (CLI exit 2)
                field_name = (e.details or {}).get("field")
                raise WorkbenchError(e.message, file=str(ref.path) if ref.path else None,
                                     field=field_name, node=e.node, hint=e.hint) from None
            if e.code == "parse-failed" and not e.node:
                _ = ref.model  # loading it: a file that is not ONNX at all: WorkbenchError naming it (exit 2)
            node = e.node
            message = e.message
            errs = (e.details or {}).get("errors") or []
            if errs and not node and not errs[0].get("node"):  # named by the static rules
                errs = _attributed_errors(ref, errs, backend)
                if errs[0].get("attributed"):
                    node, first = errs[0]["node"], errs[0]
                    message = (f"TensorRT could not parse the model at node '{node}' "
                               f"({first.get('op')}): {first.get('message')}")
            if not node and errs and errs[0].get("node_index") is not None:
                node = _node_for_index(ref, errs[0]["node_index"])
            log = (e.details or {}).get("log") or []
            found = findings_from_log(log, NameIndex.from_graph(ref.model.graph))
            causes = _parse_causes(ref, backend) if errs else {}
            for k, err in enumerate(errs):  # every node the parser refused, not only the first
                n = err.get("node") or _node_for_index(ref, err.get("node_index"))
                plugin = "plugin" in str(err.get("message", "")).lower()
                hint = ("pass the plugin library with --plugins, or replace the node" if plugin
                        else None)
                steps = [step("check", "{model}", why="names every unsupported node and the "
                              "recipes that fix it")]
                raw = str(err.get("message"))
                said = raw
                cause = causes.get(n) if n and not plugin else None
                gpu = _plugin_needs_gpu(err, backend)
                code = "missing-plugin" if plugin else "parse-error"
                if gpu is not None:  # the plugin is there; this machine cannot create it
                    who = shlex.quote(str(ref.path)) if ref.path else "MODEL"
                    said, hint, code = gpu[0], gpu[1].replace("{model}", who), \
                        "plugin-needs-gpu"
                elif cause is not None:  # the model's terms first, TensorRT's words after
                    said = in_users_terms(cause["reason"], raw)
                elif not plugin:  # the words check gives the same record ('false': no importer)
                    said = _parser_words(err, backend) or raw
                if said != raw and k == 0 and raw and raw in message:  # (the worker's line)
                    message = message.replace(raw, said, 1)
                found.append(Finding(
                    "error", code,
                    f"TensorRT's parser refused {err.get('op') or 'the node'}: {said}",
                    nodes=[n] if n else [], op=err.get("op") or None, source="parser", hint=hint,
                    next_steps=steps))
            hint = e.hint
            first_steps: List[Any] = []
            if e.code == "parse-failed":  # the worker's hint names a command: as a record here
                hint = None
                first_steps = [step("check", "{model}", why="names every unsupported node and "
                                    "the recipes that fix it")]
            said = _profile_violation(message, config, shlex.quote(str(ref.path)) if ref.path
                                      else "MODEL")
            if said is not None:  # an axis the export fixed, declared dynamic
                message, hint = f"{said[0]} (TensorRT: {message})", said[1]
            _failed(ws, key, config, e.code, node=node, message=message)
            raise BuildFailed(message, node=node, op=e.op or (errs[0].get("op") if errs and
                                                              node else None),
                              hint=hint, code=e.code, log=log,
                              findings=found, next_steps=first_steps,
                              file=str(ref.path) if ref.path else None) from None
        finally:
            if not done:  # the partial engine and the worker's own temp file, if any
                for stale in ws.engines_dir.glob(tmp.name + "*"):
                    try:
                        stale.unlink()
                    except OSError:
                        pass
        prefetch.join()
        if "error" in side:
            raise side["error"]
        from workbench.trtlog import findings_from_log
        from workbench.build.export import export_for

        findings += _profile_shape_findings(
            findings_from_log(out.get("log", []), side["names"]), ref,
            any(f.code == "default-profile" for f in defaulted))
        for n in out.get("unmatched_layers", out.get("unmatched_fp32_layers", [])):
            findings.append(Finding("warning", "exclusion-not-found",
                                    f"no TensorRT layer matches excluded node '{n}'", nodes=[n],
                                    source="build", hint="check the node name"))
        shown, note = _onnx_beside(onnx_path, output if onnx_beside else None, ref, config)
        export = export_for(config, onnx_path=shown, engine_path=str(output or engine),
                            backend=out["backend"], route=route,
                            calib_cache=args.get("calib_cache"))
        if note:
            export["notes"].insert(0, note)
        meta = {
            "key": key, "key_doc": key_doc, "config": config.to_dict(),
            "config_hash": config.config_hash, "size_bytes": out["size_bytes"],
            "backend": out["backend"], "backend_version": out["backend_version"], "route": route,
            "onnx_path": str(onnx_path), "build_seconds": out["build_seconds"],
            "targets": out.get("targets", []), "notes": out.get("notes", []),
            "findings": [f.to_dict() for f in findings], "export": export,
            "log": out.get("log", [])[-4000:], "layers": out.get("layers", []),
            "calib_cache": args.get("calib_cache"), "created": time.time(),
            "workbench_version": __version__,
            # for the engine card (workbench.build.card): real I/O, where it runs, its model
            "io": out.get("io"), "hardware_compatibility": out.get("hardware_compatibility"),
            "version_compatible": "VERSION_COMPATIBLE" in config.extra_flags,
            "built_on": out.get("built_on"),
            "model_path": str(ref.path) if ref.path is not None else None,
        }
        meta = publish_engine(ws, tmp, engine, meta_path, meta, replace=not use_cache)
        res = result_from_meta(meta, engine, time.monotonic() - t0, cache_hit=False)
        if output is not None:
            res.output_path = _copy_out(engine, output, ref.path, meta)
        ws.append_history({"action": "build", "cache_hit": False, "key": key,
                           "config_hash": config.config_hash, "engine": str(engine),
                           "seconds": round(res.seconds, 3), "backend": res.backend,
                           "backend_version": res.backend_version, "precision": config.precision})
        return res


class _AnyEvent:
    """Set when any of its events is (the worker client only asks is_set())."""

    def __init__(self, *events: Optional[threading.Event]) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def _validate_profiles(ref: ModelRef, config: BuildConfig) -> None:
    """Profiles against the model's inputs (symbolic dims shared between inputs included);
    the worker checks them again against the parsed network."""
    from workbench.precision.profiles import validate_profiles

    model = ref.model  # an unreadable file is reported as such, not as a profile problem
    _refuse_zero_size_axes(ref)  # (else: every profile refused as 'changes static dim 0')
    try:
        validate_profiles(model, config.profiles)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=str(ref.path) if ref.path else None,
                             field=f"profiles.{e.field}" if e.field else "profiles",
                             hint=e.hint) from None


def _refuse_zero_size_axes(ref: ModelRef) -> None:
    """An input axis TensorRT reads as a fixed size 0 (`inputs.zero_size_axes`) is refused
    before the build, naming the input, the axis and the recipe that names the axis (else
    TensorRT refuses every profile as 'changes static dim 0 (0 -> 1)')."""
    from workbench.inputs import shape_text, zero_size_axes

    bad = zero_size_axes(ref.model)
    if not bad:
        return
    name, axis, how = bad[0]
    more = f" (and {len(bad) - 1} more axis/axes)" if len(bad) > 1 else ""
    raise WorkbenchError(
        f"input '{name}' axis {axis} {how}{more}", file=str(ref.path) if ref.path else None,
        field=f"inputs.{name}", hint="give the axis a name or a size, then build the fixed model",
        next_steps=[step("fix", "{model}", recipe=f"set_input_shapes:shapes={name}/"
                         f"{shape_text(ref.model, name)}", o="{fixed}",
                         why="names the axis (edit the size to yours)")])


def _profile_shape_findings(found: List[Finding], ref: ModelRef, defaulted: bool
                            ) -> List[Finding]:
    """The build log's findings, with TensorRT's "Profile kMIN values are not self-consistent"
    (`profile-cannot-run`), where the build took the default profile (no --profile given),
    saying so: the profile is the workbench's guess. (Its next step is a record the CLI
    names the model in.)"""
    for f in found:
        if f.code != "profile-cannot-run":
            continue
        if defaulted:
            f.message = f.message.replace(
                "the profile's", "the default profile's (no --profile was given)", 1)
            f.extra["default_profile"] = True
    return found


def _default_profiles(ref: ModelRef, config: BuildConfig, strict: bool
                      ) -> Tuple[BuildConfig, List[Finding]]:
    """`config` with a default profile for the model's dynamic inputs (none: unchanged), and
    the finding that says so; with `strict`, one error naming every dynamic input."""
    from workbench.inputs import model_inputs
    from workbench.precision.profiles import (default_profile, default_profile_finding,
                                              missing_profile_error, shape_tensor_inputs)

    model = ref.model  # an unreadable file is reported as such, not as a profile problem
    shape_inputs = set(shape_tensor_inputs(model))
    dynamic = [s for s in model_inputs(model) if s.dynamic_axes or s.name in shape_inputs]
    if not dynamic:
        return config, []
    file = str(ref.path) if ref.path else None
    try:
        if strict:
            e = missing_profile_error(model, dynamic)
            raise WorkbenchError(e.message + " (--strict-profiles)", field=e.field, hint=e.hint)
        prof, rules = default_profile(model)
        if config.calibration:  # representative data says more than the rules
            prof, rules = _advised(model, config.calibration, prof, rules)
    except WorkbenchError as e:
        raise WorkbenchError(e.message, file=file, field=f"profiles.{e.field}" if e.field
                             else "profiles", hint=e.hint) from None
    from workbench.precision.profiles import fixed_axis_findings

    from workbench.precision.profiles import serving_notice, serving_profiles

    notice = default_profile_finding(prof, rules)
    pair = serving_profiles(model, prof)
    if pair is not None:  # a KV-cache decoder: prefill and decode, each tuned for its calls
        return config.replace(profiles=[p.to_dict() for p in pair]), \
            [serving_notice(model, prof, pair, notice)] + \
            fixed_axis_findings(model, prof, "the default profile")
    return config.replace(profiles=[prof.to_dict()]), [notice] + \
        fixed_axis_findings(model, prof, "the default profile")


def _advised(model: Any, calibration: str, prof: Any, rules: Dict[str, str]
             ) -> Tuple[Any, Dict[str, str]]:
    """The profile advisor's proposal from the calibration batches, else the rules' one."""
    from workbench.precision.calibration import load_calibration
    from workbench.precision.profiles import advise

    try:
        proposed, _ = advise(model, load_calibration(calibration, model))
    except WorkbenchError:
        return prof, rules
    if not proposed or set(proposed[0]) != set(prof):
        return prof, rules
    # the data's batch size is how it was saved, not how the engine will be fed: the batch
    # axis keeps the default's max when that is larger (sizes of other axes follow the data,
    # a count of items at axis 0 too: `workbench.inputs.leading_axes`)
    from workbench.inputs import leading_axes

    batch = leading_axes(model).batch
    out = type(proposed[0])()
    widened = False
    for name, (mn, opt, mx) in proposed[0].items():
        dmin, dmax = prof[name][0], prof[name][2]
        batch_dynamic = len(dmax) == len(mx) > 0 and dmin[0] != dmax[0] and name in batch
        if batch_dynamic and mx[0] < dmax[0]:
            mx = (dmax[0],) + tuple(mx[1:])
            widened = True
        out[name] = (tuple(mn), tuple(opt), tuple(mx))
    why = "the profile advisor on the calibration data"
    if widened:
        why += (" (batch max kept at the default "
                f"{max(v[2][0] for k, v in out.items() if k in batch)})")
    return out, {d: why for d in rules}


def _failed(ws: Any, key: str, config: BuildConfig, code: str, **extra: Any) -> None:
    """A failed, cancelled or timed-out build is part of the model's history too."""
    try:
        ws.append_history({"action": "build", "ok": False, "code": code, "key": key,
                           "config_hash": config.config_hash, **extra})
    except OSError:
        pass


def explicit_quantization_flags(graph: Any) -> List[str]:
    """The builder flags a graph's own Q/DQ nodes need on the builder-flag route: "INT8" for
    integer Q/DQ, "FP8" for float8 ones (`workbench.qdq.qdq_precisions`)."""
    from workbench.qdq import qdq_precisions

    return [p.upper() for p in qdq_precisions(graph)]


def _graph_of(onnx_path: Path, ref: ModelRef) -> Any:
    if ref.path is not None and Path(onnx_path) == ref.path:
        return ref.model.graph
    import onnx

    return onnx.load(str(onnx_path), load_external_data=False).graph


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
