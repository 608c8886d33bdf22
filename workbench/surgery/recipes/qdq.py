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

from workbench.errors import WorkbenchError
from workbench.graphindex import GraphIndex, leaf_name
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
    from workbench.model import _iter_graphs

    return {x for g in _iter_graphs(graph) for nd in g.node for x in nd.input}


def strip_qdq(proto: Any) -> Tuple[Any, Dict[str, int]]:
    """The float model behind a Q/DQ model (a new ModelProto; `proto` is not modified): every
    DequantizeLinear of a constant becomes that constant's float value (the weights as the
    quantized model computes them), every QuantizeLinear -> DequantizeLinear pair on a
    computed tensor is bypassed (its consumers read the float tensor). Returns the model and
    counts ("weights", "pairs"). A Q/DQ that is neither (a QuantizeLinear feeding an integer
    op, a Q/DQ inside a subgraph) is refused naming the node: emulate_quantized handles
    integer ops."""
    import copy

    from onnx import helper, numpy_helper

    out = copy.deepcopy(proto)
    g = out.graph
    ids = node_ids(out)
    inits = {t.name: t for t in g.initializer}
    consumers = GraphIndex(g).consumers  # read before the edits below

    def const(name: str) -> Optional[np.ndarray]:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    drop: set = set()
    rename: Dict[str, str] = {}
    graph_outputs = {o.name for o in g.output}
    added = []  # Clip (and Identity) nodes in place of the pairs
    taken = all_names(out)
    counts = {"weights": 0, "pairs": 0}
    for i, n in enumerate(g.node):
        if n.op_type == "DequantizeLinear" and n.input[0] in inits:
            scale = const(n.input[1])
            zp = const(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            if scale is None or (len(n.input) > 2 and n.input[2] and zp is None) or \
                    any(a.name != "axis" for a in n.attribute):
                raise WorkbenchError(f"{ids[i]}: a DequantizeLinear whose scale or zero point is "
                                     "computed, or with block quantization, cannot be turned "
                                     "back into float weights here", node=ids[i],
                                     hint="re-quantize from the FP32 model")
            y = dequantize_constant(const(n.input[0]), scale, zp, int(_attr(n, "axis", 1)))
            g.initializer.append(numpy_helper.from_array(y, n.output[0]))
            drop.add(i)
            counts["weights"] += 1
        elif n.op_type == "QuantizeLinear":
            dqs = consumers.get(n.output[0], [])
            if not dqs or any(g.node[j].op_type != "DequantizeLinear" for j in dqs) or \
                    n.output[0] in graph_outputs:
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
            lo, hi = _code_range(zp.dtype, ids[i])
            axis = int(_attr(n, "axis", 1))
            w = const(n.input[0])
            if w is not None:  # a weight quantized in the graph: its dequantized value
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
                    g.initializer.append(numpy_helper.from_array(y, g.node[j].output[0]))
                    drop.add(j)
                drop.add(i)
                counts["weights"] += 1
                continue
            if scale.size > 1:
                raise WorkbenchError(f"{ids[i]}: a computed tensor quantized per channel cannot "
                                     "be turned back into float here", node=ids[i],
                                     hint="re-quantize from the FP32 model")
            # the pair saturates at the ends of its code range: kept as a Clip (onnxruntime's
            # quantizer drops a Relu in front of an asymmetric pair: the clamp is that Relu)
            zf = float(np.asarray(zp, np.float64).reshape(-1)[0])
            sf = np.asarray(scale).reshape(-1)[0]
            lo_v = (np.asarray(lo - zf, np.float64) * sf).astype(scale.dtype)
            hi_v = (np.asarray(hi - zf, np.float64) * sf).astype(scale.dtype)
            src = rename.get(n.input[0], n.input[0])
            outs = [g.node[j].output[0] for j in dqs]
            named = [o for o in outs if o in graph_outputs]
            clip_out = named[0] if named else unique_name(taken, n.output[0] + "_float")
            # (not the Q's own name: a quantizer run afterwards names its new Q nodes so)
            cname = unique_name(taken, leaf_name(src) + "_saturate")
            if _opset(out) >= 11:
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
                if o in graph_outputs:
                    added.append(helper.make_node("Identity", [clip_out], [o],
                                                  name=unique_name(taken, o + "_copy")))
                else:
                    rename[o] = clip_out
            drop.update(dqs)
            drop.add(i)
            counts["pairs"] += len(dqs)
    left = [n for k, n in enumerate(g.node) if k not in drop and n.op_type in QDQ]
    if left:
        k = next(k for k, n in enumerate(g.node) if k not in drop and n.op_type in QDQ)
        raise WorkbenchError(f"{ids[k]}: a {g.node[k].op_type} of a tensor an integer op "
                             "computes cannot be turned back into float here", node=ids[k],
                             hint="`workbench fix MODEL -o OUT.onnx --recipe "
                                  "emulate_quantized` first")

    def resolve(name: str) -> str:
        seen = 0
        while name in rename and seen < 64:
            name, seen = rename[name], seen + 1
        return name

    def walk(graph: Any) -> None:
        for nd in graph.node:
            for k, x in enumerate(nd.input):
                if x in rename:
                    nd.input[k] = resolve(x)
            for a in nd.attribute:
                for sub in ([a.g] if a.type == 5 else list(a.graphs) if a.type == 10 else []):
                    if any(m.op_type in QDQ for m in sub.node):
                        raise WorkbenchError(f"{nd.name or nd.op_type}: "
                                             "Q/DQ inside a subgraph cannot be turned back "
                                             "into float here", node=nd.name or nd.op_type,
                                             hint="re-quantize from the FP32 model")
                    walk(sub)

    freed = {x for k in drop for x in g.node[k].input}
    keep = [n for k, n in enumerate(g.node) if k not in drop]
    del g.node[:]
    g.node.extend(keep + added)
    walk(g)
    used = read_names(g) | graph_outputs
    kept = [t for t in g.initializer if t.name not in freed or t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)
    if added:  # the Clip nodes were appended: restore the topological order
        from workbench.surgery.recipes.base import gs_export, gs_import

        sg = gs_import(out)
        sg.toposort()
        out = gs_export(sg, out)
    return out, counts


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

    def precondition(self, model: Any) -> Precondition:
        proto = as_proto(model)
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
