"""Bisection: the fewest candidate nodes to keep in FP32 for the outputs to meet a budget.

`bisect_exclusions(candidates, evaluate)` takes the suspects in order of suspicion (the
culprits of a layer-wise compare, each with the other nodes of its fused engine layer) and an
`evaluate(excluded) -> JudgedComparison` (build with those nodes in FP32, compare the outputs
and judge them by the verdict `compare`, `matrix` and `plan` give,
`workbench.runtime.verdict.judge_runs`: an engine rebuild through the engine cache, or a CPU
stand-in; a plain `Comparison` passes by the elementwise rule). It checks that excluding nothing
fails and excluding every suspect passes, binary-searches the shortest passing prefix
(assuming more FP32 never hurts), then tries dropping each chosen node. With `latency(excluded)
-> ms` it measures every prefix of the answer, so each exclusion's cost shows in the table
(`rows`) and the accuracy-vs-latency figure (`workbench.render.bisect_figure`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from workbench.core.model import ModelLike, as_model

__all__ = ["BisectResult", "bisect_exclusions", "onnx_evaluator", "suspects"]


def _worst(c: Any) -> float:
    if getattr(c, "reason", ""):
        return math.inf
    return max((t.rel for t in c.outputs.values()), default=0.0)


def _num(x: float) -> Any:
    return x if math.isfinite(x) else "inf"


@dataclass
class BisectResult:
    """The nodes to keep in FP32, whether that meets the budget, and what each one costs."""

    target: str
    route: str
    excluded: List[str]
    passed: bool
    candidates: List[str] = field(default_factory=list)
    evaluations: List[Dict[str, Any]] = field(default_factory=list)
    rows: List[Dict[str, Any]] = field(default_factory=list)  # accuracy vs latency per prefix
    message: str = ""
    build_config: Dict[str, Any] = field(default_factory=dict)  # engine route: what was built
    unbuildable: List[List[str]] = field(default_factory=list)  # sets TensorRT could not build

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "route": self.route, "excluded": self.excluded,
                "suggested_exclusions": self.excluded, "passed": self.passed,
                "candidates": self.candidates, "evaluations": self.evaluations,
                "rows": self.rows, "message": self.message,
                **({"build_config": self.build_config} if self.build_config else {}),
                **({"unbuildable": self.unbuildable} if self.unbuildable else {})}

    def table(self) -> str:
        """The accuracy-vs-latency table as text."""
        w = min(max([len(r["added"] or "-") for r in self.rows] + [10]), 72)
        lines = [f"{'FP32 nodes':>10}  {'last added':{w}} {'worst rel':>10} {'pass':>5} "
                 f"{'P50 ms':>9} {'cost ms':>9}"]
        for r in self.rows:
            p50 = r.get("p50_ms")
            cost = r.get("cost_ms")
            added = r["added"] or "-"
            if len(added) > w:  # cut visibly: a cut name must not read as another node's
                added = added[:w - 3] + "..."
            lines.append(f"{len(r['excluded']):>10}  {added:{w}} "
                         f"{r['worst_rel'] if isinstance(r['worst_rel'], str) else format(r['worst_rel'], '.3g'):>10} "
                         f"{'yes' if r['passed'] else 'no':>5} "
                         f"{'-' if p50 is None else format(p50, '.4f'):>9} "
                         f"{'-' if cost is None else format(cost, '+.4f'):>9}")
        return "\n".join(lines)


def bisect_exclusions(candidates: Sequence[str], evaluate: Callable[[Sequence[str]], Any], *,
                      latency: Optional[Callable[[Sequence[str]], Any]] = None,
                      target: str = "fp16", route: str = "", minimise: bool = True,
                      max_minimise: int = 8,
                      units: Optional[Sequence[Sequence[str]]] = None) -> BisectResult:
    """See the module docstring. `evaluate` returns what has `passed` (within budget),
    `outputs` ({name: TensorComparison}, for the worst relative error) and `reason`: a
    `workbench.runtime.verdict.JudgedComparison` (or a plain `Comparison`).
    `units`: nodes that go into FP32 together (the ONNX nodes of one fused engine layer: an
    exclusion that splits a fused layer leaves TensorRT no format that obeys it); the search
    adds and drops whole units, each candidate joining the unit that holds it."""
    cands = list(dict.fromkeys(candidates))
    unit_of = {n: list(u) for u in (units or []) for n in u}
    groups: List[List[str]] = []
    placed: set = set()
    for n in cands:
        if n in placed:
            continue
        g = [m for m in dict.fromkeys(unit_of.get(n, [n])) if m not in placed]
        placed.update(g)
        groups.append(g)
    memo: Dict[Tuple[str, ...], Any] = {}
    res = BisectResult(target, route, [], False, candidates=cands)

    def flat(gs: Sequence[Sequence[str]]) -> List[str]:
        return [n for g in gs for n in g]

    def ev(excl: Sequence[str]) -> Any:
        key = tuple(sorted(excl))
        if key not in memo:
            memo[key] = evaluate(list(excl))
            c = memo[key]
            row = {"excluded": list(excl), "passed": bool(c.passed),
                   "worst_rel": _num(_worst(c))}
            v = getattr(c, "verdict", None)
            if v is not None:  # the verdict's words, the elementwise rule as a diagnostic
                row.update(verdict=v.words() or c.reason, rule=v.rule,
                           elementwise_passed=bool(c.comparison.passed))
            res.evaluations.append(row)
        return memo[key]

    if ev([]).passed:
        res.passed, res.message = True, "the outputs meet the budget with nothing in FP32"
        chosen: List[List[str]] = []
    elif not cands:
        res.message = "the outputs miss the budget and there is no suspect to keep in FP32"
        return res
    elif not ev(flat(groups)).passed:
        res.message = (f"even with all {len(cands)} suspects in FP32 the outputs miss the "
                       "budget: the error comes from elsewhere (compare all tensors, --mark all)")
        res.excluded = flat(groups)
        return res
    else:
        lo, hi = 0, len(groups)  # prefix lo fails, prefix hi passes
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ev(flat(groups[:mid])).passed:
                hi = mid
            else:
                lo = mid
        chosen = groups[:hi]
        if minimise and len(chosen) > 1:
            for g in list(reversed(chosen))[:max_minimise]:
                trial = [u for u in chosen if u is not g]
                if trial and ev(flat(trial)).passed:
                    chosen = trial
        res.passed = True
        n = len(flat(chosen))
        res.message = f"{n} node(s) in FP32 meet the budget" + (
            f" ({len(chosen)} fused engine layers)" if n != len(chosen) else "")
    res.excluded = flat(chosen)
    prev_ms: Optional[float] = None
    for k in range(len(chosen) + 1):
        excl = flat(chosen[:k])
        c = ev(excl)
        row: Dict[str, Any] = {"excluded": excl, "added": " + ".join(chosen[k - 1]) if k else "",
                               "passed": bool(c.passed), "worst_rel": _num(_worst(c)),
                               "p50_ms": None, "cost_ms": None}
        if latency is not None:
            got = latency(excl)  # P50 ms, or {"p50_ms": ..., more figures for the row}
            if isinstance(got, dict):
                row.update({k2: v for k2, v in got.items() if k2 != "p50_ms"})
                got = got["p50_ms"]
            if got is not None:  # None: not measurable (e.g. a prefix that did not build)
                ms = float(got)
                row["p50_ms"] = ms
                row["cost_ms"] = None if prev_ms is None else ms - prev_ms
                prev_ms = ms
            else:  # the next row's cost is against this one, which has no figure
                prev_ms = None
        res.rows.append(row)
    return res


def onnx_evaluator(model: ModelLike, feeds: Sequence[Any], target: str = "fp16", *,
                   atol: Optional[float] = None, rtol: Optional[float] = None,
                   runner: str = "auto", metric: Any = None,
                   budget: Any = None) -> Callable[[Sequence[str]], Any]:
    """The CPU stand-in for an engine rebuild: convert to `target` with the exclusions (the
    strongly typed route's Cast insertion), run it (onnx's reference evaluator computes FP16 in
    float16), compare the outputs with onnxruntime FP32 and judge them
    (`workbench.runtime.verdict.judge_runs`: `metric` within `budget`; atol/rtol alone, the
    elementwise rule; else the default per output kind at `target`'s budgets)."""
    from workbench.precision.table import tolerances
    from workbench.precision.transform import convert
    from workbench.runtime.runners import OnnxRuntimeRunner, make_runner
    from workbench.runtime.verdict import (judge_runs, parse_budget, resolve_metric,
                                           verdict_metric)

    metric = resolve_metric(verdict_metric(metric, atol, rtol))
    parse_budget(budget)
    proto = as_model(model).with_weights()
    atol, rtol = tolerances(target, atol, rtol)
    ref = OnnxRuntimeRunner(proto).infer_all(list(feeds))
    outs = [o.name for o in proto.graph.output]

    def evaluate(excluded: Sequence[str]) -> Any:
        cand = convert(proto, target, exclude_nodes=list(excluded), measure=False).proto
        got = make_runner(runner, cand).infer_all(list(feeds))
        return judge_runs(ref, got, target, atol=atol, rtol=rtol, names=outs, metric=metric,
                          budget=budget)

    return evaluate


def suspects(report: Any, model: ModelLike, top: int = 20) -> List[str]:
    """Nodes to try in FP32, most suspicious first: the producers and consumers of tensors
    whose FP32 values lie beyond the FP16 range (an FP32 node whose output still overflows
    once cast down needs its consumers too), in topological order; then the other nodes of
    the fused engine layers that output those tensors, nearest first (a tensor fused inside
    a layer is never compared but overflows all the same); then the culprits with the other
    nodes of their fused engine layers; then the failing outputs' layers and the producers
    of tensors that turned non-finite."""
    gi = as_model(model).index  # (the structure's index: no weight is read)

    def name(i: int) -> str:
        n = gi.nodes[i]
        return n.name or f"{n.op_type}:{n.output[0]}"

    layer = getattr(report, "groups", {}) or {}
    over = [t for t in report.tensors if t.tensor in (getattr(report, "fp16_range", {}) or {})]
    out: List[str] = []
    for t in over:  # what makes and what reads each tensor beyond the FP16 range
        p = gi.producer_of(t.tensor)
        out.append(name(p) if p is not None else t.node)
        out.extend(name(c) for c in gi.consumers_of(t.tensor))
    for t in over:  # then the rest of the fused layer that outputs it, nearest first
        out.extend(layer.get(t.tensor) or [])
    groups = report.culprit_groups(top) if hasattr(report, "culprit_groups") else \
        [[t.node] for t in report.culprits(top)]
    out.extend(n for g in groups for n in g)
    for t in getattr(report, "outputs", []):  # a failing output's own fused layer
        if not t.passed:
            out.extend(layer.get(t.tensor, [t.node]))
    out.extend(t.node for t in report.tensors if not t.finite)
    const = {name(i) for i in range(len(gi)) if gi.op(i) == "Constant"}
    return [n for n in dict.fromkeys(out) if n and n not in const]
