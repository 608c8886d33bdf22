"""LayerTable: the engine's layers with their times, precisions, tactics and ONNX nodes.

One row per engine layer (a pandas DataFrame in `.df`), built from layer information, an
optional per-layer profile and an optional ONNX model (path or opened Model):

    t = LayerTable.build("engine.layers.json", "engine.profile.json", onnx="model.onnx")
    t.df.sort_values("time_ms", ascending=False).head()
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np
import pandas as pd

from workbench.core import graphindex
from workbench.core.errors import Finding, WorkbenchError
from workbench.formats.layerinfo import EngineLayers, parse_layers
from workbench.timing.mapping import DIRECT, OnnxIndex, map_layer, reformat_target
from workbench.formats.profiledata import Profile, load_profile

LayersLike = Union[str, Path, EngineLayers]
ProfileLike = Union[str, Path, Profile, None]

COLUMNS = ["index", "name", "type", "time_ms", "time_mean_ms", "time_median_ms", "pct", "count",
           "precision", "in_precision", "out_precision", "tactic", "input_shapes",
           "output_shapes", "input_formats", "output_formats", "onnx_nodes", "n_onnx", "mapping",
           "attributed_to", "is_reformat", "is_constant", "is_noop"]


def _as_index(onnx: Any) -> Optional[OnnxIndex]:
    if onnx is None or isinstance(onnx, OnnxIndex):
        return onnx
    from workbench.core.model import as_model

    model = as_model(onnx)
    return OnnxIndex.from_model(model)


class LayerTable:
    """The engine's layers as a DataFrame plus what it was built from (see module docstring)."""

    def __init__(self, df: pd.DataFrame, layers: EngineLayers, profile: Optional[Profile],
                 index: Optional[OnnxIndex], stat: str, warnings: List[Finding]) -> None:
        self.df = df
        self.layers = layers
        self.profile = profile
        self.index = index
        self.stat = stat
        self.warnings = warnings

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def build(cls, layers: Optional[LayersLike], profile: ProfileLike = None, onnx: Any = None,
              stat: str = "median", profile_id: Optional[int] = None) -> "LayerTable":
        """Join layer info, profile times (k-th record of a name <-> k-th layer of that name)
        and ONNX nodes. `stat`: "median" (falls back to mean when absent) or "mean"."""
        if stat not in ("median", "mean"):
            raise WorkbenchError(f"unknown statistic '{stat}'", field="stat",
                                 hint="use 'median' or 'mean'")
        prof = profile if (profile is None or isinstance(profile, Profile)) else load_profile(profile)
        found: List[Finding] = []  # an analyze-data.json's own issues
        if layers is None:
            if prof is None or not prof.has_layers:
                raise WorkbenchError("need layer information or a per-layer profile",
                                     field="layers", hint="pass LAYERS.json and/or PROFILE.json")
            el = layers_from_profile(prof)
        elif isinstance(layers, EngineLayers):
            el = layers
        else:
            el, prof, found = _open_layers(layers, prof, profile_id)
        index = _as_index(onnx)
        warnings = list(el.warnings) + (list(prof.warnings) if prof else []) + found
        n = len(el.layers)
        mean = np.full(n, np.nan)
        median = np.full(n, np.nan)
        count = np.full(n, np.nan)
        if prof is not None and prof.has_layers:
            slots: Dict[str, List[int]] = defaultdict(list)
            for i, layer in enumerate(el.layers):
                slots[layer.name].append(i)
            used: Dict[str, int] = defaultdict(int)
            unmatched: List[str] = []
            p_names = prof.layers["name"].tolist()
            p_mean = prof.layers["mean_ms"].to_numpy(dtype=float)
            p_median = prof.layers["median_ms"].to_numpy(dtype=float)
            p_count = prof.layers["count"].to_numpy(dtype=float)
            for j, nm in enumerate(p_names):
                k = used[nm]
                if k < len(slots.get(nm, ())):
                    i = slots[nm][k]
                    mean[i], median[i], count[i] = p_mean[j], p_median[j], p_count[j]
                    used[nm] = k + 1
                else:
                    unmatched.append(nm)
            if unmatched:
                warnings.append(Finding(
                    "warning", "profile-layer-unknown",
                    f"{len(unmatched)} profile record(s) name no layer of the engine "
                    f"(first: {unmatched[0]!r})", hint="check that the profile and the layer "
                    "information come from the same engine", source="timing",
                    extra={"unmatched": unmatched[:50]}))
            missing = int(np.isnan(mean).sum())
            if missing:
                warnings.append(Finding(
                    "info", "profile-layer-missing",
                    f"{missing} layer(s) have no time in the profile", source="timing"))
        use_median = stat == "median" and not np.isnan(median[~np.isnan(mean)]).any()
        time = median if use_median else mean
        if stat == "median" and not use_median and prof is not None and prof.has_layers:
            warnings.append(Finding("info", "profile-no-median",
                                    "the profile has no medians; using mean times",
                                    source="timing"))
        total = float(np.nansum(time)) if n else 0.0
        by_name: Dict[str, int] = {}
        cols: Dict[str, List[Any]] = {c: [] for c in COLUMNS if c not in
                                       ("time_ms", "time_mean_ms", "time_median_ms", "pct", "count")}
        for i, layer in enumerate(el.layers):
            by_name.setdefault(layer.name, i)
            const = layer.is_constant
            nodes, how = ([], "") if const else map_layer(layer, index)
            prec, ip, op = layer.precisions()
            ins, outs = layer.inputs, layer.outputs
            cols["index"].append(layer.index)
            cols["name"].append(layer.name)
            cols["type"].append(layer.type)
            cols["precision"].append(prec)
            cols["in_precision"].append(ip)
            cols["out_precision"].append(op)
            cols["tactic"].append(layer.tactic)
            cols["input_shapes"].append(", ".join([t.shape_str for t in ins]))
            cols["output_shapes"].append(", ".join([t.shape_str for t in outs]))
            cols["input_formats"].append("; ".join([t.format for t in ins]))
            cols["output_formats"].append("; ".join([t.format for t in outs]))
            cols["onnx_nodes"].append(nodes)
            cols["n_onnx"].append(len(nodes))
            cols["mapping"].append(how)
            cols["attributed_to"].append("")
            cols["is_reformat"].append(layer.is_reformat)
            cols["is_constant"].append(const)
            cols["is_noop"].append(layer.type == "NoOp")
        # reformat layers: attribute to the layer they feed / are fed by
        onnx_nodes, mapping = cols["onnx_nodes"], cols["mapping"]
        for i, name in enumerate(cols["name"]):
            if mapping[i] or cols["is_constant"][i] or not name.startswith("Reformatting"):
                continue
            target = reformat_target(name)
            if target is None:
                continue
            j = by_name.get(target)
            if j is not None and onnx_nodes[j]:
                onnx_nodes[i] = list(onnx_nodes[j])
                cols["n_onnx"][i] = 0  # attributed, not fused into this layer
                mapping[i] = "reformat-for"
                cols["attributed_to"][i] = target
        cols["time_ms"], cols["time_mean_ms"], cols["time_median_ms"] = time, mean, median
        cols["pct"] = time / total * 100.0 if total > 0 else np.full(n, np.nan)
        cols["count"] = count
        df = pd.DataFrame(cols, columns=COLUMNS)
        return cls(df, el, prof, index, "median" if use_median else "mean", warnings)

    # -- derived views -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.df)

    @property
    def source(self) -> str:
        return self.layers.source

    @property
    def has_times(self) -> bool:
        return bool(self.df["time_ms"].notna().any())

    @property
    def total_ms(self) -> float:
        return float(np.nansum(self.df["time_ms"].to_numpy(dtype=float)))

    def coverage(self) -> Dict[str, Any]:
        """How much of the non-constant engine time maps to ONNX nodes (direct, and with
        reformat layers attributed to the layer they serve)."""
        cached = getattr(self, "_coverage", None)
        if cached is not None:
            return dict(cached)
        self._coverage = self._compute_coverage()
        return dict(self._coverage)

    def _compute_coverage(self) -> Dict[str, Any]:
        d = self.df[~self.df["is_constant"]]
        t = d["time_ms"].fillna(0.0)
        total = float(t.sum())
        direct = d["mapping"].isin(DIRECT)
        attributed = d["mapping"] != ""
        out = {"layers": int(len(d)), "layers_mapped": int(direct.sum()),
               "layers_attributed": int((d["mapping"] == "reformat-for").sum()),
               "time_ms": total,
               "mapped_ms": float(t[direct].sum()), "attributed_ms": float(t[attributed].sum()),
               "mapped_pct": float(t[direct].sum() / total * 100) if total > 0 else None,
               "attributed_pct": float(t[attributed].sum() / total * 100) if total > 0 else None,
               "layer_mapped_pct": float(direct.mean() * 100) if len(d) else None,
               "verified_with_onnx": self.index is not None}
        if self.index is not None:
            covered = set()
            for nodes in d.loc[direct, "onnx_nodes"]:
                covered.update(nodes)
            out["onnx_nodes_total"] = len(self.index.names)
            out["onnx_nodes_covered"] = len(covered)
        un = d[~attributed & (t > 0)].sort_values("time_ms", ascending=False)
        out["unmapped_top"] = [{"name": r.name, "type": r.type, "time_ms": float(r.time_ms)}
                               for r in un.head(5).itertuples()]
        return out

    def node_times(self, include_attributed: bool = True) -> pd.DataFrame:
        """Per-ONNX-node time: each layer's time shared equally by the nodes it covers.
        Columns: node, node_id, op, time_ms, layers, scope."""
        recs: Dict[str, Dict[str, Any]] = {}
        d = self.df
        for nodes, how, tm, name in zip(d["onnx_nodes"], d["mapping"], d["time_ms"], d["name"]):
            if not nodes or (how == "reformat-for" and not include_attributed):
                continue
            share = (0.0 if tm != tm else float(tm)) / len(nodes)
            for nd in nodes:
                r = recs.get(nd)
                if r is None:
                    r = recs[nd] = {"node": nd, "time_ms": 0.0, "layers": []}
                r["time_ms"] += share
                r["layers"].append(name)
        out = pd.DataFrame(list(recs.values()), columns=["node", "time_ms", "layers"])
        idx = self.index
        out["node_id"] = [idx.node_id(n) if idx is not None and idx.has(n) else n
                          for n in out["node"]]
        out["op"] = [idx.op(n) if idx is not None and idx.has(n) else "" for n in out["node"]]
        out["scope"] = [scope_of(n) for n in out["node"]]
        return out[["node", "node_id", "op", "time_ms", "layers", "scope"]]

    def row(self, name: str) -> pd.Series:
        hit = self.df[self.df["name"] == name]
        if hit.empty:
            raise WorkbenchError(f"no layer named '{name}'", file=self.source, field="Name")
        return hit.iloc[0]

    def node_ids_of(self, layer_name: str) -> List[str]:
        """Graph-view node ids of the ONNX nodes a layer covers (names when no model)."""
        nodes = self.row(layer_name)["onnx_nodes"]
        if self.index is None:
            return list(nodes)
        return [self.index.node_id(n) for n in nodes if self.index.has(n)]

    def layers_of_node(self, node: str) -> List[str]:
        return [nm for nm, nodes in zip(self.df["name"], self.df["onnx_nodes"]) if node in nodes]


def _open_layers(path: Any, prof: Optional[Profile],
                 profile_id: Optional[int]) -> "tuple":
    """(EngineLayers, Profile, findings) from a layer-information file, or from an NVIDIA
    trt-perf-analysis analyze-data.json (its layers, its profile unless one was given, and its
    scored issues as findings)."""
    from workbench.formats import analyze_data, read_json

    data = read_json(path, "engine layer information")
    if analyze_data.accepts(data):
        doc = analyze_data.read_data(data, str(path))
        found = doc.issues()
        return doc.layers(), prof if prof is not None else doc.profile(), found
    return parse_layers(data, source=str(path), profile_id=profile_id), prof, []


def layers_from_profile(prof: Profile) -> EngineLayers:
    """Names-only layer information from a profile's records (trtexec --exportProfile alone):
    types are guessed from names, precisions are unknown."""
    el = parse_layers({"Layers": prof.layers["name"].tolist()}, source=prof.source)
    el.schema = "from-profile"
    el.warnings = [Finding("info", "layer-info-from-profile",
                           "no layer information: layer names come from the profile, so types, "
                           "precisions and tactics are unknown",
                           hint="export it too (trtexec --exportLayerInfo "
                                "--profilingVerbosity=detailed)", source="timing")]
    return el


def scope_of(node_name: str) -> List[str]:
    """'/layer1/layer1.0/conv1/Conv' -> ['layer1', 'layer1.0', 'conv1']; 'Conv_0' -> []
    (the one rule: `workbench.core.graphindex.scope_of`)."""
    return list(graphindex.scope_of(node_name))


def build_layer_table(layers: LayersLike, profile: ProfileLike = None, onnx: Any = None,
                      stat: str = "median") -> LayerTable:
    """Shortcut for LayerTable.build."""
    return LayerTable.build(layers, profile, onnx=onnx, stat=stat)
