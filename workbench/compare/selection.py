"""Accuracy after a data-dependent selection (NonMaxSuppression, TopK, NonZero + Gather).

An elementwise comparison of a detector's final boxes is meaningless when near-tied candidates
swap: FP16 noise of 1e-4 on two scores 1e-5 apart picks the other box, and the box rows differ
by the whole box. This check judges such a model in two parts and always reports the strict
elementwise figure beside it (`strict`, never hidden):

1. **The tensors that feed the selection** (the *frontier*): every float tensor made outside
   the selection region and read inside it (per-anchor scores, boxes, features). The region is
   every selection node (top-level NonMaxSuppression / TopK / NonZero, or an If / Loop / Scan
   whose body holds one) and everything downstream of it. Each frontier tensor must be within
   the budget: rel = max |cand - ref| / max |ref| <= tol (`workbench.runtime.comparison`'s relative
   error). Outputs made outside the region are held to the same budget.
2. **The selected outputs** (graph outputs made inside the region), judged by rows. A group is
   the selected outputs sharing the score output's leading (data-dependent) length on each side;
   its score is its 1-D float output (the first one, or `score=`); when no output is one (a
   detector that returns only its boxes), the score is read inside the region: the score of
   each box NonMaxSuppression kept (its scores input at the selected indices), the values
   TopK selected by, or another float tensor the region made with one value per selected row
   (`score=` may name any tensor of the graph). A leading axis of 1 (batch 1: boxes [1, K, 4],
   scores [1, K]) is not a row axis: rows are on the next one. Row i is the tuple of row i
   of every output of the group. A candidate row *matches* a reference row when every float
   field is within tol x (that output's max |ref|) and every integer / bool field is equal;
   rows are matched one to one, greedily in the reference's score order, to the candidate row
   of the nearest score. The group is *consistent* when every unmatched row (either side) has
   a *swap partner*, an unmatched row of the other side whose score is within tol x S of its
   own (S = max |reference score|), except rows at the selection's cut-off: a row without a
   partner is allowed only when its score is within tol x S of the lowest reference score
   (one that entered or left at the threshold or top-K boundary), or when NonMaxSuppression
   kept or dropped it at its IoU threshold (a constant, the same for every NMS of the model):
   its box (the group's float output of four values per row) overlaps a better-scored row of
   its side, of its image, by an IoU within max(4 tol, 0.01) of the threshold, so the rounding
   of two boxes decided whether it was suppressed (an *IoU flip*; corners in either order, or
   centre + size as `center_point_box` says). Unmatched candidate rows are
   judged by their candidate scores (their reference scores were not selected, so not
   computed); part 1 bounds those within the budget. Outputs of the region that fit no group
   (no 1-D float score, other leading lengths) are held to the strict elementwise budget.

`passed` = part 1 within budget and every group consistent. A model without selection nodes
has no frontier and no groups: `passed` is the elementwise budget on every output.

    check = selection_aware(ref_model, cand_model, feed, tol=0.01)
    check.passed, check.strict_rel, check.to_dict()
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from workbench.runtime.comparison import compare_tensor
from workbench.core.model import as_model

from workbench.surgery.split import SELECTION_OPS, selection_nodes, selection_region
__all__ = ["SELECTION_OPS", "SelectionCheck", "SelectionGroup", "selection_region",
           "selection_aware", "judge_rows", "inner_scores"]


# ----------------------------------------------------------------------------- rows
@dataclass
class SelectionGroup:
    """One group of selected outputs judged by rows (see the module docstring)."""

    outputs: List[str]
    score: str
    ref_rows: int
    cand_rows: int
    matched: int
    unmatched_ref: List[float] = field(default_factory=list)   # their reference scores
    unmatched_cand: List[float] = field(default_factory=list)  # their candidate scores
    unpaired: List[float] = field(default_factory=list)        # no partner, not at cut-off
    score_scale: float = 0.0
    consistent: bool = False
    # rows without a partner kept or dropped by NonMaxSuppression at its IoU threshold: the
    # box overlaps a better one by an IoU within the band of the threshold (their scores)
    iou_flips: List[float] = field(default_factory=list)
    # rows equal on every float field but not on an integer one (a class id): a label flip,
    # never a swap (its own row is always a near-tied partner); each fails the group
    label_flips: Dict[str, int] = field(default_factory=dict)  # integer output -> rows
    int_fields: List[str] = field(default_factory=list)  # the group's integer outputs

    def to_dict(self) -> Dict[str, Any]:
        return {"outputs": self.outputs, "score": self.score, "ref_rows": self.ref_rows,
                "cand_rows": self.cand_rows, "matched": self.matched,
                "unmatched_ref": len(self.unmatched_ref),
                "unmatched_cand": len(self.unmatched_cand), "unpaired": self.unpaired[:8],
                "score_scale": self.score_scale, "consistent": self.consistent,
                "iou_flips": len(self.iou_flips), "label_flips": dict(self.label_flips)}


def _field_match(r: np.ndarray, c: np.ndarray, tol: float) -> np.ndarray:
    """[n_ref, n_cand] bool: row i of r equals row j of c (floats within tol x max |r|)."""
    width = int(np.prod(r.shape[1:], dtype=np.int64))  # (0-row outputs cannot infer -1)
    r2 = r.reshape(r.shape[0], width)
    c2 = c.reshape(c.shape[0], width)
    if r.dtype.kind == "f" or c.dtype.kind == "f":
        r64, c64 = r2.astype(np.float64), c2.astype(np.float64)
        finite = r64[np.isfinite(r64)]
        scale = float(np.abs(finite).max()) if finite.size else 1.0
        bound = tol * (scale if scale > 0 else 1.0)
        return np.asarray((np.abs(r64[:, None, :] - c64[None, :, :]) <= bound).all(axis=2))
    return np.asarray((r2[:, None, :] == c2[None, :, :]).all(axis=2))


def _box_field(side: Dict[str, np.ndarray], outputs: List[str]) -> Optional[str]:
    """The group's box output: the first float one with four values per row."""
    for o in outputs:
        a = np.asarray(side[o])
        if a.dtype.kind == "f" and a.ndim >= 2 and int(np.prod(a.shape[1:])) == 4:
            return o
    return None


def _iou(box: np.ndarray, others: np.ndarray, center: bool) -> np.ndarray:
    """IoU of one box with each of `others` ([n, 4]; corners in any diagonal order, or
    centre + size when `center`: NonMaxSuppression's `center_point_box`)."""
    def corners(b: np.ndarray) -> Tuple[np.ndarray, ...]:
        b = b.reshape(-1, 4).astype(np.float64)
        if center:
            return (b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2,
                    b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2)
        return (np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3]))

    a0, a1, a2, a3 = corners(box)
    b0, b1, b2, b3 = corners(others)
    inter = np.clip(np.minimum(a2, b2) - np.maximum(a0, b0), 0, None) * \
        np.clip(np.minimum(a3, b3) - np.maximum(a1, b1), 0, None)
    union = (a2 - a0) * (a3 - a1) + (b2 - b0) * (b3 - b1) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _at_iou_threshold(side: Dict[str, np.ndarray], scores: np.ndarray, k: int, box: str,
                      image: Optional[str], iou: Tuple[float, bool], band: float) -> bool:
    """Row k of `side` was kept or dropped at the IoU threshold: a better-scored row of its
    side (of its image) overlaps it by an IoU within `band` of the threshold, so rounding of
    the boxes decides whether NonMaxSuppression suppresses it."""
    better = scores > scores[k]
    if image is not None:
        better &= np.asarray(side[image]) == np.asarray(side[image])[k]
    if not better.any():
        return False
    boxes = np.asarray(side[box]).reshape(scores.size, 4)
    ov = _iou(boxes[k], boxes[better], iou[1])
    return bool((np.abs(ov - iou[0]) <= band).any())


def judge_rows(ref: Dict[str, np.ndarray], cand: Dict[str, np.ndarray], outputs: List[str],
               score: str, tol: float, iou: Optional[Tuple[float, bool]] = None
               ) -> SelectionGroup:
    """The row rule of the module docstring for one group; `iou` (NonMaxSuppression's IoU
    threshold and centre-box flag): a row without a partner whose box overlaps a better one
    of its side by an IoU within max(4 tol, 0.01) of the threshold is an IoU flip, not a
    failure."""
    rs = np.asarray(ref[score], dtype=np.float64).reshape(-1)
    cs = np.asarray(cand[score], dtype=np.float64).reshape(-1)
    n, m = rs.size, cs.size
    finite = rs[np.isfinite(rs)]
    scale = float(np.abs(finite).max()) if finite.size else 1.0
    band = tol * (scale if scale > 0 else 1.0)
    match = np.ones((n, m), dtype=bool)
    for name in outputs:
        match &= _field_match(np.asarray(ref[name]), np.asarray(cand[name]), tol)
    used = np.zeros(m, dtype=bool)
    ref_matched = np.zeros(n, dtype=bool)
    for i in np.argsort(-rs, kind="stable"):
        js = np.flatnonzero(match[i] & ~used)
        if js.size:
            j = js[np.argmin(np.abs(cs[js] - rs[i]))]
            used[j] = True
            ref_matched[i] = True
    # a row whose floats match one of the other side but whose integer field differs (the
    # class): paired, and counted as a flip of that field (a failure, not a swap)
    ints = [o for o in outputs if np.asarray(ref[o]).dtype.kind in "iub"
            and not o.startswith(BATCH_FIELD)]
    flips_of: Dict[str, int] = {}
    if ints:
        floats = np.ones((n, m), dtype=bool)
        for name in outputs:
            if name not in ints:
                floats &= _field_match(np.asarray(ref[name]), np.asarray(cand[name]), tol)
        for i in np.argsort(-rs, kind="stable"):
            if ref_matched[i]:
                continue
            js = np.flatnonzero(floats[i] & ~used)
            if not js.size:
                continue
            j = js[np.argmin(np.abs(cs[js] - rs[i]))]
            used[j] = True
            ref_matched[i] = True
            for o in ints:
                if not _field_match(np.asarray(ref[o])[i:i + 1], np.asarray(cand[o])[j:j + 1],
                                    tol)[0, 0]:
                    flips_of[o] = flips_of.get(o, 0) + 1
    ur, uc = rs[~ref_matched], cs[~used]
    low = float(rs.min()) if n else (float(cs.min()) if m else 0.0)
    box = _box_field(ref, outputs) if iou is not None else None
    image = next((o for o in outputs if o.startswith(BATCH_FIELD)), None)
    unpaired: List[float] = []
    flips: List[float] = []
    for side, all_s, mine_idx, other in ((ref, rs, np.flatnonzero(~ref_matched), uc),
                                         (cand, cs, np.flatnonzero(~used), ur)):
        for k in mine_idx:
            s = all_s[k]
            partner = other.size and bool((np.abs(other - s) <= band).any())
            if partner or abs(s - low) <= band:
                continue
            if box is not None and _at_iou_threshold(side, all_s, int(k), box, image, iou,
                                                     max(4 * tol, 0.01)):
                flips.append(float(s))
            else:
                unpaired.append(float(s))
    return SelectionGroup(list(outputs), score, n, m,
                          int(ref_matched.sum()) - sum(flips_of.values()),
                          [float(x) for x in ur], [float(x) for x in uc], unpaired, scale,
                          consistent=not unpaired and not flips_of, iou_flips=flips,
                          label_flips=flips_of, int_fields=ints)


BATCH_FIELD = "(image)"  # the row's batch index, a field of batched groups' rows


def _score_shape(ref: np.ndarray, cand: np.ndarray) -> Optional[Tuple[Tuple[int, ...],
                                                                       Tuple[int, ...]]]:
    """The row axes of a score on both sides: [K] (rows), or [B, K] (K rows per batch item, B
    the same on both sides); None when the pair is no score (not float, other ranks)."""
    r, c = np.asarray(ref), np.asarray(cand)
    if r.dtype.kind != "f" or c.dtype.kind != "f" or r.ndim != c.ndim or r.ndim not in (1, 2):
        return None
    if r.ndim == 2 and r.shape[0] != c.shape[0]:
        return None
    return r.shape, c.shape


def _member(ref: np.ndarray, cand: np.ndarray, rows: Tuple[Tuple[int, ...], Tuple[int, ...]]
            ) -> bool:
    """Has this output one entry per row of the score (its leading axes are the score's)?"""
    r, c = np.asarray(ref), np.asarray(cand)
    (rr, cr) = rows
    return (r.shape[:len(rr)] == rr and c.shape[:len(cr)] == cr
            and r.shape[len(rr):] == c.shape[len(cr):])


def _flat_rows(a: np.ndarray, axes: int) -> np.ndarray:
    """`a` with its first `axes` axes (the row axes) made one."""
    a = np.asarray(a)
    return a.reshape((int(np.prod(a.shape[:axes], dtype=np.int64)),) + a.shape[axes:])


def _groups(ref: Dict[str, np.ndarray], cand: Dict[str, np.ndarray], selected: List[str],
            score: Optional[str], inner: Sequence[str] = ()
            ) -> Tuple[List[Tuple[List[str], str]], List[str]]:
    """([(outputs, score)], outputs left to the elementwise rule). A group is a score (`score`,
    else a selected output, else a tensor of `inner`, made inside the region) with the
    selected outputs that have one entry per score row: [K] scores pair [K, ...] outputs,
    [B, K] scores (K rows per batch item, TopK per image) pair [B, K, ...] outputs, their rows
    then carrying the batch index as a field (BATCH_FIELD) so they pair within an image. As
    many groups as scores pair outputs. Rewrites the groups' entries of `ref` / `cand` with
    their rows on axis 0."""
    pool = ([score] if score is not None else []) + list(selected) + list(inner)
    pool = list(dict.fromkeys(t for t in pool if t in ref and t in cand))
    # a selected output is a score when it is 1-D (a [K, 4] box output is no [B, K] score);
    # [B, K] scores are named (score=) or read inside (TopK's values per image)
    pool = [t for t in pool if np.ndim(ref[t]) == 1] + \
        [t for t in pool if np.ndim(ref[t]) == 2 and (t == score or t not in selected
                                                       or t in inner)]
    left = list(selected)
    groups: List[Tuple[List[str], str]] = []
    for s in pool:
        if s not in left and s in selected:
            continue  # (already a member of a group)
        rows = _score_shape(ref[s], cand[s])
        if rows is None:
            continue
        members = [o for o in left if o != s and _member(ref[o], cand[o], rows)]
        if not members and not (s == score or s in selected):
            continue  # an inner tensor that pairs nothing
        axes = len(rows[0])
        outs = [s] + members
        for o in outs:
            ref[o], cand[o] = _flat_rows(ref[o], axes), _flat_rows(cand[o], axes)
        if axes == 2 and rows[0][0] > 1:  # several images: a row pairs within its image
            key = f"{BATCH_FIELD} {s}"
            ref[key] = np.repeat(np.arange(rows[0][0]), rows[0][1])
            cand[key] = np.repeat(np.arange(rows[1][0]), rows[1][1])
            outs.append(key)
        groups.append((outs, s))
        left = [o for o in left if o not in outs]
        if score is not None:
            break
    return groups, left


def _nms_iou(proto: Any, region: Set[int]) -> Optional[Tuple[float, bool]]:
    """(IoU threshold, centre boxes) of the region's NonMaxSuppression, when every one of them
    has the same constant threshold (an initializer or Constant; absent: 0); else None."""
    from workbench.surgery.recipes.base import constant_value

    seen = set()
    for i in sorted(region):
        n = proto.graph.node[i]
        if n.op_type != "NonMaxSuppression":
            continue
        if len(n.input) > 3 and n.input[3]:
            v = constant_value(proto, n.input[3])
            if v is None or v.size == 0:
                return None  # computed at run time
            thr = float(np.asarray(v).reshape(-1)[0])
        else:
            thr = 0.0
        center = any(a.name == "center_point_box" and a.i == 1 for a in n.attribute)
        seen.add((thr, center))
    return next(iter(seen)) if len(seen) == 1 else None


def _nms_picks(proto: Any, region: Set[int]) -> List[Tuple[str, str, str]]:
    """(key, scores input, selected indices) of each NonMaxSuppression of the region."""
    out = []
    for i in sorted(region):
        n = proto.graph.node[i]
        if n.op_type == "NonMaxSuppression" and len(n.input) > 1 and n.input[1] and n.output:
            out.append((f"scores kept by {n.name or 'NonMaxSuppression'}", n.input[1],
                        n.output[0]))
    return out


def _picked_scores(scores: Optional[np.ndarray], sel: Optional[np.ndarray]
                   ) -> Optional[np.ndarray]:
    """scores[b, c, i] for each selected (b, c, i) row of NonMaxSuppression's output; None
    when the arrays do not have those shapes."""
    if scores is None or sel is None:
        return None
    s, k = np.asarray(scores), np.asarray(sel)
    if s.ndim != 3 or s.dtype.kind != "f" or k.ndim != 2 or k.shape[1] != 3 or \
            k.dtype.kind not in "iu":
        return None
    k = k.astype(np.int64)
    if k.size and ((k < 0).any() or (k.max(axis=0) >= np.array(s.shape)).any()):
        return None
    return s[k[:, 0], k[:, 1], k[:, 2]]


def inner_scores(proto: Any, region: Set[int]) -> List[str]:
    """Float tensors made inside the selection region that may hold the selecting score, best
    first: TopK's values, then the outputs of the region's Gather / Slice / reshaping nodes
    (the scores gathered for the kept rows)."""
    nodes = proto.graph.node
    topk = [nodes[i].output[0] for i in sorted(region)
            if nodes[i].op_type == "TopK" and nodes[i].output and nodes[i].output[0]]
    carry = ("Gather", "GatherElements", "GatherND", "Slice", "Squeeze", "Unsqueeze",
             "Reshape", "Flatten", "Identity", "Cast")
    rest = [o for i in sorted(region) if nodes[i].op_type in carry
            for o in nodes[i].output[:1] if o]
    outs = {o.name for o in proto.graph.output}
    # TopK's values are the score even when they are an output ([B, K] scores per image)
    return [t for t in dict.fromkeys(topk + rest) if t not in outs or t in topk]


# ----------------------------------------------------------------------------- the check
@dataclass
class SelectionCheck:
    """Both verdicts: `strict_passed` / `strict_rel` (elementwise on every output of equal
    shape) and `passed` (selection-aware: the module docstring's rule)."""

    tol: float
    strict_rel: Optional[float]
    strict_passed: bool
    passed: bool
    selection_nodes: int = 0
    frontier: Dict[str, float] = field(default_factory=dict)   # name -> rel
    missing: List[str] = field(default_factory=list)           # frontier absent in candidate
    plain: Dict[str, float] = field(default_factory=dict)      # outputs outside region -> rel
    elementwise: Dict[str, float] = field(default_factory=dict)  # region outputs, no group
    groups: List[SelectionGroup] = field(default_factory=list)
    reason: str = ""

    @property
    def frontier_rel(self) -> Optional[float]:
        return max(self.frontier.values(), default=None)

    def to_dict(self) -> Dict[str, Any]:
        worst = sorted(self.frontier.items(), key=lambda kv: -kv[1])[:5]
        return {"tol": self.tol, "passed": self.passed, "strict_passed": self.strict_passed,
                "strict_rel": self.strict_rel, "selection_nodes": self.selection_nodes,
                "frontier_tensors": len(self.frontier), "frontier_rel": self.frontier_rel,
                "frontier_worst": dict(worst), "missing": self.missing[:8],
                "plain": self.plain, "elementwise": self.elementwise,
                "groups": [g.to_dict() for g in self.groups], "reason": self.reason}

    def summary(self) -> str:
        """One line for a table cell or a report."""
        if not self.selection_nodes:
            return "no data-dependent selection: elementwise"
        parts = [f"{len(self.frontier)} tensors feed the selection, worst rel "
                 f"{(self.frontier_rel or 0):.2e}"]
        for g in self.groups:
            fields = [o for o in g.outputs if o != g.score and not o.startswith(BATCH_FIELD)]
            parts.append(f"{g.score}" + (f" (rows of {', '.join([g.score] + fields)})"
                                         if fields else "")
                         + f": {g.matched}/{g.ref_rows} rows match, "
                         f"{len(g.unmatched_ref)}+{len(g.unmatched_cand)} swapped, "
                         f"{len(g.unpaired)} without a near-tied partner"
                         + (f", {len(g.iou_flips)} kept or dropped at the IoU threshold"
                            if g.iou_flips else "")
                         + "".join(f", {k}: {v} row(s) differ in it alone (FAIL)"
                                   for k, v in g.label_flips.items())
                         + "".join(f", {k}: equal in every matched row"
                                   for k in g.int_fields if k not in g.label_flips))
        bad = [k for k, v in {**self.plain, **self.elementwise}.items() if not v <= self.tol]
        if bad:  # outputs judged element by element (no score group pairs their rows)
            parts.append("beyond the budget element by element: " + ", ".join(
                f"{k} rel {v:.3g}" for k, v in {**self.plain, **self.elementwise}.items()
                if k in bad[:4]) + (" (no score pairs their rows: `compare --score NAME`, or "
                                    "selection_aware(..., score=NAME), names one)"
                                    if not self.groups else ""))
        if self.reason:
            parts.append(self.reason)
        return "; ".join(parts)


def _rel(name: str, a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return float("inf")
    if a.dtype.kind not in "f" and b.dtype.kind not in "f":
        return 0.0 if np.array_equal(a, b) else float("inf")
    if a.size == 0:
        return 0.0
    return float(compare_tensor(name, a.astype(np.float32), b, 0.0, 0.0, sentinels=False,
                                top1=False).rel)


def _strict(ref: Dict[str, np.ndarray], cand: Dict[str, np.ndarray], names: Sequence[str]
            ) -> Optional[float]:
    """Elementwise relative error over the float outputs of equal shape (None: none)."""
    worst: Optional[float] = None
    for k in names:
        a, b = np.asarray(ref[k]), np.asarray(cand.get(k, np.zeros(0)))
        if a.dtype.kind != "f" or a.shape != b.shape or a.size == 0:
            continue
        r = _rel(k, a, b)
        worst = r if worst is None else max(worst, r)
    return worst


def selection_aware(ref_model: Any, cand_model: Any, feed: Dict[str, np.ndarray], *,
                    tol: float = 0.01, score: Optional[str] = None,
                    ref_outputs: Optional[Dict[str, np.ndarray]] = None,
                    cand_outputs: Optional[Dict[str, np.ndarray]] = None,
                    runner: Any = None, candidate_runner: Optional[str] = None
                    ) -> SelectionCheck:
    """Judge `cand_model` against `ref_model` on `feed` (both run by onnxruntime, or `runner`:
    a callable (proto, feed) -> outputs). Precomputed outputs are reused when the model
    selects nothing (no extra run)."""
    from workbench.runtime.runners import OnnxRuntimeRunner

    run = runner or (lambda proto, f: OnnxRuntimeRunner(proto).infer(f))
    if candidate_runner is not None:  # (the FP16 emulation: what the layer-wise compare ran)
        from workbench.runtime.runners import make_runner

        run_cand = lambda proto, f: make_runner(candidate_runner, proto).infer(f)  # noqa: E731
    else:
        run_cand = run
    ref_p = as_model(ref_model).with_weights()
    names = [o.name for o in ref_p.graph.output]
    starts = selection_nodes(ref_p)
    if not starts:
        ref = ref_outputs if ref_outputs is not None else run(ref_p, feed)
        cand = cand_outputs if cand_outputs is not None else \
            run_cand(as_model(cand_model).with_weights(), feed)
        plain = {k: _rel(k, ref[k], cand[k]) if k in cand else float("inf") for k in names}
        strict = _strict(ref, cand, names)
        ok = all(v <= tol for v in plain.values())
        return SelectionCheck(tol, strict, strict is not None and strict <= tol, ok,
                              plain=plain)
    region, frontier, selected = selection_region(ref_p)
    cand_p = as_model(cand_model).with_weights()
    cand_made = {o for n in cand_p.graph.node for o in n.output} | \
        {i.name for i in cand_p.graph.input}
    missing = [t for t in frontier if t not in cand_made]
    probe = [t for t in frontier if t in cand_made]
    # where no selected output is a score, the score the selection used is read inside
    inner: List[str] = []
    unscored = score is None
    if score is not None and score not in names:
        inner = [score]
    elif unscored:  # (used only where no selected output is a score for an output's rows)
        inner = inner_scores(ref_p, region)
    inner = [t for t in inner if t in cand_made]
    from workbench.runtime.runners import mark_outputs

    picks = _nms_picks(ref_p, region) if unscored else []
    extra = inner + [t for pk in picks for t in pk[1:] if t not in frontier]
    ref = run(mark_outputs(ref_p, frontier + extra), feed)
    cand = run_cand(mark_outputs(cand_p, probe + [t for t in extra if t in cand_made]), feed)
    for key, scores_t, sel_t in picks:  # the score of each box NonMaxSuppression kept
        for side in (ref, cand):
            kept = _picked_scores(side.get(scores_t), side.get(sel_t))
            if kept is not None:
                side[key] = kept
        if key in ref and key in cand:
            inner.insert(0, key)
    strict = _strict(ref, cand, names)
    check = SelectionCheck(tol, strict, strict is not None and strict <= tol and all(
        np.shape(ref[k]) == np.shape(cand[k]) for k in names), False,
        selection_nodes=len(starts), missing=missing)
    for t in probe:
        if np.asarray(ref[t]).dtype.kind == "f":
            check.frontier[t] = _rel(t, ref[t], cand[t])
    for k in names:
        if k not in selected:
            check.plain[k] = _rel(k, ref[k], cand[k])
    groups, rest = _groups(ref, cand, selected, score, inner)
    iou = _nms_iou(ref_p, region)
    for outs, s in groups:
        check.groups.append(judge_rows(ref, cand, outs, s, tol, iou=iou))
    for k in rest:
        check.elementwise[k] = _rel(k, ref[k], cand[k])
    if missing:
        check.reason = (f"{len(missing)} tensor(s) feeding the selection are not in the "
                        f"candidate (e.g. '{missing[0]}'): cannot judge")
    check.passed = (not missing and all(v <= tol for v in check.frontier.values())
                    and all(v <= tol for v in check.plain.values())
                    and all(v <= tol for v in check.elementwise.values())
                    and all(g.consistent for g in check.groups))
    return check
