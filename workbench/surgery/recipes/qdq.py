"""Make Q/DQ zero points symmetric (zero), only where the result is provably the same.

TensorRT takes QuantizeLinear/DequantizeLinear only with zero point 0. A pair Q->DQ with scale s
and zero point z computes s * (clamp(round(x/s) + z, lo, hi) - z), i.e. round(x/s) clamped to
[lo - z, hi - z]. With int8 and z = 0 the clamp is [-128, 127]. So:
- uint8 with z = 128 -> int8 with z = 0 is exact for every input (same clamp range);
- any other z changes where values saturate: exact only if every value that can reach the node
  lies inside both ranges. When the Q input is a constant we check that on the data itself;
  otherwise we refuse and say which range would change.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from workbench.support import codes
from workbench.surgery.recipes.base import (Proposal, Param, Precondition, Recipe, all_names, as_proto,
                                    constant_value, node_ids, register, unique_name)

RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _pairs(proto: Any) -> List[Tuple[int, List[int]]]:
    g = proto.graph
    out = []
    for i, n in enumerate(g.node):
        if n.op_type != "QuantizeLinear" or len(n.input) < 3 or not n.input[2]:
            continue
        dqs = [j for j, m in enumerate(g.node) if n.output[0] in m.input]
        out.append((i, dqs))
    return out


def _broadcast(v: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * x.ndim
    shape[axis % x.ndim] = v.size
    return v.reshape(shape)


def _judge(proto: Any, qi: int, dqs: List[int]) -> Tuple[bool, str]:
    g = proto.graph
    q = g.node[qi]
    ids = node_ids(proto)
    zp = constant_value(proto, q.input[2])
    scale = constant_value(proto, q.input[1])
    if zp is None or scale is None:
        return False, f"{ids[qi]}: scale/zero point are not constants"
    if not np.any(zp != 0):
        return False, f"{ids[qi]}: zero point is already 0"
    if zp.dtype not in RANGES:
        return False, f"{ids[qi]}: zero point type {zp.dtype} is not int8/uint8"
    for j in dqs:
        m = g.node[j]
        if m.op_type != "DequantizeLinear":
            return False, f"{ids[qi]}: its output also feeds {ids[j]} ({m.op_type}), not only DequantizeLinear"
        if m.input[1] != q.input[1] and not np.array_equal(constant_value(proto, m.input[1]), scale):
            return False, f"{ids[j]}: scale differs from its QuantizeLinear's"
        zpd = constant_value(proto, m.input[2]) if len(m.input) > 2 and m.input[2] else None
        if zpd is None or not np.array_equal(zpd, zp):
            return False, f"{ids[j]}: zero point differs from its QuantizeLinear's"
    if q.output[0] in {o.name for o in g.output}:
        return False, f"{ids[qi]}: its quantized output is a graph output (its values would change)"
    lo, hi = RANGES[zp.dtype]
    zi = zp.astype(np.int64)
    if zp.dtype == np.uint8 and np.all(zi == 128):
        return True, (f"{ids[qi]}: uint8 zero point 128 -> int8 zero point 0 keeps the same "
                      "clamp range [-128, 127]: exact for every input")
    # the range of round(x/s) that survives unchanged in both encodings
    keep_lo = np.maximum(lo - zi, -128)
    keep_hi = np.minimum(hi - zi, 127)
    x = constant_value(proto, q.input[0])
    if x is None:
        zs = sorted(set(int(v) for v in np.ravel(zi)))[:4]
        return False, (f"{ids[qi]}: zero point {zs} ({zp.dtype}) saturates round(x/scale) at "
                       f"[{lo}-z, {hi}-z] but symmetric int8 saturates at [-128, 127]; the input "
                       f"'{q.input[0]}' is computed at run time, so values near the limits would "
                       "change: not exact (re-quantize symmetrically, e.g. `workbench precision`)")
    axis = int(_attr(q, "axis", 1))
    r = np.round(x.astype(np.float64) / _broadcast(scale.astype(np.float64), x, axis))
    klo, khi = _broadcast(keep_lo, x, axis), _broadcast(keep_hi, x, axis)
    if np.all((r >= klo) & (r <= khi)):
        return True, (f"{ids[qi]}: its input '{q.input[0]}' is a constant whose quantized values "
                      "all lie inside both clamp ranges, so zero point 0 (int8) gives identical "
                      "results")
    bad = int(np.sum((r < klo) | (r > khi)))
    return False, (f"{ids[qi]}: {bad} value(s) of the constant input would saturate differently "
                   "with zero point 0: not exact")


@register
class SymmetricQDQ(Recipe):
    name = "symmetric_qdq"
    summary = "set Q/DQ zero points to 0 (int8) where provably exact; refuses otherwise"
    params = (Param("node", "str", None, "one QuantizeLinear node (default: all eligible)"),)
    preserves_semantics = True
    fixes = (codes.QDQ_ZERO_POINT, codes.QDQ_ZERO_POINT_RUNTIME) + codes.GENERIC_PARSER_CODES
    ops = ("QuantizeLinear", "DequantizeLinear")
    priority = 15

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        """For the Q (or the DQ's producing Q) node; a manual proposal when it is not exact."""
        g = ctx.proto.graph
        idx = ctx.node_index(finding)
        q = g.node[idx]
        if q.op_type == "DequantizeLinear":
            prod = [i for i, m in enumerate(g.node) if q.input and q.input[0] in m.output]
            idx = prod[0] if prod else idx
            q = g.node[idx]
        qid = ctx.ids[idx]
        pre = self.precondition(ctx.proto, node=qid)
        return [Proposal(qid, q.op_type, self.name, {"node": qid}, pre.reason, auto=pre.applies,
                         code=finding.code)]

    def _select(self, proto: Any, node: Optional[str]) -> List[Tuple[int, List[int], bool, str]]:
        ids = node_ids(proto)
        out = []
        for qi, dqs in _pairs(proto):
            if node and node not in (ids[qi], proto.graph.node[qi].name):
                continue
            ok, why = _judge(proto, qi, dqs)
            out.append((qi, dqs, ok, why))
        return out

    def precondition(self, model: Any, node: Optional[str] = None) -> Precondition:
        proto = as_proto(model)
        sel = self._select(proto, node)
        if not sel:
            return Precondition(False, "no QuantizeLinear with an explicit zero point" +
                                (f" named {node}" if node else ""), [])
        ids = node_ids(proto)
        good = [s for s in sel if s[2]]
        if not good:
            return Precondition(False, "; ".join(s[3] for s in sel), [ids[s[0]] for s in sel])
        return Precondition(True, "applies: " + "; ".join(s[3] for s in good) +
                            ("; refused: " + "; ".join(s[3] for s in sel if not s[2])
                             if len(good) < len(sel) else ""), [ids[s[0]] for s in good])

    def _apply(self, proto: Any, node: Optional[str] = None) -> Any:
        from onnx import numpy_helper

        taken = all_names(proto)
        g = proto.graph
        for qi, dqs, ok, _ in self._select(proto, node):
            if not ok:
                continue
            zp = constant_value(proto, g.node[qi].input[2])
            name = unique_name(taken, g.node[qi].input[2] + "_sym")
            g.initializer.append(numpy_helper.from_array(np.zeros(zp.shape, np.int8), name))
            for k in [qi] + dqs:
                g.node[k].input[2] = name
        # drop zero-point initializers nothing reads any more
        used = {x for n in g.node for x in n.input}
        keep = [t for t in g.initializer if t.name in used or t.name in {i.name for i in g.input}]
        del g.initializer[:]
        g.initializer.extend(keep)
        return proto
