"""NVIDIA trt-perf-analysis `analyze-data.json` (schema 1.0): reader and writer.

The file TensorRT's `trt-perf-analysis` skill (`.agents/skills/trt-perf-analysis/` in
NVIDIA/TensorRT) writes and its HTML report reads: `{"schema_version": "1.0", "folder",
"validation", "results": [...]}`, each result a layer-profile, layer-only or failure result
with raw TensorRT `layers`, trtexec-style `profile` entries, `records`, type/tag breakdowns and
scored `issues` (score, title, evidence, next_check, confidence). The schema is vendored in
`schemas/analyze-data.schema.json` (Apache-2.0, see `schemas/NOTICE`).

`read` returns an `AnalyzeData`, whose `layers(i)` / `profile(i)` / `issues(i)` give the
workbench's own types, so their report opens in the timing views; `write` writes a document
(built by `workbench.timing.analysis.to_analyze_data`) atomically.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from workbench.core.errors import Finding, WorkbenchError
from workbench.formats._json import PathLike, read_json
from workbench.formats.layerinfo import EngineLayers, parse_layers
from workbench.formats.profiledata import Profile, _layer_records
from workbench.formats.registry import Reader, register

SCHEMA_VERSION = "1.0"
SCHEMA_PATH = Path(__file__).with_name("schemas") / "analyze-data.schema.json"
CONFIDENCES = ("low", "medium", "high")
_HINT = ("expected trt-perf-analysis analyze-data.json (schema 1.0), as written by "
         "analyze_trt_perf.py or `workbench timing ... --analyze-data OUT.json`")


@dataclass
class AnalyzeData:
    """A parsed analyze-data.json; results are kept as they were written."""

    doc: Dict[str, Any]
    source: str = "<memory>"

    @property
    def results(self) -> List[Dict[str, Any]]:
        return self.doc["results"]

    def result(self, which: Union[int, str] = 0) -> Dict[str, Any]:
        """A result by index or label (their report's tabs)."""
        if isinstance(which, str):
            for r in self.results:
                if r.get("label") == which:
                    return r
            labels = ", ".join(str(r.get("label")) for r in self.results)
            raise WorkbenchError(f"no result labelled {which!r} (labels: {labels})",
                                 file=self.source, field="results[].label")
        if not -len(self.results) <= which < len(self.results):
            raise WorkbenchError(f"no result {which} (the file has {len(self.results)})",
                                 file=self.source, field="results")
        return self.results[which]

    def _where(self, which: Union[int, str]) -> str:
        r = self.result(which)
        return f"results[{next(i for i, x in enumerate(self.results) if x is r)}]"

    def _list(self, which: Union[int, str], key: str) -> List[Any]:
        """A result's list field ([] when absent); a WorkbenchError naming it when not a list."""
        v = self.result(which).get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise WorkbenchError(f"'{key}' must be a list, got {type(v).__name__}",
                                 file=self.source, field=f"{self._where(which)}.{key}",
                                 hint=_HINT)
        return v

    def mode(self, which: Union[int, str] = 0) -> str:
        """'layer_profile', 'layer_only' or 'unusable'."""
        v = self.result(which).get("validation") or {}
        return str(v.get("analysis_mode") or "unusable")

    def layers(self, which: Union[int, str] = 0) -> EngineLayers:
        """The result's TensorRT layers (raw inspector objects) as EngineLayers."""
        r, where = self.result(which), self._where(which)
        if self.mode(which) == "unusable":
            raw_msgs = (r.get("validation") or {}).get("messages")
            msgs = "; ".join(str(m.get("message")) for m in
                             (raw_msgs if isinstance(raw_msgs, list) else [])
                             if isinstance(m, dict))
            raise WorkbenchError(f"this analysis failed validation ({msgs or 'no messages'})",
                                 file=self.source, field=f"{where}.validation",
                                 hint="re-run trt-perf-analysis with a usable layer/profile pair")
        raw = self._list(which, "layers")
        if not raw:
            raw = [x.get("layer") for x in self._list(which, "records")
                   if isinstance(x, dict) and x.get("layer") is not None]
        if not raw:
            raise WorkbenchError("the result holds no layers", file=self.source,
                                 field=f"{where}.layers", hint=_HINT)
        el = parse_layers({"Layers": raw}, source=f"{self.source}:{where}")
        el.schema = "analyze-data"
        return el

    def profile(self, which: Union[int, str] = 0) -> Optional[Profile]:
        """The result's per-layer profile (None for a layer-only result)."""
        r, where = self.result(which), self._where(which)
        recs = self._list(which, "profile")
        if not recs:
            return None
        df = _layer_records(recs, f"{self.source}:{where}.profile")
        count = r.get("count")
        return Profile(layers=df, kind="analyze-data", source=self.source,
                       iterations=count if type(count) is int and count >= 0 else None)

    def issues(self, which: Union[int, str] = 0) -> List[Finding]:
        """Their scored issues as workbench findings (score >= 70: warning, else info)."""
        out = []
        for k, it in enumerate(self._list(which, "issues")):
            if not isinstance(it, dict):
                continue
            score = it.get("score")
            score = score if isinstance(score, (int, float)) and not isinstance(score, bool) else 0
            out.append(Finding(
                "warning" if score >= 70 else "info", "trt-perf-analysis",
                f"{it.get('title', '(untitled)')}: {it.get('evidence', '')}".strip(": "),
                hint=str(it.get("next_check") or ""), source="trt-perf-analysis",
                extra={"score": score, "confidence": it.get("confidence"), "index": k}))
        return out


def accepts(data: Any) -> bool:
    return (isinstance(data, dict) and "schema_version" in data
            and isinstance(data.get("results"), list))


def read_data(data: Any, source: str = "<memory>") -> AnalyzeData:
    """Check the parts the workbench relies on (the full schema check is the test suite's)."""
    if not isinstance(data, dict):
        raise WorkbenchError(f"expected a JSON object, got {type(data).__name__}", file=source,
                             field="schema_version", hint=_HINT)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise WorkbenchError(f"schema_version {version!r} is not {SCHEMA_VERSION!r}",
                             file=source, field="schema_version", hint=_HINT)
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise WorkbenchError("'results' must be a non-empty list", file=source, field="results",
                             hint=_HINT)
    for i, r in enumerate(results):
        if not isinstance(r, dict) or not isinstance(r.get("validation"), dict):
            raise WorkbenchError("a result needs a 'validation' object", file=source,
                                 field=f"results[{i}].validation", hint=_HINT)
    return AnalyzeData(data, source)


def read(path: PathLike) -> AnalyzeData:
    """Read an analyze-data.json file."""
    return read_data(read_json(path, "analyze-data"), str(path))


def write(path: PathLike, doc: Dict[str, Any]) -> Path:
    """Write an analyze-data document atomically (temp file + rename)."""
    from workbench.core.fsutil import atomic_write_json

    read_data(doc, str(path))  # the same checks the reader makes, before anything is written
    return atomic_write_json(path, doc, indent=2)


READER = register(Reader(
    name="trt-perf-analysis", kind="analysis", accepts=accepts, read=read_data,
    reads="NVIDIA trt-perf-analysis analyze-data.json (schema 1.0)", returns="AnalyzeData"))
