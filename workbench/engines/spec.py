"""The build spec: `BuildConfig` (everything that decides an engine, JSON), profile
normalisation, and route resolution by capability probing.

A BuildConfig holds a `PrecisionSpec` (`config.spec`) for its precision half; the flat JSON
names of the config file (`precision`, `exclude_nodes`, ..., `allow_random_calibration`) map
onto it through `SPEC_FIELDS` and read/write through to it. Exports and the orchestration
depend on this module; it depends on neither.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Generic, List, Optional, TypeVar

from workbench.engines.options import OPTIONS, by_field, config_fields, optional_fields
from workbench.core.errors import WorkbenchError
from workbench.precision import table
from workbench.precision.spec import PrecisionSpec
from workbench.core.records import check_fields, json_object
from workbench.worker.protocol import BUILD_BACKENDS

ROUTES = ("auto", "strongly-typed", "legacy-flags")
# fields added later: left out of to_dict() while unset, so older configs keep their hash
_OPTIONAL_FIELDS = ("layer_precision", *optional_fields())
# layer_precision: how the builder-flag route holds every layer to the target precision
LAYER_PRECISION = ("obey", "prefer")
BACKENDS = BUILD_BACKENDS
CALIBRATE_METHODS = table.CALIBRATE_METHODS
Shape = List[int]
T = TypeVar("T")


class _OnSpec(Generic[T]):
    """A flat build-config name for a field of the config's PrecisionSpec, read and written
    through to it (the type parameter: the field's type, for the type checker)."""

    def __init__(self, attr: str) -> None:
        self.attr = attr
        self.__doc__ = f"`spec.{attr}`"

    def __get__(self, obj: Any, owner: Any = None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]  # (the class's own attribute)
        return getattr(obj.spec, self.attr)

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj.spec, self.attr, value)


def __getattr__(name: str) -> Any:
    if name == "PRECISIONS":  # the table's targets as they are now (tests may add one)
        return table.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _ordered_example(name: str, trio: List[List[int]]) -> str:
    """NAME:MIN:OPT:MAX from the user's own three shapes with each axis's sizes put in order
    (min <= opt <= max): an example of the input's own rank, not some other model's."""
    axes = [sorted(max(0, d) for d in sizes) for sizes in zip(*trio)]
    return name + ":" + ":".join("x".join(str(a[i]) for a in axes) or "scalar"
                                 for i in range(3))


def _norm_profile(p: Any, k: int) -> Dict[str, List[Shape]]:
    if hasattr(p, "to_dict") and not isinstance(p, dict):
        p = p.to_dict()
    if not isinstance(p, dict):
        raise WorkbenchError(f"profile {k} must be a mapping input -> [min, opt, max]",
                             field=f"profiles[{k}]")
    out: Dict[str, List[Shape]] = {}
    for name, shapes in p.items():
        if isinstance(shapes, dict):
            shapes = [shapes.get("min"), shapes.get("opt"), shapes.get("max")]
        try:
            trio = [[int(d) for d in s] for s in shapes]
        except (TypeError, ValueError):
            raise WorkbenchError(f"profile {k} for '{name}' must be [min, opt, max] shapes, "
                                 f"got {shapes!r}", field=f"profiles[{k}].{name}") from None
        if len(trio) != 3:
            raise WorkbenchError(f"profile {k} for '{name}' needs exactly 3 shapes (min, opt, "
                                 f"max), got {len(trio)}", field=f"profiles[{k}].{name}")
        ranks = {len(s) for s in trio}
        if len(ranks) != 1:
            raise WorkbenchError(f"profile {k} for '{name}': min/opt/max have different ranks "
                                 f"{[len(s) for s in trio]}", field=f"profiles[{k}].{name}")
        for axis, (a, b, c) in enumerate(zip(*trio)):
            if not (0 <= a <= b <= c):
                raise WorkbenchError(
                    f"profile {k} for '{name}' axis {axis}: need min <= opt <= max, got "
                    f"{a}, {b}, {c}", field=f"profiles[{k}].{name}",
                    hint="e.g. --profile %s" % _ordered_example(name, trio))
        out[str(name)] = trio
    return out


@dataclass(init=False)
class BuildConfig:
    """Everything that decides an engine, JSON-serialisable; `config_hash` is stable.

    `BuildConfig(precision="fp16", exclude_nodes=[...], target="sm89")` or
    `BuildConfig(spec=PrecisionSpec("fp16", ...), target="sm89")`; `config.precision` etc.
    read and write `config.spec`."""

    spec: PrecisionSpec
    profiles: List[Dict[str, List[Shape]]] = field(default_factory=list)
    workspace_bytes: Optional[int] = None
    builder_optimization_level: Optional[int] = None
    timing_cache: Optional[str] = None
    target: Optional[str] = None
    backend: str = "auto"
    route: str = "auto"
    plugins: List[str] = field(default_factory=list)
    extra_flags: List[str] = field(default_factory=list)
    tactic_sources: Optional[List[str]] = None
    # where the engine may run besides the build GPU (TensorRT >= 8.6; None: not set, left out
    # of the JSON and the hash so configs written before it keep their hash)
    hardware_compatibility: Optional[str] = None
    # builder-flag route (TensorRT <= 10): put every float layer in the target's precision and
    # the excluded nodes in FP32, and make the builder "obey" (or "prefer") that; None: the
    # flag alone, TensorRT picks each layer's precision (and may keep any in FP32)
    layer_precision: Optional[str] = None
    # TF32 for FP32 math (Ampere and later): None: off for an FP32 engine (FP32 means FP32, as
    # Polygraphy builds; TensorRT and trtexec turn it on), TensorRT's default otherwise;
    # True / False: set / clear it. See `effective_tf32`.
    tf32: Optional[bool] = None
    # I/O types and formats in trtexec's grammar ("fp16:hwc8"; one per tensor or one for all;
    # float tensors only): an FP16 engine with FP16 channels-last I/O needs no reformat
    # layers at its inputs/outputs. None: FP32 linear I/O as the ONNX declares (left out of
    # the JSON and the hash)
    input_io_formats: Optional[str] = None
    output_io_formats: Optional[str] = None

    # the flat config-file names of the `spec` fields (SPEC_FIELDS); not dataclass fields
    precision = _OnSpec[str]("target")
    exclude_nodes = _OnSpec[List[str]]("exclude_nodes")
    exclude_ops = _OnSpec[List[str]]("exclude_ops")
    keep_io_types = _OnSpec[bool]("keep_io_types")
    calibration = _OnSpec[Optional[str]]("calibration")
    calibrate_method = _OnSpec[str]("calibrate_method")
    allow_random_calibration = _OnSpec[bool]("allow_random")
    per_channel = _OnSpec[bool]("per_channel")
    fallback = _OnSpec[Optional[str]]("fallback")

    def __init__(self, spec: Optional[PrecisionSpec] = None, **kw: Any) -> None:
        prec = {SPEC_FIELDS[k]: kw.pop(k) for k in list(kw) if k in SPEC_FIELDS}
        for f in fields(self):
            if f.name == "spec":
                continue
            if f.name in kw:
                value = kw.pop(f.name)
            else:
                value = [] if f.default_factory is list else f.default
            setattr(self, f.name, value)
        for name in _OPTION_ATTRS:  # options declared in workbench.engines.options only
            setattr(self, name, kw.pop(name) if name in kw else
                    by_field(name).default_value())
        if kw:
            raise TypeError(f"BuildConfig() got an unexpected keyword argument "
                            f"'{sorted(kw)[0]}'")
        if spec is not None and prec:
            spec = spec.replace(**prec)
        self.spec = spec if spec is not None else _spec_from(prec)
        self.validate()

    def validate(self) -> "BuildConfig":
        """Normalise and check every field; raises WorkbenchError naming the field."""
        try:
            self.spec.validate()
        except WorkbenchError as e:
            raise _renamed(e) from None
        if self.route not in ROUTES:
            raise WorkbenchError(f"unknown route '{self.route}'", field="route",
                                 hint="one of " + ", ".join(ROUTES))
        if self.backend not in BACKENDS:
            raise WorkbenchError(f"unknown backend '{self.backend}'", field="backend",
                                 hint="one of " + ", ".join(BACKENDS))
        if self.calibrate_method not in CALIBRATE_METHODS:
            raise WorkbenchError(f"unknown calibration method '{self.calibrate_method}'",
                                 field="calibrate_method",
                                 hint="one of " + ", ".join(CALIBRATE_METHODS))
        for option in OPTIONS:  # each build option checks its own field(s)
            option.validate(self)
        if self.layer_precision is not None:
            lp = str(self.layer_precision).strip().lower()
            if lp not in LAYER_PRECISION:
                raise WorkbenchError(f"unknown layer precision '{self.layer_precision}'",
                                     field="layer_precision",
                                     hint="one of " + ", ".join(LAYER_PRECISION))
            self.layer_precision = lp
        self.profiles = [_norm_profile(p, k) for k, p in enumerate(self.profiles or [])]
        return self

    @property
    def effective_tf32(self) -> Optional[bool]:
        """TF32 as the builder gets it: `tf32` when set, else False for an FP32 engine (its
        figures are FP32's: with TF32, TensorRT's default on Ampere and later, an FP32 ResNet
        engine is off by 8e-3 and fails FP32 tolerance), else None (TensorRT's default)."""
        if self.tf32 is not None:
            return self.tf32
        return False if self.precision == table.BASE else None

    @classmethod
    def from_spec(cls, spec: PrecisionSpec, **build: Any) -> "BuildConfig":
        """A config for `spec` plus build settings (profiles, target, ...)."""
        return cls(spec=spec, **build)

    # -- JSON (flat, the config file's format) ------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        d = {n: copy.deepcopy(getattr(self, n)) for n in _field_names()
             if not (n in _OPTIONAL_FIELDS and getattr(self, n) is None)}
        d.update({_FLAT_NAME[k]: copy.deepcopy(v) for k, v in self.spec.to_dict().items()})
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "BuildConfig":
        check_fields(d, set(_field_names()) | set(SPEC_FIELDS), "build config")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "BuildConfig":
        return cls.from_dict(json_object(text, "build config"))

    @property
    def config_hash(self) -> str:
        """sha256 of the canonical JSON (16 hex digits)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def entry(self) -> table.Precision:
        """The precision table's row for this config's target."""
        return self.spec.precision

    def __eq__(self, other: object) -> bool:  # (every field, the options' own included)
        return isinstance(other, BuildConfig) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]  # (mutable, as before)

    def replace(self, **changes: Any) -> "BuildConfig":
        d = self.to_dict()
        d.update(changes)
        return BuildConfig.from_dict(d)


# option fields BuildConfig does not declare (an option added in workbench.engines.options
# only): plain attributes, set in __init__, in the JSON like the declared ones
_OPTION_ATTRS = [n for n in config_fields()
                 if n not in {f.name for f in fields(BuildConfig)}]


def _field_names() -> List[str]:
    """Every field of the flat JSON but the precision ones: declared, then options' own."""
    return [f.name for f in fields(BuildConfig) if f.name != "spec"] + _OPTION_ATTRS


# flat config-file name -> PrecisionSpec field
SPEC_FIELDS: Dict[str, str] = {name: v.attr for name, v in vars(BuildConfig).items()
                               if isinstance(v, _OnSpec)}
_FLAT_NAME = {v: k for k, v in SPEC_FIELDS.items()}


def _spec_from(prec: Dict[str, Any]) -> PrecisionSpec:
    try:
        return PrecisionSpec(**prec)
    except WorkbenchError as e:
        raise _renamed(e) from None


def _renamed(e: WorkbenchError) -> WorkbenchError:
    """A PrecisionSpec error with the config file's field name (target -> precision)."""
    name = _FLAT_NAME.get(e.field or "", e.field)
    return WorkbenchError(e.message, field=name, hint=e.hint, node=e.node, file=e.file)


def resolve_route(config: BuildConfig, caps: Dict[str, bool]) -> str:
    """Pick the precision route by capability probing (never by version string)."""
    entry = config.entry
    flag = entry.builder_flag or entry.name.upper()
    has_flag = bool(entry.capability and caps.get(entry.capability))
    if config.route == "auto":
        if caps.get("strongly_typed_flag"):
            return "strongly-typed"
        if entry.kind == "none":  # FP32 on a TensorRT without strongly typed networks: a
            return "legacy-flags"  # weakly typed one, no flag (no --stronglyTyped in its lines)
        if has_flag:
            _check_fallback_flag(config, caps, "legacy-flags")
            return "legacy-flags"
        raise WorkbenchError(f"this TensorRT has neither strongly typed networks nor "
                             f"BuilderFlag.{flag}", field="precision",
                             hint="build in FP32, or use another TensorRT")
    if config.route == "legacy-flags" and entry.kind != "none":
        if not has_flag:
            raise WorkbenchError(
                f"this TensorRT has no BuilderFlag.{flag} (TensorRT 11 and TensorRT-RTX "
                "are strongly typed only)", field="route",
                hint="use --route strongly-typed: precision goes into the ONNX as casts / Q/DQ")
        if not entry.flag_route:
            raise WorkbenchError(f"{entry.name.upper()} has no builder-flag calibration route",
                                 field="route",
                                 hint="use --route strongly-typed (Q/DQ in the ONNX)")
    _check_fallback_flag(config, caps, config.route)
    if config.route == "strongly-typed" and entry.kind != "none" and \
            not caps.get("strongly_typed_flag"):
        raise WorkbenchError("this TensorRT has no strongly typed networks", field="route",
                             hint="use --route legacy-flags (builder flags + calibrator)")
    return config.route


def _check_fallback_flag(config: BuildConfig, caps: Dict[str, bool], route: str) -> None:
    """The builder-flag route of a quantized target with a fallback sets the fallback's flag
    too: refused, naming `fallback`, where this TensorRT lacks it."""
    if route != "legacy-flags" or not config.fallback:
        return
    fb = table.get(config.fallback)
    if not (fb.capability and caps.get(fb.capability)):
        raise WorkbenchError(f"this TensorRT has no BuilderFlag.{fb.builder_flag or fb.name.upper()} "
                             f"for the {fb.name.upper()} fallback", field="fallback",
                             hint="drop the fallback, or build strongly typed (--route "
                                  "strongly-typed: Casts + Q/DQ in the ONNX)")


def layer_precisions(config: BuildConfig, excluded: List[str]) -> Dict[str, str]:
    """The builder-flag route's layer precisions for the worker: each excluded node in the
    base (FP32) type and, with `config.layer_precision`, every other float layer ("*") in the
    target's; DataType names from the precision table."""
    base = table.get(table.BASE).layer_dtype or "float32"
    out: Dict[str, str] = {}
    if config.layer_precision:
        dt = config.entry.layer_dtype
        if not dt:
            raise WorkbenchError(f"{config.precision.upper()} has no layer precision on the "
                                 "builder-flag route", field="layer_precision",
                                 hint="leave layer_precision unset (the builder flag alone)")
        out["*"] = dt
    out.update({n: base for n in excluded})
    return out
