"""Attention-mask sentinels (-1e9, -inf, float32's min) in FP16/BF16.

A mask path is a set of FP32 tensors beyond the target's largest finite value that all come
from a constant sentinel (a Constant, ConstantOfShape or initializer whose large values are
negative) through ops that select, move or add it (Where, Unsqueeze, Expand, ... and the Add to
the attention scores), and that end in Softmax only. The lowering stores a constant read only
by lowered nodes in the low type, clamped to its largest finite value (-65504 for FP16); before
Softmax that masks as -1e9 does (exp underflows to 0), so nothing needs to stay FP32: one
information, never a warning per tensor, never advice to exclude the Constant (excluding one
keeps nothing in float). When the sentinel reaches the low type through a Cast instead (it
stays FP32: an exclusion, an op the lowering keeps FP32), it becomes -inf, and a row masked
entirely gives NaN: one warning naming the path.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from workbench.core.errors import Finding
from workbench.core.graphindex import GraphIndex

# ops a mask goes through on its way to the scores: select, move, broadcast, add, scale
MASK_OPS = frozenset({
    "Where", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Transpose", "Identity", "Cast",
    "Concat", "Slice", "Tile", "Gather", "Flatten", "Add", "Sub", "Mul", "Min", "Max", "Trilu",
    "Constant", "ConstantOfShape",
})
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})
SHAPE_READERS = frozenset({"Shape", "Size"})  # read only the shape of what they take
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})
LOW_TYPES = frozenset({10, 16})  # FLOAT16, BFLOAT16


@dataclass
class MaskPath:
    """One mask path (see the module docstring)."""

    sources: List[str]  # the constant tensors holding the sentinel
    values: List[float]  # each one's most negative value (-1e9, -inf, float32's min)
    tensors: List[str]  # the tensors beyond the limit, graph order (sources included)
    nodes: List[str]    # the nodes computing them, Constants left out, graph order
    sinks: List[str]    # the Softmax nodes it ends in

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _tensor_of(attr: Any) -> Optional[np.ndarray]:
    from onnx import numpy_helper

    try:
        return numpy_helper.to_array(attr.t)
    except Exception:  # external data not loaded, an odd type: not readable here
        return None


def constant_value(gi: GraphIndex, tensor: str) -> Optional[np.ndarray]:
    """The values of a constant float tensor: an initializer, a Constant's or ConstantOfShape's
    value (the fill value); None for anything else or what cannot be read."""
    from onnx import numpy_helper

    init = gi.initializers.get(tensor)
    if init is not None:
        if init.data_type != 1:
            return None
        try:
            return numpy_helper.to_array(init)
        except Exception:
            return None
    p = gi.producer_of(tensor)
    if p is None or gi.op(p) not in CONSTANT_OPS:
        return None
    a = gi.attribute(p, "value")
    if a is None:
        return None
    v = _tensor_of(a)
    return v if v is not None and v.dtype == np.float32 else None


def _is_sentinel(v: Optional[np.ndarray], limit: float) -> bool:
    """Large values that are all negative (a mask): min below -limit, max within +limit."""
    return v is not None and v.size > 0 and float(np.min(v)) < -limit and \
        float(np.max(v)) <= limit


def mask_paths(proto: Any, ranges: Mapping[str, float], limit: float) -> List[MaskPath]:
    """The mask paths of `proto`: `ranges` holds max |value| per tensor on the data (FP32),
    constants beyond `limit` are read from the model."""
    gi = GraphIndex.of(proto)
    over = {t for t, a in ranges.items() if a > limit and gi.producer_of(t) is not None}
    consts = {x for t in over for x in gi.nodes[gi.producer_of(t)].input
              if x and _is_sentinel(constant_value(gi, x), limit)}
    tensors = over | consts
    parent = {t: t for t in tensors}

    def root(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for t in over:
        for x in gi.nodes[gi.producer_of(t)].input:
            if x in tensors:
                parent[root(t)] = root(x)
    groups: Dict[str, List[str]] = {}
    for t in tensors:
        groups.setdefault(root(t), []).append(t)
    found = [_path(gi, members, ranges, limit) for members in groups.values()]
    return [p for p in found if p is not None]


def _amax(gi: GraphIndex, tensor: str, ranges: Mapping[str, float]) -> float:
    """max |value| of `tensor`: on the data, else (a constant) in the model."""
    if tensor in ranges:
        return float(ranges[tensor])
    v = constant_value(gi, tensor)
    return float(np.max(np.abs(v))) if v is not None and v.size else 0.0


def _path(gi: GraphIndex, members: Sequence[str], ranges: Mapping[str, float],
          limit: float) -> Optional[MaskPath]:
    """One group of connected tensors beyond the limit as a MaskPath, or None when it is not
    one (a non-constant source, an op no mask takes, a reader other than Softmax)."""
    group = set(members)
    if all(not np.isfinite(_amax(gi, t, ranges)) for t in group):
        return None  # infinite in FP32 already: the low type holds the same infinity
    outputs = set(gi.outputs)
    producers = {t: gi.producer_of(t) for t in group}
    sources, nodes, sinks = [], set(), set()
    for t in group:
        if t in outputs:
            return None
        p = producers[t]
        if p is not None:
            if gi.op(p) not in MASK_OPS:
                return None
            nodes.add(p)
        if p is None or not any(x in group for x in gi.nodes[p].input):
            if not _is_sentinel(constant_value(gi, t), limit):
                return None
            sources.append(t)
        for c in gi.consumers_of(t):
            if all(o in group for o in gi.nodes[c].output if o):
                continue
            if gi.op(c) not in SOFTMAX_OPS | SHAPE_READERS:
                return None
            sinks.add(c)
    softmax = sorted(i for i in sinks if gi.op(i) in SOFTMAX_OPS)
    if not softmax or not sources:
        return None
    sources.sort()
    return MaskPath(sources=sources,
                    values=[float(np.min(constant_value(gi, s))) for s in sources],
                    tensors=sorted(group, key=lambda t: (producers[t] is not None,
                                                         producers[t] or 0, t)),
                    nodes=[gi.key(i) for i in sorted(nodes) if gi.op(i) not in CONSTANT_OPS],
                    sinks=[gi.key(i) for i in softmax])


def stored_low(path: MaskPath, converted: Any) -> bool:
    """Does the converted model store every sentinel of `path` in the low type (the lowering
    clamps it to the type's largest finite value), rather than in FP32 for a Cast to turn
    into -inf?"""
    gi = GraphIndex.of(converted)
    for s, v in zip(path.sources, path.values):
        if not np.isfinite(v):
            continue  # -inf is -inf in any float type
        init = gi.initializers.get(s)
        if init is not None:
            if init.data_type not in LOW_TYPES:
                return False
            continue
        p = gi.producer_of(s)
        a = gi.attribute(p, "value") if p is not None and gi.op(p) in CONSTANT_OPS else None
        if a is None or a.t.data_type not in LOW_TYPES:
            return False
    return True


def _listed(names: Sequence[str], k: int = 4) -> str:
    return ", ".join(names[:k]) + (f" +{len(names) - k}" if len(names) > k else "")


def mask_finding(path: MaskPath, limit: float, dtype_name: str,
                 stored: Optional[bool] = None) -> Finding:
    """The one finding for a mask path. `stored`: whether the converted model holds the
    sentinel in the low type (`stored_low`); None before converting, where the lowering's rule
    (a constant read only by lowered nodes is stored low, clamped) is what is said."""
    low = dtype_name.upper()
    said = [f"'{s}' ({v:.3g})" for s, v in zip(path.sources, path.values)]
    finite = [f"{v:.3g}" for v in path.values if np.isfinite(v)]
    value = " / ".join(dict.fromkeys(finite)) or "-inf"
    where = (f"attention mask {_listed(said, 2)}: beyond the {low} limit {limit:g}, it "
             f"reaches only Softmax ({_listed(path.sinks)}) through {_listed(path.nodes)} "
             f"({len(path.tensors)} tensor(s) beyond the limit)")
    extra = {"mask": path.to_dict(), "limit": limit}
    if stored is False:
        keep = [n for n in path.nodes + path.sinks]
        return Finding(
            "warning", f"{dtype_name.lower()}-mask-overflow",
            f"{where}: the converted model keeps it in FP32 and a Cast takes it to {low}, "
            f"where it becomes -inf: a row masked entirely then gives NaN after Softmax",
            nodes=keep, tensors=list(path.tensors), source="precision",
            hint="keep the mask path in FP32: " + " ".join(f"--exclude {n}" for n in keep),
            extra=extra)
    how = ("the conversion stored it clamped" if stored else
           "the conversion stores it clamped (a constant only lowered nodes read)")
    return Finding(
        "info", f"{dtype_name.lower()}-saturated-mask",
        f"{where}: {how} to -{limit:g}, {low}'s largest finite value, which masks as {value} "
        f"does (Softmax's exp underflows to 0): harmless, nothing to keep in FP32",
        nodes=list(path.nodes), tensors=list(path.tensors), source="precision", extra=extra)


def settle(findings: List[Finding], converted: Any) -> List[Finding]:
    """The mask findings made before converting, said of the converted model: clamped
    (information) or cast to -inf (a warning naming the path)."""
    out = []
    for f in findings:
        mask = (f.extra or {}).get("mask") if f.code.endswith("-saturated-mask") else None
        if mask is None:
            out.append(f)
            continue
        path = MaskPath(**mask)
        low = f.code[:-len("-saturated-mask")]
        out.append(mask_finding(path, f.extra["limit"], low, stored_low(path, converted)))
    return out
