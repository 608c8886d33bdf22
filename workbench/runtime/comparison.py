"""ONE output comparison: the metrics, the pass rule, the sentinel policy and default tolerances.

Every figure the workbench shows for "how far is the candidate from the reference" comes from
`compare_tensor` / `compare_outputs`: surgery verification, precision measurement, layer-wise
compare and its exclusion search, the Precision and Compare panels and the CLI.

- Absolute error d = |candidate - reference| per element (float64); matching NaNs and matching
  infinities count as 0, a NaN or infinity on one side only as inf.
- Relative error has one definition: error / scale, where scale = max |reference| over its
  finite, non-sentinel values (the error relative to the tensor's scale). `rel` = max_abs /
  scale, `mean_rel` = mean_abs / scale. (A per-element |d| / |reference| explodes near zeros and
  says nothing about FP16 activations.)
- Pass rule (Polygraphy's `elemwise` check): an element fails when d > atol AND d > rtol *
  |reference|; the tensor passes when no element fails. With atol = rtol = tol this is
  d <= tol * max(1, |reference|), surgery verification's rule.
- Sentinel policy: values with |x| >= 1e30 (float32's extreme, ~3.4e38, used as additive
  masks) are masks, not data; so is a mask constant of the tensor's own (`data_sentinel`: one
  or two values of |x| >= 1e3, every other value at least 100x smaller, e.g. the -1e9 or -1e4
  a Where writes at masked positions), so a masked score's error is relative to its scores, not
  to the mask. A reference sentinel that the candidate holds saturated to the low type's range
  (|x| >= 6e4, FP16's max or inf) or still far outside the data (half the mask's size or more)
  with the same sign still masks: no error. Off for same-precision checks (`sentinels=False`).
- Cosine similarity over the normal values; NaN / Inf counts on the candidate side; top-1
  agreement over the last axis for outputs with a class axis.

Default tolerances per precision target live in the precision table
(`workbench.precision.table.tolerances`, one row per target); `infer_precision` reads a
candidate's precision from its graph so `compare REF CAND` uses the same defaults as
`compare REF --to TARGET`.
"""
from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

SENTINEL = 1e30     # |x| this large is a mask constant (float32's min/max), not data
SATURATED = 6e4     # a low-precision value this large is a saturated sentinel (FP16 max 65504)
DATA_SENTINEL_MIN = 1e3  # a tensor's own mask constant is at least this large ...
DATA_SENTINEL_GAP = 100.0  # ... and this many times larger than every other value

Arrays = Union[np.ndarray, Sequence[np.ndarray]]
Feed = Dict[str, np.ndarray]


def infer_precision(proto: Any) -> str:
    """The precision a candidate graph computes in: fp8 / int8 (Q/DQ by zero-point type),
    bf16 / fp16 (low-float tensors present), else fp32."""
    from workbench.core.qdq import qdq_precision

    q = qdq_precision(proto)
    if q:
        return q
    from workbench.core.graphindex import computed_types

    types = computed_types(proto.graph)  # (a Loop / If body lowered on its own counts)
    if 16 in types:
        return "bf16"
    if 10 in types:
        return "fp16"
    return "fp32"


# quantized (INT8/FP8) outputs rarely meet 1e-2 elementwise: one beyond it that still points
# the same way as FP32 is judged the same by `workbench precision` (an info) and `workbench
# compare` (its verdict line says so beside FAIL)
MILD_COSINE = 0.999
MILD_TOP1 = 0.99
MILD_REL = 0.05  # ... and no element off by more than this share of the output's scale


def points_same_way(rel: float, cosine: Optional[float], top1: Optional[float],
                    classes: bool) -> bool:
    """Does a quantized output beyond tolerance still point the same way as FP32: cosine >=
    MILD_COSINE, rel <= MILD_REL and, for class scores, top-1 agreement >= MILD_TOP1?"""
    return cosine is not None and cosine >= MILD_COSINE and rel <= MILD_REL and \
        (top1 is None or not classes or top1 >= MILD_TOP1)


def same_way_words(precision: str, classes_agree: bool) -> str:
    """What both commands say of an output `points_same_way` accepts."""
    return (f"cosine >= {MILD_COSINE:g}, rel <= {MILD_REL:g}"
            + (" and the same top-1 classes" if classes_agree else "")
            + f": the output points the same way as FP32, usually fine for "
            f"{precision.upper()}; judge it against your accuracy needs")


def same_way_note(t: "TensorComparison", precision: str, quantized: bool) -> str:
    """' (19 of 11520 element(s) beyond atol/rtol; cosine >= 0.999 ...)' for a quantized
    (Q/DQ) output that fails the elementwise rule but `points_same_way` (what `workbench
    precision` says of it, beside compare's FAIL); '' for any other. `quantized`: the
    candidate's precision is a quantized row of the precision table."""
    if not quantized or t.passed or not t.finite:
        return ""
    classes = t.top1 is not None and class_scores(t.shape, t.name)
    if not points_same_way(t.rel, t.cosine, t.top1, classes):
        return ""
    return (f" ({t.mismatches} of {t.size} element(s) beyond atol/rtol; "
            f"{same_way_words(precision, bool(classes))})")


# ----------------------------------------------------------------------------- results
def _json_float(v: Any) -> Any:
    return str(v) if isinstance(v, float) and not math.isfinite(v) else v


@dataclass
class TensorComparison:
    """How far one candidate tensor is from the reference (see the module docstring)."""

    name: str
    shape: List[int]
    dtype: str          # "float32", or "float32 -> float16" when they differ
    size: int
    max_abs: float
    mean_abs: float
    rel: float          # max_abs / scale: THE relative error
    mean_rel: float     # mean_abs / scale
    scale: float        # max |reference| over finite, non-sentinel values
    cosine: float
    nan: int            # elements NaN on one side only
    inf: int            # candidate infinities where the reference is a finite value
    mismatches: int     # elements beyond tolerance
    finite: bool        # no NaN / inf appeared in the candidate
    passed: bool
    top1: Optional[float] = None  # argmax agreement over the last axis (outputs only)
    # "[540] -> [543]": a sample's shapes differ (a data-dependent selection kept another
    # number of rows); no elementwise figure exists, the tensor fails
    shape_change: Optional[str] = None
    # max |reference| over its finite values, masks included (-1: no mask seen, as `scale`):
    # the range a low-precision type must hold (`precision.masks`), where `scale` is the data's
    amax: float = -1.0

    @property
    def magnitude(self) -> float:
        """max |reference| over its finite values, mask sentinels included."""
        return self.amax if self.amax >= 0 else self.scale

    def to_dict(self) -> Dict[str, Any]:
        # (fields read directly: dataclasses.asdict deep-copies, 180 tensors cost 0.1 s)
        return {k: _json_float(list(v) if isinstance(v, list) else v)
                for k, v in ((f, getattr(self, f)) for f in self.__dataclass_fields__)}

    def figures(self) -> Tuple[float, float, float, float, bool]:
        """(max_abs, mean_abs, rel, cosine, passed): what every report shows."""
        return (self.max_abs, self.mean_abs, self.rel, self.cosine, self.passed)


@dataclass
class Comparison:
    """Per-output results of one reference/candidate pair at one atol/rtol."""

    atol: float
    rtol: float
    outputs: Dict[str, TensorComparison] = field(default_factory=dict)
    reason: str = ""    # a structural mismatch (missing output, shape change): not comparable
    samples: int = 0

    @property
    def passed(self) -> bool:
        return not self.reason and all(t.passed for t in self.outputs.values())

    @property
    def max_abs(self) -> float:
        return max((t.max_abs for t in self.outputs.values()), default=0.0)

    @property
    def rel(self) -> float:
        return max((t.rel for t in self.outputs.values()), default=0.0)

    def to_dict(self) -> Dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "passed": self.passed,
                "reason": self.reason, "samples": self.samples,
                "max_abs": _json_float(self.max_abs), "rel": _json_float(self.rel),
                "outputs": {k: v.to_dict() for k, v in self.outputs.items()}}


# ----------------------------------------------------------------------------- metrics
def _flat(x: Arrays) -> np.ndarray:
    if isinstance(x, (list, tuple)):
        if len(x) == 1:
            return np.asarray(x[0]).reshape(-1)
        return np.concatenate([np.asarray(a).reshape(-1) for a in x])
    return np.asarray(x).reshape(-1)


def class_axis(shape: Sequence[int]) -> Optional[int]:
    """The axis a top-1 class is read along: the last of [N, C] scores and [N, T, C] token
    logits, the channel axis (1) of [N, C, H, W, ...] maps (segmentation: a class per pixel,
    ONNX's channels-first layout); None for vectors and single-channel outputs."""
    if len(shape) < 2:
        return None
    axis = len(shape) - 1 if len(shape) <= 3 else 1
    return axis if shape[axis] > 1 else None


_NOT_CLASSES = re.compile(r"(^|[._/])(present|past|cache|kv|hidden|embed)|key_cache|"
                          r"value_cache|last_hidden|hidden_states|embedding")


def class_scores(shape: Sequence[int], name: str = "") -> bool:
    """Is a top-1 agreement along `class_axis` a class verdict: [N, C] scores, or a class per
    pixel of [N, C, H, W(, D)]? Not [N, T, D] (token logits and hidden states look alike), nor
    a tensor named as a KV cache or hidden state (`present.0.key` [N, heads, T, D] is no map of
    classes)."""
    return len(shape) in (2, 4, 5) and not _NOT_CLASSES.search(name.lower())


def _top1(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> Optional[float]:
    shp = np.shape(ref[0])
    axis = class_axis(shp)
    if axis is None or np.asarray(ref[0]).dtype.kind != "f":
        return None
    ra = np.concatenate([np.asarray(b).argmax(axis).reshape(-1) for b in ref])
    ga = np.concatenate([np.asarray(b).astype(np.float64).argmax(axis).reshape(-1) for b in got])
    return float((ra == ga).mean()) if ra.size == ga.size and ra.size else None


_BLOCK = 1 << 16
_scratch = threading.local()


class _Scratch:
    """Block-sized buffers the passes write into (one set per thread): no temporaries are
    allocated and freed per block, which cost as much as the arithmetic (page faults)."""

    def __init__(self) -> None:
        f32, f64 = np.float32, np.float64
        self.r32, self.g32, self.d32, self.t32, self.s32 = (np.empty(_BLOCK, f32)
                                                            for _ in range(5))
        self.r, self.g, self.d, self.t = (np.empty(_BLOCK, f64) for _ in range(4))
        self.m, self.m2 = np.empty(_BLOCK, np.bool_), np.empty(_BLOCK, np.bool_)


def _blocks(r0: np.ndarray, g0: np.ndarray,
            size: int) -> Iterator[Tuple[np.ndarray, np.ndarray, int]]:
    """(reference block, candidate block, its length), _BLOCK elements at a time (views)."""
    for i in range(0, size, _BLOCK):
        rb = r0[i:i + _BLOCK]
        yield rb, g0[i:i + _BLOCK], len(rb)


def _buffers() -> _Scratch:
    s = getattr(_scratch, "s", None)
    if s is None:
        s = _scratch.s = _Scratch()
    return s


# OpenBLAS runs a dot product of more than 10000 elements on several threads, which then spin
# for a while after it: a core taken from the onnxruntime child streaming the next segment (a
# layer-wise compare of a ResNet-50 took 1.3x as long). Pieces this long stay on one thread.
_PIECE = 8192


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum a*b of two blocks (float64, or float32 with the pieces summed in float64): BLAS dot
    products a piece at a time (one pass, nothing written; multiply-then-sum wrote a product
    block per sum, at 2x the time)."""
    n = a.shape[0]
    k = n - n % _PIECE
    s = 0.0
    if k:  # (a batched matmul of pieces: one call, each piece a single-threaded dot)
        s = float(np.matmul(a[:k].reshape(-1, 1, _PIECE), b[:k].reshape(-1, _PIECE, 1))
                  .sum(dtype=np.float64))
    if k < n:
        s += float(np.dot(a[k:], b[k:]))
    return s


def _dots(r: np.ndarray, g: np.ndarray) -> Tuple[float, float, float]:
    """(sum r*g, sum r*r, sum g*g) of float64 blocks."""
    return _dot(r, g), _dot(r, r), _dot(g, g)


def _cosine_terms(r: np.ndarray, s: np.ndarray) -> Tuple[float, float, float]:
    """(sum r*r, sum r*s, sum s*s) of float32 blocks, s = r - g. The cosine is taken from these
    (`_cosine`): its distance from 1 comes from the small sums of the difference, so float32
    dot products carry it to ~1e-6 of itself (about what float64 sums of r*g, r*r and g*g
    kept: 1 - cos is a difference of numbers near 1 there) at half their cost: no float64
    copies, float32 dot products."""
    return _dot(r, r), _dot(r, s), _dot(s, s)


def _cosine(rr: float, rs: float, ss: float) -> Tuple[float, float, float]:
    """(sum r*g, sum r*r, sum g*g) from `_cosine_terms` sums: g = r - s."""
    return rr - rs, rr, max(rr - 2.0 * rs + ss, 0.0)


def _mismatches(d: np.ndarray, ar: np.ndarray, atol: Any, rtol: Any, t: np.ndarray,
                m: np.ndarray, m2: np.ndarray) -> int:
    """How many d > max(atol, rtol * ar), exactly: d > atol and d > rtol * ar (numpy's
    maximum with a scalar is ~7x slower than a comparison). `ar` may be `t`."""
    np.multiply(ar, rtol, out=t)
    np.greater(d, t, out=m)
    np.greater(d, atol, out=m2)
    np.logical_and(m, m2, out=m)
    return int(np.count_nonzero(m))


def _candidate_faults(g: np.ndarray, d: np.ndarray, m: np.ndarray
                      ) -> Tuple[int, int, np.ndarray]:
    """A block beside a finite reference: (NaN count, inf count, where g is not finite) of the
    candidate `g` - every NaN and inf there is the candidate's - with d = |r - g| set to inf
    where g is NaN (d is NaN exactly there). `m` is a scratch mask."""
    np.isfinite(g, out=m)
    bad = ~m
    nan_g = np.isnan(g)
    k = int(np.count_nonzero(nan_g))
    if k:
        d[nan_g] = np.inf
    return k, int(np.count_nonzero(bad)) - k, bad


def _finite_case(name: str, shape: List[int], dtype: str, size: int, r0: np.ndarray,
                 g0: np.ndarray, atol: float, rtol: float, limit: float,
                 t1: Optional[float], stop_at: float = math.inf
                 ) -> Optional[TensorComparison]:
    """The common cases - float tensors of at most 32 bits, a reference of finite values (no
    mask sentinels); the candidate finite, or with NaN / inf of its own (an FP16 overflow) -
    in float32 passes, a block of _BLOCK elements at a time, the cosine from the difference
    (`_cosine_terms`), the sums across blocks in float64: the general path's figures
    (`_general_plain`: differences are float32 rounding of |r - g|, far below any
    tolerance) at a fraction of its time and memory. None: use the general
    path - decided on the way, from each block's reference maximum (a NaN or inf shows
    there), so a tensor that needs it costs at most the blocks read before the first one."""
    if r0.dtype.kind != "f" or g0.dtype.kind != "f" or r0.dtype.itemsize > 4 \
            or g0.dtype.itemsize > 4:
        return None
    f32 = np.float32
    at, rt = f32(atol), f32(rtol)  # (limit: |reference| from which a value is a mask)
    max_abs = sum_abs = rs = rr = ss = 0.0
    scale = 0.0
    finite_d = True
    mismatches = nan = inf = 0
    S = _buffers()
    with np.errstate(invalid="ignore", over="ignore"):
        for rb, gb, n in _blocks(r0, g0, size):
            r, g = rb, gb
            if r.dtype != f32:
                r = S.r32[:n]
                np.copyto(r, rb, casting="unsafe")
            if g.dtype != f32:
                g = S.g32[:n]
                np.copyto(g, gb, casting="unsafe")
            d, t, m, m2, sd = S.d32[:n], S.t32[:n], S.m[:n], S.m2[:n], S.s32[:n]
            np.abs(r, out=t)
            rmax = float(t.max())
            if not rmax < limit:  # NaN, inf or a mask in the reference: the general path
                return None
            if rmax >= stop_at:  # (the caller looks for a mask of the tensor's own first)
                return None
            np.subtract(r, g, out=sd)
            np.abs(sd, out=d)
            dmax = float(d.max())
            clean = True  # every candidate value finite
            if not math.isfinite(dmax):  # the candidate's NaN / inf (the reference is finite)
                clean = False
                k_nan, k_inf, bad = _candidate_faults(g, d, m)
                if not (k_nan or k_inf):  # |r - g| of finite values past float32's range
                    return None
                nan, inf = nan + k_nan, inf + k_inf
                dmax = math.inf
                finite_d = False
            max_abs = max(max_abs, dmax)
            scale = max(scale, rmax)
            if finite_d:
                sum_abs += float(np.add.reduce(d))  # (float32 pairwise sum of one block)
            if dmax > atol:  # (nothing can exceed the tolerance otherwise)
                mismatches += _mismatches(d, t, at, rt, t, m, m2)
            if not clean:  # the candidate's cosine side keeps its finite values only (g = 0)
                np.copyto(sd, r, where=bad)
            x, y, z = _cosine_terms(r, sd)
            rr, rs, ss = rr + x, rs + y, ss + z
    rg, rr, gg = _cosine(rr, rs, ss)
    return _figures(name, shape, dtype, size, max_abs, sum_abs, finite_d, scale, rg, rr, gg,
                    nan, inf, mismatches, t1)


def dtype_name(dt: np.dtype) -> str:
    """A tensor's element type as the user's model names it: numpy's names for numbers,
    "string" for ONNX string tensors, which reach us as Python objects from onnxruntime and
    as fixed-width unicode or bytes from saved run results (numpy would say object, <U20)."""
    return "string" if dt.kind in "OUS" else str(dt)


def compare_tensor(name: str, ref: Arrays, got: Arrays, atol: float, rtol: float, *,
                   sentinels: bool = True, top1: bool = False) -> TensorComparison:
    """Compare one tensor; `ref`/`got` are arrays or lists of per-batch arrays (same order)."""
    refs = list(ref) if isinstance(ref, (list, tuple)) else [ref]
    gots = list(got) if isinstance(got, (list, tuple)) else [got]
    shape = list(np.shape(refs[0]))
    rdt, gdt = np.asarray(refs[0]).dtype, np.asarray(gots[0]).dtype
    rn, gn = dtype_name(rdt), dtype_name(gdt)
    dtype = rn if rn == gn else f"{rn} -> {gn}"
    changed = next(((np.shape(r), np.shape(g)) for r, g in zip(refs, gots)
                    if np.shape(r) != np.shape(g)), None)
    if changed is not None or len(refs) != len(gots):
        a, b = changed or ((len(refs),), (len(gots),))
        size = int(sum(np.size(r) for r in refs))
        return TensorComparison(name, shape, dtype, size, math.inf, math.inf, math.inf,
                                math.inf, 1.0, 0.0, 0, 0, size, True, False, None,
                                shape_change=f"{list(a)} -> {list(b)}")
    t1 = _top1(refs, gots) if top1 else None
    r0, g0 = _flat(refs), _flat(gots)
    size = int(r0.size)
    if size == 0:
        return TensorComparison(name, shape, dtype, 0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0, 0, 0,
                                True, True, t1)
    if rdt.kind not in "biufc" or gdt.kind not in "biufc":
        return _exact_case(name, shape, dtype, size, r0, g0, t1)
    masked = sentinels and rdt.kind in "fc"
    limit = SENTINEL if masked else math.inf

    def own_limit() -> float:  # with the tensor's own mask constant, if it has one
        own = data_sentinel(r0) if masked else None
        return min(limit, own) if own is not None else limit

    if rdt == gdt and _identical(r0, g0, rdt.kind in "fc"):
        limit = own_limit()
        # identical (the common case for exact rewrites): no float64 copies
        fin = np.abs(r0[np.isfinite(r0)]) if rdt.kind in "fc" else np.abs(r0)
        amax = float(fin.max()) if fin.size else -1.0
        if math.isfinite(limit) and float(np.finfo(rdt).max) > limit:  # (FP16 holds no 1e30
            fin = fin[fin < limit]  # sentinel: comparing casts 1e30 to inf, a warning)
        scale = float(fin.max()) if fin.size else 1.0
        return TensorComparison(name, shape, dtype, size, 0.0, 0.0, 0.0, 0.0, scale or 1.0, 1.0,
                                0, 0, 0, True, True, t1, amax=amax)
    # the float32 pass, first without looking for a mask constant of the tensor's own: it
    # stops at the first block holding |x| >= DATA_SENTINEL_MIN (no such block: there is none
    # to find, and no extra pass over the tensor), then runs again with what was found
    fast = _finite_case(name, shape, dtype, size, r0, g0, atol, rtol, limit, t1,
                        stop_at=DATA_SENTINEL_MIN if masked else math.inf)
    if fast is not None:
        return fast
    limit = own_limit()
    if masked:
        fast = _finite_case(name, shape, dtype, size, r0, g0, atol, rtol, limit, t1)
        if fast is not None:
            return fast
    return _general_case(name, shape, dtype, size, r0, g0, atol, rtol, limit, t1)


def data_sentinel(r0: np.ndarray) -> Optional[float]:
    """A mask constant of the tensor's own: the smallest |x| of its one or two values of
    |x| >= DATA_SENTINEL_MIN (e.g. -1e9 where a Where masks scores) when every other value is
    at least DATA_SENTINEL_GAP times smaller and there are such others; else None. (Cheap for
    the common tensor: its min and max say no.)"""
    if r0.dtype.kind != "f" or r0.size < 2:
        return None
    with np.errstate(invalid="ignore"):
        lo, hi = float(np.nanmin(r0)), float(np.nanmax(r0))
    big_end = max(-lo if math.isfinite(lo) else 0.0, hi if math.isfinite(hi) else 0.0)
    if not big_end >= DATA_SENTINEL_MIN:
        return None
    head = r0[:_BLOCK]  # (large data, not a mask, says so in its first block: no full pass)
    hb = head[np.abs(head) >= big_end / DATA_SENTINEL_GAP]
    hb = hb[np.isfinite(hb)]
    if hb.size and not np.all((hb == hb.min()) | (hb == hb.max())):
        return None
    fin = r0 if math.isfinite(lo) and math.isfinite(hi) else r0[np.isfinite(r0)]
    a = np.abs(fin)
    big = a >= big_end / DATA_SENTINEL_GAP
    vals = fin[big]
    if vals.size == fin.size:
        return None
    v_lo, v_hi = vals.min(), vals.max()

    def two_values(v: np.ndarray) -> bool:
        return bool(np.all((v == v_lo) | (v == v_hi)))

    if not two_values(vals):
        return None
    least = min(abs(float(v_lo)), abs(float(v_hi)))
    if least < DATA_SENTINEL_MIN:
        return None
    return least if least >= DATA_SENTINEL_GAP * float(a[~big].max()) else None


def _exact_case(name: str, shape: List[int], dtype: str, size: int, r0: np.ndarray,
                g0: np.ndarray, t1: Optional[float]) -> TensorComparison:
    """Strings, objects (tensors with no numeric distance): equal element by element or not.
    Each differing element is a mismatch with an infinite error (no tolerance applies)."""
    same = r0 == g0 if r0.shape == g0.shape else np.zeros(r0.shape, bool)
    bad = int(size - np.count_nonzero(same))
    err = math.inf if bad else 0.0
    return TensorComparison(name, shape, dtype, size, err, err if bad else 0.0, err, err, 1.0,
                            1.0 if not bad else 0.0, 0, 0, bad, True, bad == 0, t1)


def _identical(r0: np.ndarray, g0: np.ndarray, equal_nan: bool) -> bool:
    """np.array_equal, with a quick look at the first elements first (an FP16 candidate
    differs almost everywhere: no full passes for the common answer)."""
    head = min(r0.size, 256)
    if not np.array_equal(r0[:head], g0[:head], equal_nan=equal_nan):
        return False
    return bool(np.array_equal(r0, g0, equal_nan=equal_nan))


def _plain_reference(r0: np.ndarray, limit: float) -> bool:
    """Is every reference value finite and below the mask `limit`? Then the general path
    needs none of its NaN / inf / mask passes on that side (min/max decide it)."""
    if r0.dtype.kind in "biu":
        return True
    if r0.dtype.kind != "f":
        return False
    lo, hi = float(r0.min()), float(r0.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    return max(-lo, hi) < limit


def _general_case(name: str, shape: List[int], dtype: str, size: int, r0: np.ndarray,
                  g0: np.ndarray, atol: float, rtol: float, limit: float,
                  t1: Optional[float]) -> TensorComparison:
    """NaN/inf/sentinels anywhere: float64 figures, a block of _BLOCK elements at a time (the
    temporaries stay in cache; no full-size float64 copies). Counts, maxima and the dot
    products (float64, summed per block) are those of whole-array passes; the mean sums
    per-block sums (float64 rounding differences only). A reference with nothing but finite,
    unmasked values (float64 tensors; 32-bit and narrower ones take `_finite_case`) skips
    the passes for the reference's NaN / inf / masks; the figures are the same, bit for bit."""
    if _plain_reference(r0, limit):
        return _general_plain(name, shape, dtype, size, r0, g0, atol, rtol, t1)
    return _general_full(name, shape, dtype, size, r0, g0, atol, rtol, limit, t1)


def _general_full(name: str, shape: List[int], dtype: str, size: int, r0: np.ndarray,
                  g0: np.ndarray, atol: float, rtol: float, limit: float,
                  t1: Optional[float]) -> TensorComparison:
    """The general path with every pass: NaN, inf and masks on both sides."""
    max_abs = sum_abs = rg = rr = gg = 0.0
    scale = amax = -1.0
    finite_d = True
    mismatches = nan = inf = 0
    with np.errstate(invalid="ignore", over="ignore"):
        for rb, gb, _ in _blocks(r0, g0, size):
            r, g = rb.astype(np.float64), gb.astype(np.float64)
            nan_r, nan_g = np.isnan(r), np.isnan(g)
            inf_r, inf_g = np.isinf(r), np.isinf(g)
            same = (nan_r & nan_g) | (inf_r & (r == g))
            ar = np.abs(r)
            big = ar >= limit if math.isfinite(limit) else None
            if big is not None and big.any():  # (masks are rare: skip the passes otherwise)
                same |= big & (np.abs(g) >= min(SATURATED, limit / 2)) & \
                    (np.sign(r) == np.sign(g))
            d = np.abs(r - g)
            if same.any():
                d[same] = 0.0
            nan_d = np.isnan(d)
            if nan_d.any():
                d[nan_d] = np.inf
            fin_r = ~(nan_r | inf_r)
            if fin_r.any():
                amax = max(amax, float(ar[fin_r].max()))
            normal = fin_r & ~big if big is not None else fin_r
            every = bool(normal.all())
            if every:
                scale = max(scale, float(ar.max()))
            elif normal.any():
                scale = max(scale, float(ar[normal].max()))
            max_abs = max(max_abs, float(d.max()))
            if finite_d:
                if np.isfinite(d).all():
                    sum_abs += float(np.add.reduce(d))
                else:
                    finite_d = False
            if not every:
                ar[~normal] = 0.0
            mismatches += int(np.count_nonzero((d > atol) & (d > rtol * ar)))  # d > max(..)
            nan += int(np.count_nonzero(nan_r != nan_g))
            inf += int(np.count_nonzero(inf_g & fin_r & ~same))
            rf = r if every else np.where(normal, r, 0.0)
            keep_g = normal & ~(nan_g | inf_g)
            gf = g if keep_g.all() else np.where(keep_g, g, 0.0)
            x, y, z = _dots(rf, gf)
            rg, rr, gg = rg + x, rr + y, gg + z
    out = _figures(name, shape, dtype, size, max_abs, sum_abs, finite_d, scale, rg, rr, gg,
                   nan, inf, mismatches, t1)
    if amax >= 0:
        out.amax = amax
    return out


def _figures(name: str, shape: List[int], dtype: str, size: int, max_abs: float, sum_abs: float,
             finite_d: bool, scale: float, rg: float, rr: float, gg: float, nan: int, inf: int,
             mismatches: int, t1: Optional[float]) -> TensorComparison:
    """The comparison from the block passes' running sums (both paths end here)."""
    scale = scale if scale >= 0 else 1.0
    scale = scale or 1.0
    mean_abs = sum_abs / size if finite_d else math.inf
    denom = math.sqrt(rr) * math.sqrt(gg)
    cos = float(rg / denom) if denom else (1.0 if max_abs == 0 else 0.0)
    return TensorComparison(name, shape, dtype, size, max_abs, mean_abs, max_abs / scale,
                            mean_abs / scale, scale, cos, nan, inf, mismatches,
                            nan == 0 and inf == 0, mismatches == 0, t1, amax=scale)


def _general_plain(name: str, shape: List[int], dtype: str, size: int, r0: np.ndarray,
                   g0: np.ndarray, atol: float, rtol: float,
                   t1: Optional[float]) -> TensorComparison:
    """`_general_case` for a reference of finite, unmasked values only: no element is "same"
    (matching NaN / inf / masks), every reference element is normal, so a NaN or inf is the
    candidate's alone. The float64 operations that remain are the general path's, on the same
    blocks, so every figure is the same bit for bit."""
    max_abs = sum_abs = rg = rr = gg = 0.0
    scale = -1.0
    finite_d = True
    mismatches = nan = inf = 0
    S = _buffers()
    with np.errstate(invalid="ignore", over="ignore"):
        for rb, gb, n in _blocks(r0, g0, size):
            r, g, d, t, m = S.r[:n], S.g[:n], S.d[:n], S.t[:n], S.m[:n]
            np.copyto(r, rb, casting="unsafe")
            np.copyto(g, gb, casting="unsafe")
            np.subtract(r, g, out=d)
            np.abs(d, out=d)
            if not math.isfinite(float(d.max())):  # (r finite: only g's NaN / inf do that)
                k_nan, k_inf, bad = _candidate_faults(g, d, m)
                nan, inf = nan + k_nan, inf + k_inf
                g[bad] = 0.0  # the candidate's cosine side keeps its finite values only
            dmax = float(d.max())
            max_abs = max(max_abs, dmax)
            if finite_d:
                if math.isfinite(dmax):
                    sum_abs += float(np.add.reduce(d))
                else:
                    finite_d = False
            np.abs(r, out=t)
            scale = max(scale, float(t.max()))
            if dmax > atol:  # (nothing can exceed the tolerance otherwise)
                mismatches += _mismatches(d, t, atol, rtol, t, m, S.m2[:n])
            x, y, z = _dots(r, g)
            rg, rr, gg = rg + x, rr + y, gg + z
    return _figures(name, shape, dtype, size, max_abs, sum_abs, finite_d, scale, rg, rr, gg,
                    nan, inf, mismatches, t1)


def _batches(x: Union[Feed, Sequence[Feed]]) -> List[Feed]:
    return [x] if isinstance(x, dict) else list(x)


def _sequence_items(a: List[Any], c: List[Any]) -> List[Tuple[List[Any], List[Any]]]:
    """Per item of two lists of sequence values (one per batch): the reference's and the
    candidate's arrays of that item, while both sequences have it."""
    n = min((len(v) if isinstance(v, (list, tuple)) else 0) for v in a + c)
    return [([v[i] for v in a], [v[i] for v in c]) for i in range(n)]


def compare_outputs(ref: Union[Feed, Sequence[Feed]], got: Union[Feed, Sequence[Feed]],
                    atol: float, rtol: float, *, names: Optional[Sequence[str]] = None,
                    sentinels: bool = True, top1: bool = True) -> Comparison:
    """Compare every output of the reference (or `names`) with the candidate's, over all batches.
    A missing output or a changed shape makes the pair not comparable (`reason`); the other
    outputs are still compared, and a changed one is a failing entry saying its shapes."""
    refs, gots = _batches(ref), _batches(got)
    res = Comparison(atol, rtol)
    res.samples = sum(min((len(v) if np.ndim(v) else 1 for v in b.values()
                           if isinstance(v, np.ndarray) or np.isscalar(v)), default=0)
                      for b in refs)  # (sequences, maps, optionals: no batch axis to count)
    for name in (names if names is not None else list(refs[0]) if refs else []):
        if any(name not in b for b in gots):
            res.reason = f"output '{name}' is missing from the candidate"
            return res
        a = [b[name] for b in refs]
        c = [b[name] for b in gots]
        if any(isinstance(v, (list, tuple)) for v in a + c):  # sequences: item by item
            for item, (x, y) in enumerate(_sequence_items(a, c)):
                res.outputs[f"{name}[{item}]"] = compare_tensor(
                    f"{name}[{item}]", x, y, atol, rtol, sentinels=sentinels, top1=top1)
            if not all(isinstance(v, (list, tuple)) and len(v) == len(a[0]) for v in a + c) \
                    and not res.reason:
                res.reason = f"output '{name}' is a sequence whose length changed"
            continue
        if any(v is None or isinstance(v, dict) for v in a + c):
            continue  # a map or an empty optional: no tensor to compare (the runs still ran)
        t = compare_tensor(name, a, c, atol, rtol, sentinels=sentinels, top1=top1)
        res.outputs[name] = t  # (a changed shape: a failing entry with `shape_change`)
        if t.shape_change and not res.reason:
            res.reason = f"output '{name}' shape {t.shape_change}"
    return res
