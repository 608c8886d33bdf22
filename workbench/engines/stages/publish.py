"""Stage 6, publish: the complete engine into the cache (atomically, under its key, with its
card), a copy at the caller's output path, the ONNX TensorRT built from beside it when that
is a workspace file, and the build in the model's history. A build that failed, was
cancelled or timed out is recorded in the history too (`record_failure`), and publishes
nothing."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from workbench.core.version import __version__
from workbench.engines.cache import publish_engine, result_from_meta
from workbench.engines.result import BuildResult
from workbench.engines.spec import BuildConfig
from workbench.engines.stages.prepare import PreparedOnnx
from workbench.engines.stages.resolve import BuildJob
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.fsutil import atomic_copy
from workbench.worker.build_request import BuildRequest
from workbench.core.model import Model

PathLike = Union[str, "os.PathLike[str]"]


def publish(job: BuildJob, prepared: PreparedOnnx, request: BuildRequest, out: Dict[str, Any],
            findings: List[Finding], *, output: Optional[PathLike], with_onnx: bool,
            use_cache: bool) -> BuildResult:
    """The BuildResult of a finished worker build: its card (`engine_meta`) published with
    the engine under the key (`replace` a cached one when the cache was not to be used),
    copied to `output`, and the build appended to the history."""
    from workbench.engines.export import export_for

    config = job.config
    shown, note = onnx_beside(prepared.path, output if with_onnx else None, job.ref, config)
    export = export_for(config, onnx_path=shown, engine_path=str(output or job.engine),
                        backend=out["backend"], route=job.route,
                        calib_cache=request.calib_cache)
    if note:
        export["notes"].insert(0, note)
    meta = engine_meta(job, prepared, request, out, findings, export)
    meta = publish_engine(job.ws, Path(request.engine_path), job.engine, job.meta_path, meta,
                          replace=not use_cache)
    res = result_from_meta(meta, job.engine, time.monotonic() - job.t0, cache_hit=False)
    if output is not None:
        res.output_path = copy_out(job.engine, output, job.ref.path, meta)
    job.ws.append_history({"action": "build", "cache_hit": False, "key": job.key,
                           "config_hash": config.config_hash, "engine": str(job.engine),
                           "seconds": round(res.seconds, 3), "backend": res.backend,
                           "backend_version": res.backend_version,
                           "precision": config.precision})
    return res


def engine_meta(job: BuildJob, prepared: PreparedOnnx, request: BuildRequest,
                out: Dict[str, Any], findings: List[Finding], export: Dict[str, Any]
                ) -> Dict[str, Any]:
    """The cached engine's card: the key and config, what the worker reported, the findings
    and the equivalent commands, and what the engine card shows (I/O, where it runs)."""
    config = job.config
    return {
        "key": job.key, "key_doc": job.key_doc, "config": config.to_dict(),
        "config_hash": config.config_hash, "size_bytes": out["size_bytes"],
        "backend": out["backend"], "backend_version": out["backend_version"],
        "route": job.route, "onnx_path": str(prepared.path),
        "build_seconds": out["build_seconds"],
        "targets": out.get("targets", []), "notes": out.get("notes", []),
        "findings": [f.to_dict() for f in findings], "export": export,
        "log": out.get("log", [])[-4000:], "layers": out.get("layers", []),
        "calib_cache": request.calib_cache, "created": time.time(),
        "workbench_version": __version__,
        # for the engine card (workbench.engines.card): real I/O, where it runs, its model
        "io": out.get("io"), "hardware_compatibility": out.get("hardware_compatibility"),
        "version_compatible": "VERSION_COMPATIBLE" in config.extra_flags,
        "built_on": out.get("built_on"),
        "model_path": str(job.ref.path) if job.ref.path is not None else None,
    }


def copy_out(src: Path, dst: PathLike, model_path: Optional[Path],
             meta: Optional[Dict[str, Any]] = None) -> str:
    """Copy the engine `src` to `dst` with its card (written first; made from `meta` when the
    cached engine has none)."""
    from workbench.engines.card import copy_card

    out = Path(dst)
    if model_path is not None and out.resolve() == model_path.resolve():
        raise WorkbenchError("refusing to write the engine over the model", file=str(out),
                             hint="choose another -o path")
    out.parent.mkdir(parents=True, exist_ok=True)
    copy_card(src, out, meta)
    atomic_copy(src, out)
    return str(out)


def onnx_beside(onnx_path: Any, output: Optional[PathLike], ref: Model,
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
    atomic_copy(src, dst)
    what = (f"the {config.precision.upper()} ONNX TensorRT built from (the workbench's "
            "conversion of your model)" if tag else "the ONNX TensorRT built from")
    return str(dst), f"{dst}: {what}, written beside the engine; the lines above read it"


def record_failure(ws: Any, key: str, config: BuildConfig, code: str, **extra: Any) -> None:
    """A failed, cancelled or timed-out build is part of the model's history too."""
    try:
        ws.append_history({"action": "build", "ok": False, "code": code, "key": key,
                           "config_hash": config.config_hash, **extra})
    except OSError:
        pass
