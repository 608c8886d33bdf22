"""Are two models the same function? Run both with onnxruntime on the same inputs and compare.

Inputs are the user's (a dict of arrays) or generated from the input specs with a fixed seed:
float inputs ~ N(0, 1), integer inputs in a range that is valid for what they index (the
embedding size when they feed a Gather on a constant), bools at random. Dynamic dims get a
sensible size (2 for the first dim, 8 otherwise) unless the other model fixes them.
A difference is "not equivalent" when |a - b| > atol * max(1, |a|) for some element (absolute for
small values, relative for large ones); NaNs must match NaNs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import os

import numpy as np

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
        return f"{self.status}: max abs diff {self.max_abs_diff:.3g} (tolerance {self.tolerance:g})"


def _dims(vi: Any) -> List[Any]:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
            for d in tt.shape.dim]


def _graph_inputs(proto: Any) -> Dict[str, Any]:
    inits = {t.name for t in proto.graph.initializer}
    return {i.name: i for i in proto.graph.input if i.name not in inits}


def _int_high(proto: Any, name: str) -> int:
    """Exclusive upper bound for an integer input: the gathered table's size if it indexes one."""
    from onnx import numpy_helper

    consts = {t.name: t for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == name and n.input[0] in consts:
            axis = 0
            for a in n.attribute:
                if a.name == "axis":
                    axis = a.i
            return int(consts[n.input[0]].dims[axis])
    return 2


def make_inputs(proto: Any, seed: int = 0, other: Any = None,
                dims: Optional[Dict[str, int]] = None) -> Dict[str, np.ndarray]:
    """Sample inputs for `proto` (fixed seed). `other`: a second model whose static dims win over
    this one's dynamic dims, so both can run the same feed. `dims`: sizes for named dims."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    ins = _graph_inputs(proto)
    other_ins = _graph_inputs(other) if other is not None else {}
    feed: Dict[str, np.ndarray] = {}
    for name, vi in ins.items():
        shape = []
        a = _dims(vi)
        b = _dims(other_ins[name]) if name in other_ins else []
        for k, d in enumerate(a):
            if isinstance(d, int):
                shape.append(d)
            elif k < len(b) and isinstance(b[k], int):
                shape.append(b[k])
            elif dims and isinstance(d, str) and d in dims:
                shape.append(int(dims[d]))
            else:
                shape.append(2 if k == 0 else 8)
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if dt == np.bool_:
            feed[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif np.issubdtype(dt, np.integer):
            feed[name] = rng.integers(0, _int_high(proto, name), size=shape).astype(dt)
        else:
            feed[name] = (rng.standard_normal(size=shape, dtype=np.float32).astype(dt)
                          if dt != np.float64 else rng.standard_normal(size=shape))
    return feed


def _structure(model: Any) -> Any:
    """A ModelProto for reading inputs/outputs: paths are loaded without weight bytes."""
    import onnx

    if isinstance(model, (str, os.PathLike)):
        return onnx.load(str(model), load_external_data=False)
    return model


def session(proto: Any, threads: Optional[int] = 1) -> Any:
    """An onnxruntime CPU session running the graph as written (no graph optimisations);
    a path is handed to onnxruntime as is (no re-serialising). threads=None: ORT's default."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # compare the graph as written
    if threads is not None:
        so.intra_op_num_threads = threads
    so.enable_cpu_mem_arena = False  # one-off runs: do not keep a grown arena around
    src = str(proto) if isinstance(proto, (str, os.PathLike)) else proto.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def mark_all_outputs(proto: Any) -> Tuple[Any, List[str], Dict[str, int]]:
    """A copy of `proto` whose graph outputs are every node output (Polygraphy's `mark all`).
    Returns (marked model, node outputs in topological order, inferred elem types by name)."""
    import copy

    import onnx

    m = copy.deepcopy(proto)
    try:
        typed = onnx.shape_inference.infer_shapes(m)
    except Exception:
        typed = m
    types = {vi.name: vi.type.tensor_type.elem_type
             for vi in list(typed.graph.value_info) + list(typed.graph.output)
             + list(typed.graph.input)}
    existing = {o.name for o in m.graph.output}
    order: List[str] = []
    for node in m.graph.node:
        for o in node.output:
            if not o:
                continue
            order.append(o)
            if o in existing:
                continue
            if types.get(o):
                m.graph.output.append(onnx.helper.make_tensor_value_info(o, types[o], None))
            else:
                m.graph.output.append(onnx.ValueInfoProto(name=o))
            existing.add(o)
    return m, order, types


def run(proto: Any, feed: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    sess = session(proto)
    names = [o.name for o in sess.get_outputs()]
    want = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feed.items() if k in want})))


def compare_outputs(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray],
                    tol: float = DEFAULT_TOL) -> Verification:
    per: Dict[str, Dict[str, Any]] = {}
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for name, x in a.items():
        if name not in b:
            return Verification("different", reason=f"output '{name}' is missing after the change",
                                tolerance=tol)
        y = b[name]
        if x.shape != y.shape:
            return Verification("different", tolerance=tol,
                                reason=f"output '{name}' shape {list(x.shape)} -> {list(y.shape)}")
        if x.dtype != y.dtype:
            per[name] = {"dtype": f"{x.dtype} -> {y.dtype}"}
        if x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            per[name] = {**per.get(name, {}), "max_abs_diff": 0.0, "max_scaled_diff": 0.0,
                         "shape": list(x.shape)}
            continue  # identical (the common case for exact rewrites): no float64 copies
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        nan_x, nan_y = np.isnan(xf), np.isnan(yf)
        if np.any(nan_x != nan_y):
            return Verification("different", tolerance=tol,
                                reason=f"output '{name}': NaNs appear or disappear")
        same_inf = np.isinf(xf) & (xf == yf)
        mask = ~(nan_x | same_inf)
        d = np.abs(xf - yf)[mask] if x.size else np.zeros(0)
        mag = np.maximum(1.0, np.abs(xf[mask])) if x.size else np.zeros(0)
        mad = float(d.max()) if d.size else 0.0
        rel = float((d / mag).max()) if d.size else 0.0
        if not np.isfinite(mad):
            mad, rel = float("inf"), float("inf")
        per[name] = {**per.get(name, {}), "max_abs_diff": mad, "max_scaled_diff": rel,
                     "shape": list(x.shape)}
        worst_abs, worst_rel = max(worst_abs, mad), max(worst_rel, rel)
        ok = ok and rel <= tol
    return Verification("equivalent" if ok else "different", max_abs_diff=worst_abs,
                        max_rel_diff=worst_rel, tolerance=tol, per_output=per)


def verify(before: Any, after: Any, inputs: Optional[Dict[str, np.ndarray]] = None, *,
           seed: int = 0, tol: float = DEFAULT_TOL, dims: Optional[Dict[str, int]] = None,
           paths: Optional[tuple] = None) -> Verification:
    """Run `before` and `after` (ModelProtos with weights, or paths to ONNX files) on the same
    inputs and compare. `paths`: files holding the same two models, handed to onnxruntime
    directly so big models are not serialised again."""
    path_a, path_b = paths if paths is not None else (before, after)
    before, after = _structure(before), _structure(after)
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
    try:
        ra = run(path_a, feed)
    except Exception as e:
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
    return v


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:300]
