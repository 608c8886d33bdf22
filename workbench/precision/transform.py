"""Precision as an ONNX transform (TensorRT 11 / TensorRT-RTX are strongly typed).

`convert(model, "fp16"|"bf16"|"int8"|"fp8"|"fp32", ...)` returns a new ModelProto the user can
inspect, diff, run on CPU with onnxruntime and hand to any TensorRT:
- FP16 / BF16: Casts + low-precision weights by our own lowering (workbench.precision.lowering:
  If/Loop/Scan bodies, operands bound to one type, validity checked; onnxconverter-common, which
  `polygraphy convert --fp-to-fp16` uses, breaks on those), per-node / per-op-type exclusions
  kept in FP32, I/O kept FP32 on request; opset < 7 upgraded first.
- INT8: Q/DQ pairs (zero point 0, symmetric, per-channel weights) from onnxruntime.quantization's
  quantize_static with entropy / minmax / percentile calibration on CPU.
- FP8 (E4M3FN): the same Q/DQ placement, scales re-derived as amax/448 (workbench.precision.quantize).
Which transform a target gets is the precision table's call (`workbench.precision.table`):
`keep_fp32`, `fp16_casts`, `bf16_casts` and `qdq` below, each fn(proto, TransformJob) ->
(model, findings, report); `convert` does what all targets share (loading, exclusions,
calibration data, range checks of float targets, validation, error measurement).
Findings tell the user what matters: FP32 activations that overflow FP16 (with the nodes to
exclude), nodes kept in FP32, random calibration. With calibration data the converted model is
run against FP32 on onnxruntime CPU and the errors go into the report.
"""
from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from workbench.runtime.comparison import MILD_COSINE, MILD_REL, MILD_TOP1  # noqa: F401 (one rule)
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import Model, ModelLike, as_model
from workbench.precision import fallback as fallback_mod
from workbench.precision import table
from workbench.precision.lowering import structural_error, type_str
from workbench.precision.table import BF16_MAX, CALIBRATE_METHODS, FP16_MAX  # noqa: F401

SENTINEL_ABS = 1.0e38  # |x| this large is float32's min/max used as a mask value, not data
CONSTANT_OPS = ("Constant", "ConstantOfShape")  # excluding one keeps nothing in FP32


def __getattr__(name: str) -> Any:
    if name == "TARGETS":  # from the precision table (tests may register a target)
        return table.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class PrecisionResult:
    """The converted model and what the user should know about it."""

    proto: Any
    target: str
    findings: List[Finding] = field(default_factory=list)
    report: Dict[str, Any] = field(default_factory=dict)
    path: Optional[Path] = None  # where `convert(..., output=)` wrote it (weights beside it)

    def save(self, path: Any, *, source: Any = None, probe: Optional[bool] = None) -> Path:
        """Write the model to `path` (a model `convert` already wrote there is not rewritten;
        one written elsewhere is streamed from its data file). probe (default: for low-float
        targets up to PROBE_MAX_BYTES of weights): load the written file with onnxruntime's
        default optimizations in a child of its own; a crash there is a finding on it
        (`workbench.runtime.ortprobe`), since users load it so next."""
        from workbench.core.model import save_model

        out: Path
        if self.path is not None:
            if Path(path).resolve() == self.path.resolve():
                out = self.path
            else:
                from workbench.precision.streaming import write_streamed

                out = write_streamed(copy.deepcopy(self.proto), self.path.parent, path,
                                     source=source)[0]
        else:
            out = save_model(self.proto, path, source=source)
        if probe if probe is not None else table.is_low_float(self.target):
            from workbench.runtime.ortprobe import optimizer_crash, probe_skipped

            skipped = probe_skipped(out)
            if skipped:
                self.report["ort_probe"] = skipped
            else:
                crash = optimizer_crash(out)
                if crash is not None:
                    self.findings.append(crash)
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"target": self.target, "findings": [f.to_dict() for f in self.findings],
                **self.report}


# --------------------------------------------------------------------------- helpers
def modernize_ir(proto: Any) -> Optional[Finding]:
    """Old exporters (IR < 4) list every initializer as a graph input. Retyping a weight to
    FP16 then contradicts its input declaration, and new Q/DQ initializers would have to be
    inputs too. Drop initializer inputs and raise the IR version to 4 (which allows that)."""
    inits = {t.name for t in proto.graph.initializer}
    dup = [vi for vi in proto.graph.input if vi.name in inits]
    if not dup and proto.ir_version >= 4:
        return None
    keep = [vi for vi in proto.graph.input if vi.name not in inits]
    del proto.graph.input[:]
    proto.graph.input.extend(keep)
    old = proto.ir_version
    proto.ir_version = max(proto.ir_version, 4)
    return Finding("info", "ir-modernized",
                   f"{len(dup)} initializer(s) were also listed as graph inputs (IR {old} style): "
                   f"removed from the inputs, IR version {old} -> {proto.ir_version}",
                   source="precision")


def name_unnamed_nodes(proto: Any) -> int:
    """Give unnamed nodes their stable id as name (exclusion lists need names). Returns count."""
    from workbench.core.model import stable_node_ids

    ids = stable_node_ids(proto.graph)
    n = 0
    for node, nid in zip(proto.graph.node, ids):
        if not node.name:
            node.name = nid
            n += 1
    return n


def resolve_exclusions(proto: Any, exclude_nodes: Iterable[str], exclude_ops: Iterable[str],
                       label: str, target: Optional[str] = None
                       ) -> Tuple[List[str], List[str], List[Finding]]:
    """Check user exclusions against the graph. Unknown node -> error; unknown op -> warning;
    an op whose exclusion changes nothing for `target` (Shape for FP16, Relu for INT8) -> info.
    A node is named by stable id or by a name only it has (`GraphIndex.node_index`): an
    ambiguous name is an error naming the candidates."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(proto, label=label)
    nodes: List[str] = []
    for n in dict.fromkeys(exclude_nodes):
        try:
            nodes.append(gi.key(gi.node_index(n)))
        except WorkbenchError as e:
            raise WorkbenchError(f"cannot exclude '{n}': {e.message}", file=label, node=n,
                                 field="exclude", hint=e.hint) from None
    nodes = list(dict.fromkeys(nodes))
    ops_present = {n.op_type for n in proto.graph.node}
    ops = list(dict.fromkeys(exclude_ops))
    findings = []
    for op in ops:
        if op not in ops_present:
            findings.append(Finding("warning", "exclude-op-absent",
                                    f"--exclude-op {op}: the graph has no {op} node",
                                    op=op, source="precision",
                                    hint="op types in this graph: " + ", ".join(sorted(ops_present))))
    if target is not None:
        from workbench.precision.spec import excludable_ops

        can = set(excludable_ops(ops_present, target))
        idle = [op for op in ops if op in ops_present and op not in can]
        if idle:
            why = ("only the quantized op types (" + ", ".join(sorted(can)) + ") get Q/DQ"
                   if table.is_quantized(target) else
                   f"{'it computes' if len(idle) == 1 else 'they compute'} in FP32 in any case")
            findings.append(Finding(
                "info", "exclude-op-no-effect",
                f"--exclude-op {', '.join(idle)}: excluding {'it' if len(idle) == 1 else 'them'} "
                f"changes nothing in {target.upper()}: {why}", op=idle[0], source="precision",
                hint="exclude the quantized nodes around them (--exclude NODE) or a quantized "
                     "op type" if table.is_quantized(target) else "nothing to do: leave it out"))
    return nodes, ops, findings


def _consumers(graph: Any) -> Dict[str, List[Any]]:
    """Tensor -> the nodes reading it (one per input slot), from the graph index."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(graph)
    return {t: [gi.nodes[i] for i in idx] for t, idx in gi.consumers.items()}


def _producers(graph: Any) -> Dict[str, Any]:
    """Tensor -> the node producing it, from the graph index."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(graph)
    return {t: gi.nodes[i] for t, i in gi.producer.items()}


def run_ort(proto: Any, batches: List[Dict[str, np.ndarray]],
            outputs: Optional[List[str]] = None) -> List[Dict[str, np.ndarray]]:
    """Run a ModelProto on onnxruntime CPU over the batches; one dict of outputs per batch."""
    from workbench.runtime.runners import OnnxRuntimeRunner

    return OnnxRuntimeRunner(proto, outputs=outputs).infer_all(batches)


def activation_ranges(proto: Any, batches: List[Dict[str, np.ndarray]], bounded: bool = False
                      ) -> Dict[str, float]:
    """Max |value| of every float node output in FP32 over the batches (onnxruntime CPU).
    `bounded`: `proto` holds its weights by reference and runs a segment at a time."""
    import onnx

    from workbench.runtime.equivalence import mark_all_outputs
    from workbench.runtime.runners import run_bounded

    m, order, types = mark_all_outputs(proto)
    wanted = [o for o in order if types.get(o, onnx.TensorProto.FLOAT) == onnx.TensorProto.FLOAT]
    ranges: Dict[str, float] = {}
    for res in (run_bounded(proto, batches, wanted) if bounded else
                run_ort(m, batches, wanted)):
        for k, v in res.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "f" and v.size:
                finite = v[np.isfinite(v)]
                amax = float(np.abs(finite).max()) if finite.size else float("inf")
                if not np.isfinite(v).all():
                    amax = float("inf")
                ranges[k] = max(ranges.get(k, 0.0), amax)
    return ranges


def overflow_findings(proto: Any, ranges: Dict[str, float], limit: float = FP16_MAX,
                      dtype_name: str = "FP16", skip_nodes: Sequence[str] = ()) -> List[Finding]:
    """One warning per FP32 node output whose max |value| exceeds `limit`, naming the nodes
    that must stay FP32: the producer and every consumer of the tensor (a consumer computing
    in FP16 would receive infinity; a Constant is never named: excluding one keeps nothing in
    FP32). An attention mask's sentinel on its way to Softmax (`workbench.precision.masks`)
    is one finding for its whole path instead."""
    from workbench.precision.masks import mask_finding, mask_paths

    prod = _producers(proto.graph)
    cons = _consumers(proto.graph)
    graph_outputs = {o.name for o in proto.graph.output}
    findings = []
    sentinels = []
    masks, on_mask = [], set()
    for path in mask_paths(proto, ranges, limit):
        on_mask.update(path.tensors)
        if not all(n in skip_nodes for n in path.nodes + path.sinks):
            masks.append(mask_finding(path, limit, dtype_name))
    for tensor, amax in ranges.items():
        if amax <= limit or tensor not in prod or tensor in on_mask:
            continue
        node = prod[tensor]
        if np.isfinite(amax) and amax >= SENTINEL_ABS:
            sentinels.append((node, tensor))
            continue
        if not np.isfinite(amax):
            continue  # infinite in FP32 already (a -inf mask): FP16 holds the same infinity
        readers = [c for c in cons.get(tensor, []) if c.name != node.name]
        exclude = list(dict.fromkeys(n.name for n in [node] + readers
                                     if n.op_type not in CONSTANT_OPS))
        if all(n in skip_nodes for n in exclude):
            continue
        flags = " ".join(f"--exclude {n}" for n in exclude)
        value = "infinite" if not np.isfinite(amax) else f"{amax:.4g}"
        out_note = " (a graph output)" if tensor in graph_outputs else ""
        findings.append(Finding(
            "warning", f"{dtype_name.lower()}-overflow",
            f"node '{node.name}' ({node.op_type}) produces '{tensor}'{out_note} with max |value| "
            f"{value} in FP32 on the calibration data, beyond the {dtype_name} limit "
            f"{limit:g}: it becomes infinity in {dtype_name}",
            nodes=exclude, tensors=[tensor], op=node.op_type, source="precision",
            hint=f"keep these nodes in FP32: {flags}",
            extra={"max_abs": amax if np.isfinite(amax) else None, "limit": limit}))
    findings.sort(key=lambda f: f.nodes[0])
    findings[:0] = masks
    if sentinels:
        names = [n.name for n, _ in sentinels]
        keep = [c.name for n, t in sentinels for c in [n] + cons.get(t, [])
                if c.op_type not in CONSTANT_OPS]
        findings.append(Finding(
            "info", f"{dtype_name.lower()}-saturated-mask",
            f"{len(sentinels)} tensor(s) hold float32's extreme value (~3.4e38, the usual "
            f"additive attention-mask constant): in {dtype_name} they saturate to "
            f"+-{limit:g}, which keeps masking working; not suggested for exclusion",
            nodes=names, tensors=[t for _, t in sentinels], source="precision",
            hint="if outputs diverge, exclude the mask nodes: "
            + " ".join(f"--exclude {n}" for n in list(dict.fromkeys(keep))[:4])))
    return findings


def underflow_findings(proto: Any, ranges: Dict[str, float], tiny: float,
                       dtype_name: str = "FP16") -> List[Finding]:
    """One warning for the FP32 node outputs whose values are all below `tiny` in magnitude
    and not all zero (0 < max |value| < the target's smallest subnormal): in the target each
    becomes all zeros. Names the tensors (graph order) and, in extra["exclude"], every node
    that would keep them: producers and consumers. Untrained weights often do this."""
    from workbench.core.graphindex import GraphIndex

    gi = GraphIndex.of(proto.graph)
    pos = gi.producer  # tensor -> its producer's place in graph order
    tiny_t = sorted((t for t, amax in ranges.items() if 0.0 < amax < tiny and t in pos),
                    key=pos.__getitem__)
    if not tiny_t:
        return []
    nodes = list(dict.fromkeys(gi.nodes[i].name for t in tiny_t
                               for i in [pos[t]] + gi.consumers_of(t)))
    first = gi.nodes[pos[tiny_t[0]]]
    listed = ", ".join(f"'{t}'" for t in tiny_t[:5]) + (" ..." if len(tiny_t) > 5 else "")
    return [Finding(
        "warning", f"{dtype_name.lower()}-underflow",
        f"{len(tiny_t)} FP32 activation(s) lie entirely below {dtype_name}'s smallest value "
        f"{tiny:.3g} on these inputs ({listed}; the first from node '{first.name}' "
        f"({first.op_type}), max |value| {ranges[tiny_t[0]]:.3g}): in {dtype_name} they become "
        "all zeros",
        nodes=nodes[:20], tensors=tiny_t[:20], op=first.op_type, source="precision",
        hint="check that the inputs and weights are representative (untrained weights give "
             "tiny activations); else keep these nodes in FP32: "
             + " ".join(f"--exclude {n}" for n in nodes[:4]) + (" ..." if len(nodes) > 4 else ""),
        extra={"tiny": tiny, "tensors": len(tiny_t), "exclude": nodes})]


def auto_exclusions(model_or_path: ModelLike, calibration: Any, *, target: str = "fp16",
                    allow_random: bool = False) -> Tuple[List[str], List[Finding]]:
    """Nodes that must stay FP32 for FP16 (activations beyond 65504 on the calibration data):
    producers and consumers of each overflowing tensor. Returns (node names, findings)."""
    from workbench.precision.calibration import load_calibration, random_calibration

    src = as_model(model_or_path)  # a private copy with weights: the transform edits it
    proto = copy.deepcopy(src.proto) if src.path is None else src.load_weights()
    name_unnamed_nodes(proto)
    findings: List[Finding] = []
    if calibration is None:
        if not allow_random:
            raise WorkbenchError("auto exclusions need calibration data", field="calibration",
                                 hint="pass representative inputs (or allow_random=True)")
        batches, warn = random_calibration(proto)
        findings.append(warn)
    else:
        batches = load_calibration(calibration, proto)
    entry = table.get(target, field="target")
    limit = entry.max_abs if entry.max_abs is not None else FP16_MAX
    found = overflow_findings(proto, activation_ranges(proto, batches), limit, target.upper())
    nodes = list(dict.fromkeys(n for f in found if f.code.endswith("-overflow")
                               for n in f.nodes))
    return nodes, findings + found


# --------------------------------------------------------------------------- error metrics
def error_entry(c: Any) -> Dict[str, Any]:
    """The precision report's entry for one output, from `workbench.runtime.comparison`'s result:
    max_abs_err, mean_abs_err, rel_err (= max_abs_err / max|ref|), cosine, finite, ref_max_abs,
    top1_agreement (outputs with a class axis), and pass/fail at atol/rtol."""
    d = {"max_abs_err": c.max_abs, "mean_abs_err": c.mean_abs, "rel_err": c.rel,
         "mean_rel_err": c.mean_rel, "cosine": c.cosine, "finite": c.finite,
         "ref_max_abs": c.scale, "nan": c.nan, "inf": c.inf, "passed": c.passed,
         "mismatches": c.mismatches, "size": c.size}
    if c.top1 is not None:
        d["top1_agreement"] = c.top1
    d["shape"] = list(c.shape)
    if getattr(c, "shape_change", None):
        d["shape_change"] = c.shape_change
    return d


def compare_outputs(ref: List[Dict[str, np.ndarray]], got: List[Dict[str, np.ndarray]],
                    target: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """Per output: the figures of `workbench.runtime.comparison.compare_outputs` at the target's default
    tolerances (`error_entry`, plus atol/rtol; "passed" is the elementwise rule) and the
    verdict `workbench compare` gives (`workbench.runtime.verdict`: by output kind at the
    target's budgets; "verdict": passed, words, rule). Non-finite outputs are reported."""
    from workbench.runtime.verdict import judge_runs
    from workbench.precision.table import tolerances

    atol, rtol = tolerances(target)
    j = judge_runs(ref, got, target or "fp32", atol=atol, rtol=rtol)
    v = j.verdict
    return {k: {**error_entry(c), "atol": atol, "rtol": rtol,
                "verdict": {"passed": v.outputs[k].passed, "words": v.outputs[k].words,
                            "rule": v.rule}}
            for k, c in j.outputs.items()}


def feeds_for(proto: Any, batches: List[Dict[str, np.ndarray]]) -> List[Dict[str, np.ndarray]]:
    """Cast float feeds to the model's declared input types (FP16/BF16 inputs when the
    conversion did not keep I/O types), so the converted model sees what a user would feed.
    Every runner does this itself (`workbench.runtime.runners.cast_feed`)."""
    from workbench.runtime.runners import cast_feed, input_metadata_of

    meta = input_metadata_of(proto)
    return [{**b, **cast_feed(meta, b)} for b in batches]


def measure_error(fp32: Any, converted: Any, batches: List[Dict[str, np.ndarray]],
                  target: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """Run both models on onnxruntime CPU over the batches and compare their outputs."""
    ref = run_ort(fp32, batches)
    got = run_ort(converted, batches)
    return compare_outputs(ref, got, target)


def reference_batches(batches: List[Dict[str, np.ndarray]], limit: int = 8,
                      model: Optional[ModelLike] = None) -> List[Dict[str, np.ndarray]]:
    """At most `limit` samples in total (the numpy evaluator is slow); the same selection
    layer-wise compare makes (`workbench.runtime.runners.limit_samples`, along the batch axis of
    `model`'s batched inputs)."""
    from workbench.runtime.runners import batched_inputs, limit_samples

    return limit_samples(batches, limit, batched_inputs(model) if model is not None else None)


def measure_error_reference(fp32: Any, converted: Any, batches: List[Dict[str, np.ndarray]],
                            target: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """Compare in low-precision storage: the runner `compare` uses for the same candidate
    (`workbench.runtime.runners.low_float_runner`: FP16/BF16 tensors rounded and saturated as a GPU
    stores them, FP32 accumulation; onnx's reference evaluator where that cannot be emulated).
    onnxruntime's CPU provider upcasts most FP16 ops and drops the casts between them, which
    hides overflow that TensorRT on a GPU would show; this run does not."""
    from workbench.runtime.runners import low_float_runner, make_runner

    small = reference_batches(batches, model=fp32)
    ref = run_ort(fp32, small)
    got = make_runner(low_float_runner(converted), converted).infer_all(small)
    return compare_outputs(ref, got, target)


# --------------------------------------------------------------------------- conversion
def _count_ops(proto: Any) -> Dict[str, int]:
    """Nodes per op type, the subgraphs' (Loop / If bodies) included."""
    from workbench.core.graphindex import walk_graphs

    counts: Dict[str, int] = {}
    for g in walk_graphs(proto.graph):
        for n in g.node:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def fold_round_trip_casts(proto: Any) -> int:
    """Remove FP32 -> FP16/BF16 -> FP32 Cast round trips between nodes kept in FP32.

    onnxconverter-common casts every blocked node's output down to FP16 and back up for the
    next blocked node, so a tensor that overflows FP16 still passes through FP16 (infinity)
    even when both its producer and consumers are excluded. Returns the number of Casts removed.
    """
    import onnx

    g = proto.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
        types = {vi.name: vi.type.tensor_type.elem_type for vi in
                 list(inferred.graph.value_info) + list(g.input) + list(g.output)}
    except Exception:
        return 0
    def to_of(n: Any) -> int:
        return next((a.i for a in n.attribute if a.name == "to"), -1)

    low = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    cons = _consumers(g)
    outputs = {o.name for o in g.output}
    rename: Dict[str, str] = {}
    dead = set()
    for n in g.node:
        if n.op_type != "Cast" or to_of(n) not in low:
            continue
        x = n.input[0]
        if types.get(x) != onnx.TensorProto.FLOAT:
            continue
        y = n.output[0]
        users = cons.get(y, [])
        ups = [u for u in users if u.op_type == "Cast" and to_of(u) == onnx.TensorProto.FLOAT]
        for u in ups:
            if u.output[0] in outputs:
                continue
            rename[u.output[0]] = x
            dead.add(id(u))
        if y not in outputs and users and all(id(u) in dead for u in users):
            dead.add(id(n))
    if not dead:
        return 0
    keep = [n for n in g.node if id(n) not in dead]
    for n in keep:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
    removed = len(g.node) - len(keep)
    del g.node[:]
    g.node.extend(keep)
    gone = set(rename)
    kept_vi = [vi for vi in g.value_info if vi.name not in gone]
    del g.value_info[:]
    g.value_info.extend(kept_vi)
    return removed


def _clipped_weights(proto: Any, limit: float, skip: set) -> List[Finding]:
    """Initializers beyond `limit` (they get clipped when converted)."""
    from onnx import numpy_helper

    cons = _consumers(proto.graph)
    out = []
    for t in proto.graph.initializer:
        if t.data_type != 1 or t.data_location == 1:  # (external: checked as it streams)
            continue
        users = [n.name for n in cons.get(t.name, [])]
        if users and all(u in skip for u in users):
            continue
        a = numpy_helper.to_array(t)
        if a.size and np.abs(a[np.isfinite(a)]).max(initial=0.0) > limit:
            out.append(Finding("warning", "weight-clipped",
                               f"initializer '{t.name}' has values up to "
                               f"{float(np.abs(a).max()):.4g}, beyond {limit:g}: clipped",
                               nodes=users, tensors=[t.name], source="precision",
                               hint="exclude its consumer(s) to keep it FP32: "
                               + " ".join(f"--exclude {u}" for u in users)))
    return out


def _check_options(calibrate_method: str, route: str) -> None:
    """Refuse an unknown calibration method or route before any work."""
    if calibrate_method not in CALIBRATE_METHODS:
        raise WorkbenchError(f"unknown calibration method '{calibrate_method}'",
                             field="calibrate_method", hint="choose " + ", ".join(CALIBRATE_METHODS))
    if route not in ("onnx", "modelopt"):
        raise WorkbenchError(f"unknown route '{route}'", field="route", hint="onnx or modelopt")


def _write(out: Any, output: Any, path: Optional[Path], streamed: bool,
           entry: Any) -> Tuple[Optional[Path], List[Finding]]:
    """Write the converted model to `output` (None: nowhere): its weights streamed from the
    source file, or saved with it; returns (where, the streamed weights' clipping findings)."""
    if streamed:
        from workbench.precision.streaming import write_streamed

        assert path is not None  # (a streamed conversion reads a file)
        written, clipped = write_streamed(out, path.parent, output, source=path)
        return written, _streamed_clip_findings(out, clipped, entry)
    if output is not None:
        from workbench.core.model import save_model

        return save_model(out, output, source=path), []
    return None, []


def _source(model_or_path: Any, entry: Any, *, output: Any, route: str
            ) -> Tuple[Any, Optional[Path], bool]:
    """(the ModelProto to transform, its file, streamed?): a float or Q/DQ target written to
    `output` from a model with external data is converted on its structure and its weights
    streamed (calibration runs hold them by reference); anything else is a private copy with
    weights (the transform edits it)."""
    streamed = None
    if output is not None and route == "onnx" and (
            entry.kind == "float" or
            (entry.needs_calibration and _quantizes_streamed(model_or_path, entry))):
        streamed = _weightless(model_or_path)
    if streamed is not None:
        return streamed[0], streamed[1], True
    src = as_model(model_or_path)
    proto = copy.deepcopy(src.proto) if src.path is None else src.load_weights()
    return proto, src.path, False


def _prepare(proto: Any, exclude_nodes: Sequence[str], exclude_ops: Sequence[str], label: str,
             target: str) -> Tuple[List[str], List[str], List[Finding]]:
    """Bring the graph to a current IR, name unnamed nodes (so they can be excluded) and
    resolve the exclusions; returns (nodes, ops, findings)."""
    findings: List[Finding] = []
    modern = modernize_ir(proto)
    if modern:
        findings.append(modern)
    renamed = name_unnamed_nodes(proto)
    if renamed:
        findings.append(Finding("info", "nodes-named", f"{renamed} unnamed node(s) got their "
                                "stable id as name so they can be excluded", source="precision"))
    ex_nodes, ex_ops, ex_findings = resolve_exclusions(proto, exclude_nodes, exclude_ops, label,
                                                       target)
    return ex_nodes, ex_ops, findings + ex_findings


def _batches(proto: Any, entry: Any, calibration: Any, *, profile: Any,
             max_calib_batches: Optional[int], allow_random: bool, measure: bool,
             findings: List[Finding]) -> Tuple[Optional[List[Dict[str, np.ndarray]]], bool]:
    """(calibration batches or None, random?): the data given; random data only where allowed
    (a target that needs calibration refuses without it), each with its finding."""
    from workbench.precision.calibration import load_calibration, random_calibration

    if calibration is not None:
        batches = load_calibration(calibration, proto, profile=profile,
                                   max_batches=max_calib_batches)
        from workbench.core.inputs import not_batch_finding

        note = not_batch_finding(proto, "precision")
        if note is not None:
            findings.append(note)
        return batches, False
    if entry.needs_calibration:
        if not allow_random:
            raise WorkbenchError(f"{entry.name.upper()} needs calibration data to compute "
                                 "scales", field="calibration", hint="pass representative "
                                 "inputs (--calib PATH: .npz/.npy or a folder); random data "
                                 "only with --allow-random, and the scales will be meaningless")
    elif not (allow_random and measure and entry.kind == "float"):
        return None, False
    batches, warn = random_calibration(proto, profile=profile)
    findings.append(warn)
    return batches, True


def _op_counts(report: Dict[str, Any], before_ops: Dict[str, int], out: Any) -> None:
    """Casts inserted and Q/DQ nodes of the converted model, into the report."""
    after_ops = _count_ops(out)
    report["casts_inserted"] = after_ops.get("Cast", 0) - before_ops.get("Cast", 0)
    report["qdq_pairs"] = min(after_ops.get("QuantizeLinear", 0),
                              after_ops.get("DequantizeLinear", 0))
    report["dequantize_nodes"] = after_ops.get("DequantizeLinear", 0)
    report["quantize_nodes"] = after_ops.get("QuantizeLinear", 0)


def _few_samples(proto: Any, target: str, batches: List[Dict[str, np.ndarray]]
                 ) -> Optional[Finding]:
    """Info when entropy calibration ran on fewer than FEW_ENTROPY_SAMPLES samples (its
    histograms do not settle); None otherwise."""
    from workbench.runtime.runners import batched_inputs, samples_in

    n = sum(samples_in(b, batched_inputs(proto)) for b in batches)
    if n >= FEW_ENTROPY_SAMPLES:
        return None
    return Finding(
        "info", "few-calibration-samples",
        f"entropy calibration on {n} sample(s): its histograms (KL divergence, as "
        f"TensorRT's entropy calibrator) need a few hundred samples to settle; with "
        "fewer, the scales can clip more than they should",
        hint="add representative samples, or compare --calib-method minmax / "
        "percentile on the same data (`workbench precision MODEL --to "
        f"{target} --calib DATA --calib-method minmax -o OUT.onnx` prints its error "
        "against FP32)",
        source="precision")


def _held_findings(findings: List[Finding], held: str, target: str) -> List[Finding]:
    """A model that already computes in a low type: first, what the conversion did (nothing,
    or kept that type), and no note about unchecked FP32 activations (it would mislead)."""
    findings = [f for f in findings if f.code != "no-overflow-check"]
    if held == target:
        findings.insert(0, Finding(
            "info", "already-low-precision",
            f"the model already computes in {target.upper()}: it holds no FP32 weight and "
            "no Cast was needed, so the output is the same graph",
            hint="to change its precision, convert the FP32 model it was made from",
            source="precision"))
    else:
        findings.insert(0, Finding(
            "warning", "not-an-fp32-model",
            f"the model computes in {held.upper()}, not FP32: the {target.upper()} "
            f"conversion lowers FP32 tensors only, so the output still computes in "
            f"{held.upper()}",
            hint=f"convert the FP32 model it was made from (`--to {target}`)",
            source="precision"))
    return findings


def _measure_runs(proto: Any, out: Any, batches: List[Dict[str, np.ndarray]], target: str,
                  entry: Any, report: Dict[str, Any], findings: List[Finding],
                  held: Any = None, written: Optional[Path] = None) -> None:
    """The output errors on onnxruntime CPU ("error") and, for float targets, in low-precision
    storage ("error_reference"); a run that cannot run is noted, not raised. `held`: the
    FP32 model held by reference when the weights were streamed to `written` (no weight is
    copied into a protobuf; the storage run, which holds every weight, is left out)."""
    try:
        report["error"] = measure_error(proto, out, batches, target) if held is None else \
            _measure_streamed(held, written, batches, target)
    except Exception as e:  # e.g. ORT CPU has no BF16/FP8 kernel for some op
        report["error"] = None
        findings.append(Finding(
            "info", "cpu-cannot-verify",
            f"onnxruntime CPU could not run the {target.upper()} model "
            f"({' '.join(str(e).split())[:300]}); the graph is valid ONNX but its accuracy "
            "was not measured on CPU", hint="measure it on the GPU with `workbench compare`",
            source="precision"))
    if entry.kind == "float" and held is not None:
        report["error_reference"] = None
        findings.append(Finding(
            "info", "reference-not-run",
            f"the {target.upper()} storage run (onnx's reference evaluator) was left out: "
            "it holds every weight in memory, and this model's weights were streamed; the "
            "error above is onnxruntime CPU's", source="precision",
            hint=f"`workbench compare MODEL --to {target}` measures it a segment at a time"))
    elif entry.kind == "float":
        try:
            report["error_reference"] = measure_error_reference(proto, out, batches, target)
        except Exception as e:
            report["error_reference"] = None
            findings.append(Finding(
                "info", "reference-cannot-verify",
                f"the low-precision run could not run the {target.upper()} model "
                f"({' '.join(str(e).split())[:200]})", source="precision"))
    if report.get("error") is None and report.get("error_reference"):
        for f in findings:  # the low-precision run measured it: say so, not "unmeasured"
            if f.code == "cpu-cannot-verify":
                f.severity = "info"
                f.message = f.message.replace(
                    "the graph is valid ONNX but its accuracy was not measured on CPU",
                    f"its accuracy was measured by the low-precision run instead "
                    f"({target.upper()} arithmetic on onnx's reference evaluator)")
                f.hint = "on a GPU, `workbench compare` measures the engine itself"


def _non_finite(report: Dict[str, Any], target: str, findings: List[Finding]) -> None:
    """An error per output that is NaN/inf in either run (once per output), naming the run."""
    for key in ("error", "error_reference"):
        for name, s in (report.get(key) or {}).items():
            if not s["finite"]:
                if any(f.code == "non-finite-output" and name in f.tensors for f in findings):
                    continue
                runner = "onnxruntime CPU" if key == "error" else \
                    f"{target.upper()} storage as on a GPU (low-precision run)"
                findings.append(Finding(
                    "error", "non-finite-output",
                    f"output '{name}' is NaN/inf in {target.upper()} on the calibration "
                    f"data ({runner})", tensors=[name], source="precision",
                    hint="see the overflow findings; exclude the named nodes"))


def _measured_findings(proto: Any, out: Any, batches: List[Dict[str, np.ndarray]],
                       target: str, entry: Any, report: Dict[str, Any],
                       findings: List[Finding], held: Any = None,
                       written: Optional[Path] = None) -> List[Finding]:
    """Measure the converted model's outputs against FP32 on the batches and judge them (as a
    GPU would compute it where the low-precision run exists: onnxruntime CPU may compute a
    float16 graph in float32)."""
    _measure_runs(proto, out, batches, target, entry, report, findings, held, written)
    _non_finite(report, target, findings)
    on_gpu = bool(report.get("error_reference"))
    from workbench.runtime.runners import batched_inputs, samples_in

    batched = batched_inputs(proto)
    judged = sum(samples_in(b, batched) for b in (
        reference_batches(batches, model=proto) if on_gpu else batches))
    from workbench.surgery.split import selection_region

    return findings + accuracy_findings(
        report.get("error_reference") or report.get("error") or {}, target, entry.kind,
        f"{target.upper()} storage as on a GPU" if on_gpu else "onnxruntime CPU",
        samples=judged, selected=selection_region(proto)[2])


def convert(model_or_path: ModelLike, target: str, *, exclude_nodes: Sequence[str] = (),
            exclude_ops: Sequence[str] = (), keep_io_types: bool = True,
            calibration: Any = None, calibrate_method: str = "entropy",
            allow_random: bool = False, per_channel: bool = True, route: str = "onnx",
            measure: bool = True, max_calib_batches: Optional[int] = None,
            profile: Any = None, output: Any = None,
            fallback: Optional[str] = None) -> PrecisionResult:
    """Convert an FP32 ONNX model to `target` precision. See the module docstring.

    `calibration`: anything `workbench.precision.calibration.load_calibration` takes; required for int8/fp8
    unless `allow_random=True` (then every report carries a warning). `route="modelopt"` uses
    nvidia-modelopt when installed. Raises WorkbenchError on bad input.

    With `output` (a path) the model is written there (weights in `<name>.data` beside it when
    the source keeps its weights outside) and `result.path` says where. A float or Q/DQ target
    of a model with external data is then converted on the structure only and its weights
    streamed tensor by tensor (`workbench.precision.streaming`, `.qdq_stream`); calibration
    and accuracy runs hold the FP32 weights by reference a segment at a time: memory does
    not follow the model's size, and `result.proto` holds no weight bytes.

    `fallback` (a quantized target only): the nodes without Q/DQ compute in this float
    precision instead of FP32, excluded nodes stay FP32 (`workbench.precision.fallback`).
    """
    entry = _entry(target)
    target = entry.name
    _check_options(calibrate_method, route)
    if fallback is not None:
        return convert_with_fallback(
            model_or_path, target, fallback, exclude_nodes=exclude_nodes,
            exclude_ops=exclude_ops, keep_io_types=keep_io_types, calibration=calibration,
            calibrate_method=calibrate_method, allow_random=allow_random,
            per_channel=per_channel, route=route, measure=measure,
            max_calib_batches=max_calib_batches, profile=profile, output=output)
    model_or_path = as_model(model_or_path)  # opened once, whatever the route reads after
    proto, path, streamed = _source(model_or_path, entry, output=output, route=route)
    label = str(path) if path else "<in-memory model>"
    ex_nodes, ex_ops, findings = _prepare(proto, exclude_nodes, exclude_ops, label, target)
    batches, random_used = _batches(proto, entry, calibration, profile=profile,
                                    max_calib_batches=max_calib_batches,
                                    allow_random=allow_random, measure=measure,
                                    findings=findings)
    report: Dict[str, Any] = {"target": target, "route": route, "keep_io_types": keep_io_types,
                              "exclude_nodes": ex_nodes, "exclude_ops": ex_ops,
                              "calibration": None if batches is None else
                              {"batches": len(batches), "random": random_used,
                               "method": calibrate_method if entry.needs_calibration else None}}
    before_ops = _count_ops(proto)
    source_error = structural_error(proto)  # (a complaint the FP32 model already has)

    if route == "modelopt":
        from workbench.precision.quantize import convert_modelopt

        out = convert_modelopt(proto, target, batches, ex_nodes, ex_ops, calibrate_method)
    else:
        if entry.kind == "float":
            findings += _float_checks(proto, entry, batches, ex_nodes, report,
                                      runnable=_by_reference(model_or_path, streamed)
                                      if batches is not None else None)
        job = TransformJob(target, ex_nodes, ex_ops, keep_io_types, batches, calibrate_method,
                           per_channel, source=model_or_path if streamed else None)
        out, tfind, tinfo = entry.transform_fn()(proto, job)
        findings += tfind
        report.update(tinfo)

    if entry.kind == "float":  # the mask sentinels as the converted model stores them
        from workbench.precision.masks import settle

        findings = settle(findings, out)
    _op_counts(report, before_ops, out)
    _check_valid(out, target, source_error)
    _record(out, target, ex_nodes, ex_ops, keep_io_types, calibration, calibrate_method,
            random_used, per_channel)
    written, clip_findings = _write(out, output, path, streamed, entry)
    findings += clip_findings
    if entry.needs_calibration and batches is not None and not random_used and \
            calibrate_method == "entropy":
        few = _few_samples(proto, target, batches)
        if few is not None:
            findings.append(few)
    held = _held_low_type(proto, report) if entry.kind == "float" and route != "modelopt" \
        else None
    if held is not None:
        findings = _held_findings(findings, held, target)
    if batches is not None and measure and entry.kind != "none":
        findings = _measured_findings(proto, out, batches, target, entry, report, findings,
                                      held=_by_reference(model_or_path, streamed),
                                      written=written)
    return PrecisionResult(proto=out, target=target, findings=findings, report=report,
                           path=written)


def _measure_streamed(held: Any, written: Any, batches: List[Dict[str, np.ndarray]],
                      target: str) -> Dict[str, Dict[str, Any]]:
    """`measure_error` of a streamed conversion: the FP32 model held by reference and run a
    segment at a time, the result run whole from its file (as onnxruntime runs it in memory:
    its fusions, Q/DQ into integer kernels among them, span what a cut would split)."""
    from workbench.runtime.runners import run_bounded

    ref = run_bounded(held, batches, [o.name for o in held.graph.output])
    return compare_outputs(ref, run_ort(written, batches), target)


def _by_reference(model: "Model", streamed: bool) -> Any:
    """The model held by reference (`workbench.core.weights`) when it is streamed, else None."""
    if not streamed:
        return None
    from workbench.core import weights

    return weights.by_reference(model)


def _quantizes_streamed(model: "Model", entry: table.Precision) -> bool:
    """Are a model's Q/DQ put in on its structure, its weights quantized as they stream: a
    file with external data, no Q/DQ in it yet, a Q/DQ type the stream writes?"""
    from workbench.precision.qdq_stream import can_stream

    return model.path is not None and bool(model.external_files) and \
        can_stream(model.proto, entry.onnx_dtype)


def _weightless(model_or_path: Any) -> Optional[Tuple[Any, Path]]:
    """(structure without weight bytes, source path) of a model file whose weights live in
    external data, for a streamed conversion; None for anything else (converted in memory)."""
    m = as_model(model_or_path)
    if m.path is None or not m.external_files:
        return None
    if m.missing_external or m.truncated_external:
        m.load_weights()  # raises the error naming the missing / truncated data
    return copy.deepcopy(m.proto), m.path


def _streamed_clip_findings(proto: Any, clipped: List[str], entry: table.Precision
                            ) -> List[Finding]:
    """`_clipped_weights`' findings for the weights that saturated as they were streamed."""
    if not clipped:
        return []
    limit = entry.max_abs if entry.max_abs is not None else FP16_MAX
    cons = _consumers(proto.graph)
    out = []
    for name in clipped:
        users = [n.name for n in cons.get(name, [])]
        out.append(Finding("warning", "weight-clipped",
                           f"initializer '{name}' has values beyond {limit:g}: clipped",
                           nodes=users, tensors=[name], source="precision",
                           hint="exclude its consumer(s) to keep it FP32: "
                           + " ".join(f"--exclude {u}" for u in users)))
    return out


def _record(out: Any, target: str, ex_nodes: List[str], ex_ops: List[str], keep_io: bool,
            calibration: Any, method: str, random_used: bool, per_channel: bool) -> None:
    """Write what `out` was made with into its metadata (`spec.record_spec`): a compare of
    it then builds its advice on these exclusions instead of dropping them."""
    import os

    from workbench.precision.spec import PrecisionSpec, record_spec

    data = str(calibration) if isinstance(calibration, (str, os.PathLike)) else None
    record_spec(out, PrecisionSpec(target=target, exclude_nodes=list(ex_nodes),
                                   exclude_ops=list(ex_ops), keep_io_types=keep_io,
                                   calibration=data, calibrate_method=method,
                                   allow_random=random_used, per_channel=per_channel))


COMPARE_DEFAULT_SAMPLES = 8  # `workbench compare --samples`'s default


def accuracy_findings(errors: Dict[str, Dict[str, Any]], target: str, kind: str,
                      runner: str = "onnxruntime CPU", samples: Optional[int] = None,
                      selected: Sequence[str] = ()) -> List[Finding]:
    """A finding per output the converted model got wrong on the calibration data (`runner`'s
    run against FP32), with the search that finds what to keep in higher precision. Wrong is
    the verdict `workbench compare` gives (an entry's "verdict"; the elementwise rule at the
    target's atol/rtol for entries without one). A warning, or for INT8/FP8 outputs that still point the same way as FP32
    (`workbench.runtime.comparison.points_same_way`, the rule compare's verdict line states too) an
    info: quantized outputs rarely meet 1e-2 elementwise."""
    from workbench.runtime.comparison import class_scores, points_same_way, same_way_words

    out = []
    for name, s in errors.items():
        verdict = s.get("verdict") or {}
        if not s.get("finite", True) or verdict.get("passed", s.get("passed")) is not False:
            continue  # (non-finite outputs are said as non-finite-output)
        top1, cos = s.get("top1_agreement"), s.get("cosine")
        figs = f"max abs {s['max_abs_err']:.3g}, rel {s['rel_err']:.3g}" + (
            f", cosine {cos:.6f}" if cos is not None else "") + (
            f", top-1 agreement {top1:.3f}" if top1 is not None and
            class_scores(s.get("shape") or (), name) else "")
        beyond = (f": {s['mismatches']} of {s['size']} element(s)" if s.get("mismatches")
                  and s.get("size") else "")
        tol = (f" (beyond its tolerance atol {s['atol']:g} / rtol {s['rtol']:g}{beyond}, as "
               "workbench compare judges it)" if "atol" in s else "")
        if verdict:  # the verdict judged it; the elementwise rule is said beside it
            tol = (f" (beyond its budget: {verdict['words']}, {verdict['rule']}, as workbench "
                   f"compare judges it" + (f"; elementwise at atol {s['atol']:g} / rtol "
                                           f"{s['rtol']:g}{beyond}" if beyond else "") + ")")
        classes = top1 is not None and class_scores(s.get("shape") or (), name)
        # quantized targets rarely meet 1e-2 elementwise: where the output still points the
        # same way (cosine) and picks the same classes, it is information, not an alarm
        mild = kind != "float" and points_same_way(s.get("rel_err", 0.0), cos, top1, classes)
        if mild:
            tol += "; " + same_way_words(target, bool(classes))
        on = f"{samples} calibration sample(s)" if samples else "the calibration data"
        same = (f" --samples {samples}" if samples and samples > COMPARE_DEFAULT_SAMPLES
                else "")  # (so compare judges the same samples and prints the same figures)
        if name in selected:  # after NMS / TopK / NonZero: elementwise figures overstate it
            if s.get("shape_change"):
                figs = f"shape {s['shape_change']}"
            out.append(Finding(
                "info", "accuracy-after-selection",
                f"output '{name}' in {target.upper()} comes after the model's data-dependent "
                f"selection: near-tied rows swap (or their count changes) under any rounding, "
                f"so its elementwise figures on {on} ({runner}: {figs}) overstate the loss",
                tensors=[name], source="precision",
                hint="judge the rows it selects and the tensors that feed the selection: "
                     "`workbench compare MODEL CANDIDATE --inputs DATA --selection-aware`"))
            continue
        out.append(Finding(
            "info" if mild else "warning", "accuracy-loss",
            f"output '{name}' in {target.upper()} is off from FP32 on {on} "
            f"({runner}): {figs}{tol}", tensors=[name], source="precision",
            hint=f"find the nodes to keep in higher precision: `workbench compare MODEL "
                 f"--to {target} --inputs DATA{same}`"))
    return out


FEW_ENTROPY_SAMPLES = 256  # below this, entropy calibration is a guess (TensorRT suggests ~500)


def _held_low_type(proto: Any, report: Dict[str, Any]) -> Optional[str]:
    """"fp16"/"bf16" for a model a float target found nothing to lower in: no FP32
    initializer (nor Constant), no Cast inserted, and weights of that type; else None."""
    from workbench.core.model import _iter_graphs

    FLOAT = 1
    if report.get("casts_inserted", 0) or report.get("casts_lowering", 0):
        return None
    held = set()
    for g in _iter_graphs(proto.graph):
        if any(t.data_type == FLOAT for t in g.initializer):
            return None
        for n in g.node:
            if n.op_type == "Constant" and any(a.t.data_type == FLOAT for a in n.attribute
                                               if a.type == 4):
                return None
        held |= {t.data_type for t in g.initializer}
    kinds = [k for k, v in (("fp16", 10), ("bf16", 16)) if v in held]
    return kinds[0] if len(kinds) == 1 else None


class TransformJob:
    """What a precision transform gets besides the model: resolved exclusions, I/O policy,
    calibration batches (None without data), method and weight granularity."""

    __slots__ = ("target", "exclude_nodes", "exclude_ops", "keep_io_types", "batches",
                 "calibrate_method", "per_channel", "source")

    def __init__(self, target: str, exclude_nodes: List[str], exclude_ops: List[str],
                 keep_io_types: bool, batches: Optional[List[Dict[str, np.ndarray]]],
                 calibrate_method: str, per_channel: bool,
                 source: Optional["Model"] = None) -> None:
        self.target, self.exclude_nodes, self.exclude_ops = target, exclude_nodes, exclude_ops
        self.keep_io_types, self.batches = keep_io_types, batches
        self.calibrate_method, self.per_channel = calibrate_method, per_channel
        # the handle whose external data the model's structure refers to: a streamed
        # transform reads the weights from there as it writes (None: weights in memory)
        self.source = source


def _entry(target: Any) -> table.Precision:
    try:
        return table.get(target, field="target")
    except WorkbenchError as e:
        raise WorkbenchError(f"unknown precision target '{table.normalise(target)}'",
                             field="target", hint="choose " + (e.hint or "")) from None


def _float_checks(proto: Any, entry: table.Precision, batches: Any, ex_nodes: List[str],
                  report: Dict[str, Any], runnable: Any = None) -> List[Finding]:
    """Float targets: FP32 activations and weights beyond the target's range. `runnable`:
    the model to run for the activations when `proto` holds no weights (held by reference)."""
    target = entry.name
    limit = entry.max_abs if entry.max_abs is not None else FP16_MAX
    findings: List[Finding] = []
    if batches is not None:
        try:
            ranges = activation_ranges(runnable if runnable is not None else proto, batches,
                                       bounded=runnable is not None)
        except Exception as e:  # e.g. a custom-domain op onnxruntime does not know
            ranges = {}
            from workbench.runtime.runners import user_error

            e = user_error(e) or e  # a run refused at a node: named, with its own hint
            known = isinstance(e, WorkbenchError)
            why = e.message if known else " ".join(str(e).split())
            findings.append(Finding(
                "warning", "overflow-check-failed",
                f"onnxruntime could not run the FP32 model on the calibration data to check "
                f"activations against the {target.upper()} range ({why[:300]})",
                nodes=[e.node] if known and e.node else [],
                hint=e.hint if known and e.hint else
                "fix the model first (`workbench fix`), or check on the GPU with "
                "`workbench compare`", source="precision"))
        findings += overflow_findings(proto, ranges, limit, target.upper(), skip_nodes=ex_nodes)
        report["activation_max_abs"] = max(ranges.values()) if ranges else None
    else:
        findings.append(Finding(
            "info", "no-overflow-check",
            f"no calibration data: FP32 activations were not checked against the "
            f"{target.upper()} range", hint="pass --calib PATH to find nodes that overflow",
            source="precision"))
    findings += _clipped_weights(proto, limit, set(ex_nodes))
    return findings


# --------------------------------------------------------------------------- the transforms
# The precision table names one per target: fn(proto, job) -> (model, findings, report).
def keep_fp32(proto: Any, job: TransformJob) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """fp32: the model as it is (a copy)."""
    return copy.deepcopy(proto), [], {}


def fp16_casts(proto: Any, job: TransformJob) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """FP16 Casts + weights (workbench.precision.lowering), exclusions kept FP32."""
    return _lowered(proto, job, "fp16")


def bf16_casts(proto: Any, job: TransformJob) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """BF16 Casts + weights (workbench.precision.lowering), exclusions kept FP32."""
    return _lowered(proto, job, "bf16")


def _lowered(proto: Any, job: TransformJob, low: str) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """Both float targets: upgrade an old opset first (the parser and onnxruntime need >= 7;
    BF16 needs the opset where the graph's ops take bfloat16), then lower (subgraphs
    included), then say which nodes stayed FP32 and why."""
    from workbench.precision.lowering import BLOCK_OPS, lower

    findings: List[Finding] = []
    proto = _upgraded(proto, low, job.exclude_ops, findings)
    res = lower(proto, low, exclude_nodes=job.exclude_nodes, exclude_ops=job.exclude_ops,
                keep_io_types=job.keep_io_types, block_ops=BLOCK_OPS)
    kept = sorted(res.kept)
    why: Dict[str, int] = {}
    for reason in res.kept.values():
        why[reason] = why.get(reason, 0) + 1
    msg = (f"{len(kept)} node(s) kept in FP32"
           + (" (" + "; ".join(f"{k}: {v}" for k, v in sorted(why.items())) + ")" if why else "")
           + (": " + ", ".join(kept[:12]) + (" ..." if len(kept) > 12 else "") if kept else ""))
    findings.append(Finding("info", "kept-fp32", msg, nodes=kept, source="precision",
                            extra={"reasons": dict(res.kept)}))
    unsupported = [n for n, r in res.kept.items() if f"takes no {low.upper()}" in r]
    if unsupported:
        type_name = type_str(table.get(low).onnx_dtype)[7:-1]
        findings.append(Finding(
            "warning", f"{low}-unsupported-op",
            f"{len(unsupported)} node(s) stay FP32: their op takes no {type_name} at opset "
            f"{_opset(res.proto)}: " + ", ".join(unsupported[:12]), nodes=unsupported,
            source="precision"))
    return res.proto, findings, {"kept_fp32": kept, "casts_lowering": res.casts}


def _opset(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _upgraded(proto: Any, low: str, exclude_ops: Sequence[str], findings: List[Finding]) -> Any:
    """The model at an opset the lowering can use: >= 7 always (pre-7 broadcasting is refused
    by TensorRT's parser and onnxruntime), and the opset where the graph's ops take the low
    float type (BF16 needs a recent one; FP16 is taken from the first opsets on)."""
    from workbench.precision.casts import DEFAULT_BLOCK_OPS, min_opset_for
    from workbench.precision.quantize import ensure_opset
    from workbench.surgery.recipes.opset import MIN_OPSET, upgrade_opset

    have = _opset(proto)
    if have and have < MIN_OPSET:
        proto, target = upgrade_opset(proto)
        findings.append(Finding("info", "opset-raised",
                                f"opset raised {have} -> {target} (onnx version converter): "
                                f"TensorRT and onnxruntime refuse pre-opset-7 models",
                                source="precision"))
        have = target
    type_name = type_str(table.get(low).onnx_dtype)
    need = min_opset_for(proto, type_name, sorted(DEFAULT_BLOCK_OPS | set(exclude_ops)))
    if need > have:
        try:
            proto = ensure_opset(proto, need)
            findings.append(Finding("info", "opset-raised",
                                    f"opset raised {have} -> {need}: some ops of this graph "
                                    f"accept {type_name[7:-1]} only from opset {need}",
                                    source="precision"))
        except WorkbenchError as e:
            findings.append(Finding("warning", "opset-not-raised",
                                    f"could not raise opset {have} -> {need} ({e.message}); ops "
                                    f"without {type_name[7:-1]} at this opset stay FP32", source="precision"))
    return proto


def qdq(proto: Any, job: TransformJob) -> Tuple[Any, List[Finding], Dict[str, Any]]:
    """INT8 / FP8 Q/DQ pairs with calibrated scales (workbench.precision.quantize)."""
    from workbench.precision.quantize import quantize
    from workbench.surgery.recipes.opset import MIN_TARGET, upgrade_opset

    assert job.batches is not None
    findings: List[Finding] = []
    have = _opset(proto)
    if have and have < QDQ_OPSET:  # (DequantizeLinear takes `axis` from opset 13)
        proto, reached = upgrade_opset(proto)
        assert reached >= MIN_TARGET >= QDQ_OPSET
        findings.append(Finding(
            "info", "opset-raised",
            f"opset raised {have} -> {reached} (onnx version converter) before quantizing: "
            f"per-channel Q/DQ (DequantizeLinear's axis) needs opset {QDQ_OPSET}, as "
            "TensorRT's explicit quantization does", source="precision"))
    q, more, report = quantize(proto, job.target, job.batches, job.exclude_nodes,
                               job.exclude_ops, job.calibrate_method, job.per_channel,
                               source=job.source)
    return q, findings + more, report


QDQ_OPSET = 13  # the opset from which Q/DQ take per-channel scales (`axis`)


def _check_valid(proto: Any, target: str, source_error: str = "") -> None:
    """The converted model passes onnx's checker, or fails it exactly as its FP32 source does
    (e.g. a graph output declared without a shape, which onnxruntime and TensorRT accept)."""
    err = structural_error(proto)
    if err and err != source_error:
        raise WorkbenchError(f"the {target.upper()} model is not valid ONNX: {err[:300]}",
                             hint="exclude the node named in the message and report the model")


# --------------------------------------------------------------------------- float fallback
# A quantized target whose nodes without Q/DQ compute in a float precision: the quantized
# conversion, then the float lowering of its result (`workbench.precision.fallback`).
def _fallback_checked(target: str, fallback: Any, route: str) -> str:
    from workbench.precision.spec import check_fallback

    fb = check_fallback(target, fallback)
    assert fb is not None
    if route != "onnx":
        raise WorkbenchError(f"a fallback precision is the onnx route's (route '{route}' "
                             "quantizes on its own)", field="fallback",
                             hint="use route onnx, or drop the fallback")
    return fb


def convert_with_fallback(model_or_path: ModelLike, target: str, fallback: str, *,
                          exclude_nodes: Sequence[str] = (), exclude_ops: Sequence[str] = (),
                          keep_io_types: bool = True, calibration: Any = None,
                          calibrate_method: str = "entropy", allow_random: bool = False,
                          per_channel: bool = True, route: str = "onnx", measure: bool = True,
                          max_calib_batches: Optional[int] = None, profile: Any = None,
                          output: Any = None) -> PrecisionResult:
    """`convert(model, target, fallback=...)`: see the module docstring."""
    fb = _fallback_checked(target, fallback, route)
    model = as_model(model_or_path)
    streamed = output is not None and model.path is not None and bool(model.external_files)
    calib = dict(calibration=calibration, calibrate_method=calibrate_method,
                 allow_random=allow_random, max_calib_batches=max_calib_batches,
                 profile=profile)
    tmp = Path(tempfile.mkdtemp(prefix=".wb-fallback-", dir=Path(output).parent)) \
        if streamed else None
    try:
        q, src = _quantized_step(model, target, exclude_nodes, exclude_ops, per_channel, tmp,
                                 calib)
        user = list(q.report.get("exclude_nodes") or [])
        keep = sorted(fallback_mod.qdq_kept(q.proto) | set(user))
        f = convert(src, fb, exclude_nodes=keep,
                    exclude_ops=list(q.report.get("exclude_ops") or []),
                    keep_io_types=keep_io_types, measure=False, profile=profile,
                    max_calib_batches=max_calib_batches,
                    calibration=calibration if not streamed else None,
                    output=output if tmp is not None else None)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return _fallback_result(model, q, f, target, fb, user, keep, calib, per_channel, keep_io_types,
                   measure, output, streamed)


def _quantized_step(model: "Model", target: str, exclude_nodes: Sequence[str],
                    exclude_ops: Sequence[str], per_channel: bool, tmp: Optional[Path],
                    calib: Dict[str, Any]) -> Tuple[PrecisionResult, Any]:
    """(the quantized conversion, what the float lowering converts: its model or file). When
    the exclusions leave nothing to quantize, the model itself with a note: the fallback
    lowers all of it (a plan that keeps every quantized op in FP32 is the float model)."""
    structure = copy.deepcopy(model.proto)
    name_unnamed_nodes(structure)
    label = str(model.path) if model.path else "<in-memory model>"
    ex_nodes, ex_ops, _ = resolve_exclusions(structure, exclude_nodes, exclude_ops, label)
    if fallback_mod.quantizes(structure, ex_nodes, ex_ops):
        q = convert(model, target, exclude_nodes=exclude_nodes, exclude_ops=exclude_ops,
                    per_channel=per_channel, measure=False,
                    output=tmp / "quantized.onnx" if tmp is not None else None, **calib)
        return q, (q.path if tmp is not None else q.proto)
    note = Finding("info", "nothing-quantized",
                   f"every node {target.upper()} would quantize is excluded: no Q/DQ, the "
                   "fallback precision computes the rest", source="precision")
    return PrecisionResult(proto=structure, target=target, findings=[note],
                           report={"target": target, "route": "onnx",
                                   "exclude_nodes": ex_nodes, "exclude_ops": ex_ops,
                                   "calibration": None}), model


def _fallback_result(model: Any, q: Any, f: Any, target: str, fb: str, user: List[str],
            keep: List[str], calib: Dict[str, Any], per_channel: bool, keep_io: bool,
            measure: bool, output: Any, streamed: bool) -> Any:
    """The chained result: one report and findings, the spec recorded, written, measured."""
    from workbench.precision.spec import PrecisionSpec, record_spec

    out = f.proto
    nodes = fallback_mod.precision_nodes(q.proto, f.report.get("kept_fp32") or [], target, fb)
    spec = PrecisionSpec(target=target, exclude_nodes=user,
                         exclude_ops=list(q.report.get("exclude_ops") or []),
                         keep_io_types=keep_io, calibration=_fallback_data(calib["calibration"]),
                         calibrate_method=calib["calibrate_method"],
                         allow_random=bool((q.report.get("calibration") or {}).get("random")),
                         per_channel=per_channel, fallback=fb)
    written = f.path
    record_spec(out, spec)
    if streamed:
        fallback_mod.respec(written, spec)
    elif output is not None:
        from workbench.core.model import save_model

        written = save_model(out, output, source=model.path)
    report: Dict[str, Any] = dict(q.report)
    for k in ("casts_inserted", "casts_lowering", "kept_fp32", "activation_max_abs"):
        if k in f.report:
            report[k] = f.report[k]
    report.update(fallback=fb, precisions={p: len(v) for p, v in nodes.items()},
                  nodes_by_precision=nodes)
    findings = list(q.findings) + [_fallback_unchecked(x, fb, calib, streamed)
                                   for x in f.findings if fallback_mod.relevant(x)]
    findings.append(Finding(
        "info", "fallback-precisions",
        f"{len(nodes[target])} node(s) in {target.upper()} (Q/DQ), {len(nodes[fb])} in "
        f"{fb.upper()} (the fallback), {len(nodes[table.BASE])} in FP32 (excluded, or "
        "kept by the lowering)", nodes=nodes[table.BASE], source="precision",
        extra={"precisions": {p: len(v) for p, v in nodes.items()}}))
    res = PrecisionResult(proto=out, target=target, findings=findings, report=report,
                          path=written if output is not None else None)
    if measure and calib["calibration"] is not None:
        _fallback_measured(model, res, target, calib, streamed)
    return res


def _fallback_unchecked(f: Finding, fb: str, calib: Dict[str, Any], streamed: bool) -> Finding:
    """The float step's "no overflow check" when calibration data WAS given: the streamed
    chain lowers the quantized file without running it, so the check is another command."""
    if f.code != "no-overflow-check" or not streamed or calib["calibration"] is None:
        return f
    return Finding(
        "info", "no-overflow-check",
        f"the {fb.upper()} fallback of a model with external weights is lowered without "
        f"running the calibration data: the activations of the nodes it lowers were not "
        f"checked against the {fb.upper()} range",
        hint=f"find the nodes that overflow: `workbench compare MODEL --to {fb} --inputs DATA`, "
             "then keep them with --exclude", source="precision")


def _fallback_data(calibration: Any) -> Optional[str]:
    import os

    return str(calibration) if isinstance(calibration, (str, os.PathLike)) else None


def _fallback_measured(model: Any, res: Any, target: str, calib: Dict[str, Any], streamed: bool) -> None:
    """The chained model's outputs against FP32 on the calibration data (as `convert` measures
    a quantized target), into `res`."""
    from workbench.precision.calibration import load_calibration

    proto = model.proto if streamed else model.load_weights() if model.path else model.proto
    batches = load_calibration(calib["calibration"], proto, profile=calib["profile"],
                               max_batches=calib["max_calib_batches"])
    entry = table.get(target)
    res.findings = _measured_findings(proto, res.proto, batches, target, entry, res.report,
                                      res.findings, held=_by_reference(model, streamed),
                                      written=res.path)
