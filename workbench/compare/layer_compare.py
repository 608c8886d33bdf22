"""Layer-wise comparison: where is precision lost, and which nodes must stay in higher precision?

Runs a reference model (FP32, onnxruntime) and a candidate (its FP16/BF16/INT8/FP8 transform, or a
surgically changed model) on the same inputs with *every* intermediate tensor marked as an output
(Polygraphy's `--mark all`), matches tensors by name, and reports per tensor: max/mean absolute
error, error relative to the tensor's scale, cosine similarity, and pass/fail against
|candidate - reference| <= atol + rtol * |reference|. From that it finds the first divergence in
topological order and the nodes that *add* the most error (output error minus the worst input
error), which are the ones to keep in FP32 (`workbench precision --exclude NODE`).

Candidates holding FP16/BF16 tensors run on onnx's reference evaluator by default, which computes
in float16 arithmetic like a GPU does; onnxruntime's CPU provider upcasts most FP16 ops to FP32 and
would hide overflow. Results save as Polygraphy-compatible RunResults JSON (arrays stored with
np.save, loaded with allow_pickle=False).
"""
from __future__ import annotations

import base64
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from workbench.errors import Finding, WorkbenchError
from workbench.fsutil import atomic_write_text

Feed = Dict[str, np.ndarray]
SENTINEL = 1e30


# ----------------------------------------------------------------------------- running
def _as_proto(model: Any) -> Any:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    from workbench.model import Model, open_model

    m = model if isinstance(model, Model) else open_model(model)
    return m.load_weights()


def has_low_float(proto: Any) -> bool:
    """Does the graph compute in FP16/BF16 (initializers, casts or value infos)?"""
    for t in proto.graph.initializer:
        if t.data_type in (10, 16):
            return True
    for n in proto.graph.node:
        if n.op_type == "Cast":
            for a in n.attribute:
                if a.name == "to" and a.i in (10, 16):
                    return True
    return any(vi.type.tensor_type.elem_type in (10, 16) for vi in proto.graph.value_info)


def run_all(proto: Any, feeds: Sequence[Feed], runner: str = "onnxruntime") -> List[Feed]:
    """Every node output of `proto` for each feed. runner: onnxruntime | reference."""
    import warnings

    from workbench.equivalence import mark_all_outputs, session

    marked, order, _types = mark_all_outputs(proto)
    results: List[Feed] = []
    if runner == "onnxruntime":
        try:
            sess = session(marked, threads=None)
        except Exception as e:
            raise WorkbenchError(f"onnxruntime cannot load the model: {' '.join(str(e).split())[:300]}",
                                 hint="check it with `workbench inspect`; try --runner reference") from None
        names = [o.name for o in sess.get_outputs()]
        want = {i.name for i in sess.get_inputs()}
        for feed in feeds:
            outs = sess.run(names, {k: v for k, v in feed.items() if k in want})
            results.append(dict(zip(names, outs)))
    elif runner == "reference":
        from onnx.reference import ReferenceEvaluator

        ev = ReferenceEvaluator(proto)
        want = set(ev.input_names)
        for feed in feeds:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                outs = ev.run(None, {k: v for k, v in feed.items() if k in want}, intermediate=True)
            results.append({k: np.asarray(v) for k, v in outs.items()
                            if k in set(order) and isinstance(v, (np.ndarray, np.generic))})
    else:
        raise WorkbenchError(f"unknown runner '{runner}'", field="runner",
                             hint="use onnxruntime or reference")
    return results


# ----------------------------------------------------------------------------- metrics
@dataclass
class TensorError:
    """How far the candidate's tensor is from the reference's."""

    tensor: str
    node: str
    op: str
    shape: List[int]
    max_abs: float
    mean_abs: float
    rel: float          # max_abs / max|reference| (error relative to the tensor's scale)
    cosine: float
    finite: bool
    passed: bool
    added: float = 0.0  # rel minus the worst rel among this node's inputs


def tensor_error(ref: np.ndarray, got: np.ndarray, atol: float, rtol: float
                 ) -> Tuple[float, float, float, float, bool, bool]:
    r = np.asarray(ref, np.float64).reshape(-1)
    g = np.asarray(got).astype(np.float64).reshape(-1)
    if r.size == 0:
        return 0.0, 0.0, 0.0, 1.0, True, True
    finite = bool(np.isfinite(g).all() or not np.isfinite(r).all())
    same = (np.isnan(r) & np.isnan(g)) | (np.isinf(r) & (r == g))
    # additive-mask sentinels (float32's extreme ~3.4e38) that saturate to the low type's max
    # with the same sign still mask: not an error
    same |= (np.abs(r) >= SENTINEL) & (np.abs(g) >= 6e4) & (np.sign(r) == np.sign(g))
    d = np.where(same, 0.0, np.abs(r - g))
    d = np.where(np.isnan(d), np.inf, d)
    max_abs = float(d.max())
    mean_abs = float(d.mean()) if np.isfinite(d).all() else math.inf
    normal = np.isfinite(r) & (np.abs(r) < SENTINEL)
    scale = float(np.abs(r[normal]).max()) if normal.any() else 1.0
    rel = max_abs / (scale or 1.0)
    rf, gf = np.where(normal, r, 0), np.where(normal & np.isfinite(g), g, 0)
    denom = float(np.linalg.norm(rf) * np.linalg.norm(gf))
    cos = float(np.dot(rf, gf) / denom) if denom else (1.0 if max_abs == 0 else 0.0)
    passed = bool(np.all(d <= atol + rtol * np.abs(np.where(normal, r, 0))))
    return max_abs, mean_abs, rel, cos, finite, passed


@dataclass
class LayerwiseReport:
    """Per-tensor errors in topological order, the first divergence, and the culprits."""

    reference_runner: str
    candidate_runner: str
    atol: float
    rtol: float
    samples: int
    tensors: List[TensorError] = field(default_factory=list)
    outputs: List[TensorError] = field(default_factory=list)
    unmatched: int = 0
    findings: List[Finding] = field(default_factory=list)
    # graph outputs of each run, per sample batch: {"reference": [...], "candidate": [...]}
    runs: Dict[str, List[Feed]] = field(default_factory=dict, repr=False)

    @property
    def outputs_pass(self) -> bool:
        return all(t.passed for t in self.outputs)

    @property
    def first_divergence(self) -> Optional[TensorError]:
        return next((t for t in self.tensors if not t.passed), None)

    def culprits(self, top: int = 5) -> List[TensorError]:
        """Nodes that add the most error (non-finite first), biggest first."""
        bad = [t for t in self.tensors if t.added > self.rtol and not t.passed]
        bad.sort(key=lambda t: -t.added)
        seen, out = set(), []
        for t in bad:
            if t.node not in seen:
                seen.add(t.node)
                out.append(t)
        return out[:top]

    def suggested_exclusions(self, top: int = 5) -> List[str]:
        return [t.node for t in self.culprits(top)]

    def to_dict(self) -> Dict[str, Any]:
        fd = self.first_divergence
        return {
            "reference_runner": self.reference_runner, "candidate_runner": self.candidate_runner,
            "atol": self.atol, "rtol": self.rtol, "samples": self.samples,
            "outputs_pass": self.outputs_pass,
            "outputs": [_clean(asdict(t)) for t in self.outputs],
            "first_divergence": _clean(asdict(fd)) if fd else None,
            "culprits": [_clean(asdict(t)) for t in self.culprits()],
            "suggested_exclusions": self.suggested_exclusions(),
            "tensors": [_clean(asdict(t)) for t in self.tensors],
            "unmatched_tensors": self.unmatched,
            "findings": [f.to_dict() for f in self.findings],
        }


def _clean(d: Dict[str, Any]) -> Dict[str, Any]:
    """JSON has no inf/NaN: write them as strings."""
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def layerwise(reference: Any, candidate: Any, feeds: Optional[Sequence[Feed]] = None, *,
              calibration: Any = None, atol: float = 1e-3, rtol: float = 1e-3,
              candidate_runner: str = "auto", max_samples: int = 8,
              allow_random: bool = False) -> LayerwiseReport:
    """Compare every tensor the two models share (by name). See the module docstring."""
    ref_p, cand_p = _as_proto(reference), _as_proto(candidate)
    findings: List[Finding] = []
    if feeds is None:
        if calibration is not None:
            from workbench.precision.calibration import load_calibration

            feeds = load_calibration(calibration, ref_p)
        elif allow_random:
            from workbench.equivalence import make_inputs

            feeds = [make_inputs(ref_p, seed=0, other=cand_p)]
            findings.append(Finding(
                "warning", "random-inputs", "compared on random inputs: errors on real data can "
                "be very different", hint="pass representative inputs (--inputs PATH)",
                source="compare"))
        else:
            raise WorkbenchError("no inputs to compare on", field="inputs",
                                 hint="pass representative inputs (.npz with the model's input "
                                      "names), or allow random inputs explicitly")
    feeds = _limit(list(feeds), max_samples)
    if candidate_runner == "auto":
        candidate_runner = "reference" if has_low_float(cand_p) else "onnxruntime"
    ref_out = run_all(ref_p, feeds, "onnxruntime")
    cand_out = run_all(cand_p, feeds, candidate_runner)
    n_samples = sum(min(len(v) if np.ndim(v) else 1 for v in f.values()) for f in feeds)
    report = LayerwiseReport("onnxruntime", candidate_runner, atol, rtol, n_samples,
                             findings=findings)
    producer = {o: n for n in ref_p.graph.node for o in n.output if o}
    node_name = {id(n): (n.name or f"{n.op_type}:{n.output[0]}") for n in ref_p.graph.node}
    errors: Dict[str, TensorError] = {}
    for node in ref_p.graph.node:
        for t in node.output:
            if not t or t in errors:
                continue
            if t not in ref_out[0] or t not in cand_out[0]:
                report.unmatched += 1
                continue
            ra, ga = ref_out[0][t], cand_out[0][t]
            if np.asarray(ra).dtype.kind not in "fc" or np.shape(ra) != np.shape(ga):
                continue
            r = np.concatenate([np.asarray(o[t]).reshape(-1) for o in ref_out])
            g = np.concatenate([np.asarray(o[t]).reshape(-1) for o in cand_out])
            mx, mean, rel, cos, finite, ok = tensor_error(r, g, atol, rtol)
            worst_in = max((errors[i].rel for i in node.input if i in errors), default=0.0)
            if not math.isfinite(worst_in):
                added = 0.0  # non-finite came in: this node only passes it on
            else:
                added = rel - worst_in if math.isfinite(rel) else math.inf
            te = TensorError(t, node_name[id(node)], node.op_type, list(np.shape(ra)), mx, mean,
                             rel, cos, finite, ok, added)
            errors[t] = te
            report.tensors.append(te)
    outs = [o.name for o in ref_p.graph.output]
    for name in outs:
        if name in errors:
            report.outputs.append(errors[name])
        elif name in ref_out[0] and name in cand_out[0]:
            mx, mean, rel, cos, finite, ok = tensor_error(ref_out[0][name], cand_out[0][name],
                                                          atol, rtol)
            report.outputs.append(TensorError(name, producer.get(name).name if name in producer
                                              else "", "", list(np.shape(ref_out[0][name])), mx,
                                              mean, rel, cos, finite, ok))
    report.runs = {name: [{k: v for k, v in r.items() if k in outs} for r in res]
                   for name, res in (("reference", ref_out), ("candidate", cand_out))}
    fd = report.first_divergence
    if fd is not None:
        report.findings.append(Finding(
            "warning", "first-divergence",
            f"first tensor beyond tolerance: '{fd.tensor}' from node '{fd.node}' ({fd.op}), "
            f"max abs error {fd.max_abs:.3g}, relative {fd.rel:.3g}",
            nodes=[fd.node], tensors=[fd.tensor], op=fd.op, source="compare"))
    for t in report.culprits():
        what = ("turns finite inputs into inf/NaN (overflow)" if not math.isfinite(t.added)
                else f"adds relative error {t.added:.3g}")
        report.findings.append(Finding(
            "warning" if report.outputs_pass else "error", "precision-loss",
            f"node '{t.node}' ({t.op}) {what}", nodes=[t.node], tensors=[t.tensor], op=t.op,
            hint=f"keep it in higher precision: workbench precision --exclude {t.node}",
            source="compare"))
    return report


def _limit(feeds: List[Feed], n: int) -> List[Feed]:
    """At most `n` samples in total (the reference evaluator is slow), split along axis 0."""
    out: List[Feed] = []
    left = n
    for f in feeds:
        if left <= 0:
            break
        k = min(len(v) if np.ndim(v) else 1 for v in f.values())
        if k > left:
            f = {name: v[:left] for name, v in f.items()}
            k = left
        out.append(f)
        left -= k
    return out


# ----------------------------------------------------------------------------- RunResults
def save_run_results(path: Any, runs: Dict[str, List[Feed]]) -> Path:
    """Save {runner name: [outputs per iteration]} as Polygraphy RunResults JSON
    (`polygraphy run --load-outputs` reads it)."""

    def arr(a: np.ndarray) -> Dict[str, Any]:
        buf = io.BytesIO()
        np.save(buf, np.asarray(a), allow_pickle=False)
        return {"values": {"array": base64.b64encode(buf.getvalue()).decode(),
                           "polygraphy_class": "ndarray"}, "polygraphy_class": "LazyArray"}

    lst = [[name, [{"outputs": {k: arr(v) for k, v in it.items()}, "runtime": None,
                    "runner_name": name, "polygraphy_class": "IterationResult"} for it in iters]]
           for name, iters in runs.items()]
    return atomic_write_text(Path(path), json.dumps({"lst": lst, "polygraphy_class": "RunResults"}))


def load_run_results(path: Any) -> Dict[str, List[Feed]]:
    """Read Polygraphy RunResults JSON (ours or Polygraphy's) without pickle."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        out: Dict[str, List[Feed]] = {}
        for name, iters in data["lst"]:
            out[name] = []
            for it in iters:
                feed = {}
                for k, v in it["outputs"].items():
                    enc = v["values"] if v.get("polygraphy_class") == "LazyArray" else v
                    raw = base64.b64decode(enc["array"].encode(), validate=True)
                    feed[k] = np.load(io.BytesIO(raw), allow_pickle=False)
                out[name].append(feed)
        return out
    except FileNotFoundError:
        raise WorkbenchError("file not found", file=str(p)) from None
    except (ValueError, KeyError, TypeError) as e:
        raise WorkbenchError(f"not a RunResults JSON file ({type(e).__name__}: {e})", file=str(p),
                             hint="save results with `workbench compare --save-results` or "
                                  "`polygraphy run --save-outputs`") from None


# ----------------------------------------------------------------------------- bisection
@dataclass
class ExclusionSearch:
    """The result of `find_exclusions`: the nodes to keep in FP32 and how each round went."""

    target: str
    excluded: List[str]
    passed: bool
    rounds: List[Dict[str, Any]]
    final: Optional[LayerwiseReport] = None

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "excluded": self.excluded, "passed": self.passed,
                "rounds": self.rounds,
                "final": self.final.to_dict() if self.final is not None else None}


def find_exclusions(model: Any, target: str, *, calibration: Any = None,
                    feeds: Optional[Sequence[Feed]] = None, atol: float = 1e-2,
                    rtol: float = 1e-2, max_rounds: int = 8, per_round: int = 1,
                    start: Sequence[str] = ()) -> ExclusionSearch:
    """Convert to `target`, compare layer by layer, keep the worst culprit(s) in FP32, repeat
    until the outputs are within tolerance (or no culprit is left / max_rounds is reached)."""
    from workbench.precision.transform import convert

    ref = _as_proto(model)
    excluded: List[str] = list(start)
    rounds: List[Dict[str, Any]] = []
    report: Optional[LayerwiseReport] = None
    for k in range(max_rounds + 1):
        res = convert(ref, target, exclude_nodes=excluded, calibration=calibration)
        report = layerwise(ref, res.proto, feeds, calibration=calibration, atol=atol, rtol=rtol)
        worst = max((t.rel for t in report.outputs), default=0.0)
        rounds.append({"round": k, "excluded": list(excluded), "outputs_pass": report.outputs_pass,
                       "worst_output_rel": worst if math.isfinite(worst) else "inf"})
        if report.outputs_pass:
            break
        new: List[str] = []
        for t in report.culprits(per_round * 4):
            if t.node not in excluded:
                new.append(t.node)
            else:  # already FP32, yet its value overflows once cast down: keep its consumers too
                new.extend(c.name for c in ref.graph.node
                           if t.tensor in c.input and c.name and c.name not in excluded)
        new = list(dict.fromkeys(new))
        if not new or k == max_rounds:
            break
        excluded.extend(new[:per_round])
    return ExclusionSearch(target, excluded, bool(report and report.outputs_pass), rounds, report)
