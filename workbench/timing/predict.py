"""Latency predicted from recorded per-layer profiles of uniform engines (all FP32, all FP16,
all INT8 ...), mapped to ONNX nodes through the fused layers: what `matrix` plots where nothing
was timed, and what the precision planner ranks candidates by on a CPU. Always "predicted".

    lm = LatencyModel.from_dir("profiles/", model="resnet50.onnx")
    lm.uniform("fp16")                       # the recorded FP16 engine's total, ms
    lm.predict({"/conv1/Conv": "fp32"}, default="fp16")   # a mixed engine, ms (predicted)
    lm.predict({}, default="int8", fallback="fp16", quantized=convs)  # INT8 convs, FP16 rest

The model: each fused layer's time (median over the profile's runs) is split evenly over the
ONNX nodes it covers; a node costs its time in the precision it is given (its FP32 time where
the profile of that precision lacks it). Each boundary between consecutive compute layers of
different precisions costs one reformat, at the mean reformat-layer time of the low-precision
profiles; the engine's input/output reformats (FP32 I/O around a low-precision engine) are
counted once, as recorded in the uniform engine of the lowest precision present. Layers that
map to no ONNX node count at the default precision.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
import os
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from workbench.core.errors import WorkbenchError
from workbench.precision import table

PathLike = Union[str, "os.PathLike[str]"]  # a model file (its stem names the profiles)
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")  # high to low
# file layouts of a recorded uniform engine: ours (`<stem>_<p>.layers.json` +
# `<stem>_<p>.profile.json`) and trtexec/TREx (`<stem>-<p>.engine.graph.json` +
# `<stem>-<p>.engine.profile.json`; "qat" is an INT8 engine)
_OURS = re.compile(r"^(?P<stem>.+?)[_-](?P<p>fp32|tf32|fp16|bf16|int8|fp8|qat)\.layers\.json$")
_TREX = re.compile(r"^(?P<stem>.+?)[_-](?P<p>fp32|tf32|fp16|bf16|int8|fp8|qat)"
                   r"\.engine\.graph\.json$")


def find_profiles(folder: Any, model: Optional[PathLike] = None) -> Dict[str, Tuple[Path, Optional[Path]]]:
    """{precision: (layers.json, profile.json or None)} of the recorded uniform engines in
    `folder`. With several models' recordings there, the one whose stem begins `model`'s file
    name (e.g. `resnet50_fp16.*` for resnet50.onnx / resnet50.structure.onnx)."""
    d = Path(folder)
    if not d.is_dir():
        raise WorkbenchError("profile folder not found", file=str(d), field="--latency-profiles",
                             hint="a folder of <model>_<precision>.layers.json + "
                                  ".profile.json (or trtexec --exportLayerInfo/--exportProfile "
                                  "files)")
    found: Dict[str, Dict[str, Tuple[Path, Optional[Path]]]] = {}
    for f in sorted(d.iterdir()):
        m = _OURS.match(f.name) or _TREX.match(f.name)
        if not m:
            continue
        p = "int8" if m.group("p") == "qat" else m.group("p")
        prof = Path(str(f).replace(".layers.json", ".profile.json").replace(
            ".engine.graph.json", ".engine.profile.json"))
        found.setdefault(m.group("stem"), {})[p] = (f, prof if prof.is_file() else None)
    if not found:
        return {}
    if len(found) == 1:
        return next(iter(found.values()))
    name = Path(str(model)).name if model is not None else ""
    best = max((s for s in found if name.startswith(s)), key=len, default=None)
    return found[best] if best else {}


@dataclass
class LatencyModel:
    """Per-node times per precision from recorded uniform engines (see the module docstring)."""

    node_ms: Dict[str, Dict[str, float]]      # precision -> ONNX node -> ms
    layers: Dict[str, List[Tuple[List[str], float]]]  # precision -> compute layers in order
    other_ms: Dict[str, float]                # precision -> time of layers mapped to no node
    io_reformat_ms: Dict[str, float]          # precision -> reformat time of that engine
    boundary_ms: float                        # one reformat between precisions, ms
    totals: Dict[str, float]                  # precision -> the recorded engine's total, ms
    sources: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_tables(cls, tables: Mapping[str, Any],
                    sources: Optional[Mapping[str, str]] = None) -> "LatencyModel":
        """From `LayerTable`s of uniform engines, keyed by precision."""
        node_ms: Dict[str, Dict[str, float]] = {}
        layers: Dict[str, List[Tuple[List[str], float]]] = {}
        other: Dict[str, float] = {}
        reformat: Dict[str, float] = {}
        totals: Dict[str, float] = {}
        ref_counts: List[float] = []
        for p, t in tables.items():
            p = str(p).lower()
            df = t.df
            times = df["time_ms"].fillna(0.0).astype(float)
            totals[p] = float(times.sum())
            per: Dict[str, float] = {}
            seq: List[Tuple[List[str], float]] = []
            rest = refmt = 0.0
            for nodes, ms, is_ref, is_const in zip(df["onnx_nodes"], times, df["is_reformat"],
                                                   df["is_constant"]):
                if is_const:
                    continue
                if is_ref:
                    refmt += ms
                    if table.find(p) is not None and not table.is_base(p):  # (tf32: none)
                        ref_counts.append(ms)
                    continue
                if not nodes:
                    rest += ms
                    continue
                for n in nodes:
                    per[n] = per.get(n, 0.0) + ms / len(nodes)
                seq.append((list(nodes), ms))
            node_ms[p], layers[p], other[p], reformat[p] = per, seq, rest, refmt
        if not node_ms:
            raise WorkbenchError("no recorded engine to predict latency from",
                                 field="latency-profiles")
        boundary = (sum(ref_counts) / len(ref_counts)) if ref_counts else 0.0
        return cls(node_ms, layers, other, reformat, boundary, totals, dict(sources or {}))

    @classmethod
    def from_files(cls, files: Mapping[str, Tuple[Any, Any]], onnx: Any = None) -> "LatencyModel":
        """{precision: (layers.json, profile.json)} -> the model (ONNX: to map layers whose
        names do not say their nodes)."""
        from workbench.timing.table import LayerTable

        tables = {p: LayerTable.build(lay, prof, onnx=onnx) for p, (lay, prof) in files.items()}
        return cls.from_tables(tables, {p: str(lay) for p, (lay, _) in files.items()})

    @classmethod
    def from_dir(cls, folder: Any, model: Optional[PathLike] = None, onnx: Any = None) -> "LatencyModel":
        files = find_profiles(folder, model)
        if not files:
            raise WorkbenchError("no recorded engine profile for this model in the folder",
                                 file=str(folder), field="--latency-profiles",
                                 hint="name them <model>_<precision>.layers.json and "
                                      ".profile.json")
        return cls.from_files(files, onnx=onnx)

    @property
    def precisions(self) -> List[str]:
        return [p for p in PRECISIONS if p in self.node_ms]

    @property
    def nodes(self) -> List[str]:
        """The ONNX nodes the profiles time (the highest precision's engine's)."""
        base = self.precisions[0]
        return list(self.node_ms[base])

    @property
    def regions(self) -> List[List[str]]:
        """The fused layers of the highest-precision engine, as ONNX node lists (a node in
        two layers stays in the first)."""
        seen: set = set()
        out: List[List[str]] = []
        for nodes, _ in self.layers[self.precisions[0]]:
            keep = [n for n in nodes if n not in seen]
            seen.update(keep)
            if keep:
                out.append(keep)
        return out

    def uniform(self, precision: str) -> Optional[float]:
        """The recorded uniform engine's total (ms), None when not recorded."""
        return self.totals.get(str(precision).lower())

    def node_time(self, node: str, precision: str) -> float:
        p = str(precision).lower()
        t = self.node_ms.get(p, {}).get(node)
        if t is None:  # (not in that engine: its time in the highest precision recorded)
            t = next((self.node_ms[q][node] for q in self.precisions
                      if node in self.node_ms[q]), 0.0)
        return t

    def predict(self, assignment: Mapping[str, str], default: str = "fp32", *,
                fallback: Optional[str] = None,
                quantized: Optional[Collection[str]] = None) -> float:
        """Predicted latency (ms) of an engine computing each ONNX node in
        `assignment.get(node, default)`. `fallback` with `quantized` (a quantized `default`,
        e.g. INT8 with an FP16 fallback): a node the assignment leaves to the default and
        that is not in `quantized` is predicted at the fallback's recorded time (its
        highest recorded precision's where the fallback's engine lacks it)."""
        if fallback and quantized is not None and table.is_quantized(default):
            given = dict(assignment)
            assignment = {n: given.get(n, default if n in quantized else str(fallback))
                          for n in set(self.nodes) | set(given)}
        default = str(default).lower()
        if default not in self.node_ms:
            default = self.precisions[0]
        if not any(str(v).lower() != default for v in assignment.values()):
            return self.totals[default]  # a uniform engine: as recorded
        base = self.precisions[0]
        total = self.other_ms.get(default, self.other_ms[base])
        used = set()
        last: Optional[str] = None
        for nodes in self.regions:
            precs = [str(assignment.get(n, default)).lower() for n in nodes]
            for n, p in zip(nodes, precs):
                total += self.node_time(n, p)
                used.add(p)
                if last is not None and p != last:
                    total += self.boundary_ms
                last = p
        low = [p for p in reversed(PRECISIONS) if p in used and p in self.io_reformat_ms]
        if low:
            total += self.io_reformat_ms[low[0]]
        return total

    def coverage(self, precision: str) -> float:
        """Share of the highest-precision engine's node time whose nodes the `precision`
        engine's layers name (the rest is predicted at the higher precision's time)."""
        base = self.node_ms[self.precisions[0]]
        have = self.node_ms.get(str(precision).lower(), {})
        total = sum(base.values()) or 1.0
        return sum(t for n, t in base.items() if n in have) / total

    def describe(self) -> str:
        return ("predicted from recorded per-layer profiles of the uniform engines (" +
                ", ".join(f"{p} {self.totals[p]:.3f} ms" for p in self.precisions) + ")")


def latency_models(folder: Any, models: Sequence[str]) -> Dict[str, LatencyModel]:
    """{model: LatencyModel} for each model with recordings in `folder` (others left out)."""
    out: Dict[str, LatencyModel] = {}
    for m in models:
        files = find_profiles(folder, m)
        if files:
            out[m] = LatencyModel.from_files(files, onnx=None)
    return out

