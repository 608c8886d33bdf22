"""The precision table: every target the workbench knows, in one place.

Each row says what the target needs and how each consumer spells it: whether it needs
calibration data, the legacy builder flag (TensorRT <= 10), the trtexec / polygraphy flags of
that route, the ONNX transform of the strongly typed route (float casts, Q/DQ, none) and a line
for the user. The CLI choices (`precision`, `build`, `compare`), the Build and Precision panels,
route resolution, the exports and the calibration checks all read it; adding a target is one
`register(...)` call plus its transform.

Deliberately plain classes, no dataclasses/numpy: the CLI reads it while building argparse.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Union

from workbench.core.errors import WorkbenchError

FP16_MAX = 65504.0
FP16_TINY = 2.0 ** -24  # the smallest FP16 subnormal: smaller magnitudes become 0
BF16_MAX = 3.3895313892515355e38
BASE = "fp32"  # what the builder-flag route hands TensorRT: the original model
CALIBRATE_METHODS = ("entropy", "minmax", "percentile")
KINDS = ("none", "float", "quantized")

# A transform is "module:function" (imported when first used) or the function itself:
# fn(proto, job) -> (ModelProto, [Finding], {report entries}); see workbench.precision.transform.
Transform = Union[str, Callable[..., Any]]


class Precision:
    """One row of the table (read-only by convention; `register` a new one to change it)."""

    __slots__ = ("name", "kind", "description", "needs_calibration", "builder_flag",
                 "flag_route", "flag_calibrator", "trtexec", "polygraphy", "transform",
                 "max_abs", "min_abs", "aliases", "atol", "rtol", "layer_dtype", "min_sm",
                 "onnx_dtype", "min_opset", "ort_kernels")

    def __init__(self, name: str, kind: str, description: str, *, transform: Transform,
                 needs_calibration: bool = False, builder_flag: Optional[str] = None,
                 flag_route: bool = True, flag_calibrator: bool = False,
                 trtexec: Optional[str] = None, polygraphy: Optional[str] = None,
                 max_abs: Optional[float] = None, min_abs: Optional[float] = None,
                 aliases: Tuple[str, ...] = (), atol: Optional[float] = None, rtol: Optional[float] = None,
                 layer_dtype: Optional[str] = None, min_sm: Optional[int] = None,
                 onnx_dtype: Optional[int] = None, min_opset: int = 0,
                 ort_kernels: bool = True) -> None:
        if kind not in KINDS:
            raise ValueError(f"precision kind must be one of {KINDS}, got {kind!r}")
        self.name = name.lower()
        self.kind = kind                    # none | float (casts) | quantized (Q/DQ)
        self.description = description
        self.transform = transform          # the strongly typed route's ONNX transform
        self.needs_calibration = needs_calibration
        self.builder_flag = builder_flag    # BuilderFlag name on TensorRT <= 10, e.g. "FP16"
        self.flag_route = flag_route        # False: `--route legacy-flags` cannot build it
        self.flag_calibrator = flag_calibrator  # builder-flag route feeds a calibrator
        self.trtexec = trtexec              # trtexec flag of the builder-flag route
        self.polygraphy = polygraphy        # polygraphy convert flag of that route
        self.max_abs = max_abs              # float targets: largest finite value
        self.min_abs = min_abs              # ... and smallest non-zero one (below: 0)
        self.aliases = tuple(a.lower() for a in aliases)
        # the TensorRT DataType attribute (`trt.float16`) a layer is pinned to on the
        # builder-flag route's layer precision (TensorRT <= 10); None: no such route
        self.layer_dtype = layer_dtype
        # the oldest GPU generation whose tensor cores compute it (89: Ada's FP8), or None
        self.min_sm = min_sm
        # the ONNX element type (TensorProto enum) the target stores: the low float type of a
        # float target's tensors, the Q/DQ zero point's type of a quantized one
        self.onnx_dtype = onnx_dtype
        # the opset the transformed model needs at least (float8 Q/DQ: 19; int4: 21)
        self.min_opset = int(min_opset)
        # onnxruntime's CPU provider has kernels for the lowered type (bfloat16: mostly not),
        # so the lowered model is checked by loading it there
        self.ort_kernels = ort_kernels
        # default comparison tolerances against FP32 (`compare`, `precision`, verification):
        # tight for the untransformed model, FP16-like for every lowered one unless given
        loose = kind != "none"
        self.atol = float(atol) if atol is not None else (1e-2 if loose else 1e-3)
        self.rtol = float(rtol) if rtol is not None else (1e-2 if loose else 1e-3)

    @property
    def quantized(self) -> bool:
        """Q/DQ target: needs scales, judged by direction as well as by elements."""
        return self.kind == "quantized"

    @property
    def low_float(self) -> bool:
        """Float-cast target (FP16/BF16-like): tensors stored in a narrower float type."""
        return self.kind == "float"

    @property
    def lowered(self) -> bool:
        """Any target that changes the model (every kind but the untransformed base)."""
        return self.kind != "none"

    @property
    def capability(self) -> Optional[str]:
        """The worker's capability key for the builder flag (`fp16_flag`), or None."""
        return f"{self.builder_flag.lower()}_flag" if self.builder_flag else None

    def transform_fn(self) -> Callable[..., Any]:
        if callable(self.transform):
            return self.transform
        import importlib

        mod, _, fn = str(self.transform).partition(":")
        return getattr(importlib.import_module(mod), fn)

    def __repr__(self) -> str:
        return f"Precision({self.name!r}, {self.kind!r})"


_TABLE: Dict[str, Precision] = {}
_ALIASES: Dict[str, str] = {}


def __getattr__(name: str) -> Any:
    if name == "TARGETS":  # the names as they are now (a tuple, like it always was)
        return names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(p: Precision, *, replace: bool = False) -> Precision:
    """Add a target (tests add a dummy one); every consumer sees it at once."""
    if p.name in _TABLE and not replace:
        raise ValueError(f"precision '{p.name}' is already registered")
    _TABLE[p.name] = p
    for a in p.aliases:
        _ALIASES[a] = p.name
    return p


def unregister(name: str) -> None:
    p = _TABLE.pop(name.lower(), None)
    for a in getattr(p, "aliases", ()):
        _ALIASES.pop(a, None)


def names() -> Tuple[str, ...]:
    """Every target, in table order (fp32 first)."""
    return tuple(_TABLE)


def lowered() -> Tuple[str, ...]:
    """The targets that change the model (everything but fp32): `compare --to` choices."""
    return tuple(n for n, p in _TABLE.items() if p.kind != "none")


def normalise(name: Any) -> str:
    """Lower-case, aliases resolved ('half' -> 'fp16'); unknown names pass through."""
    n = str(name).strip().lower()
    return _ALIASES.get(n, n)


def tolerances(target: Any, atol: Optional[float] = None,
               rtol: Optional[float] = None) -> Tuple[float, float]:
    """(atol, rtol): the user's where given, else the target row's defaults (None -> fp32;
    an unknown name compares like the first lowered float target)."""
    n = normalise(target or BASE)
    row = _TABLE.get(n) or next((p for p in _TABLE.values() if p.kind == "float"), None)
    da, dr = (row.atol, row.rtol) if row is not None else (1e-2, 1e-2)
    return (da if atol is None else float(atol), dr if rtol is None else float(rtol))


def find(name: Any) -> Optional[Precision]:
    """The row for `name` (aliases accepted), or None for a name the table does not know."""
    return _TABLE.get(normalise(name)) if name else None


def is_quantized(name: Any) -> bool:
    """Whether `name` is a Q/DQ target (False for unknown names)."""
    p = find(name)
    return p is not None and p.quantized


def is_low_float(name: Any) -> bool:
    """Whether `name` is a float-cast target (False for unknown names)."""
    p = find(name)
    return p is not None and p.low_float


def is_base(name: Any) -> bool:
    """Whether `name` is the untransformed model's precision (fp32)."""
    p = find(name)
    return p is not None and p.kind == "none"


def base() -> Precision:
    """The untransformed model's row."""
    return _TABLE[BASE]


def get(name: Any, *, field: str = "precision") -> Precision:
    """The row for `name` (aliases accepted); WorkbenchError naming `field` otherwise."""
    n = normalise(name)
    p = _TABLE.get(n)
    if p is None:
        raise WorkbenchError(f"unknown precision '{n}'", field=field,
                             hint="one of " + ", ".join(_TABLE))
    return p


_Q = "workbench.precision.transform:"
register(Precision("fp32", "none", "the model as it is (no transform)",
                   transform=_Q + "keep_fp32", aliases=("float32", "float"),
                   layer_dtype="float32", onnx_dtype=1))
register(Precision("fp16", "float", "FP16 Casts + FP16 weights; overflowing nodes stay FP32",
                   transform=_Q + "fp16_casts", builder_flag="FP16", trtexec="--fp16",
                   polygraphy="--fp16", max_abs=FP16_MAX, min_abs=FP16_TINY,
                   aliases=("float16", "half"),
                   layer_dtype="float16", onnx_dtype=10))
register(Precision("bf16", "float", "BF16 Casts + BF16 weights (FP32's range, fewer digits)",
                   transform=_Q + "bf16_casts", builder_flag="BF16", trtexec="--bf16",
                   polygraphy="--bf16", max_abs=BF16_MAX, aliases=("bfloat16",),
                   layer_dtype="bfloat16", min_sm=80, onnx_dtype=16, ort_kernels=False))
register(Precision("int8", "quantized", "INT8 Q/DQ with calibrated scales (zero point 0)",
                   transform=_Q + "qdq", needs_calibration=True, builder_flag="INT8",
                   flag_calibrator=True, trtexec="--int8", polygraphy="--int8", onnx_dtype=3))
register(Precision("fp8", "quantized", "FP8 E4M3 Q/DQ, scales amax/448",
                   transform=_Q + "qdq", needs_calibration=True, builder_flag="FP8",
                   flag_route=False, aliases=("fp8e4m3", "fp8_e4m3"), min_sm=89,
                   onnx_dtype=17, min_opset=19))
del _Q
