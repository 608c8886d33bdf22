"""Per-layer profiles and end-to-end latency traces, in every form they are written: the
`Profile` type and one parse function per form (declared as readers in `formats.profiles`).

- trtexec `--exportProfile`: `[{"count": N}, {"name","timeMs","averageMs","medianMs","percentage"}...]`
  (older trtexec: no medianMs)
- the IProfiler capture the fixtures and `profile_engine` write:
  `[{"name","averageMs","medianMs","count"}]`
- the workbench's live capture: `{"format": "workbench-profile", "layers": [...], "latency": {...}}`
- trtexec `--exportTimes`: per-iteration records ending in `latencyMs` (end-to-end only)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import pandas as pd

from workbench.core.errors import Finding, WorkbenchError
from workbench.formats._json import PathLike, read_json

PROFILE_COLUMNS = ["name", "mean_ms", "median_ms", "count", "percentage"]


@dataclass
class Profile:
    """Per-layer times (`layers`: name, mean_ms, median_ms, count, percentage; one row per
    record in order) and/or end-to-end latencies in ms (`latency_ms`)."""

    layers: pd.DataFrame
    kind: str = ""
    source: str = "<memory>"
    iterations: Optional[int] = None
    latency_ms: Optional[np.ndarray] = None
    throughput: List[Dict[str, Any]] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)
    warnings: List[Finding] = field(default_factory=list)

    @property
    def has_layers(self) -> bool:
        return len(self.layers) > 0

    @property
    def has_median(self) -> bool:
        return bool(self.has_layers and self.layers["median_ms"].notna().all())

    def latency_stats(self) -> Optional[Dict[str, float]]:
        return latency_stats(self.latency_ms) if self.latency_ms is not None else None


def latency_stats(lat_ms: Any) -> Optional[Dict[str, float]]:
    """P50/P90/P99/mean/min/max of a list of latencies in ms."""
    a = np.asarray(lat_ms, dtype=float)
    if a.size == 0:
        return None
    return {"n": int(a.size), "mean_ms": float(a.mean()), "min_ms": float(a.min()),
            "max_ms": float(a.max()), "p50_ms": float(np.percentile(a, 50)),
            "p90_ms": float(np.percentile(a, 90)), "p99_ms": float(np.percentile(a, 99))}


def _num(rec: Dict[str, Any], key: str, where: str, source: str) -> Optional[float]:
    if key not in rec or rec[key] is None:
        return None
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise WorkbenchError(f"'{key}' must be a number, got {type(v).__name__} {str(v)[:30]!r}",
                             file=source, field=f"{where}.{key}", hint="the profile is malformed")
    try:
        f = float(v)
    except OverflowError:  # (an integer too large for a float)
        f = math.nan
    if math.isnan(f) or f < 0:
        raise WorkbenchError(f"'{key}' must be a non-negative number, got {str(v)[:30]}",
                             file=source, field=f"{where}.{key}", hint="the profile is malformed")
    return f


def _count(v: Any) -> Optional[int]:
    """An iteration count when it is one (a finite number; NaN, inf, text, bool: unknown)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, int):
        return v if 0 <= v < 2 ** 63 else None
    return int(v) if math.isfinite(v) and v >= 0 else None


def _layer_records(recs: List[Any], source: str, offset: int = 0) -> pd.DataFrame:
    rows = []
    for j, rec in enumerate(recs):
        where = f"[{j + offset}]"
        if not isinstance(rec, dict):
            raise WorkbenchError(f"expected a layer record object, got {type(rec).__name__}",
                                 file=source, field=where, hint="the profile is malformed")
        if "name" not in rec:
            raise WorkbenchError("layer record without 'name'", file=source, field=f"{where}.name",
                                 hint="the profile is malformed or truncated")
        mean = _num(rec, "averageMs", where, source)
        median = _num(rec, "medianMs", where, source)
        total = _num(rec, "timeMs", where, source)
        if mean is None and median is None and total is None:
            raise WorkbenchError("layer record has no time (averageMs, medianMs or timeMs)",
                                 file=source, field=f"{where}.averageMs",
                                 hint="the profile is malformed")
        count = _count(rec.get("count"))
        rows.append({"name": str(rec["name"]),
                     "mean_ms": mean if mean is not None else (median if median is not None
                                                               else total),
                     "median_ms": median,
                     "count": count,
                     "percentage": _num(rec, "percentage", where, source)})
    df = pd.DataFrame(rows, columns=PROFILE_COLUMNS)
    return df


def parse_workbench_profile(data: Dict[str, Any], source: str = "<memory>") -> Profile:
    """The workbench's live capture: `{"format": "workbench-profile", "layers", "latency"...}`."""
    recs = data.get("layers") or []
    if not isinstance(recs, list):
        raise WorkbenchError("'layers' must be a list", file=source, field="layers")
    df = _layer_records(recs, source)
    lat = data.get("latency_ms")
    if lat is None and isinstance(data.get("latency"), dict):
        lat = data["latency"].get("samples_ms")
    if lat is not None and not isinstance(lat, list):
        raise WorkbenchError("'latency_ms' must be a list", file=source, field="latency_ms")
    if lat is not None:
        lat = [_num({"latency_ms": x}, "latency_ms", f"latency_ms[{j}]", source)
               for j, x in enumerate(lat)]
        if None in lat:
            raise WorkbenchError("'latency_ms' holds a null", file=source,
                                 field="latency_ms", hint="the profile is malformed")
    thr = data.get("throughput")
    return Profile(layers=df, kind="workbench", source=source,
                   iterations=_count(data.get("iterations")),
                   latency_ms=None if lat is None else np.asarray(lat, dtype=float),
                   throughput=list(thr) if isinstance(thr, list) else [],
                   extra={k: v for k, v in data.items() if k not in ("layers", "latency_ms")})


def parse_trtexec_times(data: List[Any], source: str = "<memory>") -> Profile:
    """trtexec `--exportTimes`: one record per iteration, each with `latencyMs`."""
    lat = []
    for j, rec in enumerate(data):
        if not isinstance(rec, dict) or "latencyMs" not in rec:
            raise WorkbenchError("timing record without 'latencyMs'", file=source,
                                 field=f"[{j}].latencyMs", hint="the trace is malformed")
        lat.append(_num(rec, "latencyMs", f"[{j}]", source))
    return Profile(layers=pd.DataFrame(columns=PROFILE_COLUMNS), kind="trtexec-times",
                   source=source, iterations=len(lat), latency_ms=np.asarray(lat, dtype=float))


def parse_trtexec_profile(data: List[Any], source: str = "<memory>") -> Profile:
    """trtexec `--exportProfile`: a `{"count": N}` header, then one record per layer."""
    n = _count(data[0]["count"])
    if n is None:
        raise WorkbenchError("'count' must be a number", file=source, field="[0].count")
    df = _layer_records(data[1:], source, offset=1)
    return Profile(layers=df, kind="trtexec-profile", source=source, iterations=n)


def parse_iprofiler(data: List[Any], source: str = "<memory>") -> Profile:
    """IProfiler medians: `[{"name","averageMs","medianMs","count"}]` (no header record)."""
    df = _layer_records(data, source)
    counts = df["count"].dropna()
    return Profile(layers=df, kind="iprofiler", source=source,
                   iterations=int(counts.max()) if len(counts) else None)


def parse_profile(data: Any, source: str = "<memory>") -> Profile:
    """Detect the profile's form and normalise it (see module docstring)."""
    if isinstance(data, dict):
        if "layers" in data or data.get("format") == "workbench-profile":
            return parse_workbench_profile(data, source)
        if "Layers" in data:
            raise WorkbenchError("this is engine layer information, not a profile", file=source,
                                 field="name", hint="pass it as LAYERS.json; the profile comes "
                                 "from trtexec --exportProfile or the IProfiler")
        raise WorkbenchError(f"unrecognised profile object (keys: {', '.join(list(data)[:6])})",
                             file=source, field="layers",
                             hint="expected trtexec --exportProfile or --exportTimes output")
    if not isinstance(data, list):
        raise WorkbenchError(f"expected a JSON list of layer records, got {type(data).__name__}",
                             file=source, field="[0]")
    if not data:
        raise WorkbenchError("the profile has no records", file=source, field="[0]",
                             hint="re-run the profiling; it wrote nothing")
    first = data[0]
    if isinstance(first, dict) and "latencyMs" in first:
        return parse_trtexec_times(data, source)
    if isinstance(first, dict) and set(first) == {"count"}:
        return parse_trtexec_profile(data, source)
    return parse_iprofiler(data, source)


def load_profile(path: PathLike) -> Profile:
    """Read a per-layer profile or an --exportTimes trace (form detected from the content)."""
    return parse_profile(read_json(path, "profile"), source=str(path))


def load_run_metadata(path: PathLike) -> Dict[str, Any]:
    """trtexec/TREx build or profile metadata (`*.build.metadata.json`,
    `*.profile.metadata.json`): model/build options, device information, performance summary."""
    data = read_json(path, "run metadata")
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        raise WorkbenchError(f"expected a JSON object, got {type(data).__name__}", file=str(path),
                             field="performance_summary")
    known = ("model_options", "build_options", "performance_summary", "inference_options",
             "device_information")
    if not any(k in data for k in known):
        raise WorkbenchError(f"no known section ({', '.join(known)})", file=str(path),
                             field="performance_summary", hint="pass trtexec/TREx metadata JSON")
    return data
