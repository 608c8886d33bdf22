"""Per-layer profile and latency-trace readers, one declaration per schema.

- `iprofiler`: `[{"name","averageMs","medianMs","count"}]` (IProfiler medians; the workbench's
  `profile_engine` and TREx captures write it);
- `trtexec-profile`: trtexec `--exportProfile`, `[{"count": N}, {"name","timeMs","averageMs",
  "medianMs","percentage"}...]` (8.x trtexec has no medianMs);
- `trtexec-times`: trtexec `--exportTimes`, per-iteration records with `latencyMs`;
- `workbench-profile`: the live capture's `{"format": "workbench-profile", "layers", "latency"}`.
All return `workbench.formats.profiledata.Profile`.
"""
from __future__ import annotations

from typing import Any

from workbench.formats.profiledata import (parse_iprofiler, parse_trtexec_profile,
                                           parse_trtexec_times, parse_workbench_profile)
from workbench.formats.registry import Reader, register


def _first(data: Any) -> Any:
    return data[0] if isinstance(data, list) and data else None


def _is_workbench(data: Any) -> bool:
    return isinstance(data, dict) and (data.get("format") == "workbench-profile"
                                       or isinstance(data.get("layers"), list))


def _is_times(data: Any) -> bool:
    return isinstance(_first(data), dict) and "latencyMs" in _first(data)


def _is_trtexec_profile(data: Any) -> bool:
    return isinstance(_first(data), dict) and set(_first(data)) == {"count"}


def _is_iprofiler(data: Any) -> bool:
    f = _first(data)
    return (isinstance(f, dict) and "name" in f
            and any(k in f for k in ("averageMs", "medianMs", "timeMs")))


WORKBENCH = register(Reader(
    name="workbench-profile", kind="profile", accepts=_is_workbench, read=parse_workbench_profile,
    reads="the workbench's live capture (timing-capture profile.json)", returns="Profile"))
TRTEXEC_TIMES = register(Reader(
    name="trtexec-times", kind="profile", accepts=_is_times, read=parse_trtexec_times,
    reads="trtexec --exportTimes (per-iteration latencyMs)", returns="Profile"))
TRTEXEC_PROFILE = register(Reader(
    name="trtexec-profile", kind="profile", accepts=_is_trtexec_profile,
    read=parse_trtexec_profile, reads="trtexec --exportProfile ([{count}, {name, timeMs, "
    "averageMs, medianMs, percentage}...])", returns="Profile"))
IPROFILER = register(Reader(
    name="iprofiler", kind="profile", accepts=_is_iprofiler, read=parse_iprofiler,
    reads="IProfiler medians ([{name, averageMs, medianMs, count}])", returns="Profile"))
