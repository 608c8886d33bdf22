"""Layer-wise comparison: where is precision lost, and which nodes must stay in higher precision?

Runs a reference model (FP32, onnxruntime) and a candidate (its FP16/BF16/INT8/FP8 transform, or a
surgically changed model) on the same inputs with *every* intermediate tensor compared
(Polygraphy's `--mark all`), without holding them all: both graphs run a segment at a time
(`Runner.stream`, `workbench.runtime.segments`: every node once, a chunk of tensors within the memory
budget per segment; the two graphs side by side in the onnxruntime child, each a segment ahead
while this one is compared on up to two threads), matches tensors by name,
and reports per tensor the figures of `workbench.runtime.comparison` (max/mean absolute error, error
relative to the tensor's scale, cosine, pass/fail at atol/rtol). Tolerances default to the
candidate's precision (`infer_precision`), the same defaults `find_exclusions` uses for its target,
so `compare REF CAND` and `compare --to` agree. From that it finds the first divergence in
topological order and the nodes that *add* error, which are the ones to keep in FP32 (`workbench
precision --exclude NODE`):
- a node that computes (Conv, Add, Softmax ...) adds its output's relative error minus the worst
  relative error among its inputs;
- a node that only selects or moves values (Relu, MaxPool, Reshape, Concat ... `PASS_THROUGH_OPS`)
  does no rounding in any float type, so it cannot add error; relative figures still change
  across it (Relu drops the negative half and with it the tensor's scale), so it is judged on
  absolute error: output max abs minus the worst input max abs, over the output's scale. An
  initializer it reads (an FP16 embedding table) is not compared, so its rounding shows up here.
- a node whose input is already non-finite only passes the inf/NaN on.

Large models (over `workbench.core.weights.STREAM_DEFAULT_MB` of external weights) are held by
reference: the structure without weight bytes, each weight a memmap of its data file fed to the
segment that reads it; `find_exclusions` lowers the structure over the original FP32 weights (the
Cast the lowering puts before each lowered reader rounds the weight as the converted model stores
it). Nothing is serialized with its weights (no > 2 GB protobuf) and each segment maps at most
`weight_budget_mb(max_memory_mb)` of weights: the peak is about the interpreters (~0.4 GB) plus
the two streams' current segments, whatever the model's size (measured: 0.95 GB for a 3.5 GB
decoder, 0.94 GB for a 6.9 GB one).

Candidates holding FP16/BF16 tensors run on onnx's reference evaluator by default
(`workbench.runtime.runners.ReferenceRunner`, float16 arithmetic like a GPU); onnxruntime's CPU provider
upcasts most FP16 ops to FP32 and would hide overflow. Results save as Polygraphy-compatible
RunResults JSON (arrays stored with np.save, loaded with allow_pickle=False).
"""
from __future__ import annotations

import base64
import io
import json
import math
import os
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from workbench.runtime.comparison import SENTINEL, TensorComparison, compare_tensor, infer_precision
from workbench.core.qdq import quantized_nodes, requantized_readers
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.fsutil import atomic_write_text
from workbench.core.graphindex import GraphIndex
from workbench.core.model import ModelLike, as_model
from workbench.precision.spec import recorded_spec
from workbench.precision.table import BASE, is_low_float, is_quantized, tolerances
from workbench.runtime.runners import (Feed, batched_inputs, has_low_float, limit_samples, load_error,
                               low_float_runner, make_runner, samples_in)
from workbench.runtime.segments import ahead, order_of
from workbench.runtime.verdict import verdict_metric

__all__ = ["SENTINEL", "Feed", "has_low_float", "PASS_THROUGH_OPS", "run_all", "TensorError",
           "LayerwiseReport", "sample_feeds", "layerwise", "save_run_results", "load_run_results",
           "ExclusionSearch", "find_exclusions", "range_prepass", "plan_chunks", "tensor_bytes",
           "constant_tensors", "weightless", "candidate_words", "beyond_text"]

# ops whose output values are input values, selected or moved (exact in every float type)
PASS_THROUGH_OPS = frozenset({
    "Relu", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Max", "Min", "Clip", "Neg",
    "Abs", "Identity", "Dropout", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
    "Slice", "Gather", "GatherElements", "GatherND", "Concat", "Split", "Expand", "Tile", "Pad",
    "DepthToSpace", "SpaceToDepth", "Where", "TopK",
})


# ----------------------------------------------------------------------------- running
def run_all(proto: Any, feeds: Sequence[Feed], runner: str = "onnxruntime") -> List[Feed]:
    """Every node output of `proto` for each feed. runner: onnxruntime | emulate | reference."""
    return _started(runner, proto).infer_all(feeds)


# ----------------------------------------------------------------------------- metrics
@dataclass
class TensorError(TensorComparison):
    """One tensor's comparison (`workbench.runtime.comparison`) plus where it sits in the graph."""

    node: str = ""
    op: str = ""
    added: float = 0.0  # error this node adds (see the module docstring)

    @property
    def tensor(self) -> str:
        return self.name

    @classmethod
    def of(cls, c: TensorComparison, node: str, op: str, added: float = 0.0) -> "TensorError":
        return cls(**{k: getattr(c, k) for k in TensorComparison.__dataclass_fields__},
                   node=node, op=op, added=added)

    def to_dict(self) -> Dict[str, Any]:
        d = super().to_dict()
        return {"tensor": d.pop("name"), "node": d.pop("node"), "op": d.pop("op"), **d}


def added_error(node: Any, out: TensorComparison, inputs: Sequence[TensorComparison]) -> float:
    """The error `node` adds to its output `out`, given its compared inputs."""
    if out.shape_change or any(i.shape_change for i in inputs):
        return 0.0  # a data-dependent shape: no precision figure (selection-aware judges it)
    if any(not (math.isfinite(i.rel) and math.isfinite(i.max_abs)) for i in inputs):
        return 0.0  # non-finite came in: this node only passes it on
    if not math.isfinite(out.rel):
        return math.inf
    if node.op_type in PASS_THROUGH_OPS:
        worst_abs = max((i.max_abs for i in inputs), default=0.0)
        return (out.max_abs - worst_abs) / (out.scale or 1.0)
    return out.rel - max((i.rel for i in inputs), default=0.0)


def precision_words(precision: str) -> str:
    p = str(precision or BASE).upper()
    return f"{p} (Q/DQ)" if is_quantized(precision) else p


def candidate_words(runner: str, precision: str) -> str:
    """A candidate runner's name (`LayerwiseReport.candidate_runner`) as users read it:
    'emulate' is `workbench.runtime.runners.EmulatedRunner` (onnxruntime's CPU provider in FP32 with
    every low-float value rounded and saturated as stored: a GPU's FP16 storage), 'reference'
    onnx's reference evaluator in real low-float arithmetic, 'tensorrt-*' the engine."""
    p = precision_words(precision)
    name = str(runner)
    if name == "emulate":
        return f"{p} emulated on onnxruntime CPU (values rounded to {p} as stored, FP32 arithmetic)"
    if name == "reference":
        return f"{p} arithmetic on onnx's reference evaluator (CPU)"
    if name == "onnxruntime":
        return f"{p} on onnxruntime CPU"
    if name.startswith("tensorrt"):
        return f"the TensorRT {p} engine on the GPU"
    return f"{p}, run by '{name}'"


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
    precision: str = "fp32"  # the candidate's precision (read from its graph)
    chunks: int = 1  # runs needed to keep the marked tensors within the memory budget
    constants: int = 0  # node outputs computed from initializers only (not compared)
    # Q/DQ candidates (INT8/FP8): the nodes whose inputs the candidate quantizes (they read a
    # DequantizeLinear output); only they add quantization error, the others (a BatchNorm,
    # a Relu in float) pass on or scale what comes in. None: every node computes in the
    # candidate's precision (FP16/BF16), any may add error.
    quantized_nodes: Optional[Set[str]] = None
    samples_available: int = 0  # in the data given (max_samples may compare fewer)
    # nodes of the reference's data-dependent selection (NMS / TopK / NonZero and everything
    # after): near-tied rows swap under any rounding there, so their tensors name no culprit
    # and no first divergence (the selection-aware verdict judges them)
    selection_nodes: Set[str] = field(default_factory=set)
    # node -> the nodes whose outputs it reads (set with quantized_nodes where a culprit may be
    # a float node fused behind the quantized ones: `to_exclude` walks up from it)
    feeders: Dict[str, List[str]] = field(default_factory=dict)
    # Q/DQ candidates: pass-through nodes (a Concat) whose output the candidate quantizes again
    # -> the nodes reading it (`workbench.core.qdq.requantized_readers`): excluding those keeps it
    # in float, excluding the node does not
    requantized: Dict[str, List[str]] = field(default_factory=dict)
    # what `workbench precision` recorded in the candidate (`precision.spec.recorded_spec`):
    # its exclusions, which the advice keeps and adds to; None: not made by it
    made_with: Optional[Any] = None
    # FP16/BF16 and Q/DQ candidates: its graph and types (`rounding.CandidateTypes`), for
    # culprits that already compute in FP32 there (a kept node, a float node reading a Q/DQ
    # that belongs to another: the advice names where their input is rounded)
    rounding: Optional[Any] = field(default=None, repr=False)
    # FP16/BF16 candidates: the tensors of attention masks whose sentinel (-1e9) the candidate
    # stores clamped to the type's largest value (`precision.masks`): they differ from FP32 by
    # the clamping alone, which masks the same way before Softmax; never a culprit
    masks: Set[str] = field(default_factory=set)
    # an engine's report: node -> op type; the nodes whose output it compared are those of
    # `tensors` (a fused layer hides the others): a pass-through culprit (a Reshape after a
    # fused ScatterND) passes on error it did not make, from hidden nodes above (`to_exclude`)
    node_ops: Dict[str, str] = field(default_factory=dict)
    # what judges the outputs (`workbench.runtime.verdict.verdict_metric`'s decision: the
    # user's metric, "elementwise" for explicit atol/rtol, None for the default per output
    # kind) and its budget: the verdict `compare` prints and the findings' severity follow it
    metric: Any = field(default=None, repr=False)
    budget: Any = field(default=None, repr=False)
    _verdict: Any = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> Any:
        """The outputs' verdict (`workbench.runtime.verdict.judge_tensors`) from the per-sample
        runs the report kept; judged once, when the outputs and runs are in."""
        from workbench.runtime.verdict import judge_tensors

        key = (len(self.outputs), id(self.runs))
        if self._verdict is None or self._verdict[0] != key:
            v = judge_tensors(self.outputs, self.precision or "fp32", self.runs or None,
                              metric=self.metric, budget=self.budget, atol=self.atol,
                              rtol=self.rtol)
            self._verdict = (key, v)
        return self._verdict[1]

    @property
    def outputs_pass(self) -> bool:
        """The outputs within budget by the verdict (`verdict`)."""
        return bool(self.verdict.passed)

    @property
    def elementwise_pass(self) -> bool:
        """The outputs within atol + rtol*|ref| element by element (a diagnostic)."""
        return all(t.passed for t in self.outputs)

    @property
    def candidate_words(self) -> str:
        """How the candidate was run, in users' terms (`candidate_words`)."""
        return candidate_words(self.candidate_runner, self.precision)

    @property
    def first_divergence(self) -> Optional[TensorError]:
        return next((t for t in self.tensors if not t.passed
                     and t.node not in self.selection_nodes and t.tensor not in self.masks),
                    None)

    def layer_of(self, t: TensorError) -> List[str]:
        """The ONNX nodes computed together with `t`'s node (in an engine: its fused layer;
        here: the node alone)."""
        return [t.node]

    def to_exclude(self, t: TensorError) -> List[str]:
        """The nodes that keep `t` in higher precision: its node, or for a Q/DQ candidate the
        quantized nodes computed with it (a Relu fused behind its INT8 Conv in one engine
        layer: excluding the Relu changes nothing, excluding the Conv does)."""
        q = self.quantized_nodes
        if self.already_fp32(t):  # excluding it again changes nothing: where it is rounded
            return self.rounding.rounded_at(t.node)
        hidden = self.hidden_sources(t) if q is None else []
        if hidden:
            return hidden
        if q is not None and t.node in self.requantized:
            return list(self.requantized[t.node])
        if q is None or t.node in q:
            return [t.node]
        layer = set(self.layer_of(t))
        # the quantized nodes nearest above it in its layer (a layer between two compared
        # tensors can hold more: those are not what feeds this node's error)
        out: List[str] = []
        seen, todo = {t.node}, list(self.feeders.get(t.node, ()))
        while todo:
            n = todo.pop(0)
            if n in seen or n not in layer:
                continue
            seen.add(n)
            if n in q:
                out.append(n)
            else:
                todo += self.feeders.get(n, ())
        return out or [n for n in self.layer_of(t) if n in q] or [t.node]

    def hidden_sources(self, t: TensorError) -> List[str]:
        """For a pass-through culprit (Reshape, Transpose, Concat ...: it moves values, it does
        not round them) whose inputs come from nodes the comparison could not see (fused in an
        engine layer): the nearest computing nodes above it, up through other unseen
        pass-through ones; [] when its inputs were compared (then it is the culprit)."""
        from workbench.core.qdq import PASS_THROUGH_OPS

        if not self.node_ops or t.op not in PASS_THROUGH_OPS:
            return []
        compared = {x.node for x in self.tensors}
        out: List[str] = []
        seen, todo = {t.node}, list(self.feeders.get(t.node, ()))
        while todo:
            n = todo.pop(0)
            if n in seen:
                continue
            seen.add(n)
            if n in compared:
                continue  # its error is known, and smaller: not where this came from
            if self.node_ops.get(n) in PASS_THROUGH_OPS:
                todo += self.feeders.get(n, ())
            elif n in self.node_ops:
                out.append(n)
        return out

    def already_fp32(self, t: TensorError) -> bool:
        """Does `t`'s node already compute in FP32 in this candidate (FP16/BF16: kept, or an
        op the lowering keeps FP32; Q/DQ: a node with no Q/DQ of its own)?"""
        return self.rounding is not None and self.rounding.computes_fp32(t.node)

    def culprits(self, top: int = 5, *, beyond: bool = True) -> List[TensorError]:
        """Nodes that add the most error (non-finite first), biggest first. `beyond`: only
        tensors beyond atol/rtol that add more than rtol; False: any node adding error (the
        search's next step when a metric tighter than the elementwise rule still fails)."""
        q = self.quantized_nodes
        bad = [t for t in self.tensors
               if (t.added > self.rtol and not t.passed if beyond else t.added > 0)
               and t.node not in self.selection_nodes and t.tensor not in self.masks
               and (q is None or not math.isfinite(t.added)
                    or any(n in q for n in self.layer_of(t))
                    # a float node reading the DQ of a quantized op (no Q/DQ of its own):
                    # where that rounding first shows; its advice is the op's (`to_exclude`)
                    or (self.already_fp32(t) and self.rounding.reads_dq(t.node)
                        and bool(self.to_exclude(t))))]
        bad.sort(key=lambda t: -t.added)
        seen, out = set(), []
        for t in bad:
            if t.node not in seen:
                seen.add(t.node)
                out.append(t)
        return out[:top]

    def suggested_exclusions(self, top: int = 5) -> List[str]:
        out: List[str] = []
        for t in self.culprits(top):
            out += [n for n in self.to_exclude(t) if n not in out]
        return out

    def to_dict(self) -> Dict[str, Any]:
        fd = self.first_divergence
        return {
            "reference_runner": self.reference_runner, "candidate_runner": self.candidate_runner,
            "precision": self.precision,
            "atol": self.atol, "rtol": self.rtol, "samples": self.samples,
            "outputs_pass": self.outputs_pass, "elementwise_pass": self.elementwise_pass,
            "verdict_rule": self.verdict.rule,
            "outputs": [t.to_dict() for t in self.outputs],
            "first_divergence": fd.to_dict() if fd else None,
            "culprits": [t.to_dict() for t in self.culprits()],
            "suggested_exclusions": self.suggested_exclusions(),
            "tensors": [t.to_dict() for t in self.tensors],
            "unmatched_tensors": self.unmatched, "chunks": self.chunks,
            "constant_tensors": self.constants,
            "candidate_exclusions": list(self.made_with.exclude_nodes)
            if self.made_with is not None else None,

            "findings": [f.to_dict() for f in self.findings],
        }


def sample_feeds(reference: ModelLike, candidate: Optional[ModelLike] = None, *, calibration: Any = None,
                 allow_random: bool = False, findings: Optional[List[Finding]] = None
                 ) -> List[Feed]:
    """The inputs to compare on: the calibration data, or (only when allowed) random inputs
    with a warning appended to `findings`."""
    ref_p = as_model(reference).proto  # (inputs and shapes: no weight bytes)
    if calibration is not None:
        from workbench.core.inputs import not_batch_finding
        from workbench.precision.calibration import load_calibration

        feeds = load_calibration(calibration, ref_p)
        note = not_batch_finding(ref_p, "compare")
        if findings is not None and note is not None:
            findings.append(note)
        return feeds
    if not allow_random:
        raise WorkbenchError("no inputs to compare on", field="inputs",
                             hint="pass representative inputs (.npz with the model's input "
                                  "names), or allow random inputs explicitly")
    from workbench.runtime.equivalence import make_inputs, non_tensor_inputs, unshaped_inputs

    where = str(reference) if isinstance(reference, (str, os.PathLike)) else None
    other_kind = non_tensor_inputs(ref_p)
    if other_kind:  # (a list or a dict cannot travel in an .npz or as random arrays)
        name, kind = other_kind[0]
        raise WorkbenchError(
            f"input '{name}' is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a tensor: "
            "compare feeds tensors only", file=where, field=f"inputs.{name}", category="tool",
            hint=f"run the model in onnxruntime with your own feed for '{name}', or compare "
                 "the part of the graph after the nodes that read it")
    unshaped = unshaped_inputs(ref_p)
    if unshaped:  # (a made-up rank would fail inside the model, blaming nobody)
        import shlex

        name = unshaped[0]
        path = shlex.quote(str(reference)) if isinstance(reference, (str, os.PathLike)) \
            else "MODEL"
        raise WorkbenchError(
            f"input '{name}' has no shape (unknown rank): random inputs for it cannot be made "
            "up", file=where, field=f"inputs.{name}", category="inputs",
            hint=f"pass real inputs (--inputs PATH, .npz keyed by input name), or give it a "
                 f"shape: `workbench fix {path} --recipe set_input_shapes:shapes="
                 f"{shlex.quote(name)}/1x3x224x224 -o FIXED.onnx` (use its real sizes)")
    other = as_model(candidate).proto if candidate is not None else None
    feed = make_inputs(ref_p, seed=0, other=other)
    if findings is not None:
        # the values of integer scalars (a trip count, a K) decide what the run exercises
        scalars = ", ".join(f"{k} = {int(v)}" for k, v in feed.items()
                            if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype,
                                                                 np.integer))
        findings.append(Finding(
            "warning", "random-inputs", "compared on random inputs: errors on real data can "
            "be very different" + (f" (integer scalars: {scalars})" if scalars else ""),
            hint="pass representative inputs (--inputs PATH)", source="compare"))
    return [feed]


# marked tensors held at once (both runs, all samples). A chunk is one segment of each graph
# (`Runner.stream`: every node runs once whatever the chunk count), so a small budget costs
# only a short-lived session per segment; the reference evaluator re-runs the whole graph per
# chunk, so it gets the larger one.
DEFAULT_BUDGET_MB = 32.0
RERUN_BUDGET_MB = 256.0


_RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli"})


def constant_tensors(proto: Any) -> set:
    """Node outputs that depend on no graph input (Constant, ConstantOfShape, and what is
    computed from initializers only: weights made at run time, shape arithmetic). They are
    weights, not activations: not compared; their rounding shows up in the node reading them."""
    inits = {t.name for t in proto.graph.initializer}
    out: set = set()
    for n in proto.graph.node:
        if n.op_type in _RANDOM_OPS or any(a.type in (5, 10) for a in n.attribute):
            continue  # random, or a body that may read graph inputs
        if all((not x) or x in inits or x in out for x in n.input):
            out.update(o for o in n.output if o)
    return out


def weightless(proto: Any, keep_bytes: int = 4096) -> Any:
    """A copy of `proto` whose large initializers keep name, type and dims but no data: what
    shape inference needs, without copying the weights (small ones, e.g. Reshape shapes, stay)."""
    import onnx

    m = onnx.ModelProto()
    g = proto.graph
    big = [t for t in g.initializer if t.ByteSize() > keep_bytes]
    if not big:
        m.CopyFrom(proto)
        return m
    saved = list(g.initializer)
    try:
        del g.initializer[:]
        m.CopyFrom(proto)
    finally:
        g.initializer.extend(saved)
    for t in saved:
        if t.ByteSize() > keep_bytes:
            m.graph.initializer.append(onnx.TensorProto(name=t.name, dims=list(t.dims),
                                                        data_type=t.data_type))
        else:
            m.graph.initializer.append(t)
    return m



def tensor_bytes(proto: Any, feed: Feed, names: Sequence[str]) -> Dict[str, int]:
    """FP32 bytes of each tensor for one feed (ONNX shape inference with the inputs pinned to
    the feed's shapes); unknown shapes count as the largest known tensor."""
    import onnx

    m = weightless(as_model(proto).proto)
    for vi in m.graph.input:
        if vi.name in feed and vi.type.tensor_type.HasField("shape"):
            shp = np.shape(feed[vi.name])
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == len(shp):
                for d, v in zip(dims, shp):
                    d.Clear()
                    d.dim_value = int(v)
    try:
        typed = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:
        typed = m
    sizes: Dict[str, int] = {}
    for vi in list(typed.graph.value_info) + list(typed.graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            sizes[vi.name] = 4 * int(np.prod([d.dim_value for d in tt.shape.dim] or [1]))
    big = max(sizes.values(), default=4)
    return {n: sizes.get(n, big) for n in names}



def plan_chunks(names: Sequence[str], sizes: Dict[str, int], budget_bytes: Optional[int],
                copies: int = 2, weights: Optional[Dict[str, int]] = None,
                weight_budget: Optional[int] = None) -> List[List[str]]:
    """Split `names` (in order) so each chunk's `copies` x bytes fits the budget (None: one
    chunk) and, with `weights` (bytes of weights the nodes making each tensor map), each
    chunk's segment maps at most `weight_budget` bytes of weights. A tensor over a budget on
    its own gets a chunk of its own."""
    if not names:
        return []
    if budget_bytes is None and weight_budget is None:
        return [list(names)]
    weights = weights or {}
    chunks: List[List[str]] = [[]]
    used = wused = 0
    for n in names:
        b = sizes.get(n, 0) * copies
        w = weights.get(n, 0)
        if chunks[-1] and ((budget_bytes is not None and used + b > budget_bytes) or
                           (weight_budget is not None and wused + w > weight_budget)):
            chunks.append([])
            used = wused = 0
        chunks[-1].append(n)
        used += b
        wused += w
    return chunks


# a segment's weights mapped at once by default (a model held by reference): the peak is about
# two segments' weights (reference and candidate side by side) and the candidate's rounded copy
# of its largest weight, plus the interpreters, whatever the model's size
DEFAULT_WEIGHT_BUDGET_MB = 256.0


def weight_budget_mb(max_memory_mb: Optional[float]) -> float:
    """Weights one segment maps for a peak of about `max_memory_mb` (None: the default): a
    quarter of it, less the interpreters' ~512 MB (reference and candidate segments side by
    side, the candidate's rounded copies of its weights), at least 16 MB."""
    if max_memory_mb is None:
        return DEFAULT_WEIGHT_BUDGET_MB
    return max(16.0, (float(max_memory_mb) - 512.0) / 4.0)


def memory_finding(proto: Any, max_memory_mb: Optional[float]) -> Optional[Finding]:
    """A warning when one weight of a model held by reference is larger than a segment may map
    for `max_memory_mb` (`weight_budget_mb`): a segment holds at least the node reading it, so
    the peak follows that weight instead; None when it fits or nothing is held by reference."""
    from workbench.core import weights

    refs = weights.weight_refs(proto)
    if max_memory_mb is None or not refs:
        return None
    big = max(refs.values(), key=lambda r: r.nbytes)
    budget = weight_budget_mb(max_memory_mb)
    if big.nbytes <= budget * 2 ** 20:
        return None
    need = 512 + 4 * big.nbytes / 2 ** 20
    return Finding(
        "warning", "over-memory",
        f"weight '{big.name}' ({big.nbytes / 2 ** 20:.0f} MB) is larger than a segment may map "
        f"within --max-memory {max_memory_mb:g} ({budget:.0f} MB of weights a segment): its "
        "segment maps it whole, so the peak follows it and may pass the limit",
        tensors=[big.name], source="compare",
        hint=f"allow about {need:.0f} MB (--max-memory {need:.0f}) for a peak the limit holds")


def tensor_weights(proto: Any, names: Sequence[str]) -> Dict[str, int]:
    """Bytes of referenced weights (`workbench.core.weights`) to map before each of `names` can be
    made: the weights of the nodes up to its producer not yet counted for an earlier name."""
    from workbench.core import weights

    per_node = weights.node_weight_bytes(proto)
    if not any(per_node):
        return {}
    want = set(names)
    out: Dict[str, int] = {}
    acc = 0
    for n, b in zip(proto.graph.node, per_node):
        acc += b
        made = [o for o in n.output if o in want]
        if made:
            out[made[0]] = acc
            acc = 0
    return out



def _started(kind: str, proto: Any, label: Optional[str] = None) -> Any:
    r = _labelled(make_runner(kind, proto, mark_all=True), label)
    try:
        r.start()
    except WorkbenchError:
        raise
    except Exception as e:
        raise load_error(r.name, e, label or r._label(),
                         hint="try --runner reference" if r.name != "reference" else None
                         ) from None
    return r


def _labelled(r: Any, label: Optional[str]) -> Any:
    """The runner, its errors naming `label` (the user's file) when given."""
    if label and hasattr(r, "_text"):
        r._text = label
    return r


def _opened(model: Any, stream_weights_mb: Optional[float] = None) -> Any:
    """The model's ModelProto: by reference (`workbench.core.weights`) when it is a path with more
    external weights than the threshold, else with its weights (`Model.with_weights`)."""
    from workbench.core import weights

    if weights.streams(model, stream_weights_mb):
        return weights.by_reference(model)
    return as_model(model).with_weights()


def _label_of(model: Any) -> Optional[str]:
    return str(model) if isinstance(model, (str, os.PathLike)) else None


# ops a conversion puts where a tensor was (a Cast to FP32 on an output, Q/DQ, Identity): the
# same tensor by name, even though another op makes it
CONVERSION_OPS = frozenset({"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear",
                            "Identity"})


def _chunked(report: "LayerwiseReport", ref_p: Any, cand_p: Any, runner: str,
             ref_order: List[str], outs: List[str], feeds: Sequence[Feed], atol: float,
             rtol: float, memory_budget_mb: Optional[float], producer: Dict[str, Any],
             record: Any, labels: Tuple[Optional[str], Optional[str]] = (None, None),
             max_memory_mb: Optional[float] = None) -> Dict[str, List[Feed]]:
    """Fetch the marked tensors a chunk at a time within the budget; compare; drop. Both
    graphs run a segment per chunk (`Runner.stream`: each node once), side by side, each a
    chunk ahead of the comparison."""
    ref_r = _labelled(make_runner("onnxruntime", ref_p, mark_all=True), labels[0])
    cand_r = _started(runner, cand_p, labels[1]) if runner == "reference" else \
        _labelled(make_runner(runner, cand_p, mark_all=True), labels[1])
    cand_names = set(order_of(cand_p)) | {o.name for o in cand_p.graph.output}
    fixed = constant_tensors(ref_p)
    shared = [t for t in ref_order if t in cand_names and t not in fixed]
    # a node the candidate dropped, its input's producer taking over its output's name
    # (onnxruntime's quantizer folds a Relu into the Conv before it, whose output is named
    # as the Relu's was): another tensor under that name, not compared, said. (A rewrite
    # whose last node makes the name, a decomposed FastGelu ending in a Mul, is compared.)
    cand_op = {o: n.op_type for n in cand_p.graph.node for o in n.output if o}

    def took_over(t: str) -> bool:
        if t not in producer or t not in cand_op or cand_op[t] == producer[t].op_type or \
                cand_op[t] in CONVERSION_OPS:
            return False
        ups = {producer[i].op_type for i in producer[t].input if i in producer}
        return cand_op[t] in ups

    other = [t for t in shared if took_over(t)]
    if other:
        t = other[0]
        report.findings.append(Finding(
            "info", "other-producer",
            f"{len(other)} tensor(s) of the reference are made by another op in the candidate, "
            f"e.g. '{t}': {producer[t].op_type} in the reference, {cand_op[t]} in the "
            "candidate (the node was folded into the one before it, which took its name): "
            "they hold other values, so they are not compared", tensors=other[:10],
            source="compare",
            hint="nothing to do: the outputs and the other tensors are compared as usual"))
        shared = [t for t in shared if t not in set(other)]
    report.constants = sum(1 for t in ref_order if t in fixed)
    report.unmatched = len(ref_order) - len(shared) - report.constants
    sizes = tensor_bytes(ref_p, feeds[0], shared) if feeds else {}
    default = RERUN_BUDGET_MB if runner == "reference" else DEFAULT_BUDGET_MB
    budget = (memory_budget_mb if memory_budget_mb is not None else default) * 2 ** 20
    # both runs of every sample, and two chunks at a time: the next runs while this one is
    # compared (`ahead`)
    wsizes = tensor_weights(ref_p, shared)  # (a model held by reference: bounded segments)
    chunks = plan_chunks(shared, sizes, budget, 2 * 2 * max(1, len(feeds)), wsizes,
                         int(weight_budget_mb(max_memory_mb) * 2 ** 20) if wsizes else None
                         ) or [[]]
    chunks[-1] = chunks[-1] + [o for o in outs if o in cand_names and o not in chunks[-1]]
    report.chunks = len(chunks)
    over = memory_finding(ref_p, max_memory_mb) if wsizes else None
    if over is not None:
        report.findings.append(over)
    runs: Dict[str, List[Feed]] = {"reference": [{} for _ in feeds],
                                   "candidate": [{} for _ in feeds]}
    seen: set = set()
    # the two graphs stream side by side (each a segment ahead, in a thread of its own: the
    # onnxruntime child runs both at once) while this thread compares
    ref_s, cand_s = ahead(ref_r.stream(feeds, chunks)), ahead(cand_r.stream(feeds, chunks))
    with closing(ref_s), closing(cand_s):
        pairs = ((c, r, g) for c, (r, g) in zip(chunks, _side_by_side(ref_s, cand_s)))
        _compare_chunks(pairs, outs, feeds, runs, seen, producer, atol, rtol, record)
    return runs


def _locate_wait_s() -> float:
    """How long a stream whose child died under it waits for the other stream's answer: that
    one re-runs its segment in a fresh process to pin the crash ($WORKBENCH_ORT_LOCATE s)."""
    from workbench.runtime.ortchild import LOCATE_ENV

    return float(os.environ.get(LOCATE_ENV) or 30) + 30.0


def _side_by_side(a: Any, b: Any) -> Iterator[Tuple[Any, Any]]:
    """Pairs of two `ahead` streams. Both run in the one onnxruntime child: when it dies under
    both, the error raised is the cause - the run that went past its limit, or the crash that
    repeated in a fresh process (pinned to a node: that model crashed it) - not whichever
    stream the caller happened to read first."""
    from workbench.runtime.ortchild import OrtCrashed, OrtLimitExceeded, OrtStopped

    streams = (a, b)
    while True:
        got = []
        for k, s in enumerate(streams):
            try:
                got.append(next(s))
            except StopIteration:
                return
            except (OrtCrashed, OrtStopped) as e:
                if isinstance(e, OrtStopped) or (e.shared and e.node is None):
                    other = streams[1 - k].failure(_locate_wait_s())
                    if isinstance(other, OrtLimitExceeded) or (
                            isinstance(other, OrtCrashed) and other.node is not None):
                        raise other from None
                raise
        yield got[0], got[1]


def _is_tensor(value: Any) -> bool:
    """Whether a run value is a tensor (onnxruntime returns sequences as lists, maps as
    dicts, an empty optional as None)."""
    return value is not None and not isinstance(value, (list, tuple, dict))


def _compare_chunks(items: Any, outs: List[str], feeds: Sequence[Feed],
                    runs: Dict[str, List[Feed]], seen: set, producer: Dict[str, Any],
                    atol: float, rtol: float, record: Any) -> None:
    for chunk, ref_out, cand_out in items:
        for o in outs:
            for k in range(len(feeds)):
                if o in ref_out[k]:
                    runs["reference"][k][o] = ref_out[k][o]
                if o in cand_out[k]:
                    runs["candidate"][k][o] = cand_out[k][o]
        todo: List[str] = []
        for t in chunk:
            if t in seen or t not in producer or t not in ref_out[0] or t not in cand_out[0]:
                continue
            ra, ga = ref_out[0][t], cand_out[0][t]
            if not _is_tensor(ra) or not _is_tensor(ga):  # a sequence, map or optional value:
                continue  # (compared where it becomes a tensor again, e.g. after SequenceAt)
            if np.asarray(ra).dtype.kind not in "fc" or np.shape(ra) != np.shape(ga):
                continue
            seen.add(t)
            todo.append(t)
        done = _compare_all(todo, ref_out, cand_out, atol, rtol)
        for t in todo:  # recorded in graph order (a node's added error reads its inputs')
            record(t, done[t])
        del ref_out, cand_out, done


def _compare_all(names: List[str], ref_out: List[Feed], cand_out: List[Feed], atol: float,
                 rtol: float) -> Dict[str, TensorComparison]:
    """Each tensor's figures; with more than one core, a helper thread takes every other
    tensor (largest first), so a chunk of large activations is compared on two cores while
    the next segments still wait for it (numpy releases the GIL in its loops)."""
    import threading

    def one(t: str) -> TensorComparison:
        return compare_tensor(t, [o[t] for o in ref_out], [o[t] for o in cand_out], atol, rtol)

    out: Dict[str, TensorComparison] = {}
    big = sorted(names, key=lambda t: -int(np.size(ref_out[0][t])))
    if len(big) < 2 or _cores() < 2 or np.size(ref_out[0][big[1]]) < (1 << 18):
        for t in names:
            out[t] = one(t)
        return out
    failed: List[BaseException] = []

    def helper() -> None:
        try:
            for t in big[1::2]:
                out[t] = one(t)
        except BaseException as e:  # raised in the caller's thread below
            failed.append(e)

    th = threading.Thread(target=helper, name="compare-helper", daemon=True)
    th.start()
    try:
        for t in big[0::2]:
            out[t] = one(t)
    finally:
        th.join()
    if failed:
        raise failed[0]
    return out


def _cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def layerwise(reference: ModelLike, candidate: ModelLike, feeds: Optional[Sequence[Feed]] = None, *,
              calibration: Any = None, atol: Optional[float] = None,
              rtol: Optional[float] = None, candidate_runner: str = "auto",
              max_samples: int = 8, allow_random: bool = False,
              memory_budget_mb: Optional[float] = None,
              stats_path: Any = None,
              labels: Tuple[Optional[str], Optional[str]] = (None, None),
              selection: Optional[Set[str]] = None, max_memory_mb: Optional[float] = None,
              stream_weights_mb: Optional[float] = None, metric: Any = None,
              budget: Any = None) -> LayerwiseReport:
    """Compare every tensor the two models share (by name). See the module docstring.
    atol/rtol None: the defaults of the candidate's precision (`workbench.runtime.comparison`).
    `selection`: the names of the reference's selection-region nodes when the caller has
    them (the FP32-node search, every round), else read from the reference.

    Bounded memory: the marked tensors are fetched a chunk at a time (both runs, every
    sample; each chunk one segment of each graph, every node run once), each chunk compared
    and dropped, so about `memory_budget_mb` (default DEFAULT_BUDGET_MB, RERUN_BUDGET_MB with
    the reference evaluator) of tensors are held; only per-tensor figures are kept.
    `stats_path`: each tensor's figures are also appended there as a JSON line as soon as they
    are known. `labels`: how errors name the two models (default: their paths, when given as
    paths).

    Large models (paths with more external weights than `stream_weights_mb`, default
    `workbench.core.weights.STREAM_DEFAULT_MB`): both are read by reference (`workbench.core.weights`),
    never whole; each segment maps only its own weights, at most `weight_budget_mb(max_memory_mb)`
    of them, so the peak follows the largest segment, not the model."""
    make_runner("onnxruntime", reference).warm()  # its child starts while we prepare
    ref_p, cand_p = _opened(reference, stream_weights_mb), _opened(candidate, stream_weights_mb)
    findings: List[Finding] = []
    if feeds is None:
        feeds = sample_feeds(ref_p, cand_p, calibration=calibration, allow_random=allow_random,
                             findings=findings)
    feeds = list(feeds)
    batched = batched_inputs(ref_p)
    available = sum(samples_in(f, batched) for f in feeds)
    feeds = limit_samples(feeds, max_samples, batched)
    precision = infer_precision(cand_p)
    metric = verdict_metric(metric, atol, rtol)  # (before the defaults fill atol/rtol in)
    atol, rtol = tolerances(precision, atol, rtol)
    if candidate_runner == "auto":
        candidate_runner = low_float_runner(cand_p)
    report = LayerwiseReport("onnxruntime", candidate_runner, atol, rtol,
                             sum(samples_in(f, batched) for f in feeds), findings=findings,
                             precision=precision, quantized_nodes=quantized_nodes(cand_p)
                             if is_quantized(precision) else None,
                             requantized=requantized_readers(cand_p),
                             samples_available=available,
                             selection_nodes=selection if selection is not None
                             else _selection_node_names(ref_p), made_with=recorded_spec(cand_p),
                             rounding=_candidate_types(cand_p, precision),
                             metric=metric, budget=budget)
    producer = {o: n for n in ref_p.graph.node for o in n.output if o}
    node_name = {id(n): (n.name or f"{n.op_type}:{n.output[0]}") for n in ref_p.graph.node}
    outs = [o.name for o in ref_p.graph.output]
    ref_order = list(dict.fromkeys(o for n in ref_p.graph.node for o in n.output if o))
    errors: Dict[str, TensorError] = {}
    sink = open(stats_path, "a", encoding="utf-8") if stats_path else None

    def record(t: str, c: TensorComparison) -> None:
        node = producer[t]
        ins = [errors[i] for i in node.input if i in errors]
        te = TensorError.of(c, node_name[id(node)], node.op_type, added_error(node, c, ins))
        errors[t] = te
        report.tensors.append(te)
        if sink is not None:
            sink.write(json.dumps(te.to_dict()) + "\n")
            sink.flush()

    try:
        runs = _chunked(report, ref_p, cand_p, candidate_runner, ref_order, outs, feeds,
                        atol, rtol, memory_budget_mb, producer, record,
                        (labels[0] or _label_of(reference), labels[1] or _label_of(candidate)),
                        max_memory_mb)
    finally:
        if sink is not None:
            sink.close()
    order_of = {t: i for i, t in enumerate(ref_order)}
    report.tensors.sort(key=lambda t: order_of.get(t.tensor, 0))
    for name in outs:
        if all(name in r for r in runs["reference"]) and all(name in r for r in runs["candidate"]):
            c = compare_tensor(name, [o[name] for o in runs["reference"]],
                               [o[name] for o in runs["candidate"]], atol, rtol, top1=True)
            prev = errors.get(name)
            report.outputs.append(TensorError.of(
                c, prev.node if prev else (node_name[id(producer[name])] if name in producer
                                           else ""),
                prev.op if prev else "", prev.added if prev else 0.0))
    report.runs = runs
    report.findings.extend(_clamped_masks(report, ref_p, cand_p))
    report.findings.extend(divergence_findings(report))
    return report


def _clamped_masks(report: LayerwiseReport, ref_p: Any, cand_p: Any) -> List[Finding]:
    """Find the attention masks an FP16/BF16 candidate stores clamped (`precision.masks`),
    note their tensors in `report.masks` and say so once each."""
    from workbench.precision import masks, table

    limit = table.get(report.precision).max_abs \
        if report.rounding is not None and report.rounding.quantized is None else None
    if not limit:
        return []
    # (max |reference| on these inputs, the mask sentinels included: `scale` leaves them out)
    ranges = {t.tensor: t.magnitude for t in report.tensors}
    out = []
    for path in masks.mask_paths(ref_p, ranges, limit):
        if masks.stored_low(path, cand_p):
            report.masks.update(path.tensors)
            f = masks.mask_finding(path, limit, report.precision, stored=True)
            f.message += ("; its tensors differ from FP32 by that clamping alone, so they "
                          "name no culprit")
            f.source = "compare"
            out.append(f)
    return out


def _candidate_types(proto: Any, precision: str) -> Any:
    """`rounding.CandidateTypes` of an FP16/BF16 or Q/DQ (INT8/FP8) candidate (None for
    other precisions)."""
    from workbench.compare.rounding import CandidateTypes

    if is_quantized(precision):
        return CandidateTypes.of(proto, quantized_nodes(proto))
    if not is_low_float(precision):
        return None
    return CandidateTypes.of(proto)


def _selection_node_names(proto: Any) -> Set[str]:
    """Names of the nodes of `proto`'s data-dependent selection region (none: empty)."""
    from workbench.surgery.split import selection_region

    region, _, _ = selection_region(proto)
    return {proto.graph.node[i].name or f"{proto.graph.node[i].op_type}:"
            f"{proto.graph.node[i].output[0]}" for i in region}


def beyond_text(t: TensorComparison, atol: float, rtol: float) -> str:
    """Why a tensor is beyond tolerance, in the terms of the elementwise rule
    (`workbench.runtime.comparison`: an element fails when |error| > atol and > rtol x
    |reference|; the outputs themselves are judged by the verdict, `workbench.runtime.verdict`).
    Its relative error (max abs error over the tensor's largest value) can be far below rtol
    while a few small elements still fail: both figures are named."""
    if t.shape_change:
        return (f"its shape changed ({t.shape_change}): a data-dependent selection (NMS, TopK, "
                "NonZero) kept other elements, so there is no elementwise figure; `workbench "
                "compare REF CAND --selection-aware` judges the rows it selects")
    if not t.finite:
        bad = ", ".join(x for x in (f"{t.nan} NaN" if t.nan else "",
                                    f"{t.inf} inf" if t.inf else "") if x)
        return f"the candidate holds {bad} where the reference is finite"
    return (f"{t.mismatches} of {t.size} element(s) differ by more than atol {atol:g} and rtol "
            f"{rtol:g} x |reference| (the elementwise rule); max abs error "
            f"{t.max_abs:.3g} = relative error {t.rel:.3g} of the tensor's largest |value| "
            f"{t.scale:.3g}")


def _prior_flags(made_with: Any, precision: str) -> List[str]:
    """The flags the candidate was made with (`LayerwiseReport.made_with`) that a new
    `workbench precision` command must repeat: its exclusions and non-default settings
    (none when it recorded nothing, or another target)."""
    import shlex

    if made_with is None or made_with.target != precision:
        return []
    flags = [f"--exclude {shlex.quote(n)}" for n in made_with.exclude_nodes]
    flags += [f"--exclude-op {shlex.quote(o)}" for o in made_with.exclude_ops]
    if is_quantized(precision) and made_with.calibrate_method != "entropy":
        flags.append(f"--calib-method {made_with.calibrate_method}")
    if not made_with.keep_io_types:
        flags.append("--no-keep-io")
    if is_quantized(precision) and not made_with.per_channel:
        flags.append("--no-per-channel")
    if getattr(made_with, "fallback", None):  # its nodes without Q/DQ computed in this type
        flags.append(f"--fallback {made_with.fallback}")
    return flags


def _keep_hint(precision: str, node: Union[str, Sequence[str]], made_with: Any = None,
               subject: str = "") -> str:
    """The command that keeps `node` (or these nodes) in higher precision (MODEL / DATA: the
    CLI fills in the reference and the inputs), on top of the exclusions the candidate was
    made with (`made_with`, said as such). `subject`: how the nodes are named ('it')."""
    import shlex

    nodes = [node] if isinstance(node, str) else list(node)
    if not (is_quantized(precision) or is_low_float(precision)):
        return "keep it in higher precision (`workbench precision MODEL --exclude NODE`)"
    prior = _prior_flags(made_with, precision)
    new = [f"--exclude {shlex.quote(n)}" for n in nodes]
    flags = " ".join(dict.fromkeys(prior + new))
    who = subject or ("it" if len(nodes) == 1 else "them")
    command = f"`workbench precision MODEL --to {precision} {flags} --calib DATA -o OUT.onnx`"
    if not prior:
        return f"keep {who} in higher precision: {command}"
    return (f"keep {who} in higher precision as well as what the candidate already keeps "
            f"(it was made with {' '.join(prior)}): {command}")


def divergence_findings(report: "LayerwiseReport",
                        groups: Optional[Dict[str, List[str]]] = None) -> List[Finding]:
    """The first divergence and one finding per culprit (the node to keep in FP32); `groups`:
    the other ONNX nodes of each tensor's fused engine layer, named beside the culprit."""
    out: List[Finding] = []
    fd = report.first_divergence
    if fd is not None:
        where = f"'{fd.tensor}' from node '{fd.node}' ({fd.op})"
        why = beyond_text(fd, report.atol, report.rtol)
        if report.outputs_pass:  # information: where error starts, not a failure
            out.append(Finding(
                "info", "first-divergence",
                f"outputs within budget ({report.verdict.rule}); the first intermediate tensor "
                f"beyond atol/rtol is {where}: {why}. That is where error starts, should it "
                "grow",
                nodes=[fd.node], tensors=[fd.tensor], op=fd.op, source="compare"))
        else:
            out.append(Finding(
                "warning", "first-divergence",
                f"first tensor beyond tolerance: {where}: {why}",
                nodes=[fd.node], tensors=[fd.tensor], op=fd.op, source="compare"))
    for t in report.culprits():
        what = ("turns finite inputs into inf/NaN (overflow)" if not math.isfinite(t.added)
                else f"adds relative error {t.added:.3g}")
        members = [n for n in (groups or {}).get(t.tensor, []) if n != t.node]
        inside = f" (engine layer also holds {', '.join(members[:4])})" if members else ""
        excl = report.to_exclude(t)
        low = report.precision.upper()
        if report.already_fp32(t) and report.quantized_nodes is not None:  # no Q/DQ of its own
            inside += (f"; it is not quantized in the candidate (no Q/DQ of its own, so "
                       f"keeping it in FP32 changes nothing): what it reads carries the {low} "
                       f"rounding of {', '.join(excl[:4])}")
        elif report.already_fp32(t):  # kept before (or an op the lowering keeps FP32)
            inside += (f"; it already computes in FP32 in the candidate: its input is rounded "
                       f"to {low} at {', '.join(excl)}" if excl else
                       f"; it already computes in FP32 in the candidate and reads no {low} "
                       "value")
        elif excl != [t.node] and t.node in report.requantized:  # a Concat between Q/DQ pairs
            inside += (f"; it computes nothing of its own ({t.op}): the model quantizes its "
                       f"output again as the {low} input of "
                       f"{', '.join(excl[:4])}, whose exclusion keeps it in float")
        elif excl != [t.node] and report.quantized_nodes is None and \
                report.hidden_sources(t) == excl:  # error made above it, out of sight
            inside += (f"; it computes nothing of its own ({t.op}): the error comes from "
                       f"{', '.join(excl[:4])} above it, whose output{'s' if len(excl) > 1 else ''}"
                       " the engine does not hold apart (fused)")
        elif excl != [t.node]:  # a float node fused behind the quantized ones that feed it
            inside += (f"; it computes in float, fused with the {low} "
                       f"node{'s' if len(excl) > 1 else ''} {', '.join(excl[:4])}")
        keep = _keep_hint(report.precision, excl, report.made_with,
                          ", ".join(excl) if report.already_fp32(t) else "") if excl else (
            "nothing to keep in FP32 for it: what it reads is FP32 in the candidate, so the "
            "error it adds is how it amplifies the error coming in; judge the other culprits, "
            "or relax the tolerance (--atol/--rtol)")
        if report.outputs_pass:  # nothing to fix: where error is added, should it matter
            out.append(Finding(
                "info", "precision-loss",
                f"node '{t.node}' ({t.op}) {what}{inside}; the outputs are within budget "
                f"({report.verdict.rule}), so nothing needs to stay in higher precision",
                nodes=[t.node] + members, tensors=[t.tensor], op=t.op, source="compare",
                hint="only if you need tighter outputs: " + keep))
            continue
        out.append(Finding(
            "error", "precision-loss",
            f"node '{t.node}' ({t.op}) {what}{inside}", nodes=[t.node] + members,
            tensors=[t.tensor], op=t.op, hint=keep, source="compare"))
    return out


# ----------------------------------------------------------------------------- RunResults
def _picklefree(a: np.ndarray, where: str) -> np.ndarray:
    """`a` as an array np.save writes without pickle: onnxruntime hands string tensors back as
    arrays of Python str objects, saved as fixed-width unicode (bytes as fixed-width bytes)."""
    if a.dtype != object:
        return a
    items = a.ravel().tolist()
    if all(isinstance(x, str) for x in items):
        return a.astype(np.str_)
    if all(isinstance(x, bytes) for x in items):
        return a.astype(np.bytes_)
    raise WorkbenchError(f"{where} holds Python objects, which cannot be saved without pickle",
                         field="save_results", hint="save the results without that output")


def save_run_results(path: Any, runs: Dict[str, List[Feed]]) -> Path:
    """Save {runner name: [outputs per iteration]} as Polygraphy RunResults JSON
    (`polygraphy run --load-outputs` reads it)."""

    def arr(a: np.ndarray, where: str) -> Dict[str, Any]:
        buf = io.BytesIO()
        np.save(buf, _picklefree(np.asarray(a), where), allow_pickle=False)
        return {"values": {"array": base64.b64encode(buf.getvalue()).decode(),
                           "polygraphy_class": "ndarray"}, "polygraphy_class": "LazyArray"}

    lst = [[name, [{"outputs": {k: arr(v, f"{name} output '{k}'") for k, v in it.items()},
                    "runtime": None, "runner_name": name,
                    "polygraphy_class": "IterationResult"} for it in iters]]
           for name, iters in runs.items()]
    return atomic_write_text(Path(path), json.dumps({"lst": lst, "polygraphy_class": "RunResults"}))


def load_run_results(path: Any) -> Dict[str, List[Feed]]:
    """Read Polygraphy RunResults JSON (ours or Polygraphy's) without pickle. Every way the
    file can be wrong (not JSON, wrong structure, an array header that declares more than it
    holds) is a one-line WorkbenchError naming the file and where in it."""
    from workbench.precision.calibration import max_array_bytes, read_npy

    p = Path(path)
    hint = ("save results with `workbench compare --save-results` or "
            "`polygraphy run --save-outputs`")

    def bad(what: str, where: str = "") -> WorkbenchError:
        return WorkbenchError(f"not a RunResults JSON file ({what})", file=str(p),
                              field=where or None, hint=hint)

    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkbenchError("file not found", file=str(p)) from None
    except (OSError, ValueError, RecursionError) as e:  # (folder, not UTF-8, not JSON, deep)
        raise bad(f"{type(e).__name__}: {str(e)[:120]}") from None
    from workbench.formats.polygraphy_run_results import iterations

    budget = [max_array_bytes()]
    out: Dict[str, List[Feed]] = {}
    for _i, name, arrays in iterations(data, str(p)):
        if arrays is None:  # a runner's entry begins
            out[name] = []
            continue
        feed = {}
        for k, arr, where in arrays:
            try:
                raw = base64.b64decode(arr.encode("ascii"), validate=True)
            except ValueError as e:  # (binascii.Error, non-ASCII)
                raise bad(f"array is not base64: {e}", where) from None
            feed[k] = read_npy(io.BytesIO(raw), len(raw), f"{p}[{where}]", budget)
        out[name].append(feed)
    return out


# ----------------------------------------------------------------------------- bisection
@dataclass
class ExclusionSearch:
    """The result of `find_exclusions`: the nodes to keep in FP32 and how each round went."""

    target: str
    excluded: List[str]
    passed: bool
    rounds: List[Dict[str, Any]]
    final: Optional[LayerwiseReport] = None
    findings: List[Finding] = field(default_factory=list)
    hopeless: bool = False  # FP32 activations beyond the target's range: no search was run
    stopped: str = ""  # why the search ended: passed | no-culprit | max-rounds | hopeless
    # outputs after a data-dependent selection, judged through the tensors feeding it
    selected: List[str] = field(default_factory=list)
    # what judged the rounds (`workbench.runtime.verdict`): the metric ("elementwise" when
    # atol/rtol were given alone; None: the default per output kind) and the verdict's rule
    metric: Optional[str] = None
    rule: str = ""

    @property
    def elementwise(self) -> bool:
        """Did the atol/rtol rule judge (asked for by --atol/--rtol or --metric elementwise)?"""
        return self.metric == "elementwise"

    def relax_words(self) -> str:
        """What to relax to accept more error: the options that judge this search."""
        fin = self.final
        if self.elementwise:
            tol = (f"atol {fin.atol:g}, rtol {fin.rtol:g}" if fin is not None else
                   "the defaults")
            return f"relax the tolerance ({tol}: --atol/--rtol)"
        return (f"relax the budget ({self.rule or 'the default verdict'}: --budget), or judge "
                "by the metric that matters to you (--metric)")

    @property
    def quantized_left(self) -> Optional[int]:
        """INT8/FP8: the nodes the answer still quantizes (0: every one kept in FP32, the model
        gains nothing from the target); None for float targets."""
        fin = self.final
        if fin is None or not is_quantized(self.target):
            return None
        return len(fin.quantized_nodes or ())  # (no Q/DQ left: the candidate reads as FP32)

    def why_stopped(self, model: Optional[ModelLike] = None, data: Optional[str] = None) -> str:
        """Why the search ended without meeting the budget, and what to try next, in one
        line (the CLI prints it, the Compare panel shows it; `model`/`data`: paths for the
        commands, else MODEL/DATA). What to relax names what judged: --atol/--rtol for the
        elementwise rule, --budget/--metric for the verdict."""
        import shlex

        m = shlex.quote(str(model)) if isinstance(model, (str, os.PathLike)) else "MODEL"
        d = shlex.quote(str(data)) if data else "DATA"
        calib = ""
        if is_quantized(self.target):  # the scales, more often than a node, are the loss
            calib = (f"; for {self.target.upper()}, another calibration often does more than "
                     f"FP32 nodes: `workbench precision {m} --to {self.target} --calib {d} "
                     "--calib-method percentile -o OUT.onnx` (or minmax) prints its error")
        calib = self._range_hint() + calib
        relax = self.relax_words()
        what = "tolerance" if self.elementwise else "budget"
        if self.stopped == "nothing-left":
            return (f"stopped: keeping one more node in FP32 would leave nothing in "
                    f"{self.target.upper()} (every quantizable node kept): at this {what} the "
                    f"model gains nothing from {self.target.upper()}; build it in FP16, or "
                    f"{relax}{calib}")
        if self.stopped == "no-culprit":
            sel = selects_by_value(model) if model is not None else ""
            why = (f"or comes from ops that pick by value on near-ties ({sel})" if sel else
                   "rounding everywhere rather than in a few nodes")
            return ("stopped: the layer-wise compare blames no node that is not already kept "
                    f"in FP32; the remaining error builds up across many nodes, {why}: judge "
                    f"the outputs' figures against your accuracy needs, or {relax}{calib}")
        said = "relax --atol/--rtol" if self.elementwise else relax
        return (f"stopped after {len(self.rounds)} rounds without meeting the {what} "
                f"({self._judged_by()}): keep the listed nodes and run the search again from "
                f"that model, or {said}{calib}")

    def _judged_by(self) -> str:
        fin = self.final
        if self.elementwise:
            return f"atol {fin.atol:g}, rtol {fin.rtol:g}" if fin is not None else "the defaults"
        return self.rule or "the default verdict"

    def _range_hint(self) -> str:
        """For an output whose largest error is within rtol of its own range but whose
        elements near zero fail by atol (boxes in pixels, depths in metres): the figures and
        the atol that judges it relative to its range ('' for none)."""
        fin = self.final
        if fin is None or not self.elementwise:  # (the verdict judges by the range already)
            return ""
        for t in fin.outputs:
            if t.passed or not t.finite or t.shape_change or not (t.scale > 0) or \
                    not (t.rel <= fin.rtol):
                continue
            atol = float(f"{fin.rtol * t.scale:.2g}")
            if atol <= fin.atol:
                continue
            return (f"; '{t.tensor}': its largest error {t.max_abs:.3g} is {100 * t.rel:.2g}% "
                    f"of its largest value {t.scale:.3g}, within rtol {fin.rtol:g} of its "
                    f"range: the elements beyond are near zero, where atol {fin.atol:g} is the "
                    f"bound; if its values are in large units (pixels, metres), judge it "
                    f"against its range: --atol {atol:g} (rtol x its largest value)")
        return ""

    @property
    def verdict(self) -> Optional[Dict[str, Any]]:
        """The answer's verdict (JSON form): the best round's where the search answered an
        earlier round, else the last one's; None without a round (hopeless)."""
        best = [r for r in self.rounds if r.get("best")]
        return (best or self.rounds or [{}])[-1].get("verdict")

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "excluded": self.excluded, "passed": self.passed,
                "hopeless": self.hopeless, "stopped": self.stopped, "rounds": self.rounds,
                "selected": self.selected, "metric": self.metric, "rule": self.rule,
                "verdict": self.verdict,
                "findings": [f.to_dict() for f in self.findings],
                "final": self.final.to_dict() if self.final is not None else None}


def selects_by_value(model: ModelLike) -> str:
    """'TopK at /post/topk, ...' for the nodes of `model` that pick by value (selection ops,
    ArgMax/ArgMin): a near-tie there flips under any rounding ('' when none)."""
    from workbench.surgery.split import SELECTION_OPS, nodes_of_ops

    proto = as_model(model).proto
    nodes = [proto.graph.node[i] for i in
             nodes_of_ops(proto, tuple(SELECTION_OPS) + ("ArgMax", "ArgMin"))]
    return ", ".join(f"{n.op_type} at {n.name or '?'}" for n in nodes[:3]) + (
        f" +{len(nodes) - 3}" if len(nodes) > 3 else "")


HOPELESS_SHARE = 0.25  # more than this share of the compute nodes out of range: no search
HOPELESS_MIN = 16      # ... and more than this many nodes (a small planted block is not hopeless)


def streamed_ranges(proto: Any, feeds: Sequence[Feed], max_memory_mb: Optional[float] = None
                    ) -> Dict[str, float]:
    """`activation_ranges` a segment at a time: max |value| of every FP32 node output over the
    feeds, each segment mapping at most `weight_budget_mb(max_memory_mb)` of weights (a model
    held by reference is never run whole)."""
    from workbench.runtime.runners import OnnxRuntimeRunner

    order = order_of(proto)
    feeds = list(feeds)
    sizes = tensor_bytes(proto, feeds[0], order) if feeds else {}
    wsizes = tensor_weights(proto, order)
    chunks = plan_chunks(order, sizes, int(DEFAULT_BUDGET_MB * 2 ** 20), max(1, len(feeds)),
                         wsizes, int(weight_budget_mb(max_memory_mb) * 2 ** 20)
                         if wsizes else None)
    ranges: Dict[str, float] = {}
    for outs in OnnxRuntimeRunner(proto).stream(feeds, chunks):
        for res in outs:
            for k, v in res.items():
                if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.size:
                    fin = np.isfinite(v)
                    amax = float(np.abs(v[fin]).max()) if fin.any() else float("inf")
                    if not fin.all():
                        amax = float("inf")
                    ranges[k] = max(ranges.get(k, 0.0), amax)
    return ranges


def range_prepass(ref: Any, feeds: Sequence[Feed], target: str,
                  ranges: Optional[Dict[str, float]] = None
                  ) -> Tuple[List[str], List[Finding], bool]:
    """Before any search: FP32 activations beyond the target's largest finite value (FP16:
    65504) on these inputs, and those entirely below its smallest (they become zeros; their
    nodes start in FP32 too, never counted as hopeless). Returns (nodes that must stay FP32 -
    producers and consumers of those tensors, findings, hopeless). Hopeless: more than
    HOPELESS_SHARE of the compute nodes (and more than HOPELESS_MIN) would have to stay FP32,
    so no exclusion list can make the target worth it."""
    from workbench.precision import table
    from workbench.precision.transform import (activation_ranges, overflow_findings,
                                               underflow_findings)

    entry = table.get(target, field="target")
    if entry.max_abs is None or entry.max_abs > 1e38:  # BF16/FP32 range: nothing to find
        return [], [], False
    if ranges is None:  # (given: measured a segment at a time, `streamed_ranges`)
        ranges = activation_ranges(ref, list(feeds))
    found = overflow_findings(ref, ranges, entry.max_abs, target.upper())
    if entry.min_abs:  # values that flush to zero: named at once, searched from FP32
        found += underflow_findings(ref, ranges, entry.min_abs, target.upper())
    pos = {o: i for i, n in enumerate(ref.graph.node) for o in n.output}
    over = sorted((f for f in found if f.code.endswith("-overflow")),
                  key=lambda f: pos.get(f.tensors[0], 0))  # topological: the first one first
    nodes = list(dict.fromkeys(n for f in over for n in f.nodes))
    compute = [n for n in ref.graph.node if n.op_type not in ("Constant", "ConstantOfShape")]
    under = [n for f in found if f.code.endswith("-underflow") for n in f.extra["exclude"]]
    if not over:
        return under, found, False
    worst = max(over, key=lambda f: (f.extra or {}).get("max_abs") or math.inf)
    wmax = (worst.extra or {}).get("max_abs")
    tensors = [t for f in over for t in f.tensors]
    listed = ", ".join(f"'{t}'" for t in tensors[:5]) + (" ..." if len(tensors) > 5 else "")
    hopeless = len(nodes) > max(HOPELESS_MIN, HOPELESS_SHARE * len(compute))
    if hopeless:
        # a float target with FP32's range, else FP32 itself
        alt = next((n for n in table.names() if table.get(n).low_float
                    and (table.get(n).max_abs or math.inf) > entry.max_abs), table.BASE)
        return nodes, [Finding(
            "error", f"{target}-range",
            f"{len(tensors)} FP32 activation(s) exceed the {target.upper()} limit "
            f"{entry.max_abs:g} on these inputs (first {listed}; largest "
            f"{'inf' if wmax is None else f'{wmax:.4g}'} at '{worst.tensors[0]}' from node "
            f"'{worst.nodes[0]}' ({worst.op})): {len(nodes)} of {len(compute)} nodes would have "
            f"to stay FP32, so no exclusion list makes {target.upper()} worth it; no search run",
            nodes=nodes[:8], tensors=tensors[:8], op=worst.op, source="compare",
            hint=f"use --to {alt} (FP32's range), check that the inputs are representative, or "
                 f"rescale the model (normalisation before the first layers)",
            extra={"limit": entry.max_abs, "tensors": len(tensors), "nodes": len(nodes)})
        ] + [f for f in found if not f.code.endswith("-overflow")], True
    return list(dict.fromkeys(nodes + under)), [Finding(
        "info", f"{target}-range",
        f"{len(tensors)} FP32 activation(s) exceed the {target.upper()} limit {entry.max_abs:g} "
        f"({listed}): the search starts with their {len(nodes)} producer/consumer node(s) in FP32",
        nodes=nodes, tensors=tensors, source="compare")] + found, False


def _lowered_by_reference(ref: Any, target: str, keep: Sequence[str]) -> Any:
    """The `target` conversion of a model held by reference, over its original weights: the
    weights enter the lowering as FP32 graph inputs (so it casts them before their lowered
    readers instead of converting their bytes), then become references again. Emulated, the
    Cast rounds each weight exactly as the converted initializer stores it (values beyond the
    target's range become inf here where the conversion saturates them)."""
    import onnx

    from workbench.core import weights
    from workbench.precision.transform import convert

    refs = weights.weight_refs(ref)
    m = onnx.ModelProto()
    m.CopyFrom(ref)  # (weightless: a few MB)
    weights.as_inputs(m)
    cand = convert(m, target, exclude_nodes=keep, measure=False).proto
    weights.restore(cand, refs)
    _saturate_weight_casts(cand, set(refs))
    return cand


def _saturate_weight_casts(proto: Any, names: Set[str]) -> None:
    """A Clip to FP16's finite range before each Cast of a weight in `names` to FP16 (in
    place): the converted model stores a finite weight beyond the range saturated, where the
    Cast alone would make it inf."""
    from onnx import helper, numpy_helper

    g = proto.graph
    lim = "__wb_fp16_max"
    nodes: List[Any] = []
    added = False
    for n in g.node:
        if n.op_type == "Cast" and n.input and n.input[0] in names and \
                any(a.name == "to" and a.i == 10 for a in n.attribute):
            sat = f"{n.input[0]}__wb_sat{len(nodes)}"
            nodes.append(helper.make_node("Clip", [n.input[0], lim + "_neg", lim], [sat],
                                          name=f"{sat}__wb_saturate"))
            n.input[0] = sat
            added = True
        nodes.append(n)
    if added:
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend([numpy_helper.from_array(np.array(65504.0, np.float32), lim),
                              numpy_helper.from_array(np.array(-65504.0, np.float32),
                                                      lim + "_neg")])


def _search_reference(model: ModelLike, target: str, stream_weights_mb: Optional[float]
                      ) -> Tuple[Any, bool, Optional[str]]:
    """(the reference model, held by reference?, its label): a large model is held by
    reference for float targets (quantizing reads every weight: in memory while the model
    fits, refused beyond); unnamed nodes get their stable ids as names (exclusion lists name
    nodes)."""
    from workbench.core import weights
    from workbench.precision import table

    by_ref = weights.streams(model, stream_weights_mb)
    label = _label_of(model)
    if by_ref and table.get(target, field="target").kind != "float" and \
            weights.external_bytes(model) < weights.PROTOBUF_SAFE_MB * 2 ** 20:
        by_ref = False  # (quantizing reads every weight: in memory while a model fits)
    elif by_ref and table.get(target, field="target").kind != "float":
        raise WorkbenchError(
            f"--to {target} on a model of {weights.external_bytes(model) / 2 ** 30:.1f} GB: "
            "quantizing needs every weight in memory; only float targets (fp16, bf16) are "
            "searched on models held by reference", file=label, field="--to",
            hint="search with --to fp16 or --to bf16")
    ref = weights.by_reference(model) if by_ref else as_model(model).with_weights()
    if any(not n.name for n in ref.graph.node):  # exclusion lists need names: the stable ids
        import onnx

        from workbench.precision.transform import name_unnamed_nodes

        named = onnx.ModelProto()
        named.CopyFrom(ref)
        name_unnamed_nodes(named)
        ref = named
    return ref, by_ref, label


class _Rounds:
    """The search's rounds: each converts the reference to the target with some nodes kept,
    compares layer by layer, and records the round. A model that selects data-dependently
    (NMS, TopK, NonZero) is judged through the tensors feeding the selection (its selected
    outputs swap rows on near-ties under any rounding), the rest of its outputs as usual."""

    def __init__(self, ref: Any, target: str, feeds: Sequence[Feed], *, by_ref: bool,
                 label: Optional[str], calibration: Any, atol: float, rtol: float,
                 max_samples: int, max_memory_mb: Optional[float],
                 findings: List[Finding], metric: Any = None,
                 budget: Union[None, str, float] = None) -> None:
        from workbench.surgery.split import selection_region

        self.ref, self.target, self.feeds, self.by_ref, self.label = \
            ref, target, feeds, by_ref, label
        self.calibration, self.atol, self.rtol = calibration, atol, rtol
        self.metric, self.budget = metric, budget  # (`verdict_metric`'s decision, made)
        self._last: Optional[Tuple[LayerwiseReport, Any]] = None  # the last report judged
        self.max_samples, self.max_memory_mb, self.findings = max_samples, max_memory_mb, findings
        self.rounds: List[Dict[str, Any]] = []
        region, frontier, self.selected = selection_region(ref)
        self.in_region = {ref.graph.node[i].name for i in region}  # (every node is named)
        self.feeding = set(frontier)

    def judged(self, rep: LayerwiseReport) -> List[Any]:
        """The rows the verdict reads (TensorComparison / TensorError): the outputs, or for a
        selecting model the selection's inputs and its unselected outputs."""
        if not self.selected:
            return list(rep.outputs)
        return [t for t in rep.tensors if t.tensor in self.feeding] + \
            [o for o in rep.outputs if o.tensor not in self.selected]

    def verdict(self, rep: LayerwiseReport) -> Any:
        """The verdict (`workbench.runtime.verdict`) of the judged rows at the target's budgets:
        the outputs from the per-sample runs the report kept; a selecting model's tensors
        feeding the selection as plain tensors (`judge_rows`)."""
        from workbench.runtime.verdict import judge_rows

        if self._last is not None and self._last[0] is rep:  # (a round is judged once: a
            return self._last[1]                              # decoder's logits are large)
        outs = [o for o in rep.outputs if o.tensor not in self.selected]
        feeding = [t for t in rep.tensors if t.tensor in self.feeding] if self.selected else []
        v = judge_rows(outs, self.target, rep.runs, internal=feeding, metric=self.metric,
                       budget=self.budget, atol=rep.atol, rtol=rep.rtol)
        self._last = (rep, v)
        return v

    def passes(self, rep: LayerwiseReport) -> bool:
        """Whether the judged rows are within budget (the verdict's)."""
        return self.verdict(rep).passed

    def attempt(self, k: int, keep: List[str]) -> Tuple[LayerwiseReport, float]:
        """Round `k`: the target conversion with `keep` in FP32, compared layer by layer;
        returns (the report, the worst judged relative error) and records the round."""
        from workbench.precision.transform import convert

        ref, target, label = self.ref, self.target, self.label
        if self.by_ref:
            cand = _lowered_by_reference(ref, target, keep)
        else:
            cand = convert(ref, target, exclude_nodes=keep, calibration=self.calibration,
                           measure=False).proto
        rep = layerwise(ref, cand, self.feeds, atol=self.atol, rtol=self.rtol,
                        max_samples=self.max_samples,
                        labels=(label, f"{label} converted to {target}" if label else None),
                        selection=self.in_region, max_memory_mb=self.max_memory_mb)
        rep.findings = self.findings + [f for f in rep.findings if f.code != "over-memory"]
        judged = self.judged(rep)
        w = max((t.rel for t in judged), default=0.0)
        v = self.verdict(rep)
        self.rounds.append({"round": k, "excluded": list(keep), "outputs_pass": v.passed,
                            "worst_output_rel": w if math.isfinite(w) else "inf",
                            "verdict": v.to_dict(), "verdict_words": v.words(),
                            # the elementwise rule, a diagnostic beside the verdict
                            "elementwise_passed": all(t.passed for t in judged),
                            "elements_beyond": sum(t.mismatches for t in judged
                                                   if not t.passed)})
        return rep, w


def _fp32_culprit_neighbours(ref: Any, gi: GraphIndex, report: LayerwiseReport, t: Any,
                             excluded: List[str]) -> List[str]:
    """For a culprit already in FP32 and still adding error: its value overflows once cast
    down (keep its consumers too), or its inputs arrive rounded and it amplifies that, as a
    difference of two large values does (keep their producers too); the nearest nodes still
    rounding its input come first."""
    nodes = ref.graph.node
    consumers = [nodes[c].name for c in gi.consumers_of(t.tensor)
                 if nodes[c].name and nodes[c].name not in excluded]
    found = gi.find(t.node)
    producers = [nodes[p].name for p in (gi.producer_of(i) for i in
                                         (nodes[found[0]].input if found else []))
                 if p is not None and nodes[p].name and nodes[p].name not in excluded]
    # in the candidate its input may be rounded further up (a Cast before an
    # Unsqueeze above its producer): the nearest nodes still in FP16 come first
    rounded = [n for n in report.to_exclude(t) if n not in excluded] \
        if report.already_fp32(t) else []
    return rounded + (consumers + producers if not math.isfinite(t.added)
                      else producers + consumers)


def _next_culprits(ref: Any, gi: GraphIndex, report: LayerwiseReport, excluded: List[str],
                   in_region: Set[str], per_round: int) -> List[str]:
    """The nodes to keep in FP32 next, worst culprit first, none twice (selecting nodes pass
    values on: their rounding is not the loss)."""
    new: List[str] = []
    found = report.culprits(per_round * 4 + len(in_region))
    if not any(t.node not in in_region for t in found) and report.elementwise_pass:
        # the verdict fails (a metric tighter than atol/rtol) with every output within them,
        # so nothing is beyond them: the nodes adding the most error come next all the same
        found = report.culprits(per_round * 4 + len(in_region), beyond=False)
    for t in found:
        if t.node in in_region:
            continue  # (selecting nodes pass values on; their rounding is not the loss)
        if report.quantized_nodes is not None and report.already_fp32(t):
            # INT8/FP8: a node with no Q/DQ of its own (kept, or left in float by the
            # quantizer): keeping it changes nothing, nor do its float neighbours; the
            # quantized nodes whose rounding it carries do
            new.extend(n for n in report.to_exclude(t) if n not in excluded)
            continue
        if t.node not in excluded:
            new.append(t.node)
            continue
        new.extend(_fp32_culprit_neighbours(ref, gi, report, t, excluded))
    return list(dict.fromkeys(new))


def _prune_seeded(search: _Rounds, k: int, excluded: List[str], seeded: List[str],
                  report: LayerwiseReport) -> Tuple[List[str], LayerwiseReport]:
    """Once the outputs pass: try again without the range prepass's nodes (the outputs may
    pass without them, e.g. mask sentinels); they go where they are not needed, else the
    answer stays this round (the try is noted on it)."""
    fewer = [n for n in excluded if n not in seeded]
    again, w = search.attempt(k + 1, fewer)
    if search.passes(again):
        search.rounds[-1]["pruned"] = list(seeded)
        return fewer, again
    search.rounds.pop()
    search.rounds[-1]["without_seeded"] = w if math.isfinite(w) else "inf"
    return excluded, report


def find_exclusions(model: ModelLike, target: str, *, calibration: Any = None,
                    feeds: Optional[Sequence[Feed]] = None, atol: Optional[float] = None,
                    rtol: Optional[float] = None, max_rounds: int = 8, per_round: int = 1,
                    start: Sequence[str] = (), allow_random: bool = False,
                    check_range: bool = True, max_samples: int = 8,
                    max_memory_mb: Optional[float] = None,
                    stream_weights_mb: Optional[float] = None, metric: Any = None,
                    budget: Union[None, str, float] = None) -> ExclusionSearch:
    """Convert to `target`, compare layer by layer, keep the worst culprit(s) in FP32, repeat
    until the outputs are within budget (or no culprit is left / max_rounds is reached).
    Within budget is the verdict `compare`, `matrix` and `plan` give
    (`workbench.runtime.verdict`): `metric` (a name, a callable or "MODULE:FUNC") within
    `budget`; else, with atol/rtol given, the elementwise rule they ask for; else the default
    per output kind at the target's budgets (`budget` alone scales its main figure).
    atol/rtol None: the target's defaults (`workbench.precision.table.tolerances`), which
    still give each tensor's elementwise diagnostic and which tensors are culprits.
    check_range: first look for FP32 activations beyond the target's range (`range_prepass`):
    their nodes start in FP32, and when they are too many the answer comes at once, no search.
    max_samples: the samples each round compares (layerwise's).

    A large model (a path with more external weights than `stream_weights_mb`): the
    reference and every candidate are held by reference (`workbench.core.weights`): the candidate
    is the lowered structure over the original FP32 weights (each weight rounded to the
    target by the Cast the lowering puts before its readers), nothing is serialized with its
    weights, and every run goes a segment at a time within `max_memory_mb`."""
    from workbench.runtime.verdict import parse_budget, resolve_metric, verdict_metric

    metric = resolve_metric(verdict_metric(metric, atol, rtol))  # (said before any run)
    parse_budget(budget)
    ref, by_ref, label = _search_reference(model, target, stream_weights_mb)
    atol, rtol = tolerances(target, atol, rtol)
    findings: List[Finding] = []
    if feeds is None:
        feeds = sample_feeds(ref, calibration=calibration, allow_random=allow_random,
                             findings=findings)
    excluded: List[str] = list(start)
    seeded: List[str] = []  # the range prepass's nodes: kept only if the outputs need them
    over = memory_finding(ref, max_memory_mb) if by_ref else None
    if over is not None:
        findings.append(over)
    if check_range:
        nodes, found, hopeless = range_prepass(
            ref, feeds, target, streamed_ranges(ref, feeds, max_memory_mb) if by_ref else None)
        findings.extend(found)
        if hopeless:
            return ExclusionSearch(target, [], False, [], None, findings, hopeless=True,
                                   stopped="hopeless", metric=_metric_name(metric))
        seeded = [n for n in nodes if n not in excluded]
        excluded.extend(seeded)
    report: Optional[LayerwiseReport] = None
    stopped = "max-rounds"
    gi = GraphIndex(ref.graph)  # a culprit's readers and the producers of its inputs
    search = _Rounds(ref, target, feeds, by_ref=by_ref, label=label, calibration=calibration,
                     atol=atol, rtol=rtol, max_samples=max_samples,
                     max_memory_mb=max_memory_mb, findings=findings, metric=metric,
                     budget=budget)
    rounds = search.rounds
    best: Optional[Tuple[float, int, LayerwiseReport]] = None  # (worst error, round, report)
    for k in range(max_rounds + 1):
        try:
            report, worst = search.attempt(k, excluded)
        except WorkbenchError as e:  # the last quantizable node kept: nothing left to convert
            if k == 0 or "nothing to quantize" not in e.message:
                raise
            stopped = "nothing-left"
            excluded = list(rounds[-1]["excluded"]) if rounds else []
            break
        if best is None or worst < best[0]:
            best = (worst, k, report)
        if search.passes(report):
            stopped = "passed"
            if seeded:
                excluded, report = _prune_seeded(search, k, excluded, seeded, report)
            break
        new = _next_culprits(ref, gi, report, excluded, search.in_region, per_round)
        if not new:
            stopped = "no-culprit"
            break
        if k == max_rounds:
            break
        excluded = excluded + new[:per_round]
    verdict = search.verdict(report) if report is not None else None
    passed = verdict is not None and verdict.passed and stopped != "nothing-left"
    if not passed and best is not None and best[1] != len(rounds) - 1:
        # later rounds made it worse (a kept node can move another's quantization): the
        # answer is the best round, said as such. Best is the least worst relative error of
        # the judged rows: a figure every round has on one scale, where the verdict's losses
        # are per output kind (a top-1 share, 1 - cosine) and all fail here anyway
        excluded, report = list(rounds[best[1]]["excluded"]), best[2]
        rounds[best[1]]["best"] = True
    return ExclusionSearch(target, excluded, passed, rounds, report, findings, stopped=stopped,
                           selected=list(search.selected), metric=_metric_name(metric),
                           rule=verdict.rule if verdict is not None else "")


def _metric_name(metric: Any) -> Optional[str]:
    """A resolved metric as the search records it: its name, a callable's __name__, None."""
    return None if metric is None else str(getattr(metric, "__name__", metric))
