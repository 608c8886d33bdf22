"""Engine layer information in every form TensorRT writes it: the types (`EngineLayers`,
`EngineLayer`, `TensorInfo`) and the one parser the per-version readers
(`trt_layers_bindings`, `trt_layers_io_tensors`, `trt_layers_names_only`) share.

`load_layers(path)` reads `IEngineInspector.get_engine_information(JSON)` or trtexec
`--exportLayerInfo` output: `{"Layers", "Bindings"}` (8.x/10.x), `{"Layers", "I/O Tensors"}`
(11.x), LAYER_NAMES_ONLY string lists, tensor formats in `Format/Datatype` or split
`Format` + `Datatype` fields, raw \\x1e/\\x1f separators in `Metadata`. Unknown layer types and
missing optional fields are tolerated (recorded as warnings); a file whose structure is wrong
raises a WorkbenchError naming the file and the field.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Dict, List, Optional, Sequence

from workbench.core.errors import Finding, WorkbenchError
from workbench.formats._json import PathLike, read_json

# precision names, lowest bit width first (used to pick a layer's compute precision)
FLOAT_ORDER = ("FP4", "INT4", "FP8", "INT8", "FP16", "BF16", "FP32", "FP64")
_DTYPE_WORDS = [  # (substring in a format/dtype description, precision); first match wins
    ("bfloat16", "BF16"), ("bf16", "BF16"), ("fp16", "FP16"), ("half", "FP16"),
    ("fp32", "FP32"), ("float32", "FP32"), ("double", "FP64"), ("fp64", "FP64"),
    ("fp8", "FP8"), ("e4m3", "FP8"), ("fp4", "FP4"), ("e2m1", "FP4"),
    ("uint8", "UINT8"), ("int8", "INT8"), ("int4", "INT4"), ("int32", "INT32"),
    ("int64", "INT64"), ("int16", "INT16"), ("bool", "BOOL"), ("float", "FP32"),
]
_META_ONNX = re.compile(r"^\s*\[ONNX Layer:\s*(.*?)\]\s*$", re.S)
_PROFILE_SUFFIX = re.compile(r"\s*\[profile\s*(\d+)\]")


@lru_cache(maxsize=4096)
def _precision_of(desc: str) -> str:
    low = desc.lower()
    if "n/a" in low and "dynamic" in low:
        return ""
    for word, prec in _DTYPE_WORDS:
        if word in low:
            return prec
    return ""


def parse_precision(desc: Optional[str]) -> str:
    """'Channel major FP16 format where channel % 8 == 0' -> 'FP16'; 'Half' -> 'FP16'."""
    if not desc:
        return ""
    return _precision_of(str(desc))


class TensorInfo:
    """One input or output of an engine layer (a slotted class: engines have 10^4-10^5)."""

    __slots__ = ("name", "shape", "format", "precision", "location")

    def __init__(self, name: str, shape: Optional[List[int]] = None, format: str = "",
                 precision: str = "", location: str = "") -> None:
        self.name = name
        self.shape = shape if shape is not None else []
        self.format = format
        self.precision = precision
        self.location = location

    @property
    def shape_str(self) -> str:
        return "x".join(map(str, self.shape)) if self.shape else "?"

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.shape_str}, {self.precision or '?'})"


@dataclass
class EngineLayer:
    """One layer of a built engine (as the inspector describes it)."""

    index: int
    name: str
    type: str = "Unknown"
    inputs: List[TensorInfo] = field(default_factory=list)
    outputs: List[TensorInfo] = field(default_factory=list)
    tactic: str = ""
    origin: str = ""
    metadata: str = ""
    onnx_from_metadata: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def in_precision(self) -> str:
        return _lowest(tuple([t.precision for t in self.inputs]))

    @property
    def out_precision(self) -> str:
        return _lowest(tuple([t.precision for t in self.outputs]))

    @property
    def precision(self) -> str:
        """The compute precision: the narrowest float/int8 type among inputs, else outputs
        (index tensors such as INT32 ids do not count unless nothing else is there)."""
        return self.precisions()[0]

    def precisions(self) -> "tuple":
        """(compute precision, input precision, output precision) in one pass."""
        ip, op = self.in_precision, self.out_precision
        return (ip or op or _any([t.precision for t in self.inputs + self.outputs]), ip, op)

    @property
    def is_reformat(self) -> bool:
        t = self.type.lower()
        return ("reformat" in t or self.origin.upper() in ("REFORMAT",)
                or self.name.startswith("Reformatting CopyNode"))

    @property
    def is_constant(self) -> bool:
        return self.type == "Constant"

    @property
    def fused_ops(self) -> List[str]:
        """The operations a TensorRT 10.x/11.x `kgen` kernel fuses (['Add', 'Mul', 'Mean']);
        [] for other layers."""
        from workbench.formats.kgen import is_kgen, kgen_ops

        return kgen_ops(self.raw) if is_kgen(self.type) else []


@dataclass
class EngineLayers:
    """All layers of one engine plus its I/O tensor names and where they came from."""

    layers: List[EngineLayer]
    bindings: List[str] = field(default_factory=list)
    schema: str = ""  # "bindings" (8.x/10.x), "io-tensors" (11.x), "names-only", "analyze-data"
    source: str = "<memory>"
    warnings: List[Finding] = field(default_factory=list)

    @property
    def names_only(self) -> bool:
        return self.schema == "names-only"

    def __len__(self) -> int:
        return len(self.layers)

    def by_name(self) -> Dict[str, EngineLayer]:
        return {layer.name: layer for layer in self.layers}


@lru_cache(maxsize=1024)
def _lowest(precs: Sequence[str]) -> str:
    found = [p for p in precs if p in FLOAT_ORDER]
    if not found:
        return ""
    return min(found, key=FLOAT_ORDER.index)


def _any(precs: Sequence[str]) -> str:
    for p in precs:
        if p:
            return p
    return ""


def onnx_names_from_metadata(meta: str) -> List[str]:
    """'[ONNX Layer: /conv1/Conv]\\x1e[ONNX Layer: /relu/Relu]' -> ['/conv1/Conv', '/relu/Relu']."""
    if not meta:
        return []
    out: List[str] = []
    for piece in re.split(r"[\x1e\x1f]", meta):
        m = _META_ONNX.match(piece)
        if m and m.group(1) and m.group(1) not in out:
            out.append(m.group(1))
    if not out and "ONNX Layer:" in meta:  # separators replaced (e.g. by '+') by another tool
        for m in re.finditer(r"\[ONNX Layer:\s*([^\]]*?)\]", meta):
            if m.group(1) and m.group(1) not in out:
                out.append(m.group(1))
    return out


def _tensor(d: Any, where: str, source: str) -> TensorInfo:
    if isinstance(d, str):
        return TensorInfo(name=d)
    if not isinstance(d, dict):
        raise WorkbenchError(f"expected a tensor object, got {type(d).__name__}", file=source,
                             field=where, hint="the layer information file is malformed")
    dims = d.get("Dimensions", d.get("Shape", []))
    shape: List[int] = []
    if isinstance(dims, list):
        if all(type(x) is int for x in dims):
            shape = dims
        else:
            for x in dims:
                try:
                    shape.append(int(x))
                except (TypeError, ValueError):
                    shape.append(-1)
    fmt = d.get("Format/Datatype")
    if fmt is None:  # newer split fields
        parts = [d.get(k) for k in ("Format", "Datatype", "DataType", "Type") if d.get(k)]
        fmt = " ".join(str(p) for p in parts)
        prec = parse_precision(str(d.get("Datatype") or d.get("DataType") or d.get("Type") or fmt))
    else:
        prec = parse_precision(str(fmt))
    return TensorInfo(name=str(d.get("Name", "")), shape=shape, format=str(fmt or ""),
                      precision=prec, location=str(d.get("Location", "")))


def _tensors(value: Any, where: str, source: str) -> List[TensorInfo]:
    if value is None:
        return []
    if isinstance(value, (dict, str)):
        value = [value]
    if not isinstance(value, list):
        raise WorkbenchError(f"expected a list of tensors, got {type(value).__name__}",
                             file=source, field=where, hint="the layer information file is malformed")
    return [_tensor(t, f"{where}[{i}]", source) for i, t in enumerate(value)]


def _type_from_name(name: str) -> str:
    if name.startswith("Reformatting CopyNode"):
        return "Reformat"
    if name.startswith("{ForeignNode["):
        return "Myelin"
    if name.startswith("[ShapeHostToDeviceCopy"):
        return "ShapeHostToDevice"
    return "Unknown"


def parse_layers(data: Any, source: str = "<memory>",
                 profile_id: Optional[int] = None) -> EngineLayers:
    """Turn parsed layer-information JSON into EngineLayers (see module docstring)."""
    if isinstance(data, list):
        if data and isinstance(data[0], dict) and ("count" in data[0] or "averageMs" in data[0]
                                                   or "latencyMs" in data[0]):
            raise WorkbenchError("this is a profile or timing trace, not engine layer information",
                                 file=source, field="Layers",
                                 hint="pass it as the profile (--profile); the layer information "
                                      "comes from trtexec --exportLayerInfo or IEngineInspector")
        data = {"Layers": data}
    if not isinstance(data, dict):
        raise WorkbenchError(f"expected a JSON object with 'Layers', got {type(data).__name__}",
                             file=source, field="Layers",
                             hint="export it with trtexec --exportLayerInfo or IEngineInspector")
    if "Layers" not in data:
        keys = ", ".join(list(data)[:6]) or "none"
        raise WorkbenchError(f"no 'Layers' list (keys: {keys})", file=source, field="Layers",
                             hint="export it with trtexec --exportLayerInfo or IEngineInspector")
    raw_layers = data["Layers"]
    if not isinstance(raw_layers, list):
        raise WorkbenchError(f"'Layers' must be a list, got {type(raw_layers).__name__}",
                             file=source, field="Layers")
    warnings: List[Finding] = []
    if "I/O Tensors" in data:
        schema, io = "io-tensors", data.get("I/O Tensors")
    else:
        schema, io = "bindings", data.get("Bindings")
    bindings: List[str] = []
    if isinstance(io, list):
        for b in io:
            if isinstance(b, str):
                bindings.append(b)
            elif isinstance(b, dict) and b.get("Name") is not None:
                bindings.append(str(b["Name"]))
    elif io is not None:
        warnings.append(Finding("warning", "layer-info-field", f"ignored malformed I/O list in "
                                f"{source}", source="timing"))
    layers: List[EngineLayer] = []
    names_only = bool(raw_layers) and all(isinstance(x, str) for x in raw_layers)
    if names_only:
        schema = "names-only"
        warnings.append(Finding(
            "info", "layer-info-names-only",
            "layer information has names only (ProfilingVerbosity LAYER_NAMES_ONLY): no types, "
            "formats or tactics", hint="rebuild with ProfilingVerbosity.DETAILED "
            "(trtexec --profilingVerbosity=detailed) for precision and tactic columns",
            source="timing"))
    unknown_fields = 0
    for i, rl in enumerate(raw_layers):
        where = f"Layers[{i}]"
        if isinstance(rl, str):
            layers.append(EngineLayer(index=i, name=rl, type=_type_from_name(rl)))
            continue
        if not isinstance(rl, dict):
            raise WorkbenchError(f"expected a layer object or name, got {type(rl).__name__}",
                                 file=source, field=where, hint="the file is malformed")
        name = rl.get("Name")
        if name is None:
            unknown_fields += 1
            name = f"(unnamed layer {i})"
        name = str(name)
        ltype = rl.get("LayerType") or _type_from_name(name)
        meta = rl.get("Metadata") or ""
        if not isinstance(meta, str):
            meta = str(meta)
        tactic = rl.get("TacticName") or rl.get("TacticValue") or rl.get("Tactic") or ""
        layers.append(EngineLayer(
            index=i, name=name, type=str(ltype),
            inputs=_tensors(rl.get("Inputs"), f"{where}.Inputs", source),
            outputs=_tensors(rl.get("Outputs"), f"{where}.Outputs", source),
            tactic=str(tactic), origin=str(rl.get("Origin") or ""), metadata=meta,
            onnx_from_metadata=onnx_names_from_metadata(meta), raw=rl))
    fmts = [t.format for x in layers for t in x.inputs + x.outputs]
    if fmts and all("n/a" in f.lower() for f in fmts):
        warnings.append(Finding(
            "info", "layer-info-no-context",
            "tensor formats and shapes are 'N/A due to dynamic shapes': the layer information was "
            "exported without an execution context, so precisions are unknown",
            hint="set inspector.execution_context after setting input shapes (the workbench's "
                 "capture and trtexec --exportLayerInfo do) to get formats and precisions",
            source="timing"))
    if unknown_fields:
        warnings.append(Finding("warning", "layer-info-field",
                                f"{unknown_fields} layer(s) without a Name in {source}",
                                source="timing"))
    layers = _filter_profile(layers, profile_id, source)
    if bindings:
        bindings = [b for b in bindings if _keep_name(b, profile_id)]
    return EngineLayers(layers=layers, bindings=bindings, schema=schema, source=source,
                        warnings=warnings)


def _keep_name(name: str, profile_id: Optional[int]) -> bool:
    m = _PROFILE_SUFFIX.search(name) if "[profile" in name else None
    if not profile_id:
        return m is None
    return m is not None and int(m.group(1)) == profile_id


def _filter_profile(layers: List[EngineLayer], profile_id: Optional[int],
                    source: str) -> List[EngineLayer]:
    """Engines with several optimization profiles repeat every layer with a `[profile N]`
    suffix; keep one profile's layers (profile 0 carries no suffix)."""
    if not any("[profile" in x.name and _PROFILE_SUFFIX.search(x.name) for x in layers):
        if profile_id:
            raise WorkbenchError(f"the engine has no layers for optimization profile {profile_id}",
                                 file=source, field="Layers", hint="use profile 0")
        return layers
    kept = [x for x in layers if _keep_name(x.name, profile_id)]
    if not kept:
        raise WorkbenchError(f"no layers for optimization profile {profile_id}", file=source,
                             field="Layers", hint="choose a profile that the engine has")
    return kept


def read_layers(data: Any, source: str = "<memory>") -> EngineLayers:
    """The layer readers' `read` (`formats.trt_layers_*`): every layout goes through
    `parse_layers`, which tells them apart by their fields."""
    return parse_layers(data, source=source)


def load_layers(path: PathLike, profile_id: Optional[int] = None) -> EngineLayers:
    """Read an engine's layer information JSON (any TensorRT version's layout)."""
    return parse_layers(read_json(path, "engine layer information"), source=str(path),
                        profile_id=profile_id)
