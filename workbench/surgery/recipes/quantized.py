"""Exact float emulation of onnxruntime-quantized operators, so TensorRT can parse the model.

`quantize_dynamic` writes DynamicQuantizeLinear + MatMulInteger/ConvInteger; `quantize_static`
in QOperator format writes QLinearConv/QLinearMatMul/QLinearAdd/... between an asymmetric
(uint8, zero point != 0) QuantizeLinear and DequantizeLinear. TensorRT imports none of the
integer ops and takes Q/DQ only with zero point 0. This recipe rewrites the whole quantized
region at once: every 8-bit tensor becomes a float32 tensor holding the *same integers*
(a "twin"), and every op computes on those integers in float32:

- zero points are subtracted in float (exact: small integers), MatMul/Conv sum integer products
  in float32 (exact while every partial sum stays below 2**24, which the precondition checks
  from the weights: K * 255 * max|w - zw| < 2**24),
- requantisation is Clip(Round(acc * (sx * sw / sy)) + zy, lo, hi) with the multiplier computed
  in float32 in onnxruntime's order, Round being round-half-to-even as in onnxruntime,
- 8-bit unary ops (QLinearSigmoid, QLinearLeakyRelu) and QLinearConcat's requantisation become
  a 256-entry lookup table that onnxruntime itself computes for that node (so it is exact by
  construction), read with Gather.

A tensor still needed in its integer type (a graph output, an op this recipe does not rewrite)
gets a Cast back from its twin: exact, since the twin holds integers in range. The result runs
in FP32 (or FP16 if the user lowers it) on TensorRT: it computes what onnxruntime's integer
kernels compute, without INT8 speed. For INT8 speed, re-quantize in QDQ format with symmetric
scales (`workbench precision --to int8`).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from workbench.core.model import ModelLike, as_model
from workbench.support import codes
from workbench.surgery.recipes.base import (Precondition, Proposal, Recipe, _dom, all_names,
                                            constant_value, fix_step, infer_types, node_ids,
                                            opset_of, register, tensor_types, unique_name)

# onnx elem type -> (lowest, highest) integer the quantized type holds
RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}
INT32, FLOAT = 6, 1
EXACT_SUM = 2 ** 24  # float32 holds every integer below this exactly

INTEGER_OPS = ("DynamicQuantizeLinear", "MatMulInteger", "ConvInteger")
QLINEAR_OPS = ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QLinearSigmoid",
               "QLinearLeakyRelu", "QLinearConcat", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QGemm")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
OPS = INTEGER_OPS + QLINEAR_OPS + QDQ_OPS
# onnxruntime's other quantized (com.microsoft) ops: no TensorRT importer, no emulation here
UNEMULATED = ("QAttention", "QLinearSoftmax", "QLinearWhere", "QLinearReduceMean",
              "QLinearConvTranspose", "QEmbedLayerNormalization", "QOrderedMatMul",
              "QOrderedGelu", "QOrderedLayerNormalization", "QOrderedAttention",
              "QOrderedLongformerAttention", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
              "DynamicQuantizeLSTM")


class Refuse(Exception):
    """A node this recipe cannot rewrite exactly; the message names why."""


def _attr(node: Any, name: str, default: Any = None) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _arg(node: Any, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


class Emulation:
    """One rewrite of a model's quantized region: twins, emitted nodes, new initializers."""

    def __init__(self, proto: Any) -> None:
        self.proto = proto
        self.types = tensor_types(infer_types(proto))
        self.taken = all_names(proto)
        self.opset = opset_of(proto)
        self.twins: Dict[str, Tuple[str, int]] = {}  # integer tensor -> (float twin, elem type)
        self.nodes: List[Any] = []
        self.inits: List[Any] = []
        self.prefix = "q"
        self.emitted: set = set()  # ids of the nodes this rewrite made
        self.notes: List[str] = []  # where the emulation is exact only up to float32 rounding
        from workbench.core.graphindex import GraphIndex

        self.index = GraphIndex.of(proto)

    def consumers(self, tensor: str) -> List[Any]:
        return [self.proto.graph.node[j] for j in self.index.consumers_of(tensor)]

    def producer(self, tensor: str) -> Optional[Any]:
        j = self.index.producer_of(tensor)
        return self.proto.graph.node[j] if j is not None else None

    # -------------------------------------------------------------------- emitting
    def name(self, tag: str) -> str:
        return unique_name(self.taken, f"{self.prefix}/{tag}")

    def const(self, value: Any, tag: str = "c", dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        name = self.name(tag)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: List[str], out: Optional[str] = None, **attrs: Any) -> str:
        from onnx import helper

        o = out or self.name(f"{op_type}_out")
        node = helper.make_node(op_type, inputs, [o], name=self.name(op_type), **attrs)
        self.emitted.add(id(node))
        self.nodes.append(node)
        return o

    # -------------------------------------------------------------------- reading
    def dtype(self, name: str) -> int:
        return self.types.get(name, (0, None))[0]

    def shape(self, name: str) -> Optional[List[Any]]:
        return self.types.get(name, (0, None))[1]

    def value(self, name: str) -> Optional[np.ndarray]:
        return constant_value(self.proto, name) if name else None

    def need(self, name: str, what: str) -> np.ndarray:
        v = self.value(name)
        if v is None:
            raise Refuse(f"its {what} '{name}' is computed at run time (needs a constant)")
        return v

    def integers(self, name: str) -> str:
        """A float32 tensor holding the integer values of `name` (twin, constant or Cast)."""
        if not name:
            return self.const(0.0, "zero")
        if name in self.twins:
            return self.twins[name][0]
        v = self.value(name)
        if v is not None:
            return self.const(v.astype(np.float32), "int_values")
        return self.op("Cast", [name], to=FLOAT)

    def centred(self, x: str, zp: str) -> str:
        """x - zero point, in float (exact)."""
        fx = self.integers(x)
        if not zp:
            return fx
        z = self.value(zp)
        if z is not None and not np.any(z):
            return fx
        return self.op("Sub", [fx, self.integers(zp)])

    def per_axis(self, name: str, axis: int, rank: Optional[int], what: str) -> str:
        """A scale or zero point that broadcasts against a tensor of `rank` along `axis`."""
        v = self.value(name)
        if v is None:
            if self.shape(name) in ([], [1]):
                return name
            raise Refuse(f"its per-axis {what} '{name}' is computed at run time")
        if v.size == 1:
            return self.const(v.reshape(()).astype(np.float32), what)
        if axis == -1:
            return self.const(v.reshape(-1).astype(np.float32), what)
        if rank is None:
            raise Refuse(f"the rank of the tensor its per-axis {what} applies to is unknown "
                         "(run infer_shapes)")
        shp = [1] * rank
        shp[axis % rank] = v.size
        return self.const(v.reshape(shp).astype(np.float32), what)

    def zero_point(self, z: str, axis: int, rank: Optional[int]) -> str:
        """A float tensor of the zero point broadcasting along `axis`, or "" when it is 0."""
        if not z:
            return ""
        v = self.value(z)
        if v is None:
            if self.shape(z) not in ([], [1]):
                raise Refuse(f"its per-axis zero point '{z}' is computed at run time")
            return self.integers(z)
        if not np.any(v):
            return ""
        return self.per_axis(z, axis, rank, "zero_point")

    def twin(self, out: str, value: str, elem: int) -> None:
        """Record that `value` (float) holds the integers of the original output `out`."""
        if out:
            self.twins[out] = (value, elem)

    def quantize(self, real: str, zp: str, elem: int, out: str) -> None:
        """Clip(Round(real) + zp, lo, hi) as `out`'s twin (real already divided by the scale)."""
        lo, hi = RANGES[elem]
        r = self.op("Round", [real])
        if zp:
            r = self.op("Add", [r, zp])
        self.twin(out, self.op("Clip", [r, self.const(lo, "lo"), self.const(hi, "hi")]), elem)

    def out_type(self, zp: str, default: int = 2) -> int:
        dt = self.dtype(zp) if zp else 0
        if not dt and zp and self.value(zp) is not None:
            from onnx import helper

            dt = helper.np_dtype_to_tensor_dtype(self.value(zp).dtype)
        dt = dt or default
        if dt not in RANGES:
            raise Refuse(f"quantized type {dt} is not an 8/16-bit integer")
        return dt

    def weights(self, w: str, zp: str, axis: int, what: str) -> Tuple[str, float]:
        """(w - zw) of constant integer weights as a float32 constant, and max |w - zw|."""
        v = self.value(w)
        if v is None:
            return self.centred(w, zp), 255.0
        c = v.astype(np.float64)
        z = self.value(zp) if zp else None
        if zp and z is None:
            raise Refuse(f"the zero point of its {what} is computed at run time")
        if z is not None and z.size > 1:
            shp = [1] * c.ndim
            shp[axis % c.ndim] = z.size
            c = c - z.astype(np.float64).reshape(shp)
        elif z is not None:
            c = c - float(z.reshape(()))
        return self.const(c.astype(np.float32), what), float(np.max(np.abs(c))) if c.size else 0.0

    def check_sum(self, k: int, wmax: float, node: Any) -> None:
        """Note a node whose worst-case integer sum passes 2**24: float32 then rounds the sum
        (relative error below 1e-7), as the model's own Cast of the int32 result would."""
        bound = k * 255.0 * max(wmax, 1.0)
        if bound >= EXACT_SUM:
            self.notes.append(f"{node.name or node.op_type}: sums of {k} products of up to "
                              f"255 x {wmax:g} can reach {bound:.3g}, beyond float32's exact "
                              "integers (2**24): rounded there (relative error < 1e-7)")

    def scale_ratio(self, node: Any, sx: str, sw: str, sy: str, axis: int, rank: Optional[int]
                    ) -> str:
        """sx * sw / sy in float32, in onnxruntime's order, broadcast along `axis`."""
        a, b, c = (self.need(s, "scale").astype(np.float32) for s in (sx, sw, sy))
        m = (a.reshape(-1)[0] * b.reshape(-1)) / c.reshape(-1)[0]
        m = m.astype(np.float32)
        if m.size == 1:
            return self.const(m.reshape(()), "multiplier")
        if axis == -1:  # along the last axis: a 1-D vector broadcasts at any rank
            return self.const(m.reshape(-1), "multiplier")
        if rank is None:
            raise Refuse("the rank of its output is unknown (run infer_shapes)")
        shp = [1] * rank
        shp[axis % rank] = m.size
        return self.const(m.reshape(shp), "multiplier")

    def lookup(self, node: Any, src: str, elem: int, out: str, out_elem: int,
               table: np.ndarray) -> None:
        """out = table[src - lo], the table indexed by every value of an 8-bit type."""
        lo, _ = RANGES[elem]
        idx = self.integers(src)
        if lo:
            idx = self.op("Sub", [idx, self.const(lo, "lo")])
        idx = self.op("Cast", [idx], to=INT32)
        self.twin(out, self.op("Gather", [self.const(table.astype(np.float32), "table"), idx],
                               axis=0), out_elem)


    def fold(self, n: Any) -> None:
        """A DequantizeLinear of constants becomes its float value, as onnxruntime computes it
        (the integer difference, then one multiply in float32, per tensor or per axis)."""
        from onnx import numpy_helper

        from workbench.surgery.recipes.qdq import dequantize_constant

        z = _arg(n, 2)
        v = dequantize_constant(self.value(n.input[0]), self.value(n.input[1]),
                                self.value(z) if z else None, int(_attr(n, "axis", 1)))
        self.inits.append(numpy_helper.from_array(v, n.output[0]))


def _constant_dq(e: Emulation, n: Any) -> bool:
    """A DequantizeLinear whose input, scale and zero point are all constants."""
    return n.op_type == "DequantizeLinear" and all(
        e.value(x) is not None for x in n.input[:3] if x)


# ------------------------------------------------------------------------ onnxruntime tables
def _ort_table(node: Any, proto: Any, elem: int, arg_names: List[str]) -> np.ndarray:
    """Run `node` alone in onnxruntime on every value of its 8-bit input: the exact table."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    lo, hi = RANGES[elem]
    np_t = helper.tensor_dtype_to_np_dtype(elem)
    values = np.arange(lo, hi + 1).astype(np_t)
    inits = []
    for a in arg_names:
        if a and a != "__x__":
            inits.append(numpy_helper.from_array(constant_value(proto, a), a))
    n = helper.make_node(node.op_type, ["x" if a == "__x__" else a for a in arg_names], ["y"],
                         domain=node.domain)
    n.attribute.extend(a for a in node.attribute if a.name != "axis")
    if node.op_type == "QLinearConcat":
        n.attribute.extend([helper.make_attribute("axis", 0)])
    out_t = elem if node.op_type != "QLinearConcat" else \
        helper.np_dtype_to_tensor_dtype(constant_value(proto, arg_names[1]).dtype)
    g = helper.make_graph([n], "table", [helper.make_tensor_value_info("x", elem, [values.size])],
                          [helper.make_tensor_value_info("y", out_t, [values.size])], inits)
    m = helper.make_model(g, opset_imports=list(proto.opset_import))
    m.ir_version = min(proto.ir_version or 9, 9)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": values})[0].astype(np.float64)


# ------------------------------------------------------------------------ one rewrite per op
def _dynamic_quantize(e: Emulation, n: Any) -> None:
    x = n.input[0]
    y, ys, yz = (list(n.output) + ["", "", ""])[:3]
    zero = e.const(0.0, "zero")
    mn = e.op("Min", [e.op("ReduceMin", [x], keepdims=0), zero])
    mx = e.op("Max", [e.op("ReduceMax", [x], keepdims=0), zero])
    span = e.op("Div", [e.op("Sub", [mx, mn]), e.const(255.0, "qrange")])
    scale = e.op("Where", [e.op("Equal", [mx, mn]), e.const(1.0, "one"), span],
                 out=ys or None)
    zp = e.op("Round", [e.op("Clip", [e.op("Neg", [e.op("Div", [mn, scale])]),
                                      e.const(0.0, "lo"), e.const(255.0, "hi")])])
    e.twin(yz, zp, 2)
    r = e.op("Add", [e.op("Round", [e.op("Div", [x, scale])]), zp])
    e.twin(y, e.op("Clip", [r, e.const(0.0, "lo"), e.const(255.0, "hi")]), 2)


def _quantize_linear(e: Emulation, n: Any) -> None:
    x, s, z = n.input[0], n.input[1], _arg(n, 2)
    if e.dtype(x) not in (0, FLOAT):
        raise Refuse(f"its input '{x}' is not float32")
    if _attr(n, "block_size", 0):
        raise Refuse("blocked quantization (block_size) is not emulated")
    elem = e.out_type(z, _attr(n, "output_dtype", 0) or 2)
    axis, rank = int(_attr(n, "axis", 1)), _rank(e, x)
    real = e.op("Div", [x, e.per_axis(s, axis, rank, "scale")])
    e.quantize(real, e.zero_point(z, axis, rank), elem, n.output[0])


def _dequantize_linear(e: Emulation, n: Any) -> None:
    q, s, z = n.input[0], n.input[1], _arg(n, 2)
    if _attr(n, "block_size", 0):
        raise Refuse("blocked quantization (block_size) is not emulated")
    axis, rank = int(_attr(n, "axis", 1)), _rank(e, q)
    if q not in e.twins and _constant_dq(e, n):  # weights, int32 biases: their float value
        e.fold(n)
        return
    centred = e.integers(q)
    zz = e.zero_point(z, axis, rank)
    if zz:
        centred = e.op("Sub", [centred, zz])
    e.op("Mul", [centred, e.per_axis(s, axis, rank, "scale")], out=n.output[0])


def _matmul_integer(e: Emulation, n: Any) -> None:
    a, b, az, bz = n.input[0], n.input[1], _arg(n, 2), _arg(n, 3)
    if az and (e.value(az) is not None and e.value(az).size > 1):
        raise Refuse("a per-row zero point of A is not emulated")
    w, wmax = e.weights(b, bz, -1, "B")
    bshape = e.shape(b)
    if bshape and isinstance(bshape[0], int):
        e.check_sum(bshape[-2] if len(bshape) >= 2 else bshape[0], wmax, n)
    elif e.value(b) is None:
        raise Refuse(f"the inner dimension of '{b}' is unknown (run infer_shapes)")
    e.twin(n.output[0], e.op("MatMul", [e.centred(a, az), w]), INT32)


def _conv_attrs(n: Any) -> Dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in n.attribute}


def _conv_k(e: Emulation, w: str) -> int:
    shp = e.shape(w)
    if shp is None or not all(isinstance(d, int) for d in shp[1:]):
        raise Refuse(f"the shape of the weights '{w}' is unknown")
    k = 1
    for d in shp[1:]:
        k *= d
    return k


def _conv_integer(e: Emulation, n: Any) -> None:
    x, w, xz, wz = n.input[0], n.input[1], _arg(n, 2), _arg(n, 3)
    wf, wmax = e.weights(w, wz, 0, "W")
    e.check_sum(_conv_k(e, w), wmax, n)
    e.twin(n.output[0], e.op("Conv", [e.centred(x, xz), wf], **_conv_attrs(n)), INT32)


SAME_SHAPE = ("QuantizeLinear", "DequantizeLinear", "QLinearSigmoid", "QLinearLeakyRelu",
              "Relu", "Sigmoid", "Cast", "Identity")


def _rank(e: Emulation, name: str) -> Optional[int]:
    """The rank of a tensor: inferred, or through ops that keep their input's shape (ONNX
    shape inference knows no com.microsoft QLinear op)."""
    for _ in range(64):
        shp = e.shape(name)
        if shp is not None:
            return len(shp)
        prod = e.producer(name)
        if prod is None or prod.op_type not in SAME_SHAPE or not prod.input:
            return None
        name = prod.input[0]
    return None


def _bias(e: Emulation, b: str) -> Tuple[List[str], float]:
    if not b:
        return [], 0.0
    v = e.need(b, "bias")
    if v.size and float(np.max(np.abs(v.astype(np.float64)))) >= EXACT_SUM:
        raise Refuse(f"its int32 bias '{b}' has values beyond float32's exact integers")
    return [e.const(v.astype(np.float32), "bias")], float(np.max(np.abs(v))) if v.size else 0.0


def _qlinear_conv(e: Emulation, n: Any) -> None:
    x, sx, zx, w, sw, zw, sy, zy = (list(n.input) + [""] * 8)[:8]
    b = _arg(n, 8)
    elem = e.out_type(zy)
    wf, wmax = e.weights(w, zw, 0, "W")
    bias, bmax = _bias(e, b)
    e.check_sum(_conv_k(e, w), wmax + bmax / 255.0, n)
    acc = e.op("Conv", [e.centred(x, zx), wf] + bias, **_conv_attrs(n))
    m = e.scale_ratio(n, sx, sw, sy, 1, _rank(e, x))
    e.quantize(e.op("Mul", [acc, m]), e.zero_point(zy, 1, None), elem, n.output[0])


def _qlinear_matmul(e: Emulation, n: Any) -> None:
    a, sa, za, b, sb, zb, sy, zy = n.input[:8]
    elem = e.out_type(zy)
    if e.value(za) is not None and e.value(za).size > 1:
        raise Refuse("a per-row zero point of A is not emulated")
    wf, wmax = e.weights(b, zb, -1, "B")
    bshape = e.shape(b)
    if not bshape or not isinstance(bshape[-2 if len(bshape) > 1 else 0], int):
        raise Refuse(f"the inner dimension of '{b}' is unknown (run infer_shapes)")
    e.check_sum(bshape[-2 if len(bshape) > 1 else 0], wmax, n)
    acc = e.op("MatMul", [e.centred(a, za), wf])
    rank = _rank(e, n.output[0]) or _rank(e, a)
    e.quantize(e.op("Mul", [acc, e.scale_ratio(n, sa, sb, sy, -1, rank)]),
               e.zero_point(zy, -1, None), elem, n.output[0])


def _qgemm(e: Emulation, n: Any) -> None:
    """com.microsoft QGemm: alpha * (A - za)(B - zb) + C in int32 (C: the int32 bias, at scale
    alpha * sa * sb), then requantised to y_scale/y_zero_point, or dequantised to float when
    the node has no y_scale (as onnxruntime's kernel does)."""
    a, sa, za, b, sb, zb, c, sy, zy = (list(n.input) + [""] * 9)[:9]
    if e.value(za) is not None and e.value(za).size > 1:
        raise Refuse("a per-row zero point of A is not emulated")
    trans_a, trans_b = int(_attr(n, "transA", 0)), int(_attr(n, "transB", 0))
    alpha = np.float32(_attr(n, "alpha", 1.0))
    bv = e.need(b, "B")
    if bv.ndim != 2:
        raise Refuse(f"B '{b}' is not a matrix")
    if trans_b:  # per-column zero points and scales follow B's columns: transpose first
        bv = bv.T
    zbv = e.value(zb) if zb else None
    if zb and zbv is None:
        raise Refuse("the zero point of its B is computed at run time")
    centred_b = bv.astype(np.float64) - (zbv.astype(np.float64).reshape(1, -1) if zbv is not None
                                         and zbv.size > 1 else
                                         float(zbv.reshape(())) if zbv is not None else 0.0)
    wmax = float(np.max(np.abs(centred_b))) if centred_b.size else 0.0
    e.check_sum(int(centred_b.shape[0]), wmax, n)
    ax = e.centred(a, za)
    if trans_a:
        ax = e.op("Transpose", [ax], perm=[1, 0])
    acc = e.op("MatMul", [ax, e.const(centred_b.astype(np.float32), "B")])
    if c:
        cv = e.need(c, "bias C")
        if cv.size and float(np.max(np.abs(cv.astype(np.float64)))) >= EXACT_SUM:
            raise Refuse(f"its int32 bias '{c}' has values beyond float32's exact integers")
        acc = e.op("Add", [acc, e.const(cv.astype(np.float32), "bias")])
    a_s = e.need(sa, "scale").astype(np.float32).reshape(-1)[0]
    b_s = e.need(sb, "scale").astype(np.float32).reshape(-1)
    real = (alpha * a_s * b_s).astype(np.float32)
    if not sy:  # float output
        e.op("Mul", [acc, e.const(real if real.size > 1 else real.reshape(()), "scale")],
             out=n.output[0])
        return
    y_s = e.need(sy, "scale").astype(np.float32).reshape(-1)[0]
    m = (real / y_s).astype(np.float32)
    e.quantize(e.op("Mul", [acc, e.const(m if m.size > 1 else m.reshape(()), "multiplier")]),
               e.zero_point(zy, -1, None), e.out_type(zy), n.output[0])


def _real(e: Emulation, q: str, s: str, z: str) -> str:
    """scale * (q - zp), as onnxruntime's QLinearAdd/Mul reference computes it."""
    sc = e.need(s, "scale")
    if sc.size != 1:
        raise Refuse(f"its scale '{s}' is per-axis")
    return e.op("Mul", [e.const(sc.reshape(()).astype(np.float32), "scale"), e.centred(q, z)])


def _qlinear_binary(e: Emulation, n: Any) -> None:
    a, sa, za, b, sb, zb, sc, zc = (list(n.input) + [""] * 8)[:8]
    elem = e.out_type(zc)
    va, vb = _real(e, a, sa, za), _real(e, b, sb, zb)
    both = e.op("Add" if n.op_type == "QLinearAdd" else "Mul", [va, vb])
    c = e.need(sc, "scale")
    e.quantize(e.op("Div", [both, e.const(c.reshape(()).astype(np.float32), "scale")]),
               e.zero_point(zc, 0, None), elem, n.output[0])


def _qlinear_unary(e: Emulation, n: Any) -> None:
    x, sx, zx, sy, zy = (list(n.input) + [""] * 5)[:5]
    for s in (sx, zx, sy, zy):
        if s:
            e.need(s, "scale/zero point")
    elem_in, elem = e.out_type(zx), e.out_type(zy)
    if elem_in not in (2, 3):
        raise Refuse("only 8-bit inputs have a lookup table")
    table = _ort_table(n, e.proto, elem_in, ["__x__", sx, zx, sy, zy])
    e.lookup(n, x, elem_in, n.output[0], elem, table)


def _qlinear_concat(e: Emulation, n: Any) -> None:
    sy, zy = n.input[0], n.input[1]
    elem = e.out_type(zy)
    e.need(sy, "scale"), e.need(zy, "zero point")
    parts = []
    for k in range(2, len(n.input), 3):
        x, sx, zx = n.input[k], n.input[k + 1], n.input[k + 2]
        e.need(sx, "scale"), e.need(zx, "zero point")
        elem_in = e.out_type(zx)
        same = np.array_equal(e.value(sx), e.value(sy)) and np.array_equal(e.value(zx),
                                                                          e.value(zy))
        if same:
            parts.append(e.integers(x))
            continue
        if elem_in not in (2, 3):
            raise Refuse("only 8-bit inputs have a lookup table")
        table = _ort_table(n, e.proto, elem_in, [sy, zy, "__x__", sx, zx])
        tmp = e.name("requantized")
        e.lookup(n, x, elem_in, tmp, elem, table)
        parts.append(e.twins.pop(tmp)[0])
    e.twin(n.output[0], e.op("Concat", parts, axis=int(_attr(n, "axis", 0))), elem)


def _qlinear_gap(e: Emulation, n: Any) -> None:
    """sum(x - zx) over the image * (sx / (sy * size)), as onnxruntime's kernel computes it."""
    x, sx, zx, sy, zy = n.input[:5]
    elem = e.out_type(zy)
    last = int(_attr(n, "channels_last", 0))
    shp = e.shape(x)
    rank = _rank(e, x)
    if rank is None or rank < 3:
        raise Refuse(f"the rank of '{x}' is unknown or below 3 (run infer_shapes)")
    spatial = list(range(1, rank - 1)) if last else list(range(2, rank))
    a, c = e.need(sx, "scale").astype(np.float32), e.need(sy, "scale").astype(np.float32)
    if a.size != 1 or c.size != 1:
        raise Refuse("per-axis scales are not emulated")

    def reduce_sum(t: str) -> str:
        if e.opset >= 13:
            return e.op("ReduceSum", [t, e.const(np.array(spatial), "axes", np.int64)],
                        keepdims=1)
        return e.op("ReduceSum", [t], axes=spatial, keepdims=1)

    centred = e.centred(x, zx)
    total = reduce_sum(centred)
    dims = [shp[i] for i in spatial] if shp is not None else [None]
    if all(isinstance(d, int) and d > 0 for d in dims):
        size = int(np.prod(dims))
        mult = e.const(np.float32(a.reshape(()) / (c.reshape(()) * np.float32(size))),
                       "multiplier")
    else:  # the image size at run time: a sum of ones (exact below 2**24)
        ones = e.op("Add", [e.op("Mul", [centred, e.const(0.0, "zero")]), e.const(1.0, "one")])
        size = e.op("Mul", [e.const(c.reshape(()), "scale"), reduce_sum(ones)])
        mult = e.op("Div", [e.const(a.reshape(()), "scale"), size])
    e.quantize(e.op("Mul", [total, mult]), e.zero_point(zy, 0, None), elem, n.output[0])


def _qlinear_average_pool(e: Emulation, n: Any) -> None:
    """Dequantize, average in float, quantize: onnxruntime's QLinearAveragePool."""
    x, sx, zx, sy, zy = n.input[:5]
    elem = e.out_type(zy)
    if int(_attr(n, "channels_last", 0)):
        raise Refuse("channels_last pooling is not emulated")
    a, c = e.need(sx, "scale"), e.need(sy, "scale")
    if a.size != 1 or c.size != 1:
        raise Refuse("per-axis scales are not emulated")
    real = e.op("Mul", [e.centred(x, zx), e.const(a.reshape(()).astype(np.float32), "scale")])
    attrs = {k: v for k, v in _conv_attrs(n).items() if k != "channels_last"}
    pooled = e.op("AveragePool", [real], **attrs)
    e.quantize(e.op("Div", [pooled, e.const(c.reshape(()).astype(np.float32), "scale")]),
               e.zero_point(zy, 0, None), elem, n.output[0])


HANDLERS: Dict[str, Callable[[Emulation, Any], None]] = {
    "DynamicQuantizeLinear": _dynamic_quantize, "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer, "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear, "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul, "QLinearAdd": _qlinear_binary,
    "QLinearMul": _qlinear_binary, "QLinearSigmoid": _qlinear_unary,
    "QLinearLeakyRelu": _qlinear_unary, "QLinearConcat": _qlinear_concat,
    "QLinearGlobalAveragePool": _qlinear_gap, "QLinearAveragePool": _qlinear_average_pool,
    "QGemm": _qgemm,
}
MS_OPS = ("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
          "QLinearGlobalAveragePool", "QLinearAveragePool", "QGemm")


def _handled(n: Any) -> bool:
    d = _dom(n.domain)
    if n.op_type in MS_OPS:
        return d == "com.microsoft"
    return n.op_type in HANDLERS and d == ""


def _wanted(e: Emulation, n: Any, region: set) -> bool:
    """Whether to rewrite this node: integer ops always; Q/DQ when TensorRT refuses them
    (zero point != 0, 8-bit unsigned) or when they border the rewritten region."""
    if n.op_type not in QDQ_OPS:
        return True
    z = _arg(n, 2)
    zv = e.value(z) if z else None
    asym = bool(z) and (zv is None or bool(np.any(zv)) or zv.dtype == np.uint8)
    if n.op_type == "DequantizeLinear":
        if _constant_dq(e, n) and e.value(n.input[0]).dtype != np.int8:
            return True  # an int32 bias (onnxruntime's), uint8/16-bit weights: TensorRT refuses
        return asym or n.input[0] in e.twins
    outs = e.consumers(n.output[0])  # symmetric Q -> DQ pairs stay (TensorRT INT8)
    return asym or (bool(outs) and all(id(c) in region and c.op_type not in QDQ_OPS
                                       for c in outs))


def emulate(proto: Any) -> Tuple[Any, List[Tuple[int, str]], List[int], List[str]]:
    """Rewrite every quantized node it can; returns (model, [(index, refusal)], rewritten
    indices, notes on sums float32 rounds)."""
    e = Emulation(proto)
    g = proto.graph
    ids = node_ids(proto)
    region = {id(n) for n in g.node if _handled(n)}
    refused: List[Tuple[int, str]] = []
    done: List[int] = []
    kept: List[Any] = []
    restored: set = set()

    def restore(name: str) -> None:
        if name in e.twins and name not in restored:
            restored.add(name)
            e.prefix = f"{name}/restore"
            e.nodes.append(_cast(e, e.twins[name][0], name, e.twins[name][1]))

    for i, n in enumerate(g.node):
        if id(n) in region and _wanted(e, n, region):
            start_nodes, start_inits, start_twins = len(e.nodes), len(e.inits), dict(e.twins)
            e.prefix = n.name or ids[i]
            try:
                try:
                    HANDLERS[n.op_type](e, n)
                except Refuse:
                    raise
                except Exception as err:  # an odd model: refuse the node, never crash
                    raise Refuse(f"cannot emulate it ({type(err).__name__}: {err})") from None
            except Refuse as why:
                del e.nodes[start_nodes:], e.inits[start_inits:]
                e.twins = start_twins
                refused.append((i, str(why)))
            else:
                done.append(i)
                kept.extend(e.nodes[start_nodes:])
                del e.nodes[start_nodes:]
                continue
        if n.op_type in MOVE_OPS and _dom(n.domain) == "" and n.input and \
                n.input[0] in e.twins and not any(x in e.twins for x in n.input[1:]) and \
                not (n.op_type == "MaxPool" and len([o for o in n.output if o]) > 1):
            # moving or selecting integers (Flatten, Reshape, MaxPool, ...) between quantized
            # ops: the same op on the twin holds the same integers (no uint8 tensor inside)
            kept.append(_on_twin(e, n, ids[i]))
            continue
        # a node left as it is: its integer inputs come back from their twins
        if n.op_type == "Cast" and n.input and n.input[0] in e.twins and \
                _attr(n, "to") == FLOAT:
            from onnx import helper

            kept.append(helper.make_node("Identity", [e.twins[n.input[0]][0]], [n.output[0]],
                                         name=n.name or ids[i]))
            continue
        for x in n.input:
            restore(x)
        kept.extend(e.nodes)
        del e.nodes[:]
        kept.append(n)
    for o in g.output:
        restore(o.name)
    kept.extend(e.nodes)
    if not done:
        return proto, refused, done, e.notes
    kept = _float_weights(e, kept, done)
    _unused_twins_dropped(e, kept)
    del g.node[:]
    g.node.extend(kept)
    g.initializer.extend(e.inits)
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    produced = {x for n in g.node for x in n.output} | {i.name for i in g.input}
    vis = [v for v in g.value_info if v.name in produced]
    del g.value_info[:]
    g.value_info.extend(vis)
    in_use = {_dom(n.domain) for n in g.node}
    ops = [o for o in proto.opset_import if _dom(o.domain) == "" or _dom(o.domain) in in_use]
    del proto.opset_import[:]
    proto.opset_import.extend(ops)
    return proto, refused, done, e.notes


# ops that only move, select or compare their first input's values: exact on a float twin
MOVE_OPS = ("Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "MaxPool",
            "Slice", "Gather", "Split", "Expand", "Tile", "DepthToSpace", "SpaceToDepth")


def _on_twin(e: Emulation, n: Any, nid: str) -> Any:
    """A copy of `n` reading its input's float twin; its outputs become twins of the
    originals (restored by a Cast only where something still reads the integers)."""
    node = copy.deepcopy(n)
    elem = e.twins[n.input[0]][1]
    node.input[0] = e.twins[n.input[0]][0]
    e.prefix = n.name or nid
    del node.output[:]
    for o in n.output:
        if not o:
            node.output.append("")
            continue
        t = e.name(f"{o}_twin")
        node.output.append(t)
        e.twin(o, t, elem)
    e.emitted.add(id(node))
    return node


def _float_weights(e: Emulation, nodes: List[Any], done: List[int]) -> List[Any]:
    """The int8 DequantizeLinear of a constant left as it is (TensorRT takes those) feeding an
    op whose other operand now computes in float: there is no INT8 pair left for TensorRT to
    fuse it into, so it becomes its float value too (what the op computes is unchanged)."""
    pos = {id(n): i for i, n in enumerate(e.proto.graph.node)}
    consts = {t.name for t in e.proto.graph.initializer} | {t.name for t in e.inits}
    producer = {o: n for n in nodes for o in n.output if o}
    readers: Dict[str, List[Any]] = {}
    for n in nodes:
        for x in n.input:
            readers.setdefault(x, []).append(n)

    def activation_in_float(x: str) -> bool:
        if not x or x in consts or e.value(x) is not None:
            return False
        p = producer.get(x)
        return p is None or p.op_type != "DequantizeLinear" or id(p) in e.emitted

    out = []
    for n in nodes:
        if id(n) in pos and n.op_type == "DequantizeLinear" and _constant_dq(e, n) and \
                n.input[0] not in e.twins and any(
                    activation_in_float(x) for r in readers.get(n.output[0], [])
                    for x in r.input if x != n.output[0]):
            e.fold(n)
            consts.add(n.output[0])
            done.append(pos[id(n)])
            continue
        out.append(n)
    done.sort()
    return out


def _cast(e: Emulation, src: str, out: str, elem: int) -> Any:
    from onnx import helper

    node = helper.make_node("Cast", [src], [out], name=e.name("Cast"), to=elem)
    e.emitted.add(id(node))
    return node


def _unused_twins_dropped(e: Emulation, nodes: List[Any]) -> None:
    """Remove nodes this rewrite emitted whose outputs nothing reads (e.g. an unused zero
    point of a DynamicQuantizeLinear)."""
    graph_out = {o.name for o in e.proto.graph.output}
    while True:
        used = {x for n in nodes for x in n.input} | graph_out
        dead = [k for k, n in enumerate(nodes)
                if id(n) in e.emitted and all(o not in used for o in n.output if o)]
        if not dead:
            return
        for k in reversed(dead):
            del nodes[k]


def _candidates(proto: Any) -> List[int]:
    return [i for i, n in enumerate(proto.graph.node) if _handled(n)]


@register
class EmulateQuantized(Recipe):
    name = "emulate_quantized"
    summary = ("rewrite onnxruntime-quantized ops (DynamicQuantizeLinear, MatMulInteger, "
               "ConvInteger, QLinear*, asymmetric Q/DQ) into exact float32 emulation TensorRT "
               "parses (same integers, no INT8 speed-up)")
    params = ()
    preserves_semantics = True
    mutates_input = True
    cost = ("the quantized ops now compute in float (same values, no INT8 speed-up: for "
            "INT8, `workbench precision FP32_MODEL --to int8` from the float model)")
    fixes = codes.OP_REJECTED + (codes.QDQ_ZERO_POINT, codes.QDQ_ZERO_POINT_RUNTIME,
                                 codes.UNSUPPORTED_DTYPE) + codes.GENERIC_PARSER_CODES
    ops = OPS + UNEMULATED
    priority = 18

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        idx = ctx.node_index(finding)
        n, nid = ctx.proto.graph.node[idx], ctx.ids[idx]
        if n.op_type in UNEMULATED:
            return []  # (the next step says what to do instead)
        pre = ctx.cached("emulate_quantized", lambda: self.precondition(ctx.proto))
        if not pre.applies:
            return []
        integer = ctx.cached("emulate_quantized:integer",
                             lambda: any(ctx.proto.graph.node[i].op_type not in QDQ_OPS
                                         for i in _candidates(ctx.proto)))
        if integer:
            return [Proposal(nid, n.op_type, self.name, {}, pre.reason, code=finding.code)]
        # only Q/DQ the parser refuses (asymmetric zero points, int32 biases, uint8 weights):
        # symmetric_qdq (asked first) keeps INT8 where that is exact; where it is not, this
        # is the one rewrite that makes the model parse, so it is applied, saying what it costs
        return [Proposal(nid, n.op_type, self.name, {}, pre.reason + "; the asymmetric Q/DQ "
                         "pairs then compute in float (same values, no INT8 speed-up): for "
                         "INT8 on TensorRT, re-quantize the float model symmetrically "
                         "(`workbench precision FP32_MODEL --to int8`)", code=finding.code)]

    def next_step(self, finding: Any, ctx: Any) -> Any:
        if not self.can_fix(finding, ctx):
            return None
        op = ctx.proto.graph.node[ctx.node_index(finding)].op_type
        if op in UNEMULATED:
            return (f"{op} is an onnxruntime quantized op (QOperator format) that TensorRT "
                    f"has no importer for and {self.name} cannot rewrite: re-quantize the "
                    "float model in QDQ format (precision --to int8 on the FP32 model; "
                    "TensorRT runs its Q/DQ pairs in INT8)")
        return fix_step(self.name, "rewrites the quantized ops into exact float emulation")

    def precondition(self, model: ModelLike) -> Precondition:
        import copy

        proto = as_model(model).with_weights()
        cands = _candidates(proto)
        ids = node_ids(proto)
        if not cands:
            return Precondition(False, "no onnxruntime-quantized op (DynamicQuantizeLinear, "
                                "MatMulInteger, ConvInteger, QLinear*, Q/DQ)", [])
        _, refused, done, notes = emulate(copy.deepcopy(proto))
        if not done:
            why = "; ".join(f"{ids[i]} ({proto.graph.node[i].op_type}): {r}"
                            for i, r in refused[:4])
            return Precondition(False, why or "no quantized node needs rewriting (symmetric "
                                "Q/DQ only: TensorRT takes those as they are)",
                                [ids[i] for i, _ in refused])
        ops = sorted({proto.graph.node[i].op_type for i in done})
        reason = (f"applies to {len(done)} node(s) ({', '.join(ops)}): each becomes float32 "
                  "ops on the same integers (zero points subtracted, sums exact below 2**24, "
                  "requantisation with round-half-to-even as onnxruntime), 8-bit unary ops a "
                  "lookup table onnxruntime computes")
        if notes:
            reason += "; " + "; ".join(notes[:3]) + (f" (and {len(notes) - 3} more)"
                                                       if len(notes) > 3 else "")
        if refused:
            reason += "; left as they are: " + "; ".join(
                f"{ids[i]} ({proto.graph.node[i].op_type}): {r}" for i, r in refused[:3])
        return Precondition(True, reason, [ids[i] for i in done])

    def _apply(self, proto: Any) -> Any:
        return emulate(proto)[0]
