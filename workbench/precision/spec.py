"""`PrecisionSpec`: what precision to give a model, as one JSON-able value.

The same spec drives `workbench precision`, the Precision panel, `convert(...)` and the
precision half of a `BuildConfig` (which holds one instead of copying its fields). One
conversion each way: CLI arguments -> spec (`from_args`), spec -> JSON (`to_dict`/`to_json`),
JSON -> spec (`from_dict`/`from_json`); `convert_kwargs()` is what `convert` takes.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Optional, Tuple

from workbench.core.errors import WorkbenchError
from workbench.precision import table
from workbench.core.records import check_fields, json_object


@dataclass
class PrecisionSpec:
    """Target, FP32 exclusions, I/O types, calibration source and method."""

    target: str = table.BASE
    exclude_nodes: List[str] = field(default_factory=list)
    exclude_ops: List[str] = field(default_factory=list)
    keep_io_types: bool = True
    calibration: Optional[str] = None
    calibrate_method: str = "entropy"
    allow_random: bool = False
    per_channel: bool = True
    # a quantized target's precision for the nodes without Q/DQ (a float target of the
    # table, e.g. "fp16": TensorRT <= 10's `--int8 --fp16`); None: they stay FP32
    fallback: Optional[str] = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, *, prefix: str = "") -> "PrecisionSpec":
        """Normalise and check; WorkbenchError names the field (`prefix` + name)."""
        self.target = table.get(self.target, field=prefix + "target").name
        if self.calibrate_method not in table.CALIBRATE_METHODS:
            raise WorkbenchError(f"unknown calibration method '{self.calibrate_method}'",
                                 field=prefix + "calibrate_method",
                                 hint="one of " + ", ".join(table.CALIBRATE_METHODS))
        self.exclude_nodes = [str(n) for n in self.exclude_nodes]
        self.exclude_ops = [str(n) for n in self.exclude_ops]
        self.keep_io_types = bool(self.keep_io_types)
        self.allow_random = bool(self.allow_random)
        self.per_channel = bool(self.per_channel)
        if self.calibration is not None:
            self.calibration = str(self.calibration)
        self.fallback = check_fallback(self.target, self.fallback, field=prefix + "fallback")
        return self

    @property
    def precision(self) -> table.Precision:
        """The target's row of the precision table."""
        return table.get(self.target)

    # -- conversions ------------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        """Every field; `fallback` only when set (a spec without one keeps the JSON, the
        recorded metadata and the build-config hash it always had)."""
        d = asdict(self)
        if d["fallback"] is None:
            del d["fallback"]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PrecisionSpec":
        check_fields(d, (f.name for f in fields(cls)), "precision spec")
        return cls(**d)

    @classmethod
    def from_json(cls, text: str) -> "PrecisionSpec":
        return cls.from_dict(json_object(text, "precision spec"))

    @classmethod
    def from_args(cls, args: Any, *, target_attr: str = "target") -> "PrecisionSpec":
        """From parsed CLI arguments: the target from `args.<target_attr>` (`precision --to`
        is "target", `build --precision` is "precision"), then --exclude, --exclude-op,
        --calib, --calib-method, --allow-random, --keep-io, --no-per-channel, --fallback; flags a verb
        does not have keep their defaults."""
        from workbench.precision.options import PRECISION_OPTIONS

        d: Dict[str, Any] = {"target": getattr(args, target_attr, None) or table.BASE}
        for option in PRECISION_OPTIONS:
            v = getattr(args, option.dest, None)
            if v is not None:
                d[option.field] = list(v) if isinstance(v, (list, tuple)) else v
        return cls.from_dict(d)

    def convert_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of `workbench.precision.transform.convert` (after the target)."""
        return dict(exclude_nodes=list(self.exclude_nodes), exclude_ops=list(self.exclude_ops),
                    keep_io_types=self.keep_io_types, calibration=self.calibration,
                    calibrate_method=self.calibrate_method, allow_random=self.allow_random,
                    per_channel=self.per_channel, fallback=self.fallback)

    def replace(self, **changes: Any) -> "PrecisionSpec":
        d = self.to_dict()
        d.update(changes)
        return PrecisionSpec.from_dict(d)


def fallback_choices(target: Any) -> List[str]:
    """The float precisions of the table a `target` may fall back to, in table order (the
    values `check_fallback` takes with it): every float one for a quantized target, none for
    another (the panels offer these)."""
    return _floats() if table.is_quantized(target) else []


def _floats() -> List[str]:
    """The table's float (low-precision) targets, in table order."""
    return [n for n in table.names() if table.is_low_float(n)]


def check_fallback(target: str, fallback: Any, *, field: str = "fallback") -> Optional[str]:
    """`fallback` normalised (None stays None): a float precision of the table, given with a
    quantized `target`; WorkbenchError naming `field` and what to do otherwise."""
    if fallback is None:
        return None
    row = table.get(fallback, field=field)
    if not row.low_float:
        raise WorkbenchError(f"fallback '{row.name}' is not a float precision: the nodes "
                             "without Q/DQ compute in it", field=field,
                             hint="one of " + ", ".join(_floats()))
    if not table.is_quantized(target):
        quant = [n for n in table.names() if table.is_quantized(n)]
        raise WorkbenchError(f"a fallback applies to a quantized target ({', '.join(quant)}), "
                             f"not {str(target).upper()}", field=field,
                             hint=f"drop the fallback, or quantize (e.g. target "
                                  f"{quant[0] if quant else 'int8'} with fallback {row.name})")
    return row.name


FALLBACK_SEP = "+"  # a precision axis item TARGET+FALLBACK: "int8+fp16" (INT8 with an FP16 fallback)


def precision_label(target: str, fallback: Optional[str] = None) -> str:
    """How a target with its fallback is named on a precision axis: "int8+fp16"; a target
    without one keeps its own name ("int8")."""
    return f"{target}{FALLBACK_SEP}{fallback}" if fallback else str(target)


def precision_items() -> List[str]:
    """Every item a precision axis takes, in table order: each target of the table, then
    each quantized target with each float precision it may fall back to (`fallback_choices`):
    the choices the matrix offers."""
    names = list(table.names())
    return names + [precision_label(t, f) for t in names for f in fallback_choices(t)]


def parse_precision(item: Any, *, field: str = "precision") -> Tuple[str, Optional[str]]:
    """(target, fallback or None) of one precision axis item, "fp16" or "int8+fp16" (aliases
    accepted, names normalised), checked as a `PrecisionSpec` checks them (`check_fallback`);
    WorkbenchError naming `field`, the item and the items allowed otherwise."""
    text = str(item).strip()
    head, sep, tail = text.partition(FALLBACK_SEP)
    try:
        target = table.get(head, field=field).name
        fallback = check_fallback(target, tail, field=field) if sep else None
    except WorkbenchError as e:
        raise WorkbenchError(f"precision '{text}': {e.message}", field=field,
                             hint="one of " + ", ".join(precision_items())) from None
    return target, fallback


METADATA_KEY = "workbench.precision"  # metadata_props entry: the spec a model was converted with


def record_spec(proto: Any, spec: PrecisionSpec) -> None:
    """Write `spec` into `proto`'s metadata (METADATA_KEY, replacing an older entry): what a
    later `workbench compare` of this candidate needs to build on its exclusions."""
    keep = [p for p in proto.metadata_props if p.key != METADATA_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, spec.to_json()


def recorded_spec(proto: Any) -> Optional[PrecisionSpec]:
    """The spec `record_spec` wrote into `proto`, or None (none, or not readable)."""
    for p in getattr(proto, "metadata_props", ()):
        if p.key == METADATA_KEY:
            try:
                return PrecisionSpec.from_json(p.value)
            except (WorkbenchError, TypeError):
                return None
    return None


def excludable_ops(ops: Any, target: str) -> List[str]:
    """The op types among `ops` whose exclusion can change a `target` model: for INT8/FP8 the
    ops that get Q/DQ inputs (`quantize.QUANT_OPS`), for FP16/BF16 those the lowering would
    turn to the low type (not Cast, Shape, Constant, control flow, ...: they stay FP32
    anyway); sorted. FP32: none."""
    from workbench.precision.lowering import BLOCK_OPS
    from workbench.precision.quantize import QUANT_OPS

    have = set(ops)
    row = table.find(target)
    if row is not None and row.quantized:
        return sorted(have & set(QUANT_OPS))
    if row is not None and row.low_float:
        return sorted(have - set(BLOCK_OPS))
    return []

