"""Layer-wise comparison of an engine (or any candidate runner) in bounded memory.

`engine_layerwise` compares a candidate with the FP32 onnxruntime reference on chosen tensors
without ever holding every tensor at once, and without marking more than it must:
- **Which tensors**: `boundary_tensors` keeps the ONNX tensors that are outputs of engine
  layers in an *unmarked* build (the layer information's output names), so marking them does
  not break a fusion that the shipped engine has; `compare_tensors(proto)` is every float node
  output (Polygraphy's `mark all`, which changes the engine being debugged).
- **Chunks**: `plan_chunks` splits the marked tensors so one chunk's tensors, for every sample
  and both sides, fit `memory_budget_mb` (sizes from ONNX shape inference at the feeds'
  shapes); each chunk is one candidate (one engine build marking that subset: `candidate(names)`
  returns a Runner) and one reference run fetching only those tensors.
- **Streaming**: each tensor's figures (`workbench.runtime.comparison.compare_tensor`, aggregated over
  all samples, plus its count of reference values beyond the FP16 range) are written to a JSON
  lines file as the chunk arrives; only the tensors in `keep` are saved whole (.npy).
- **Observer check**: the candidate is also run unmarked; its final outputs are the answer the
  report judges, and every marked chunk's final outputs are compared with them. When marking
  changed the answer, a Finding says so and names the chunk.
The per-node added error and culprits use layer_compare's rules (`added_error`), measured from
the nearest compared tensors upstream: a fused layer's error lands on the node that produces its
output, and `groups` names every ONNX node inside that layer.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set

import numpy as np

from workbench.runtime.comparison import SENTINEL, compare_outputs, compare_tensor, infer_precision
from workbench.runtime.runners import mark_outputs  # (re-exported: the marking the runs share)
from workbench.compare.layer_compare import (LayerwiseReport, TensorError, _opened,
                                            added_error, constant_tensors,
                                            divergence_findings, plan_chunks, tensor_bytes,
                                            weightless)
from workbench.runtime.verdict import verdict_metric
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import ModelLike, as_model
from workbench.precision.table import tolerances
from workbench.runtime.runners import (Feed, OnnxRuntimeRunner, Runner, batched_inputs, make_runner,
                               samples_in)

__all__ = ["FP16_MAX", "EngineCompareReport", "mark_outputs", "compare_tensors",
           "boundary_tensors", "onnx_candidate",
           "RecordedRunner", "recorded_candidate", "engine_layerwise", "peak_rss_mb"]

FP16_MAX = 65504.0
CandidateFactory = Callable[[List[str]], Runner]


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (Linux ru_maxrss is in KB)."""
    import resource
    import sys

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024.0 * 1024.0) if sys.platform == "darwin" else r / 1024.0


# ----------------------------------------------------------------------------- marking
def _float_outputs(proto: Any) -> List[str]:
    """Float node outputs in topological order that depend on a graph input (constants and,
    where shape inference knows their type, non-float tensors left out)."""
    import onnx

    try:
        typed = onnx.shape_inference.infer_shapes(weightless(proto))
        types = {vi.name: vi.type.tensor_type.elem_type for vi in
                 list(typed.graph.value_info) + list(typed.graph.output)}
    except Exception:
        types = {}
    floats = {1, 10, 11, 16}
    outs = {o.name for o in proto.graph.output}
    consts = constant_tensors(proto)
    order = []
    for n in proto.graph.node:
        if n.op_type in ("RandomNormal", "RandomUniform") or \
                any(o in consts for o in n.output if o):
            continue  # a constant (folded by TensorRT; it cannot be a network output there)
        for o in n.output:
            if o and o not in outs and (types.get(o, 1) in floats or types.get(o) == 0):
                order.append(o)
    return order


def compare_tensors(proto: Any) -> List[str]:
    """Every float intermediate tensor (what `--mark all` marks), topological order."""
    return _float_outputs(as_model(proto).proto)


def boundary_tensors(proto: Any, layer_outputs: Iterable[str]) -> List[str]:
    """The float intermediate ONNX tensors that are outputs of engine layers (names from the
    layer information of an unmarked build), in topological order: marking these keeps the
    engine's fusions."""
    want = set(layer_outputs)
    return [t for t in _float_outputs(as_model(proto).proto) if t in want]


# ----------------------------------------------------------------------------- sizes, chunks
# ----------------------------------------------------------------------------- candidates
def onnx_candidate(candidate: ModelLike, runner: str = "auto") -> CandidateFactory:
    """A candidate factory for an ONNX model (the CPU stand-in for an engine): marks the names
    as graph outputs and runs it with onnxruntime or onnx's reference evaluator (auto: the
    reference evaluator for FP16/BF16 graphs, which computes in float16 like a GPU)."""
    proto = as_model(candidate).with_weights()

    def make(names: List[str]) -> Runner:
        return make_runner(runner, mark_outputs(proto, names) if names else proto)

    return make


class RecordedRunner(Runner):
    """Outputs recorded elsewhere (a Polygraphy RunResults file's iterations: `polygraphy run
    --trt --trt-outputs mark all --save-outputs`), replayed for the same feeds in order."""

    name = "recorded"

    def __init__(self, iterations: Sequence[Feed], label: str = "recorded") -> None:
        super().__init__(None)
        self.iterations = list(iterations)
        self.name = label

    def _start(self) -> None:
        pass

    def input_metadata(self) -> Dict[str, Any]:
        return {}

    def infer_all(self, feeds: Sequence[Feed]) -> List[Feed]:
        if len(feeds) != len(self.iterations):
            raise WorkbenchError(
                f"the recorded run '{self.name}' has {len(self.iterations)} iteration(s) but "
                f"there are {len(feeds)} input batch(es)", field="inputs",
                hint="pass the inputs that run used (one .npz batch per iteration)")
        return [dict(it) for it in self.iterations]

    def infer(self, feed: Feed) -> Feed:
        return self.infer_all([feed])[0]


def recorded_candidate(iterations: Sequence[Feed], label: str = "recorded") -> CandidateFactory:
    """A candidate factory over recorded outputs: every 'build' is the same recording."""
    return lambda names: RecordedRunner(iterations, label)


# ----------------------------------------------------------------------------- report
@dataclass
class EngineCompareReport(LayerwiseReport):
    """A LayerwiseReport (shared nouns) plus how it was measured: marking, chunks, observer
    check, the statistics file, FP16-range exceedance, fused groups, peak memory."""

    marking: str = "boundaries"
    chunks: List[List[str]] = field(default_factory=list)
    observer: List[Dict[str, Any]] = field(default_factory=list)
    stats_path: Optional[str] = None
    kept: Dict[str, List[str]] = field(default_factory=dict)
    fp16_range: Dict[str, int] = field(default_factory=dict)
    groups: Dict[str, List[str]] = field(default_factory=dict)
    peak_rss_mb: float = 0.0
    budget_mb: Optional[float] = None
    seconds: float = 0.0
    unmarkable: List[str] = field(default_factory=list)  # marking them broke the build
    unmarkable_reason: str = ""
    layers: Optional[Any] = field(default=None, repr=False)  # EngineLayers of the unmarked engine

    @property
    def marking_changed_outputs(self) -> bool:
        return any(not o["same_answer"] for o in self.observer)

    def layer_of(self, t: Any) -> List[str]:
        """`t`'s node and the other ONNX nodes of its fused engine layer."""
        return [t.node] + [n for n in self.groups.get(t.tensor, []) if n != t.node]

    def culprit_groups(self, top: int = 5) -> List[List[str]]:
        """For each culprit, the ONNX nodes of its fused engine layer (the node itself first)."""
        return [[t.node] + [n for n in self.groups.get(t.tensor, []) if n != t.node]
                for t in self.culprits(top)]

    def to_dict(self) -> Dict[str, Any]:
        d = super().to_dict()
        d.update(marking=self.marking, chunks=[len(c) for c in self.chunks],
                 observer=self.observer, marking_changed_outputs=self.marking_changed_outputs,
                 stats_path=self.stats_path, kept=self.kept, fp16_range=self.fp16_range,
                 culprit_groups=self.culprit_groups(), peak_rss_mb=self.peak_rss_mb,
                 budget_mb=self.budget_mb, seconds=self.seconds,
                 unmarkable=self.unmarkable, unmarkable_reason=self.unmarkable_reason)
        return d


MAX_SPLIT_DEPTH = 3  # a marked build that fails is retried as halves this many times


def _fp16_exceed(arrays: Sequence[np.ndarray]) -> int:
    n = 0
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind != "f":
            continue
        with np.errstate(invalid="ignore"):
            ab = np.abs(a)
            n += int(np.count_nonzero((ab > FP16_MAX) & (ab < SENTINEL) & np.isfinite(a)))
    return n


def _groups(proto: Any, compared: Set[str], targets: Iterable[str]) -> Dict[str, Any]:
    """For each target tensor: (its nearest compared upstream tensors, the nodes between)."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(proto)
    producer = {t: gi.nodes[i] for t, i in gi.producer.items()}
    out: Dict[str, Any] = {}
    for t in targets:
        ups: List[str] = []
        nodes: List[str] = []
        seen: Set[str] = set()
        stack = [t]
        while stack:
            cur = stack.pop()
            node = producer.get(cur)
            if node is None:
                continue
            nm = node.name or f"{node.op_type}:{node.output[0]}"
            if nm in seen:
                continue
            seen.add(nm)
            if node.op_type != "Constant":
                nodes.append(nm)
            for i in node.input:
                if not i:
                    continue
                if i in compared:
                    ups.append(i)
                else:
                    stack.append(i)
        out[t] = (list(dict.fromkeys(ups)), nodes)
    return out


def _plan(ref_p: Any, feeds: List[Feed], tensors: Sequence[str],
          memory_budget_mb: Optional[float]) -> Any:
    """(samples, bytes per tensor over all feeds, chunks that fit the budget, budget in bytes):
    all feeds of a chunk are held together, for both sides."""
    batched = batched_inputs(ref_p)  # (points [num_points, 4]: each feed is one sample)
    samples = sum(samples_in(f, batched) for f in feeds)
    budget = int(memory_budget_mb * 1024 * 1024) if memory_budget_mb else None
    sizes = tensor_bytes(ref_p, feeds[0], list(tensors))
    scale = max(samples // max(samples_in(feeds[0], batched), 1), 1)
    sizes = {k: v * scale for k, v in sizes.items()}
    return samples, sizes, plan_chunks(list(tensors), sizes, budget), budget


def _over_budget(chunks: List[List[str]], sizes: Dict[str, int], budget: Optional[int],
                 memory_budget_mb: Optional[float]) -> Optional[Finding]:
    """A warning naming the tensors that alone exceed the budget (they are compared one at a
    time all the same); None when every one fits."""
    if budget is None:
        return None
    too_big = [n for c in chunks if len(c) == 1 for n in c if sizes[n] * 2 > budget]
    if not too_big:
        return None
    return Finding(
        "warning", "over-budget", f"{len(too_big)} tensor(s) alone exceed the memory "
        f"budget of {memory_budget_mb:g} MB (e.g. '{too_big[0]}'); compared one at a time",
        tensors=too_big[:10], hint="raise --memory-budget or use fewer --samples",
        source="compare")


def _node_key(n: Any) -> str:
    """A node's name, or op:first-output for an unnamed one."""
    return n.name or f"{n.op_type}:{n.output[0]}"


@dataclass
class _ChunkState:
    """What every chunk's tensors are compared and recorded with: the tolerances, each tensor's
    producer and group, the errors so far (the upstream of later tensors), the tensors to keep
    whole and the stats file (None: no stats)."""
    atol: float
    rtol: float
    node_of: Dict[str, Any]
    groups: Dict[str, Any]
    keep_set: Set[str]
    keep_dir: Any
    fh: Any
    errors: Dict[str, TensorError] = field(default_factory=dict)


def _keep_whole(keep_dir: Any, t: str, ra: List[Any], ga: List[Any]) -> List[str]:
    """Save both sides of tensor `t` (all samples) as .npy in keep_dir; returns the two paths."""
    kd = Path(keep_dir)
    kd.mkdir(parents=True, exist_ok=True)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in t)
    pr, pc = kd / f"{safe}.reference.npy", kd / f"{safe}.candidate.npy"
    np.save(pr, np.concatenate([np.asarray(a) for a in ra]))
    np.save(pc, np.concatenate([np.asarray(a) for a in ga]))
    return [str(pr), str(pc)]


def _compare_chunk(report: EngineCompareReport, st: _ChunkState, k: int, chunk: List[str],
                   ref_out: List[Dict[str, Any]], cand_out: List[Dict[str, Any]]) -> None:
    """Compare each tensor of chunk `k` on both sides (a missing, non-float or misshapen one is
    unmatched): its error and added error, FP16-range count, kept arrays and stats line."""
    for t in chunk:
        if any(t not in o for o in cand_out) or any(t not in o for o in ref_out):
            report.unmatched += 1
            continue
        ra = [o[t] for o in ref_out]
        ga = [o[t] for o in cand_out]
        if np.asarray(ra[0]).dtype.kind not in "fc" or \
                any(np.shape(a) != np.shape(b) for a, b in zip(ra, ga)):
            report.unmatched += 1
            continue
        c = compare_tensor(t, ra, ga, st.atol, st.rtol)
        node = st.node_of[t]
        ups, members = st.groups[t]
        te = TensorError.of(c, _node_key(node), node.op_type,
                            added_error(node, c, [st.errors[u] for u in ups if u in st.errors]))
        st.errors[t] = te
        report.tensors.append(te)
        report.groups[t] = members
        over = _fp16_exceed(ra)
        if over:
            report.fp16_range[t] = over
        if t in st.keep_set:
            report.kept[t] = _keep_whole(st.keep_dir, t, ra, ga)
        if st.fh is not None:
            line = te.to_dict()
            line.update(chunk=k, fp16_range_exceeded=over, group=members)
            st.fh.write(json.dumps(line) + "\n")
    if st.fh is not None:
        st.fh.flush()


def _observe(report: EngineCompareReport, k: int, chunk: List[str], outs: List[str],
             cand_final: List[Dict[str, Any]], cand_out: List[Dict[str, Any]], atol: float,
             rtol: float) -> None:
    """Note whether marking chunk `k` changed the candidate's final outputs (the observer
    check): compared with the unmarked run's."""
    obs = compare_outputs(cand_final, [{n: o[n] for n in outs if n in o} for o in cand_out],
                          atol, rtol, names=outs, sentinels=False, top1=False)
    report.observer.append({
        "chunk": k, "marked": len(chunk), "same_answer": obs.passed,
        "identical": not obs.reason and obs.max_abs == 0.0,
        "max_abs_change": obs.max_abs if math.isfinite(obs.max_abs) else "inf",
        "reason": obs.reason})


def _run_chunks(report: EngineCompareReport, st: _ChunkState, ref_p: Any,
                candidate: CandidateFactory, feeds: List[Feed], chunks: List[List[str]],
                outs: List[str], cand_final: List[Dict[str, Any]], observer: bool,
                on_chunk: Optional[Callable[[int, int], None]]) -> List[List[str]]:
    """Run each chunk marked on both sides and compare it; a chunk whose marked build fails is
    retried as halves (MAX_SPLIT_DEPTH times), then noted unmarkable. Returns the chunks run."""
    queue = [(list(c), 0) for c in chunks]
    done_chunks: List[List[str]] = []
    while queue:
        chunk, depth = queue.pop(0)
        k = len(done_chunks)
        if on_chunk is not None:
            on_chunk(k, len(done_chunks) + len(queue) + 1)
        try:
            cand_out = candidate(list(chunk)).infer_all(feeds)
        except WorkbenchError as e:
            # marking these tensors can make TensorRT fail (a fused Myelin/ForeignNode
            # region has no implementation once its insides are outputs): mark fewer
            if len(chunk) > 1 and depth < MAX_SPLIT_DEPTH:
                half = len(chunk) // 2
                queue[:0] = [(chunk[:half], depth + 1), (chunk[half:], depth + 1)]
            else:
                report.unmarkable.extend(chunk)
                report.unmarkable_reason = report.unmarkable_reason or \
                    " ".join(str(e).split())[:300]
            continue
        done_chunks.append(chunk)
        ref_run = OnnxRuntimeRunner(mark_outputs(ref_p, chunk), outputs=chunk + outs)
        ref_out = ref_run.infer_all(feeds)
        if observer:
            _observe(report, k, chunk, outs, cand_final, cand_out, st.atol, st.rtol)
        else:  # (a recorded run: every chunk is the same run)
            cand_out = [{n: o[n] for n in chunk if n in o} for o in cand_out]
        _compare_chunk(report, st, k, chunk, ref_out, cand_out)
        del ref_out, cand_out
    return done_chunks


def _final_outputs(report: EngineCompareReport, st: _ChunkState, outs: List[str],
                   final: Any) -> None:
    """The final outputs' errors (unmarked runs), each credited to the node that the compared
    tensors blame for it (else its producer)."""
    for name in outs:
        report.groups.setdefault(name, st.groups[name][1])
        c = final.outputs[name]
        prev = st.errors.get(name)
        node = st.node_of.get(name)
        report.outputs.append(TensorError.of(
            c, prev.node if prev else (node.name if node is not None else ""),
            prev.op if prev else (node.op_type if node is not None else ""),
            prev.added if prev else 0.0))


def engine_layerwise(reference: ModelLike, candidate: CandidateFactory, feeds: Sequence[Feed], *,
                     tensors: Sequence[str], marking: str = "boundaries",
                     memory_budget_mb: Optional[float] = None, stats_path: Any = None,
                     keep: Sequence[str] = (), keep_dir: Any = None,
                     atol: Optional[float] = None, rtol: Optional[float] = None,
                     precision: Optional[str] = None, candidate_name: str = "candidate",
                     findings: Optional[List[Finding]] = None,
                     on_chunk: Optional[Callable[[int, int], None]] = None,
                     observer: bool = True,
                     quantized_nodes: Optional[Set[str]] = None, metric: Any = None,
                     budget: Any = None) -> EngineCompareReport:
    """Compare `tensors` of the candidate (built/run per chunk by `candidate(names)`) with the
    FP32 reference, chunked to `memory_budget_mb`; see the module docstring."""
    t0 = time.monotonic()
    ref_p = _opened(reference)  # (a large model by reference: its runs map the weights)
    feeds = list(feeds)
    if not feeds:
        raise WorkbenchError("no inputs to compare on", field="inputs",
                             hint="pass representative inputs (.npz with the model's input names)")
    precision = precision or infer_precision(ref_p)
    metric = verdict_metric(metric, atol, rtol)  # (before the defaults fill atol/rtol in)
    atol, rtol = tolerances(precision, atol, rtol)
    outs = [o.name for o in ref_p.graph.output]
    samples, sizes, chunks, budget = _plan(ref_p, feeds, tensors, memory_budget_mb)
    report = EngineCompareReport("onnxruntime", candidate_name, atol, rtol, samples,
                                 findings=list(findings or []), precision=precision,
                                 marking=marking, chunks=chunks, budget_mb=memory_budget_mb,
                                 quantized_nodes=quantized_nodes, metric=metric,
                                 budget=budget)
    over = _over_budget(chunks, sizes, budget, memory_budget_mb)
    if over is not None:
        report.findings.append(over)
    stats = Path(stats_path) if stats_path else None
    if stats is not None:
        stats.parent.mkdir(parents=True, exist_ok=True)
    keep_set = set(keep)
    if keep_set and keep_dir is None:
        raise WorkbenchError("full tensors asked for but no folder to keep them in",
                             field="keep_dir")

    # the reference's and the unmarked candidate's final outputs: the answer that counts
    ref_final = OnnxRuntimeRunner(ref_p).infer_all(feeds)
    cand_final = candidate([]).infer_all(feeds)
    final = compare_outputs(ref_final, cand_final, atol, rtol, names=outs)
    if final.reason:
        raise WorkbenchError(f"the candidate cannot be compared: {final.reason}",
                             field="outputs", hint="the engine must have the model's outputs")
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(ref_p)
    node_of = {t: gi.nodes[i] for t, i in gi.producer.items()}
    report.feeders = {_node_key(n): [_node_key(node_of[i]) for i in n.input if i in node_of]
                      for n in gi.nodes}
    compared = set(tensors)
    report.node_ops = {_node_key(n): n.op_type for n in gi.nodes}
    groups = _groups(ref_p, compared, compared | set(outs))
    fh = stats.open("w", encoding="utf-8") if stats is not None else None
    st = _ChunkState(atol, rtol, node_of, groups, keep_set, keep_dir, fh)
    try:
        report.chunks = _run_chunks(report, st, ref_p, candidate, feeds, chunks, outs,
                                    cand_final, observer, on_chunk)
    finally:
        if fh is not None:
            fh.close()
    order = {t: i for i, t in enumerate(tensors)}
    report.tensors.sort(key=lambda te: order.get(te.tensor, 0))
    _final_outputs(report, st, outs, final)
    report.runs = {"reference": [{k: v for k, v in r.items() if k in outs} for r in ref_final],
                   "candidate": [{k: v for k, v in r.items() if k in outs} for r in cand_final]}
    _findings(report)
    report.stats_path = str(stats) if stats is not None else None
    report.peak_rss_mb = peak_rss_mb()
    report.seconds = time.monotonic() - t0
    return report


def _changed_hint(report: EngineCompareReport) -> str:
    """What to try when marked builds answer differently from the shipped engine, for the
    marking that was used: boundaries already keep the fusions, so there the difference is
    the builder choosing other kernels (each build times its own tactics; TF32 and FP16
    kernels round differently)."""
    if report.marking == "boundaries":
        return ("the marking already keeps the fusions (--mark boundaries): the marked builds "
                "chose other kernels than the engine you ship. Give every build the same "
                "timing cache (\"timing_cache\": \"PATH\" in --build-config) so they pick the "
                "same tactics, mark fewer tensors per build (--memory-budget) or name the "
                "tensors to mark (--mark T1,T2); and check the engine was built with the "
                "precision compared (the card beside an engine file says)")
    return ("compare with the default fusion-aware marking (--mark boundaries) or fewer "
            "tensors per build (--memory-budget)")


def _findings(report: EngineCompareReport) -> None:
    if report.unmarkable:
        names = report.unmarkable
        report.findings.append(Finding(
            "warning", "marking-breaks-build",
            f"TensorRT could not build the engine with {len(names)} of these tensors marked as "
            f"outputs ({report.unmarkable_reason}); they were not compared, e.g. "
            + ", ".join(f"'{n}'" for n in names[:4]) + (" ..." if len(names) > 4 else ""),
            tensors=names[:20], source="compare",
            hint="marking the insides of a fused (Myelin/ForeignNode) region can leave TensorRT "
                 "without an implementation: use the default --mark boundaries, or name fewer "
                 "tensors"))
    changed = [o for o in report.observer if not o["same_answer"]]
    if changed:
        o = changed[0]
        report.findings.append(Finding(
            "error", "marking-changed-outputs",
            f"marking tensors changed the engine's answer: {len(changed)} of "
            f"{len(report.observer)} marked build(s) give final outputs beyond tolerance of the "
            f"unmarked engine (chunk {o['chunk']}: max abs change {o['max_abs_change']}); the "
            "per-tensor figures describe a different engine than the one you ship",
            hint=_changed_hint(report), source="compare"))
    elif any(not o["identical"] for o in report.observer):
        worst = max(float(o["max_abs_change"]) for o in report.observer)
        report.findings.append(Finding(
            "info", "marking-moved-outputs",
            f"marked builds move the final outputs by at most {worst:.3g} (within tolerance): "
            "the figures describe the engine you ship", source="compare"))
    if report.fp16_range:
        names = sorted(report.fp16_range, key=lambda n: -report.fp16_range[n])
        report.findings.append(Finding(
            "error", "fp16-range",
            f"{len(names)} tensor(s) exceed the FP16 range (|x| > 65504) already in FP32, e.g. "
            f"'{names[0]}' ({report.fp16_range[names[0]]} values)", tensors=names[:10],
            hint="keep their producers in FP32 (workbench compare --to fp16 bisects them)",
            source="compare"))
    report.findings.extend(divergence_findings(report, report.groups))
