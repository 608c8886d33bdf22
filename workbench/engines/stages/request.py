"""Stage 4, the worker request: everything the worker's `build` op needs, as one typed,
frozen BuildRequest (workbench.worker.build_request): the prepared ONNX by absolute path (the
worker is long-lived and started elsewhere), the partial engine's path under the cache, the
route and what the precision table decides on it (builder flag, calibrator and its batches,
layer precisions, the flags a quantized model's own Q/DQ nodes need), profiles, knobs and
the timing cache. The worker knows no precision names: it obeys the request.
"""
from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from workbench.engines.options import Render, worker_args
from workbench.engines.spec import BuildConfig, layer_precisions
from workbench.engines.stages.prepare import PreparedOnnx
from workbench.engines.stages.resolve import BuildJob
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model
from workbench.worker.build_request import BuildRequest


def worker_request(job: BuildJob, prepared: PreparedOnnx) -> Tuple[BuildRequest, List[Finding]]:
    """The BuildRequest for `job` (its engine path a partial file under the cache, unique to
    this process and thread), and the findings choosing it made."""
    config = job.config
    tmp = job.ws.engines_dir / f".{job.key[:32]}.{os.getpid()}.{threading.get_ident()}.partial"
    timing_cache = config.timing_cache or str(
        job.ws.timing_caches_dir / f"{job.backend}-{job.version}.cache")
    request = BuildRequest.from_args(dict(
        onnx_path=str(Path(str(prepared.path)).resolve()),  # (the worker's folder may differ)
        engine_path=str(tmp),
        backend=config.backend if config.backend != "auto" else job.backend,
        route=job.route, precision=config.precision, profiles=list(config.profiles),
        timing_cache=timing_cache, report_layers=True,
        **worker_args(config, Render(job.route, job.backend)),  # every build option's fields
        test_step_delay=float(os.environ.get("WORKBENCH_BUILD_STEP_DELAY", "0") or 0)))
    if job.route != "legacy-flags":
        return request, []
    return legacy_fields(job, prepared, request)


def legacy_fields(job: BuildJob, prepared: PreparedOnnx, request: BuildRequest
                  ) -> Tuple[BuildRequest, List[Finding]]:
    """The legacy route's fields: the table names the flag and the calibrator; the worker
    obeys. Q/DQ nodes already in the ONNX (a quantized model) need the INT8 (FP8) flag on
    TensorRT <= 10 ("Int8 precision has been set for a layer ... but int8 is not configured
    in the builder"): added, with a finding that says so."""
    config, entry = job.config, job.config.entry
    findings: List[Finding] = []
    fields: Dict[str, Any] = {"builder_flag": entry.builder_flag,
                              "calibrate": bool(entry.flag_calibrator)}
    findings += unsaid_fallback(config)
    fb = fallback_flag(config)
    if fb and fb not in (request.extra_flags or ()):  # `--int8 --fp16`: the layers without
        request = replace(request, extra_flags=tuple(request.extra_flags or ()) + (fb,))
        findings.append(Finding(  # INT8 run in the fallback's type, not FP32
            "info", "fallback-flag",
            f"built with the {entry.builder_flag} and {fb} builder flags (`--fallback "
            f"{config.fallback}`): layers without {entry.name.upper()} run in "
            f"{config.fallback.upper()}, the builder picks per layer; excluded nodes stay "
            "FP32", source="build"))
    need = [f for f in explicit_quantization_flags(graph_of(prepared.path, job.ref))
            if f != (entry.builder_flag or "").upper() and f not in (request.extra_flags or ())]
    if need:
        fields["extra_flags"] = tuple(request.extra_flags or ()) + tuple(need)
        findings.append(Finding(
            "info", "explicit-quantization",
            f"the model carries {'/'.join(need)} Q/DQ nodes: built with the "
            f"{', '.join(need)} builder flag{'s' if len(need) > 1 else ''} TensorRT "
            "needs for them (the scales come from the Q/DQ nodes, no calibration)",
            source="build"))
    lp = layer_precisions(config, expand_exclude_ops(job.ref, config))
    if lp:
        fields["layer_precisions"] = lp
        fields["precision_constraints"] = config.layer_precision or "obey"
    if entry.flag_calibrator:
        fields["calib_npz"], fields["calib_cache"] = write_calibration(
            job.ref, config, job.ws, job.calib_hash or "", job.backend, job.version)
        fields["calibrate_method"] = config.calibrate_method
    return replace(request, **fields), findings


def fallback_flag(config: BuildConfig) -> Optional[str]:
    """The builder flag of the config's fallback precision (FP16 for `--fallback fp16`), set
    beside the quantized target's on the builder-flag route; None without a fallback."""
    if not config.fallback:
        return None
    from workbench.precision import table

    return table.get(config.fallback).builder_flag


def unsaid_fallback(config: BuildConfig) -> List[Finding]:
    """A float precision's flag given with `--flag` beside a quantized target (`--precision
    int8 --flag FP16`) is a fallback nobody else knows of: this builder runs the layers
    without INT8 in FP16, a strongly typed build and the CPU checks in FP32. An info that
    names `--fallback`, which says it to all of them."""
    from workbench.precision import table
    from workbench.precision.spec import fallback_choices

    if config.fallback or not config.entry.quantized:
        return []
    flags = set(config.extra_flags or ())
    floats = [n for n in fallback_choices(config.precision)
              if table.get(n).builder_flag in flags]
    if not floats:
        return []
    q, f = config.precision.upper(), table.get(floats[0])
    return [Finding(
        "info", "flag-is-a-fallback",
        f"--flag {f.builder_flag} beside {q}: this builder runs the layers without {q} in "
        f"{f.name.upper()} (trtexec {config.entry.trtexec or ''} {f.trtexec or ''}), but a "
        f"strongly typed build and the CPU checks (precision, compare, plan) would keep them "
        "in FP32", source="build",
        hint=f"say it as a fallback: --fallback {f.name} (instead of --flag "
             f"{f.builder_flag}), so every route computes them in {f.name.upper()}")]


def write_calibration(ref: Model, config: BuildConfig, ws: Any, calib_hash: str,
                      backend: str, version: str) -> Tuple[str, str]:
    """Legacy INT8: validated batches -> one .npz the worker reads (keys 'b<i>:<input>')."""
    import numpy as np

    from workbench.precision.calibration import load_calibration
    from workbench.core.fsutil import atomic_write_bytes

    batches = load_calibration(config.calibration, ref)
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


def expand_exclude_ops(ref: Model, config: BuildConfig) -> List[str]:
    """The excluded nodes: those named, and every named node of an excluded op type."""
    names = list(config.exclude_nodes)
    if config.exclude_ops:
        ops = set(config.exclude_ops)
        names += [n.name for n in ref.graph.node if n.op_type in ops and n.name]
    return names


def explicit_quantization_flags(graph: Any) -> List[str]:
    """The builder flags a graph's own Q/DQ nodes need on the builder-flag route: "INT8" for
    integer Q/DQ, "FP8" for float8 ones (`workbench.core.qdq.qdq_precisions`)."""
    from workbench.core.qdq import qdq_precisions

    return [p.upper() for p in qdq_precisions(graph)]


def graph_of(onnx_path: Path, ref: Model) -> Any:
    """The graph of the ONNX TensorRT gets: the model's own when it is the model's file."""
    if ref.path is not None and Path(onnx_path) == ref.path:
        return ref.graph
    import onnx

    return onnx.load(str(onnx_path), load_external_data=False).graph
