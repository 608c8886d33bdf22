"""One notion of "within budget": the verdict `compare`, `matrix`, `plan` and the panels give.

The elementwise rule (`atol + rtol*|ref|`, `workbench.runtime.comparison`) fails healthy FP16 logits on
their near-zero elements: a ResNet-50's logits (scale ~100) off by 0.095 at worst (rel 8.5e-4
of the scale, cosine 1.000000) fail it. The verdict here judges an output by what it is for:

- the user's metric when given: "top1" (share of samples whose top-1 class changes), "top5"
  (share whose reference class leaves the candidate's top 5), "cosine" (1 - the lowest
  per-sample cosine), "rel" (max error / the output's scale), "elementwise" (Polygraphy's
  atol + rtol*|ref| rule, what explicit --atol/--rtol ask for), or a callable
  `f(reference, candidate) -> loss` over {output: array} dicts of all samples (0: identical);
  within budget when the loss <= the budget;
- otherwise a stated default per output kind (`output_kind`) at the precision's budget
  (`default_budget`): class scores by top-1 agreement (a flip between classes the reference
  itself separates by less than the tolerated error is a tie, not a flip) and the error
  relative to the output's scale; embeddings by cosine; boxes by IoU; masks by pixel
  agreement; any other tensor by the scale-relative error and cosine.

The elementwise result stays beside it as a diagnostic (`OutputVerdict.elementwise`).
"""
from __future__ import annotations

import importlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from workbench.runtime.comparison import (MILD_COSINE, MILD_REL, Comparison, TensorComparison,
                                  class_axis, class_scores)
from workbench.core.errors import WorkbenchError

Outputs = Mapping[str, np.ndarray]
MetricFn = Callable[[Outputs, Outputs], float]
MetricLike = Union[None, str, MetricFn]

BUILTIN = ("top1", "top5", "cosine", "rel", "elementwise")

# default budgets by the candidate's precision: rel = max error / output scale, cosine = the
# lowest per-sample cosine allowed, top1 = share of samples allowed to change class, iou /
# pixels = boxes' lowest mean IoU and masks' pixel agreement
_BUDGETS: Dict[str, Dict[str, float]] = {
    "fp32": {"rel": 1e-3, "cosine": 0.9999, "top1": 0.0, "iou": 0.999, "pixels": 0.999},
    "tf32": {"rel": 5e-3, "cosine": 0.9999, "top1": 0.01, "iou": 0.99, "pixels": 0.995},
    "fp16": {"rel": 1e-2, "cosine": 0.999, "top1": 0.01, "iou": 0.99, "pixels": 0.99},
    "bf16": {"rel": 3e-2, "cosine": 0.999, "top1": 0.01, "iou": 0.98, "pixels": 0.99},
    "int8": {"rel": MILD_REL, "cosine": MILD_COSINE, "top1": 0.01, "iou": 0.95,
             "pixels": 0.98},
    "fp8": {"rel": MILD_REL, "cosine": MILD_COSINE, "top1": 0.01, "iou": 0.95, "pixels": 0.98},
}

_BOXES = re.compile(r"(^|[._/])(box|boxes|bbox|bboxes|rois?|anchors?)($|[._/\d])")
_MASKS = re.compile(r"(^|[._/])(mask|masks|seg|segmentation|alpha|matte)($|[._/\d])")
_EMBED = re.compile(r"embed|hidden|pooler|feature|last_hidden|encoder_out|sentence")


def default_budget(precision: str) -> Dict[str, float]:
    """The default budgets for a candidate in `precision` (fp32 when unknown)."""
    return dict(_BUDGETS.get(str(precision or "fp32").lower(), _BUDGETS["fp32"]))


def output_kind(name: str, shape: Sequence[int]) -> str:
    """"boxes" ([..., 4] named as boxes), "mask" (named as a mask/segmentation, or [N, 1, H, W]),
    "logits" (class scores: `comparison.class_scores`), "embedding" ([N, D] / [N, T, D], or
    named as one) or "tensor"."""
    low = name.lower()
    shape = list(shape)
    if shape and shape[-1] == 4 and len(shape) >= 2 and _BOXES.search(low):
        return "boxes"
    if _MASKS.search(low) or (len(shape) == 4 and shape[1] == 1 and shape[2] > 1):
        return "mask"
    if class_scores(shape, name) and class_axis(shape) is not None and not _EMBED.search(low):
        return "logits"
    if _EMBED.search(low) or len(shape) in (2, 3):
        return "embedding"
    return "tensor"


@dataclass
class OutputVerdict:
    """One output judged: the metric, its loss and budget, and the elementwise diagnostic."""

    name: str
    kind: str
    metric: str          # what was measured, e.g. "top-1 agreement" or "cosine"
    loss: float          # 0 = identical; within budget when <= budget
    budget: float
    passed: bool
    words: str           # "top-1 8/8 (0 decisive flips), rel 0.00085 <= 0.01"
    elementwise: bool    # the atol + rtol*|ref| rule's result (a diagnostic)
    mismatches: int = 0  # elements beyond atol/rtol
    figures: Dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "metric": self.metric,
                "loss": _j(self.loss), "budget": self.budget, "passed": self.passed,
                "words": self.words, "elementwise_passed": self.elementwise,
                "mismatches": self.mismatches,
                "figures": {k: _j(v) for k, v in self.figures.items()}}


@dataclass
class Verdict:
    """Every output judged; truthy when all are within budget."""

    outputs: Dict[str, OutputVerdict]
    rule: str            # "default (per output kind, FP16 budgets)" or "metric top1 <= 0.01"
    reason: str = ""     # not comparable (a missing output, a changed shape)

    @property
    def passed(self) -> bool:
        return not self.reason and all(v.passed for v in self.outputs.values())

    @property
    def elementwise_passed(self) -> bool:
        return all(v.elementwise for v in self.outputs.values())

    @property
    def loss(self) -> float:
        """The worst loss over outputs relative to its budget's units (the metric's own loss
        when one metric judges all)."""
        return max((v.loss for v in self.outputs.values()), default=0.0)

    def __bool__(self) -> bool:
        return self.passed

    def words(self) -> str:
        return "; ".join(f"{k}: {v.words}" for k, v in self.outputs.items())

    def to_dict(self) -> Dict[str, Any]:
        return {"passed": self.passed, "rule": self.rule, "reason": self.reason,
                "elementwise_passed": self.elementwise_passed,
                "outputs": {k: v.to_dict() for k, v in self.outputs.items()}}


def _j(v: float) -> Any:
    v = float(v)
    return v if math.isfinite(v) else str(v)


# ----------------------------------------------------------------------------- metrics
def _stack(batches: Sequence[Outputs], name: str) -> np.ndarray:
    arrs = [np.asarray(b[name]) for b in batches]
    return np.concatenate(arrs) if len(arrs) > 1 and all(a.ndim for a in arrs) else arrs[0]


def _class_view(x: np.ndarray) -> np.ndarray:
    """Scores as [rows, classes] along `class_axis` (float64)."""
    axis = class_axis(x.shape)
    x = np.moveaxis(np.asarray(x, np.float64), axis, -1)
    return x.reshape(-1, x.shape[-1])


def top1_flips(ref: np.ndarray, got: np.ndarray, tie: float = 0.0) -> Dict[str, float]:
    """{"agreement", "flips" (share of rows whose top-1 changed), "decisive" (share changed
    where the reference separates its class from the candidate's pick by more than `tie`)}."""
    r, g = _class_view(ref), _class_view(got)
    ra, ga = r.argmax(-1), np.nan_to_num(g, nan=-np.inf).argmax(-1)
    flip = ra != ga
    rows = np.arange(len(r))
    margin = r[rows, ra] - r[rows, ga]
    decisive = flip & (margin > tie)
    n = max(len(r), 1)
    return {"agreement": float(1 - flip.sum() / n), "flips": float(flip.sum() / n),
            "decisive": float(decisive.sum() / n), "rows": float(len(r))}


def top5_miss(ref: np.ndarray, got: np.ndarray) -> float:
    """Share of rows whose reference top-1 class is not in the candidate's top 5."""
    r, g = _class_view(ref), _class_view(got)
    k = min(5, r.shape[-1])
    top = np.argsort(-np.nan_to_num(g, nan=-np.inf), axis=-1)[:, :k]
    return float(1 - (top == r.argmax(-1)[:, None]).any(-1).mean()) if len(r) else 0.0


def min_cosine(ref: np.ndarray, got: np.ndarray) -> float:
    """The lowest cosine over samples (axis 0); NaN/inf in the candidate give 0."""
    r = np.asarray(ref, np.float64).reshape(max(len(ref), 1) if np.ndim(ref) else 1, -1)
    g = np.asarray(got, np.float64).reshape(r.shape[0], -1)
    if not np.isfinite(g).all():
        return 0.0
    num = (r * g).sum(-1)
    den = np.linalg.norm(r, axis=-1) * np.linalg.norm(g, axis=-1)
    cos = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(
        np.abs(r - g).max(-1) == 0, 1.0, 0.0))
    return float(cos.min()) if cos.size else 1.0


def box_iou(ref: np.ndarray, got: np.ndarray) -> float:
    """Mean IoU of boxes paired by position ([..., 4], corner or centre form alike: IoU of
    the boxes as x1 y1 x2 y2 after sorting each pair of coordinates)."""
    r = np.asarray(ref, np.float64).reshape(-1, 4)
    g = np.asarray(got, np.float64).reshape(-1, 4)
    if not np.isfinite(g).all():
        return 0.0

    def corners(b: np.ndarray) -> np.ndarray:
        return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                         np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], -1)

    r, g = corners(r), corners(g)
    iw = np.clip(np.minimum(r[:, 2], g[:, 2]) - np.maximum(r[:, 0], g[:, 0]), 0, None)
    ih = np.clip(np.minimum(r[:, 3], g[:, 3]) - np.maximum(r[:, 1], g[:, 1]), 0, None)
    inter = iw * ih
    union = (r[:, 2] - r[:, 0]) * (r[:, 3] - r[:, 1]) + (g[:, 2] - g[:, 0]) * \
        (g[:, 3] - g[:, 1]) - inter
    same = np.all(r == g, -1)
    iou = np.where(union > 0, inter / np.where(union > 0, union, 1), same.astype(float))
    return float(iou.mean()) if iou.size else 1.0


def mask_agreement(ref: np.ndarray, got: np.ndarray) -> float:
    """Share of pixels on the same side of the threshold (0.5 for [0, 1] probabilities, 0 for
    logits)."""
    r, g = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    thr = 0.5 if r.size and r.min() >= 0 and r.max() <= 1 else 0.0
    return float(((r > thr) == (g > thr)).mean()) if r.size else 1.0


def resolve_metric(metric: MetricLike) -> MetricLike:
    """A metric name, a callable, or "MODULE:FUNC" (imported) -> a builtin name or callable."""
    if metric is None or callable(metric):
        return metric
    m = str(metric).strip().lower()
    if m in BUILTIN:
        return m
    if ":" in str(metric):
        mod, _, fn = str(metric).partition(":")
        try:
            f = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise WorkbenchError(f"cannot load the metric '{metric}': {e}", field="--metric",
                                 hint="give MODULE:FUNC importable from here (PYTHONPATH), "
                                      "FUNC(reference, candidate) -> loss") from None
        if not callable(f):
            raise WorkbenchError(f"'{metric}' is not callable", field="--metric")
        return f
    raise WorkbenchError(f"unknown metric '{metric}'", field="--metric",
                         hint="one of " + ", ".join(BUILTIN) + ", or MODULE:FUNC")


def parse_budget(budget: Union[None, str, float]) -> Optional[float]:
    """'1%' -> 0.01, '0.001' -> 0.001, None -> None."""
    if budget is None or isinstance(budget, (int, float)):
        return None if budget is None else float(budget)
    s = str(budget).strip()
    try:
        v = float(s[:-1]) / 100 if s.endswith("%") else float(s)
    except ValueError:
        raise WorkbenchError(f"budget '{budget}' is not a number", field="--budget",
                             hint="e.g. 1% or 0.01") from None
    if not v >= 0:
        raise WorkbenchError(f"budget '{budget}' is negative", field="--budget")
    return v


def metric_loss(metric: MetricLike, ref: Sequence[Outputs], got: Sequence[Outputs],
                names: Optional[Sequence[str]] = None) -> float:
    """The loss of `metric` over all samples (worst output for the builtins)."""
    metric = resolve_metric(metric)
    ref, got = list(ref), list(got)
    names = list(names or (ref[0] if ref else []))
    if callable(metric):
        return float(metric({n: _stack(ref, n) for n in names},
                            {n: _stack(got, n) for n in names}))
    worst = 0.0
    for n in names:
        r, g = _stack(ref, n), _stack(got, n)
        if metric in ("top1", "top5"):
            if class_axis(r.shape) is None:
                continue
            loss = top1_flips(r, g)["flips"] if metric == "top1" else top5_miss(r, g)
        elif metric == "cosine":
            loss = 1.0 - min_cosine(r, g)
        else:
            scale = float(np.abs(r[np.isfinite(r)]).max()) if np.isfinite(r).any() else 1.0
            d = np.abs(np.asarray(r, np.float64) - np.asarray(g, np.float64))
            loss = float(np.nan_to_num(d, nan=np.inf).max()) / (scale or 1.0) if d.size else 0.0
        worst = max(worst, loss)
    return worst


# ----------------------------------------------------------------------------- verdicts
def judge_tensor(t: TensorComparison, precision: str = "fp32",
                 ref: Optional[np.ndarray] = None, got: Optional[np.ndarray] = None,
                 budgets: Optional[Mapping[str, float]] = None,
                 kind: Optional[str] = None) -> OutputVerdict:
    """The default verdict of one output: by its kind (`output_kind`, or `kind` when the
    caller knows better: "tensor" for an internal one) at `precision`'s budgets.
    `ref` / `got` (all samples) give the per-sample figures; without them the comparison's
    own figures judge (top-1 agreement, global cosine, rel)."""
    b = {**default_budget(precision), **(budgets or {})}
    kind = kind or output_kind(t.name, t.shape)
    base = dict(name=t.name, kind=kind, elementwise=bool(t.passed), mismatches=t.mismatches)
    if t.shape_change or not t.finite:
        why = (f"shape {t.shape_change}" if t.shape_change else
               f"{t.nan} NaN / {t.inf} inf in the candidate")
        return OutputVerdict(metric="finite values", loss=math.inf, budget=0.0, passed=False,
                             words=why, **base)
    if "string" in t.dtype or t.dtype.split(" ")[-1].startswith(("int", "uint", "bool")):
        share = t.mismatches / max(t.size, 1)
        return OutputVerdict(metric="exact", loss=share, budget=0.0, passed=t.mismatches == 0,
                             words=f"{t.mismatches} of {t.size} differ", **base)
    rel_ok = t.rel <= b["rel"]
    rel_w = f"rel {t.rel:.3g} {'<=' if rel_ok else '>'} {b['rel']:g}"
    figs: Dict[str, float] = {"rel": t.rel, "cosine": t.cosine}
    if kind == "logits":
        if ref is not None and got is not None:
            f = top1_flips(ref, got, tie=b["rel"] * t.scale)
            figs.update(top1=f["agreement"], top1_decisive_flips=f["decisive"],
                        top5_miss=top5_miss(ref, got))
            loss = f["decisive"]
            n = int(f["rows"])
            same = n - int(round(f["flips"] * n))
            ties = int(round((f["flips"] - f["decisive"]) * n))
            w = (f"top-1 {same}/{n}" + (f" ({ties} flip(s) between classes within the "
                                         f"tolerated error: ties)" if ties else "")
                 + f", top-5 miss {figs['top5_miss']:.3g}")
        else:
            agree = 1.0 if t.top1 is None else t.top1
            loss = 1.0 - agree
            figs["top1"] = agree
            w = f"top-1 agreement {agree:.4g}"
        ok = loss <= b["top1"] + 1e-12 and rel_ok
        return OutputVerdict(metric="top-1 agreement and rel", loss=loss, budget=b["top1"],
                             passed=ok, words=f"{w}, {rel_w}", figures=figs, **base)
    if kind == "boxes" and ref is not None and got is not None:
        iou = box_iou(ref, got)
        figs["iou"] = iou
        ok = iou >= b["iou"]
        return OutputVerdict(metric="box IoU", loss=1 - iou, budget=1 - b["iou"], passed=ok,
                             words=f"mean IoU {iou:.5f} {'>=' if ok else '<'} {b['iou']:g}",
                             figures=figs, **base)
    if kind == "mask" and ref is not None and got is not None:
        agree = mask_agreement(ref, got)
        figs["pixels"] = agree
        ok = agree >= b["pixels"]
        return OutputVerdict(metric="mask pixel agreement", loss=1 - agree,
                             budget=1 - b["pixels"], passed=ok,
                             words=f"pixels agree {agree:.5f} {'>=' if ok else '<'} "
                                   f"{b['pixels']:g}", figures=figs, **base)
    cos = min_cosine(ref, got) if ref is not None and got is not None else t.cosine
    figs["cosine"] = cos
    cos_ok = cos >= b["cosine"]
    cos_w = f"cosine {cos:.6f} {'>=' if cos_ok else '<'} {b['cosine']:g}"
    if kind == "embedding":
        return OutputVerdict(metric="cosine", loss=1 - cos, budget=1 - b["cosine"],
                             passed=cos_ok, words=cos_w, figures=figs, **base)
    return OutputVerdict(metric="rel and cosine", loss=t.rel, budget=b["rel"],
                         passed=rel_ok and cos_ok, words=f"{rel_w}, {cos_w}", figures=figs,
                         **base)


def judge(comparison: Comparison, precision: str = "fp32", *, metric: MetricLike = None,
          budget: Union[None, str, float] = None, ref: Optional[Sequence[Outputs]] = None,
          got: Optional[Sequence[Outputs]] = None) -> Verdict:
    """Judge a comparison: by `metric` within `budget` when a metric is given (needs `ref` /
    `got`, the outputs of every sample, for anything but "rel"), else by the default per
    output kind (`judge_tensor`); `budget` alone scales the default's main figure."""
    metric = resolve_metric(metric)
    b = parse_budget(budget)
    p = str(precision or "fp32").upper()
    names = list(comparison.outputs)
    if metric == "elementwise":
        outs = {n: OutputVerdict(n, output_kind(n, t.shape), "elementwise atol/rtol",
                                 t.mismatches / max(t.size, 1), 0.0, bool(t.passed),
                                 f"{t.mismatches} of {t.size} beyond atol {comparison.atol:g} "
                                 f"rtol {comparison.rtol:g}", bool(t.passed), t.mismatches,
                                 {"rel": t.rel, "cosine": t.cosine})
                for n, t in comparison.outputs.items()}
        return Verdict(outs, f"elementwise atol {comparison.atol:g} rtol {comparison.rtol:g}",
                       comparison.reason)
    if metric is not None:
        if (ref is None or got is None) and metric != "rel":
            raise WorkbenchError(f"the metric '{getattr(metric, '__name__', metric)}' needs "
                                 "the outputs of every sample", field="metric")
        b = 0.01 if b is None else b
        mname = getattr(metric, "__name__", str(metric))
        if comparison.reason:  # (an output missing or reshaped: no figure to compute)
            loss = math.inf
        elif ref is not None and got is not None:
            loss = metric_loss(metric, ref, got, names)
        else:
            loss = comparison.rel
        ok = bool(loss <= b) and not comparison.reason
        outs = {}
        for n, t in comparison.outputs.items():  # one metric over all outputs: each entry
            outs[n] = OutputVerdict(n, output_kind(n, t.shape), mname, loss, b, ok,
                                    f"{mname} loss {loss:.4g} {'<=' if ok else '>'} {b:g}",
                                    bool(t.passed), t.mismatches,
                                    {"rel": t.rel, "cosine": t.cosine})
        return Verdict(outs, f"metric {mname} <= {b:g}", comparison.reason)
    budgets = _scaled(b)
    outs = {}
    for n, t in comparison.outputs.items():
        r = _stack(ref, n) if ref is not None else None
        g = _stack(got, n) if got is not None and all(n in x for x in got) else None
        outs[n] = judge_tensor(t, precision, r if g is not None else None, g, budgets)
    rule = f"default per output kind, {p} budgets" + (f" at {b:g}" if b is not None else "")
    return Verdict(outs, rule, comparison.reason)


def _scaled(b: Optional[float]) -> Optional[Dict[str, float]]:
    """The default verdict's budgets when `--budget` alone is given: it scales each kind's
    main figure (rel, top-1 share, 1 - cosine, 1 - IoU, 1 - pixel agreement)."""
    if b is None:
        return None
    return {"rel": b, "top1": b, "cosine": 1 - b, "iou": 1 - b, "pixels": 1 - b}


def verdict_metric(metric: MetricLike, atol: Optional[float] = None,
                   rtol: Optional[float] = None) -> MetricLike:
    """The metric a verdict judges by, one decision for every caller: the user's; else
    "elementwise" when atol or rtol were given explicitly (the rule they ask for); else None
    (the default per output kind)."""
    if metric is None and (atol is not None or rtol is not None):
        return "elementwise"
    return metric


def judge_tensors(tensors: Sequence[TensorComparison], precision: str = "fp32",
                  runs: Optional[Mapping[str, Sequence[Outputs]]] = None, *,
                  metric: MetricLike = None, budget: Union[None, str, float] = None,
                  atol: float = 0.0, rtol: float = 0.0) -> Verdict:
    """`judge` for a report's list of output comparisons (`LayerwiseReport.outputs`), with its
    per-sample runs {"reference": [...], "candidate": [...]} when it kept them."""
    c = Comparison(atol, rtol, {t.name: t for t in tensors})
    ref = (runs or {}).get("reference") or None
    got = (runs or {}).get("candidate") or None
    if ref and got and not all(t.name in ref[0] for t in tensors):
        ref = got = None
    return judge(c, precision, metric=metric, budget=budget, ref=ref, got=got)


def judge_rows(outputs: Sequence[TensorComparison], precision: str = "fp32",
               runs: Optional[Mapping[str, Sequence[Outputs]]] = None, *,
               internal: Sequence[TensorComparison] = (), metric: MetricLike = None,
               budget: Union[None, str, float] = None, atol: float = 0.0,
               rtol: float = 0.0) -> Verdict:
    """`judge_tensors` over `outputs`, plus `internal` tensors judged beside them (those
    feeding a data-dependent selection, whose selected outputs swap near-tied rows under any
    rounding): no per-sample runs are kept for them, so they are judged as the default judges
    a plain tensor (scale-relative error and cosine at `precision`'s budgets, `budget` scaling
    them when no metric is given), or elementwise when that is the metric."""
    metric = resolve_metric(metric)
    verdict = judge_tensors(outputs, precision, runs, metric=metric, budget=budget, atol=atol,
                            rtol=rtol) if outputs else None
    if not internal:
        return verdict if verdict is not None else Verdict({}, "nothing to judge")
    if metric == "elementwise":
        inner = judge_tensors(internal, precision, None, metric=metric, atol=atol, rtol=rtol)
    else:
        scaled = _scaled(parse_budget(budget)) if metric is None else None
        inner = Verdict({t.name: judge_tensor(t, precision, budgets=scaled, kind="tensor")
                         for t in internal},
                        f"rel and cosine at {str(precision or 'fp32').upper()} budgets"
                        + (f" at {parse_budget(budget):g}" if scaled else ""))
    if verdict is None:  # (every output is selected: a metric over outputs has none to read)
        unread = (f" (no output left for the metric "
                  f"{getattr(metric, '__name__', metric)}: every output is selected)"
                  if metric not in (None, "elementwise") else "")
        return Verdict(inner.outputs, "the tensors feeding the selection: " + inner.rule
                       + unread, inner.reason)
    return Verdict({**inner.outputs, **verdict.outputs},
                   f"{verdict.rule}; the tensors feeding the selection: {inner.rule}",
                   verdict.reason or inner.reason)


@dataclass
class JudgedComparison:
    """A comparison of outputs and its verdict: `passed` is the verdict's, `outputs` and
    `reason` the comparison's (their figures: rel, cosine, the elementwise diagnostic), so
    it stands where a `Comparison` did (`workbench.compare.bisect`)."""

    comparison: Comparison
    verdict: Verdict

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    @property
    def outputs(self) -> Dict[str, TensorComparison]:
        return self.comparison.outputs

    @property
    def reason(self) -> str:
        return self.comparison.reason

    def __bool__(self) -> bool:
        return self.passed


def judge_runs(ref: Sequence[Outputs], got: Sequence[Outputs], precision: str, *,
               atol: float, rtol: float, names: Optional[Sequence[str]] = None,
               metric: MetricLike = None,
               budget: Union[None, str, float] = None) -> JudgedComparison:
    """Compare two runs' outputs (every sample batch) and judge them (`judge`): the figures
    at atol/rtol, the verdict by `metric` within `budget` or the default per output kind."""
    from workbench.runtime.comparison import compare_outputs

    c = compare_outputs(ref, got, atol, rtol, names=names)
    ok = [n for n in c.outputs if all(n in b for b in ref) and all(n in b for b in got)]
    use = ok == list(c.outputs)  # (a sequence's items, "out[0]": no per-sample arrays)
    return JudgedComparison(c, judge(c, precision, metric=metric, budget=budget,
                                     ref=list(ref) if use else None,
                                     got=list(got) if use else None))
