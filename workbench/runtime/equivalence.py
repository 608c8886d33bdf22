"""Are two models the same function? Run both with onnxruntime on the same inputs and compare.

Inputs are the user's (a dict of arrays) or generated from the input specs with a fixed seed:
float inputs ~ N(0, 1), integer inputs in a range that is valid for what they index (the
embedding size when they feed a Gather on a constant), bools at random. Dynamic dims get a
sensible size (2 for the first dim, 8 otherwise) unless the other model fixes them.
A difference is "not equivalent" when |a - b| > tol * max(1, |a|) for some element (absolute for
small values, relative for large ones); NaNs must match NaNs. The runs go through
`workbench.runtime.runners`, so onnxruntime runs in its child process (`workbench.runtime.ortchild`): a model
that crashes it gives an "unverified"/"different" verdict whose reason is the one-line crash
(model, signal, node), never the end of the calling kernel. The figures come from
`workbench.runtime.comparison` (atol = rtol = tol, no sentinel policy), the same comparison every other
capability uses.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from workbench.runtime import comparison
from workbench.core.model import as_model
from workbench.runtime.runners import mark_all_outputs, run, session  # noqa: F401 (public here too)

DEFAULT_TOL = 1e-5


@dataclass
class Verification:
    """The verdict: status is "equivalent", "different" or "unverified" (with a reason)."""

    status: str
    max_abs_diff: Optional[float] = None
    max_rel_diff: Optional[float] = None
    tolerance: float = DEFAULT_TOL
    per_output: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    input_shapes: Dict[str, List[int]] = field(default_factory=dict)
    reason: str = ""
    seed: int = 0

    @property
    def equivalent(self) -> bool:
        return self.status == "equivalent"

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "Verification":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def __str__(self) -> str:
        if self.status == "unverified":
            return f"unverified: {self.reason}"
        if self.max_abs_diff is None:  # (a verdict without figures: outputs that could not be
            # compared, e.g. a plugin node onnxruntime cannot run)
            return f"{self.status}: {self.reason or 'no figures'}"
        return f"{self.status}: max abs diff {self.max_abs_diff:.3g} (tolerance {self.tolerance:g})"


def _dims(vi: Any) -> List[Any]:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
            for d in tt.shape.dim]


def _declared_zero(vi: Any) -> set:
    """Axes a value info declares with dim_value 0 (set, not absent)."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return set()
    return {k for k, d in enumerate(tt.shape.dim)
            if d.WhichOneof("value") == "dim_value" and d.dim_value == 0}


def non_tensor_inputs(proto: Any) -> List[Tuple[str, str]]:
    """(name, kind) of the graph inputs that are not tensors (a sequence, map or optional):
    no array feeds them."""
    return [(n, (vi.type.WhichOneof("value") or "untyped").replace("_type", ""))
            for n, vi in _graph_inputs(proto).items()
            if vi.type.WhichOneof("value") != "tensor_type"]


def unshaped_inputs(proto: Any) -> List[str]:
    """Graph inputs (not initializers) declared without a shape (unknown rank): no sample of
    them can be made up."""
    return [n for n, vi in _graph_inputs(proto).items()
            if vi.type.WhichOneof("value") == "tensor_type"
            and not vi.type.tensor_type.HasField("shape")]


def _graph_inputs(proto: Any) -> Dict[str, Any]:
    inits = {t.name for t in proto.graph.initializer}
    return {i.name: i for i in proto.graph.input if i.name not in inits}


def _int_high(proto: Any, name: str) -> int:
    """Exclusive upper bound for an integer input: the gathered table's size if it indexes one;
    1 for a RoiAlign's batch_indices (image 0 exists at every batch size, a profile's min 1)."""
    consts = {t.name: t for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "RoiAlign" and len(n.input) > 2 and n.input[2] == name:
            return 1
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name and n.input[0] in consts:
            axis = 0
            for a in n.attribute:
                if a.name == "axis":
                    axis = a.i
            return int(consts[n.input[0]].dims[axis])
    return 2


# integer inputs that count rather than index: (op, slot) -> (low, exclusive high) for random
# values. A Loop's trip count drawn 0 (the old 0..1) ran no iteration: the compare of an FP16
# Loop body "passed" at 0 error without running it
_COUNT_SLOTS = {("Loop", 0): (1, 5), ("TopK", 1): (1, 2)}


def count_range(proto: Any, name: str) -> Optional[Tuple[int, int]]:
    """(low, exclusive high) for random values of integer input `name` where it counts
    (a Loop's trip count: 1..4; a TopK's K: 1), None where it does not."""
    for n in proto.graph.node:
        for k, i in enumerate(n.input):
            if i == name and (n.op_type, k) in _COUNT_SLOTS:
                return _COUNT_SLOTS[(n.op_type, k)]
    return None


# ops whose integer input indexes an axis of another input: op -> (index slot, data slot)
_INDEXERS = {"RoiAlign": (2, 0), "ScatterND": (1, 0), "GatherND": (1, 0),
             "ScatterElements": (1, 0), "GatherElements": (1, 0), "Gather": (1, 0)}
# ops whose output holds (some of) the values of their first input, as they are: an index
# input read through them (edge_index -> Gather row 1 -> Unsqueeze -> ScatterElements) still
# indexes what the last one indexes
_CARRIERS = {"Gather", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand", "Identity",
             "Transpose", "Slice", "Tile", "Concat", "Split", "Cast"}


def _index_bounds(proto: Any, shapes: Dict[str, List[int]]) -> Dict[str, int]:
    """Exclusive upper bounds for integer inputs that index an axis of another tensor at run
    time, as these input `shapes` size it: a RoiAlign's batch_indices pick images of its X
    (axis 0), ScatterND/GatherND indices its data's leading axes, *Elements indices the
    `axis` attribute's. 1 where the size is unknown (index 0 is valid for any size >= 1)."""
    from workbench.core.graphindex import GraphIndex

    idx = GraphIndex.of(proto)
    typed: List[Any] = []  # shape inference, once, when a tensor is not a graph input
    consts = set(idx.constant_names())
    out: Dict[str, int] = {}
    for name in shapes:
        # the input's values, and the tensors that carry them on (edge_index[1] unsqueezed)
        carried, todo = {name}, [name]
        while todo:
            t = todo.pop()
            for k in idx.consumers_of(t):
                node = idx.nodes[k]
                if node.domain not in ("", "ai.onnx") or node.op_type not in _CARRIERS:
                    continue
                if node.op_type != "Concat" and node.input[0] != t:
                    continue
                for o in node.output:
                    if o and o not in carried:
                        carried.add(o)
                        todo.append(o)
        for t in carried:
            for k in idx.consumers_of(t):
                node = idx.nodes[k]
                slots = _INDEXERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
                if slots is None or len(node.input) <= slots[0] or node.input[slots[0]] != t:
                    continue
                data = node.input[slots[1]]
                if node.op_type == "Gather" and data in consts:
                    continue  # (a table of weights: `_int_high` reads its size)
                if node.op_type.endswith("ND"):  # indices [..., k]: data axes 0..k-1
                    depth = int(shapes[name][-1]) if t == name and shapes[name] else \
                        _size_of(proto, t, -1, shapes, typed, unknown=0)
                    if depth <= 0:
                        continue
                    axes = list(range(depth))
                else:
                    attr = idx.attribute(k, "axis") if node.op_type != "RoiAlign" else None
                    axes = [int(attr.i) if attr is not None else 0]
                sizes = [_size_of(proto, data, a, shapes, typed) for a in axes]
                out[name] = min([out.get(name, sizes[0])] + sizes)
    return out


def _size_of(proto: Any, tensor: str, axis: int, shapes: Dict[str, List[int]],
             typed: List[Any], unknown: int = 1) -> int:
    """Axis `axis` of `tensor` when the graph inputs have these `shapes`: an input's own size,
    else shape inference's (a size, or a dim name an input shares), else `unknown` (1)."""
    if tensor in shapes:
        dims: List[Any] = list(shapes[tensor])
    else:
        if not typed:
            import onnx

            try:
                typed.append(onnx.shape_inference.infer_shapes(proto))
            except Exception:
                typed.append(proto)
        g = typed[0].graph
        vis = {v.name: v for v in list(g.value_info) + list(g.output)}
        dims = _dims(vis[tensor]) if tensor in vis else []
    if axis < 0:
        axis += len(dims)
    d = dims[axis] if 0 <= axis < len(dims) else None
    if isinstance(d, str):  # a dim name an input carries: its size in `shapes`
        d = next((shapes[n][j] for n, vi in _graph_inputs(proto).items() if n in shapes
                  for j, x in enumerate(_dims(vi)) if x == d and j < len(shapes[n])), None)
    return max(1, int(d)) if isinstance(d, int) else unknown


def make_inputs(proto: Any, seed: int = 0, other: Any = None,
                dims: Optional[Dict[str, int]] = None) -> Dict[str, np.ndarray]:
    """Sample inputs for `proto` (fixed seed). `other`: a second model whose static dims win over
    this one's dynamic dims, so both can run the same feed. `dims`: sizes for named dims.
    Index inputs stay valid for what they index (`_int_high`, `_index_bounds`)."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    ins = _graph_inputs(proto)
    other_ins = _graph_inputs(other) if other is not None else {}
    shapes: Dict[str, List[int]] = {}
    guessed: set = set()  # (input, axis) sized by the default guess, not by a model or `dims`
    for name, vi in ins.items():
        shape = []
        a = _dims(vi)
        b = _dims(other_ins[name]) if name in other_ins else []
        zero = _declared_zero(vi)
        for k, d in enumerate(a):
            if k in zero:  # a declared size 0 is a size (onnxruntime feeds nothing else)
                shape.append(0)
            elif isinstance(d, int):
                shape.append(d)
            elif k < len(b) and isinstance(b[k], int):
                shape.append(b[k])
            elif dims and isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                shape.append(2 if k == 0 else 8)
                guessed.add((name, k))
        shapes[name] = shape
    from workbench.core.inputs import relate_decoder_shapes

    related = relate_decoder_shapes(proto, shapes, guessed)
    ints = [n for n, vi in ins.items() if np.issubdtype(
        helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type), np.integer)]
    bounds = _index_bounds(proto, shapes) if ints else {}
    feed: Dict[str, np.ndarray] = {}
    for name, vi in ins.items():
        shape = shapes[name]
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dt == np.bool_:
            feed[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif np.issubdtype(dt, np.integer):
            counts = count_range(proto, name)
            low, high = counts or (0, bounds.get(name) or _int_high(proto, name))
            feed[name] = rng.integers(low, high, size=shape).astype(dt)
        else:
            feed[name] = (rng.standard_normal(size=shape, dtype=np.float32).astype(dt)
                          if dt != np.float64 else rng.standard_normal(size=shape))
    feed.update(related)
    return feed




def make_inputs_at(proto: Any, shapes: Dict[str, Sequence[int]], seed: int = 0
                   ) -> Dict[str, np.ndarray]:
    """Sample inputs (`make_inputs`) with the named inputs at these shapes (a profile's
    min/opt/max): the values a run at those shapes sees."""
    from onnx import helper

    elem = {i.name: i.type.tensor_type.elem_type for i in proto.graph.input}
    # (a 0 in a value info reads as unknown: build at 1 there, then empty the tensor; a profile
    # min of 0 is an empty tensor, e.g. a KV cache before the first decode step)
    fixed = helper.make_model(helper.make_graph([], "at", [
        helper.make_tensor_value_info(n, elem[n], [max(int(d), 1) for d in sh])
        for n, sh in shapes.items() if n in elem], []))
    feed = make_inputs(proto, seed=seed, other=fixed)
    for n, sh in shapes.items():
        if n in feed and any(int(d) == 0 for d in sh):
            feed[n] = np.zeros(tuple(int(d) for d in sh), dtype=feed[n].dtype)
    return feed


def compare_outputs(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray],
                    tol: float = DEFAULT_TOL) -> Verification:
    """The verdict for two output dicts: `workbench.runtime.comparison` with atol = rtol = tol and no
    sentinel policy (a same-precision rewrite must keep mask constants exactly)."""
    return _verdict(comparison.compare_outputs(a, b, tol, tol, sentinels=False, top1=False), tol)


def _verdict(c: "comparison.Comparison", tol: float) -> Verification:
    if c.reason:
        return Verification("different", tolerance=tol,
                            reason=c.reason.replace("from the candidate", "after the change"))
    per = {k: v.to_dict() for k, v in c.outputs.items()}
    for k, v in c.outputs.items():
        per[k]["max_abs_diff"] = per[k]["max_abs"]  # the name verification records always had
        if v.nan:
            return Verification("different", tolerance=tol, per_output=per,
                                max_abs_diff=c.max_abs, max_rel_diff=c.rel,
                                reason=f"output '{k}': NaNs appear or disappear")
    return Verification("equivalent" if c.passed else "different", max_abs_diff=c.max_abs,
                        max_rel_diff=c.rel, tolerance=tol, per_output=per)


def verify(before: Any, after: Any, inputs: Optional[Dict[str, np.ndarray]] = None, *,
           seed: int = 0, tol: float = DEFAULT_TOL, dims: Optional[Dict[str, int]] = None,
           paths: Optional[tuple] = None) -> Verification:
    """Run `before` and `after` (ModelProtos with weights, or paths to ONNX files) on the same
    inputs and compare. `paths`: files holding the same two models, handed to onnxruntime
    directly so big models are not serialised again."""
    path_a, path_b = paths if paths is not None else (before, after)
    before, after = as_model(before).proto, as_model(after).proto  # (the graphs only)
    try:
        feed = inputs if inputs is not None else make_inputs(before, seed, other=after, dims=dims)
    except Exception as e:
        return Verification("unverified", reason=f"could not make sample inputs: {e}", tolerance=tol)
    shapes = {k: list(v.shape) for k, v in feed.items()}
    out_a = [o.name for o in before.graph.output]
    out_b = [o.name for o in after.graph.output]
    if out_a != out_b:
        return Verification("unverified", tolerance=tol, input_shapes=shapes,
                            reason=f"the outputs differ ({out_a} vs {out_b}); not comparable")
    note = ""
    try:
        ra = run(path_a, feed)
    except Exception as e:
        try:  # opset < 7, which onnxruntime does not run: onnx's reference evaluator does
            from workbench.runtime.runners import ReferenceRunner

            if not 0 < _default_opset(before) < 7:
                raise e
            ra = ReferenceRunner(path_a).infer(feed)
            note = ("the model before the change ran on onnx's reference evaluator "
                    "(onnxruntime: " + _short(e)[:160] + ")")
        except Exception:
            return Verification("unverified", tolerance=tol, input_shapes=shapes,
                                reason="onnxruntime cannot run the model before the change: "
                                       + _short(e))
    try:
        rb = run(path_b, feed)
    except Exception as e:
        return Verification("different", tolerance=tol, input_shapes=shapes,
                            reason="onnxruntime cannot run the model after the change: " + _short(e))
    v = compare_outputs(ra, rb, tol)
    v.input_shapes, v.seed = shapes, seed
    if note and not v.reason:
        v.reason = note
    return v


def _default_opset(proto: Any) -> int:
    return next((int(o.version) for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:300]
