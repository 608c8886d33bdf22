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

from workbench.core.errors import WorkbenchError
from workbench.core.graphindex import GraphIndex, leaf_name
from workbench.core.model import ModelLike, as_model
from workbench.support import codes
from workbench.surgery.recipes.base import (Proposal, Param, Precondition, Recipe, all_names,
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


def _judge(proto: Any, qi: int, dqs: List[int]) -> Tuple[bool, str, str]:
    """(exact?, "node: why", the kind of why without node names or values, for grouping)."""
    g = proto.graph
    q = g.node[qi]
    ids = node_ids(proto)
    zp = constant_value(proto, q.input[2])
    scale = constant_value(proto, q.input[1])
    if zp is None or scale is None:
        return False, f"{ids[qi]}: scale/zero point are not constants", "scale or zero point computed"
    if not np.any(zp != 0):
        return False, f"{ids[qi]}: zero point is already 0", "zero point already 0"
    if zp.dtype not in RANGES:
        return (False, f"{ids[qi]}: zero point type {zp.dtype} is not int8/uint8",
                "zero point not int8/uint8")
    for j in dqs:
        m = g.node[j]
        if m.op_type != "DequantizeLinear":
            return (False, f"{ids[qi]}: its output also feeds {ids[j]} ({m.op_type}), not only "
                    "DequantizeLinear", "feeds a node other than DequantizeLinear")
        if m.input[1] != q.input[1] and not np.array_equal(constant_value(proto, m.input[1]), scale):
            return False, f"{ids[j]}: scale differs from its QuantizeLinear's", "scale differs in the pair"
        zpd = constant_value(proto, m.input[2]) if len(m.input) > 2 and m.input[2] else None
        if zpd is None or not np.array_equal(zpd, zp):
            return (False, f"{ids[j]}: zero point differs from its QuantizeLinear's",
                    "zero point differs in the pair")
    if q.output[0] in {o.name for o in g.output}:
        return (False, f"{ids[qi]}: its quantized output is a graph output (its values would "
                "change)", "quantized output is a graph output")
    lo, hi = RANGES[zp.dtype]
    zi = zp.astype(np.int64)
    if zp.dtype == np.uint8 and np.all(zi == 128):
        return True, (f"{ids[qi]}: uint8 zero point 128 -> int8 zero point 0 keeps the same "
                      "clamp range [-128, 127]: exact for every input"), "uint8 128 -> int8 0"
    # the range of round(x/s) that survives unchanged in both encodings
    keep_lo = np.maximum(lo - zi, -128)
    keep_hi = np.minimum(hi - zi, 127)
    x = constant_value(proto, q.input[0])
    if x is None:
        zs = sorted(set(int(v) for v in np.ravel(zi)))[:4]
        return False, (f"{ids[qi]}: zero point {zs} ({zp.dtype}) saturates round(x/scale) at "
                       f"[{lo}-z, {hi}-z] but symmetric int8 saturates at [-128, 127]; the input "
                       f"'{q.input[0]}' is computed at run time, so values near the limits would "
                       "change: not exact (re-quantize symmetrically, e.g. `workbench precision`)"), \
            ("an asymmetric zero point on a tensor computed at run time moves where values "
             "saturate: not exact")
    axis = int(_attr(q, "axis", 1))
    r = np.round(x.astype(np.float64) / _broadcast(scale.astype(np.float64), x, axis))
    klo, khi = _broadcast(keep_lo, x, axis), _broadcast(keep_hi, x, axis)
    if np.all((r >= klo) & (r <= khi)):
        return True, (f"{ids[qi]}: its input '{q.input[0]}' is a constant whose quantized values "
                      "all lie inside both clamp ranges, so zero point 0 (int8) gives identical "
                      "results"), "constant input inside both clamp ranges"
    bad = int(np.sum((r < klo) | (r > khi)))
    return False, (f"{ids[qi]}: {bad} value(s) of the constant input would saturate differently "
                   "with zero point 0: not exact"), "constant input saturates differently: not exact"


def _const_dqs(proto: Any) -> List[int]:
    """DequantizeLinear nodes of a stored 8-bit constant (no QuantizeLinear in front: how
    onnxruntime's quantizer stores weights, biases and scalars) with an explicit zero point."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    out = []
    for i, n in enumerate(g.node):
        if n.op_type == "DequantizeLinear" and len(n.input) > 2 and n.input[2] and \
                n.input[0] in inits:
            out.append(i)
    return out


def _groups(scale: np.ndarray, x: np.ndarray, axis: int) -> List[Tuple[Any, ...]]:
    """Index tuples of x, one per scale element (the whole tensor for a per-tensor scale)."""
    if scale.size <= 1 or x.ndim == 0:
        return [tuple(slice(None) for _ in range(x.ndim))]
    ax = axis % x.ndim
    return [tuple(c if d == ax else slice(None) for d in range(x.ndim))
            for c in range(scale.size)]


def _requantize_const(x: np.ndarray, scale: np.ndarray, zp: np.ndarray,
                      axis: int) -> Tuple[Optional[Tuple[np.ndarray, np.ndarray]], str]:
    """Symmetric int8 codes and scales that dequantize to exactly the values DequantizeLinear
    computes from (x, scale, zp), or None and the evidence why there are none.

    Per scale group, the first that fits: the same scale with codes x - zp (when they fit
    int8); the scale times 2**p with codes (x - zp) / 2**p (exact in binary floating point);
    a group of one magnitude c (a scalar, a vector of equal values): codes -1/0/1, scale c.
    The result is checked against onnxruntime's arithmetic (`dequantize_constant`)."""
    want = dequantize_constant(x, scale, zp, axis)
    k = x.astype(np.int64) - (_broadcast(zp.astype(np.int64), x, axis) if x.ndim
                              else zp.astype(np.int64).reshape(()))
    k = np.broadcast_to(k, x.shape).copy()
    codes_out = np.zeros(x.shape, np.int64)
    flat_scale = scale.reshape(-1).astype(scale.dtype).copy()
    new_scale = flat_scale.copy()
    for gi, sl in enumerate(_groups(scale, x, axis)):
        kg = k[sl] if x.ndim else k
        s = flat_scale[gi if flat_scale.size > 1 else 0]
        done = False
        for p in range(0, 9):
            d = 1 << p
            if np.all(kg % d == 0) and np.all((kg // d >= -128) & (kg // d <= 127)):
                cand = (s * scale.dtype.type(d)).astype(scale.dtype)
                if np.isfinite(cand):
                    codes_g, s_new, done = kg // d, cand, True
                    break
        if not done:
            wg = want[sl] if x.ndim else want
            mags = np.unique(np.abs(wg[wg != 0]))
            if mags.size == 1 and mags[0] > 0:
                codes_g, s_new, done = np.sign(wg).astype(np.int64), mags[0].astype(scale.dtype), True
        if not done:
            break
        if x.ndim:
            codes_out[sl] = codes_g
        else:
            codes_out = np.asarray(codes_g, np.int64).reshape(())
        new_scale[gi if flat_scale.size > 1 else 0] = s_new
    else:
        codes8 = codes_out.astype(np.int8)
        s_out = new_scale.reshape(scale.shape)
        got = dequantize_constant(codes8, s_out, None, axis)
        if np.array_equal(got, want):
            return (codes8, s_out), ""
    # not exact: what a symmetric re-quantization (scale max|v|/127) would cost, in the
    # original scale's steps
    worst, steps = 0.0, 0.0
    for gi, sl in enumerate(_groups(scale, x, axis)):
        wg = (want[sl] if x.ndim else want).astype(np.float64)
        m = float(np.max(np.abs(wg))) if wg.size else 0.0
        if m == 0:
            continue
        s_sym = m / 127.0
        err = float(np.max(np.abs(np.clip(np.round(wg / s_sym), -128, 127) * s_sym - wg)))
        s0 = float(flat_scale[gi if flat_scale.size > 1 else 0])
        worst = max(worst, err)
        steps = max(steps, err / s0 if s0 else 0.0)
    return None, (f"its values need codes outside int8 with zero point 0 and no symmetric scale "
                  f"represents them exactly (re-quantizing it symmetrically moves values by up "
                  f"to {worst:.3g}, {steps:.2f} of its quantization step): not exact")


def _judge_const(proto: Any, di: int) -> Tuple[bool, str, str, Optional[Tuple[np.ndarray, np.ndarray]]]:
    """A DequantizeLinear of a stored constant: (exact?, "node: why", kind, new codes/scale)."""
    n = proto.graph.node[di]
    nid = node_ids(proto)[di]
    x = constant_value(proto, n.input[0])
    scale = constant_value(proto, n.input[1])
    zp = constant_value(proto, n.input[2])
    if zp is None or scale is None:
        return False, f"{nid}: scale/zero point are not constants", "scale or zero point computed", None
    if not np.any(zp != 0):
        return False, f"{nid}: zero point is already 0", "zero point already 0", None
    if zp.dtype not in RANGES or x.dtype not in RANGES or scale.dtype.kind != "f" or \
            any(a.name not in ("axis",) for a in n.attribute):
        return (False, f"{nid}: a {x.dtype} constant with a {zp.dtype} zero point (or block "
                "quantization) is not re-encoded here", "not an 8-bit constant", None)
    axis = int(_attr(n, "axis", 1))
    new, why = _requantize_const(x, scale, zp, axis)
    if new is None:
        return False, f"{nid}: {why}", "constant not representable symmetrically: not exact", None
    same = np.array_equal(new[1], scale)
    return True, (f"{nid}: its constant '{n.input[0]}' re-encoded as int8 with zero point 0"
                  + (" (same scale)" if same else " (codes and scale rescaled)")
                  + " dequantizes to identical values"), "constant re-encoded exactly", new


def _group_reasons(items: List[Tuple[str, str, str]], limit: int = 3) -> str:
    """'kind: A, B, C and N more' for (node id, why, kind) items of one outcome; a single
    node keeps its full reason."""
    if len(items) == 1:
        return items[0][1]
    by: Dict[str, List[str]] = {}
    for nid, _, kind in items:
        by.setdefault(kind, []).append(nid)
    parts = []
    for kind, nodes in by.items():
        shown = ", ".join(nodes[:limit]) + (f" and {len(nodes) - limit} more"
                                            if len(nodes) > limit else "")
        parts.append(f"{len(nodes)} node(s) ({kind}): {shown}")
    return "; ".join(parts)


@register
class SymmetricQDQ(Recipe):
    name = "symmetric_qdq"
    summary = ("set Q/DQ zero points to 0 (int8) where provably exact (Q->DQ pairs, and the "
               "DequantizeLinear of a stored constant re-encoded symmetrically); refuses "
               "otherwise")
    params = (Param("node", "str", None, "one QuantizeLinear, the DequantizeLinear of its "
                    "pair, or the DequantizeLinear of a constant (default: all eligible)"),)
    preserves_semantics = True
    fixes = (codes.QDQ_ZERO_POINT, codes.QDQ_ZERO_POINT_RUNTIME) + codes.GENERIC_PARSER_CODES
    ops = ("QuantizeLinear", "DequantizeLinear")
    priority = 15

    def _target(self, finding: Any, ctx: Any) -> Optional[Tuple[int, Precondition]]:
        """(index of the node to name, the precondition for it) for a finding's node: the
        QuantizeLinear of a pair (also for its DequantizeLinear), or a constant's DQ."""
        idx = ctx.node_index(finding)
        if idx is None:
            return None

        def make() -> Tuple[int, Precondition]:
            g = ctx.proto.graph
            i = idx
            q = g.node[i]
            if q.op_type == "DequantizeLinear":
                prod = [k for k, m in enumerate(g.node) if q.input and q.input[0] in m.output]
                if prod and g.node[prod[0]].op_type == "QuantizeLinear":
                    i = prod[0]
            return i, self.precondition(ctx.proto, node=ctx.ids[i])

        return ctx.cached(f"symmetric_qdq.{idx}", make)

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        """For the Q (or the DQ's producing Q) node, or a constant's DQ, where it is exact;
        nothing where it is not (the next recipe, emulate_quantized, is asked then)."""
        t = self._target(finding, ctx)
        if t is None or not t[1].applies:
            return []
        i, pre = t
        nid = ctx.ids[i]
        return [Proposal(nid, ctx.proto.graph.node[i].op_type, self.name, {"node": nid},
                         pre.reason, auto=True, code=finding.code)]

    def next_step(self, finding: Any, ctx: Any) -> Any:
        if not self.can_fix(finding, ctx):
            return None
        t = self._target(finding, ctx)
        if t is None or not t[1].applies or _rule_words(finding.hint):
            return None  # (the rule table's words name the node already)
        from workbench.surgery.recipes.base import fix_step

        return fix_step(self.name + ':node=' + ctx.ids[t[0]], "makes its zero point 0 exactly "
                        "(--recipe symmetric_qdq without a node does every such node)")

    def retracts(self, finding: Any, ctx: Any) -> Optional[Tuple[str, str]]:
        """The rule table's 'symmetric_qdq:node=N (applies only where exact)' advice, where
        it is not exact for this node: those words and why not."""
        words = _rule_words(finding.hint)
        if not words or not self.can_fix(finding, ctx):
            return None
        t = self._target(finding, ctx)
        if t is None or t[1].applies:
            return None  # (node= takes the DQ of a pair too: the words run as printed)
        why = t[1].reason.split(": ", 1)[-1]
        return words, f"symmetric_qdq does not apply to it: {why}"

    def _select(self, proto: Any, node: Optional[str]) -> List[Tuple[int, List[int], bool, str, str, Any]]:
        """(node index, its DQs, exact?, why, kind, re-encoding) per candidate: each Q->DQ
        pair (by its Q or one of its DQs) and each constant's DQ."""
        ids = node_ids(proto)
        g = proto.graph
        out = []

        def named(i: int) -> bool:
            return node in (ids[i], g.node[i].name)

        for qi, dqs in _pairs(proto):
            if node and not (named(qi) or any(named(j) for j in dqs)):
                continue
            ok, why, kind = _judge(proto, qi, dqs)
            out.append((qi, dqs, ok, why, kind, None))
        for di in _const_dqs(proto):
            if node and not named(di):
                continue
            ok, why, kind, new = _judge_const(proto, di)
            out.append((di, [], ok, why, kind, new))
        return out

    def precondition(self, model: ModelLike, node: Optional[str] = None) -> Precondition:
        proto = as_model(model).with_weights()
        sel = self._select(proto, node)
        if not sel:
            return Precondition(False, "no QuantizeLinear with an explicit zero point, or "
                                "DequantizeLinear of a constant with one" +
                                (f", named {node}" if node else ""), [])
        ids = node_ids(proto)
        good = [(ids[s[0]], s[3], s[4]) for s in sel if s[2]]
        bad = [(ids[s[0]], s[3], s[4]) for s in sel if not s[2] and
               s[4] != "zero point already 0"]
        if not good:
            bad = bad or [(ids[s[0]], s[3], s[4]) for s in sel]
            return Precondition(False, _group_reasons(bad), [b[0] for b in bad])
        reason = "applies to " + _group_reasons(good)
        if bad:
            reason += "; left as they are: " + _group_reasons(bad)
        return Precondition(True, reason, [x[0] for x in good])

    def _apply(self, proto: Any, node: Optional[str] = None) -> Any:
        from onnx import numpy_helper

        taken = all_names(proto)
        g = proto.graph
        for qi, dqs, ok, _, _, new in self._select(proto, node):
            if not ok:
                continue
            n = g.node[qi]
            zp = constant_value(proto, n.input[2])
            name = unique_name(taken, n.input[2] + "_sym")
            g.initializer.append(numpy_helper.from_array(np.zeros(zp.shape, np.int8), name))
            if new is not None:  # a constant's DQ: its re-encoded codes and scale
                xn = unique_name(taken, n.input[0] + "_sym")
                g.initializer.append(numpy_helper.from_array(new[0], xn))
                n.input[0] = xn
                if not np.array_equal(new[1], constant_value(proto, n.input[1])):
                    sn = unique_name(taken, n.input[1] + "_sym")
                    g.initializer.append(numpy_helper.from_array(new[1], sn))
                    n.input[1] = sn
            for k in [qi] + dqs:
                g.node[k].input[2] = name
        # drop initializers nothing reads any more
        used = {x for nd in g.node for x in nd.input}
        keep = [t for t in g.initializer if t.name in used or t.name in {i.name for i in g.input}]
        del g.initializer[:]
        g.initializer.extend(keep)
        return proto


def _rule_words(hint: Optional[str]) -> Optional[str]:
    """The static rule's symmetric_qdq advice inside a hint, as it was formatted."""
    import re

    if not hint:
        return None
    m = re.search(r"`workbench fix [^`]*--recipe symmetric_qdq:node=[^`]*` \(applies only "
                  r"where exact\)", hint)
    return m.group(0) if m else None


def dequantize_constant(x: np.ndarray, scale: np.ndarray, zero_point: Optional[np.ndarray],
                        axis: int = 1) -> np.ndarray:
    """DequantizeLinear of a constant, as onnxruntime computes it: the integer difference
    x - zero_point, then one multiply in the scale's float type (per tensor, or per `axis`)."""
    zp = np.zeros((), dtype=np.int64) if zero_point is None else zero_point.astype(np.int64)
    if x.ndim:
        scale, zp = _broadcast(scale, x, axis), _broadcast(zp, x, axis)
    diff = x.astype(np.int64) - zp
    return (diff.astype(scale.dtype) * scale).astype(scale.dtype)


QDQ = ("QuantizeLinear", "DequantizeLinear")
CODE_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
               "uint16": (0, 65535), "int4": (-8, 7), "uint4": (0, 15),
               "float8_e4m3fn": (-448.0, 448.0)}


def _code_range(dtype: np.dtype, node: str) -> Tuple[float, float]:
    """The codes a QuantizeLinear of this zero-point type saturates at."""
    r = CODE_RANGES.get(np.dtype(dtype).name)
    if r is None:
        raise WorkbenchError(f"{node}: quantization to {np.dtype(dtype).name} cannot be turned "
                             "back into float here", node=node,
                             hint="re-quantize from the FP32 model")
    return r


def _opset(proto: Any) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def read_names(graph: Any) -> set:
    """Every tensor name a node of `graph` or of any of its subgraphs reads."""
    from workbench.core.model import _iter_graphs

    return {x for g in _iter_graphs(graph) for nd in g.node for x in nd.input}


class _Strip:
    """One strip_qdq pass over a copy of a model: the nodes to drop, the tensors renamed to
    their float producers, the Clip/Identity nodes added in place of pairs, and the counts."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.g = g = out.graph
        self.ids = node_ids(out)
        self.inits = {t.name: t for t in g.initializer}
        self.consumers = GraphIndex(g).consumers  # read before the edits below
        self.drop: set = set()
        self.rename: Dict[str, str] = {}
        self.graph_outputs = {o.name for o in g.output}
        self.added: List[Any] = []  # Clip (and Identity) nodes in place of the pairs
        self.taken = all_names(out)
        self.counts = {"weights": 0, "pairs": 0}

    def const(self, name: str) -> Optional[np.ndarray]:
        """The initializer `name` as an array (None: a computed tensor)."""
        from onnx import numpy_helper

        return numpy_helper.to_array(self.inits[name]) if name in self.inits else None

    def dequantize_weight(self, i: int, n: Any) -> None:
        """A DequantizeLinear of a constant: its float value becomes an initializer under the
        node's output name; a computed scale/zero point or block quantization is refused."""
        from onnx import numpy_helper

        ids, const = self.ids, self.const
        scale = const(n.input[1])
        zp = const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if scale is None or (len(n.input) > 2 and n.input[2] and zp is None) or \
                any(a.name != "axis" for a in n.attribute):
            raise WorkbenchError(f"{ids[i]}: a DequantizeLinear whose scale or zero point is "
                                 "computed, or with block quantization, cannot be turned "
                                 "back into float weights here", node=ids[i],
                                 hint="re-quantize from the FP32 model")
        y = dequantize_constant(const(n.input[0]), scale, zp, int(_attr(n, "axis", 1)))
        self.g.initializer.append(numpy_helper.from_array(y, n.output[0]))
        self.drop.add(i)
        self.counts["weights"] += 1

    def _pair_params(self, i: int, n: Any, dqs: List[int]) -> Tuple[np.ndarray, np.ndarray]:
        """(scale, zero point) of QuantizeLinear `n`, checked to be a plain rounding step: only
        DequantizeLinear consumers with the same constant scale and zero point (else refused,
        naming the node and the fix)."""
        g, ids, const = self.g, self.ids, self.const
        if not dqs or any(g.node[j].op_type != "DequantizeLinear" for j in dqs) or \
                n.output[0] in self.graph_outputs:
            raise WorkbenchError(f"{ids[i]}: QuantizeLinear feeds "
                                 + (", ".join(f"{ids[j]} ({g.node[j].op_type})" for j in dqs
                                              if g.node[j].op_type != "DequantizeLinear")
                                    or "a graph output")
                                 + ", not only DequantizeLinear: the model computes in "
                                 "integers there", node=ids[i],
                                 hint="`workbench fix MODEL -o OUT.onnx --recipe "
                                      "emulate_quantized` rewrites integer ops into float "
                                      "first")
        scale = const(n.input[1])
        zp_name = n.input[2] if len(n.input) > 2 else ""
        zp = const(zp_name) if zp_name else np.zeros((), np.uint8)  # (ONNX: uint8 default)
        if scale is None or zp is None or any(a.name not in ("axis", "saturate")
                                             for a in n.attribute):
            raise WorkbenchError(f"{ids[i]}: a QuantizeLinear whose scale or zero point is "
                                 "computed, or with block quantization, cannot be turned "
                                 "back into float here", node=ids[i],
                                 hint="re-quantize from the FP32 model")
        for j in dqs:
            d = g.node[j]
            dzp = const(d.input[2]) if len(d.input) > 2 and d.input[2] else np.zeros((), zp.dtype)
            if not np.array_equal(const(d.input[1]), scale) or dzp is None or \
                    not np.array_equal(dzp.astype(np.float64), zp.astype(np.float64)):
                raise WorkbenchError(f"{ids[j]}: its scale or zero point differs from its "
                                     f"QuantizeLinear {ids[i]}'s: the pair is not a plain "
                                     "rounding step", node=ids[j],
                                     hint="re-quantize from the FP32 model")
        return scale, zp

    def strip_pair(self, i: int, n: Any) -> None:
        """A QuantizeLinear and its DequantizeLinears: folded into the weight's rounded value
        (a constant input), else bypassed by a Clip at the code range's ends (per tensor only)."""
        dqs = self.consumers.get(n.output[0], [])
        scale, zp = self._pair_params(i, n, dqs)
        lo, hi = _code_range(zp.dtype, self.ids[i])
        w = self.const(n.input[0])
        if w is not None:
            self._fold_weight(i, dqs, w, scale, zp, lo, hi, int(_attr(n, "axis", 1)))
            return
        if scale.size > 1:
            raise WorkbenchError(f"{self.ids[i]}: a computed tensor quantized per channel cannot "
                                 "be turned back into float here", node=self.ids[i],
                                 hint="re-quantize from the FP32 model")
        self._clip_pair(i, n, dqs, scale, zp, lo, hi)

    def _fold_weight(self, i: int, dqs: List[int], w: np.ndarray, scale: np.ndarray,
                     zp: np.ndarray, lo: float, hi: float, axis: int) -> None:
        """A weight quantized in the graph: each DequantizeLinear's output becomes the
        weight's dequantized value (rounded and saturated as the pair does)."""
        from onnx import numpy_helper

        ws = _broadcast(scale, w, axis) if w.ndim else scale
        wz = (_broadcast(zp, w, axis) if w.ndim else zp).astype(np.float64)
        if np.dtype(zp.dtype).kind == "f" or "float8" in np.dtype(zp.dtype).name:
            # float8: round to the nearest float8 (saturating), not to an integer
            v = np.clip(w.astype(np.float32) / ws.astype(np.float32), lo, hi)
            y = (v.astype(zp.dtype).astype(np.float32) * ws).astype(scale.dtype)
        else:
            code = np.clip(np.rint(w.astype(np.float64) / ws) + wz, lo, hi)
            y = ((code - wz) * ws).astype(scale.dtype)
        for j in dqs:
            self.g.initializer.append(numpy_helper.from_array(y, self.g.node[j].output[0]))
            self.drop.add(j)
        self.drop.add(i)
        self.counts["weights"] += 1

    def _clip_pair(self, i: int, n: Any, dqs: List[int], scale: np.ndarray, zp: np.ndarray,
                   lo: float, hi: float) -> None:
        """Bypass a pair on a computed tensor: it saturates at the ends of its code range, so
        it is kept as a Clip (onnxruntime's quantizer drops a Relu in front of an asymmetric
        pair: the clamp is that Relu); the DQs' readers read the Clip."""
        from onnx import helper, numpy_helper

        g, taken, added = self.g, self.taken, self.added
        zf = float(np.asarray(zp, np.float64).reshape(-1)[0])
        sf = np.asarray(scale).reshape(-1)[0]
        lo_v = (np.asarray(lo - zf, np.float64) * sf).astype(scale.dtype)
        hi_v = (np.asarray(hi - zf, np.float64) * sf).astype(scale.dtype)
        src = self.rename.get(n.input[0], n.input[0])
        outs = [g.node[j].output[0] for j in dqs]
        named = [o for o in outs if o in self.graph_outputs]
        clip_out = named[0] if named else unique_name(taken, n.output[0] + "_float")
        # (not the Q's own name: a quantizer run afterwards names its new Q nodes so)
        cname = unique_name(taken, leaf_name(src) + "_saturate")
        if _opset(self.out) >= 11:
            lo_n = unique_name(taken, cname + "_min")
            hi_n = unique_name(taken, cname + "_max")
            g.initializer.extend([numpy_helper.from_array(np.asarray(lo_v), lo_n),
                                  numpy_helper.from_array(np.asarray(hi_v), hi_n)])
            added.append(helper.make_node("Clip", [src, lo_n, hi_n], [clip_out], name=cname))
        else:
            added.append(helper.make_node("Clip", [src], [clip_out], name=cname,
                                          min=float(lo_v), max=float(hi_v)))
        for o in outs:
            if o == clip_out:
                continue
            if o in self.graph_outputs:
                added.append(helper.make_node("Identity", [clip_out], [o],
                                              name=unique_name(taken, o + "_copy")))
            else:
                self.rename[o] = clip_out
        self.drop.update(dqs)
        self.drop.add(i)
        self.counts["pairs"] += len(dqs)

    def refuse_leftovers(self) -> None:
        """A Q/DQ neither folded nor bypassed (of a tensor an integer op computes) is refused,
        naming the first."""
        g = self.g
        left = [k for k, n in enumerate(g.node) if k not in self.drop and n.op_type in QDQ]
        if left:
            k = left[0]
            raise WorkbenchError(f"{self.ids[k]}: a {g.node[k].op_type} of a tensor an integer "
                                 "op computes cannot be turned back into float here",
                                 node=self.ids[k], hint="`workbench fix MODEL -o OUT.onnx "
                                 "--recipe emulate_quantized` first")

    def _resolve(self, name: str) -> str:
        """Follow renames to the float tensor a removed DQ's output now is (bounded chain)."""
        seen = 0
        while name in self.rename and seen < 64:
            name, seen = self.rename[name], seen + 1
        return name

    def _rewire(self, graph: Any) -> None:
        """Point every input (in subgraphs too) at its renamed tensor; a Q/DQ inside a
        subgraph is refused."""
        for nd in graph.node:
            for k, x in enumerate(nd.input):
                if x in self.rename:
                    nd.input[k] = self._resolve(x)
            for a in nd.attribute:
                for sub in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                    if any(m.op_type in QDQ for m in sub.node):
                        raise WorkbenchError(f"{nd.name or nd.op_type}: "
                                             "Q/DQ inside a subgraph cannot be turned back "
                                             "into float here", node=nd.name or nd.op_type,
                                             hint="re-quantize from the FP32 model")
                    self._rewire(sub)

    def rebuild(self) -> Any:
        """The model without the dropped nodes, with the added ones, inputs rewired, unread
        initializers of dropped nodes gone, in topological order."""
        g = self.g
        freed = {x for k in self.drop for x in g.node[k].input}
        keep = [n for k, n in enumerate(g.node) if k not in self.drop]
        del g.node[:]
        g.node.extend(keep + self.added)
        self._rewire(g)
        used = read_names(g) | self.graph_outputs
        kept = [t for t in g.initializer if t.name not in freed or t.name in used]
        del g.initializer[:]
        g.initializer.extend(kept)
        out = self.out
        if self.added:  # the Clip nodes were appended: restore the topological order
            from workbench.surgery.recipes.base import gs_export, gs_import

            sg = gs_import(out)
            sg.toposort()
            out = gs_export(sg, out)
        return out


def strip_qdq(proto: Any) -> Tuple[Any, Dict[str, int]]:
    """The float model behind a Q/DQ model (a new ModelProto; `proto` is not modified): every
    DequantizeLinear of a constant becomes that constant's float value (the weights as the
    quantized model computes them), every QuantizeLinear -> DequantizeLinear pair on a
    computed tensor is bypassed (its consumers read the float tensor). Returns the model and
    counts ("weights", "pairs"). A Q/DQ that is neither (a QuantizeLinear feeding an integer
    op, a Q/DQ inside a subgraph) is refused naming the node: emulate_quantized handles
    integer ops."""
    import copy

    st = _Strip(copy.deepcopy(proto))
    for i, n in enumerate(st.g.node):
        if n.op_type == "DequantizeLinear" and n.input[0] in st.inits:
            st.dequantize_weight(i, n)
        elif n.op_type == "QuantizeLinear":
            st.strip_pair(i, n)
    st.refuse_leftovers()
    return st.rebuild(), st.counts


@register
class StripQDQ(Recipe):
    name = "strip_qdq"
    summary = ("turn a Q/DQ model back into float: weights at their dequantized values, "
               "activation Q/DQ pairs removed (then re-quantize with `workbench precision`)")
    params = ()
    preserves_semantics = False  # the activations' rounding goes
    mutates_input = False
    fixes = ()
    ops = QDQ

    def precondition(self, model: ModelLike) -> Precondition:
        proto = as_model(model).with_weights()
        ids = node_ids(proto)
        qdq = [ids[i] for i, n in enumerate(proto.graph.node) if n.op_type in QDQ]
        if not qdq:
            return Precondition(False, "no QuantizeLinear/DequantizeLinear in the graph", [])
        try:
            _, counts = strip_qdq(proto)
        except WorkbenchError as e:
            return Precondition(False, str(e), qdq)
        return Precondition(True, f"applies: {counts['weights']} quantized constant(s) become "
                            f"float, {counts['pairs']} activation Q/DQ pair(s) go (not exact: "
                            "their rounding is removed)", qdq)

    def _apply(self, proto: Any) -> Any:
        return strip_qdq(proto)[0]
