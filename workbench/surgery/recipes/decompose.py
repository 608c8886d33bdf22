"""Replace an op TensorRT cannot parse with an equivalent subgraph of standard ONNX ops.

The registry maps (domain, op_type) to a `Decomposition` with a `check` (does the exact rewrite
apply to this node? why not?) and a `build` that emits standard nodes producing the node's own
output names, so nothing downstream changes. Every entry here was chosen because TensorRT-RTX 1.7's
ONNX parser rejects the op (checked with the real parser) and onnxruntime can run both sides, so
the rewrite is verified numerically after it is applied.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from workbench.core.model import ModelLike, as_model
from workbench.support import codes
from workbench.support.rules import MATRIX_UNSUPPORTED
from workbench.surgery.recipes.base import (Param, Precondition, Proposal, Recipe, _dom, all_names,
                                            constant_value, find_node_index, fix_step,
                                            infer_types, node_ids,
                                            opset_of, register, tensor_types, unique_name)


class Emit:
    """Collects the nodes/initializers of one rewrite with unique names."""

    def __init__(self, proto: Any, prefix: str, dtype: Optional[int] = None) -> None:
        self.proto = proto
        self.taken = all_names(proto)
        self.prefix = prefix or "decomposed"
        self.nodes: List[Any] = []
        self.inits: List[Any] = []
        self.np_dtype = _np_dtype(dtype) if dtype else np.float32

    def const(self, value: Any, dtype: Any = None, tag: str = "c") -> str:
        from onnx import numpy_helper

        arr = np.asarray(value, dtype=dtype if dtype is not None else self.np_dtype)
        name = unique_name(self.taken, f"{self.prefix}/{tag}")
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: List[str], out: Optional[str] = None, **attrs: Any) -> str:
        from onnx import helper

        o = out or unique_name(self.taken, f"{self.prefix}/{op_type}_out")
        self.nodes.append(helper.make_node(op_type, inputs, [o],
                                           name=unique_name(self.taken, f"{self.prefix}/{op_type}"),
                                           **attrs))
        return o


def _np_dtype(code: int) -> Any:
    from onnx import helper

    return helper.tensor_dtype_to_np_dtype(code)


@dataclass
class Context:
    proto: Any
    node: Any
    types: Dict[str, Tuple[int, Optional[List[Any]]]]
    opset: int

    def dtype(self, name: str) -> int:
        return self.types.get(name, (0, None))[0]

    def shape(self, name: str) -> Optional[List[Any]]:
        return self.types.get(name, (0, None))[1]

    def attr(self, name: str, default: Any = None) -> Any:
        from onnx import helper

        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def used(self, k: int) -> bool:
        if k >= len(self.node.output) or not self.node.output[k]:
            return False
        o = self.node.output[k]
        return any(o in n.input for n in self.proto.graph.node) or \
            o in {x.name for x in self.proto.graph.output}


@dataclass
class Decomposition:
    """One exact rewrite; `advice`: the support table's hint that describes it (dropped from
    the next steps of a node it does not apply to, `Decompose.retracts`)."""

    domain: str
    op: str
    summary: str
    check: Callable[[Context], Tuple[bool, str]]
    build: Callable[[Context, Emit], None]
    advice: str = ""


REGISTRY: Dict[Tuple[str, str], Decomposition] = {}


def decomposition(domain: str, op: str, summary: str, advice: str = "") -> Callable[[Any], Any]:
    """Register a class's `check` and `build` for (domain, op); without a `check`, the rewrite
    needs only a float32/float16 first input (`_float_input`)."""
    def deco(cls: Any) -> Any:
        check = getattr(cls, "check", _float_input)
        REGISTRY[(_dom(domain), op)] = Decomposition(domain, op, summary, check, cls.build, advice)
        return cls
    return deco


FLOATS = {1: "float32", 10: "float16", 11: "float64"}


def _float_input(ctx: Context, k: int = 0) -> Tuple[bool, str]:
    dt = ctx.dtype(ctx.node.input[k])
    if dt not in FLOATS:
        return False, (f"input '{ctx.node.input[k]}' has unknown dtype (run infer_shapes)" if not dt
                       else f"input '{ctx.node.input[k]}' is not float32/float16")
    return True, ""


def _gelu_tanh(e: Emit, x: str, out: str) -> None:
    x3 = e.op("Mul", [e.op("Mul", [x, x]), x])
    inner = e.op("Add", [x, e.op("Mul", [x3, e.const(0.044715)])])
    t = e.op("Tanh", [e.op("Mul", [inner, e.const(math.sqrt(2.0 / math.pi))])])
    e.op("Mul", [e.op("Mul", [x, e.const(0.5)]), e.op("Add", [t, e.const(1.0)])], out=out)


def _gelu_erf(e: Emit, x: str, out: str) -> None:
    erf = e.op("Erf", [e.op("Div", [x, e.const(math.sqrt(2.0))])])
    e.op("Mul", [e.op("Mul", [x, e.const(0.5)]), e.op("Add", [erf, e.const(1.0)])], out=out)


@decomposition("com.microsoft", "FastGelu", "tanh-approximated GELU (+ optional bias) -> Mul/Add/Tanh")
class _FastGelu:
    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x = ctx.node.input[0]
        if len(ctx.node.input) > 1 and ctx.node.input[1]:
            x = e.op("Add", [x, ctx.node.input[1]])
        _gelu_tanh(e, x, ctx.node.output[0])


@decomposition("com.microsoft", "BiasGelu", "Add + exact (erf) GELU")
class _BiasGelu:
    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        _gelu_erf(e, e.op("Add", [ctx.node.input[0], ctx.node.input[1]]), ctx.node.output[0])


@decomposition("com.microsoft", "QuickGelu", "x * Sigmoid(alpha * x)")
class _QuickGelu:
    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x = ctx.node.input[0]
        alpha = float(ctx.attr("alpha", 1.702))
        s = e.op("Sigmoid", [e.op("Mul", [x, e.const(alpha)])])
        e.op("Mul", [x, s], out=ctx.node.output[0])


@decomposition("com.microsoft", "FusedMatMul", "Transpose (transA/transB) + MatMul + Mul(alpha)")
class _FusedMatMul:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        if ctx.attr("transBatchA", 0) or ctx.attr("transBatchB", 0):
            return False, "transBatchA/transBatchB have no direct ONNX equivalent here"
        for k, flag in ((0, "transA"), (1, "transB")):
            if ctx.attr(flag, 0) and ctx.shape(ctx.node.input[k]) is None:
                return False, f"{flag}=1 needs the rank of input {k} (run infer_shapes)"
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        ins = list(ctx.node.input[:2])
        for k, flag in ((0, "transA"), (1, "transB")):
            if ctx.attr(flag, 0):
                r = len(ctx.shape(ins[k]))
                perm = list(range(r - 2)) + [r - 1, r - 2]
                ins[k] = e.op("Transpose", [ins[k]], perm=perm)
        alpha = float(ctx.attr("alpha", 1.0))
        if alpha == 1.0:
            e.op("MatMul", ins, out=ctx.node.output[0])
        else:
            e.op("Mul", [e.op("MatMul", ins), e.const(alpha)], out=ctx.node.output[0])


@decomposition("", "Gelu", "GELU (opset 20) -> the erf or tanh form with Mul/Add (TensorRT "
               "before 10 and other backends without a Gelu importer)")
class _Gelu:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        if ctx.attr("approximate", "none") not in ("none", "tanh", b"none", b"tanh"):
            return False, f"approximate='{ctx.attr('approximate')}' is not none/tanh"
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        approx = ctx.attr("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        (_gelu_tanh if approx == "tanh" else _gelu_erf)(e, ctx.node.input[0], ctx.node.output[0])


@decomposition("", "GroupNormalization",
               "Reshape to [N, groups, -1] + InstanceNormalization + Reshape back + per-channel "
               "scale and bias (opset 21's [C] scale; opset 18's [groups] scale repeated)")
class _GroupNorm:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        shape = ctx.shape(ctx.node.input[0])
        if not shape or len(shape) < 3:
            return False, "the input's rank is unknown or below 3 (run infer_shapes)"
        if ctx.opset < 21:  # per-group scale: repeated per channel needs C and the values
            c = shape[1]
            if not isinstance(c, int) or c <= 0:
                return False, "the channel count is dynamic (opset 18's per-group scale)"
            for k in (1, 2):
                if constant_value(ctx.proto, ctx.node.input[k]) is None:
                    return False, f"input {k} (per-group scale/bias) is not a constant"
        if int(ctx.attr("stash_type", 1)) != 1:
            return False, "stash_type other than float32"
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x, scale, bias = ctx.node.input[:3]
        g = int(ctx.attr("num_groups"))
        eps = float(ctx.attr("epsilon", 1e-5))
        rank = len(ctx.shape(x) or [])
        grouped = e.op("Reshape", [x, e.const([0, g, -1], np.int64, "grouped")])
        normed = e.op("InstanceNormalization", [grouped, e.const(np.ones(g), tag="ones"),
                                                e.const(np.zeros(g), tag="zeros")], epsilon=eps)
        back = e.op("Reshape", [normed, e.op("Shape", [x])])
        per_channel = [1] * (rank - 2)
        if ctx.opset < 21:  # [groups] -> [C]: each group's value for its channels
            c = int(ctx.shape(x)[1])
            sc = np.repeat(np.asarray(constant_value(ctx.proto, scale)), c // g)
            bi = np.repeat(np.asarray(constant_value(ctx.proto, bias)), c // g)
            s_c = e.const(sc.reshape([c] + per_channel), tag="scale")
            b_c = e.const(bi.reshape([c] + per_channel), tag="bias")
        else:
            dims = e.const([-1] + per_channel, np.int64, "per_channel")
            s_c, b_c = e.op("Reshape", [scale, dims]), e.op("Reshape", [bias, dims])
        e.op("Add", [e.op("Mul", [back, s_c]), b_c], out=ctx.node.output[0])


def _reduce_mean(ctx: Context, e: Emit, x: str) -> str:
    if ctx.opset >= 18:
        return e.op("ReduceMean", [x, e.const([-1], np.int64, "axes")], keepdims=1)
    return e.op("ReduceMean", [x], axes=[-1], keepdims=1)


@decomposition("com.microsoft", "SkipLayerNormalization",
               "Add(input, skip, bias) + layer normalisation over the last axis")
class _SkipLayerNorm:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        for k in (1, 2):
            if ctx.used(k):
                return False, f"output {k} (mean / inverse std) is used; no standard op gives it"
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        n = ctx.node
        ins = list(n.input) + [""] * (5 - len(n.input))
        x, skip, gamma, beta, bias = ins[:5]
        eps = float(ctx.attr("epsilon", 1e-12))
        sum_out = n.output[3] if len(n.output) > 3 and ctx.used(3) else None
        s = e.op("Add", [x, skip])
        if bias:
            s = e.op("Add", [s, bias], out=sum_out)
        elif sum_out:
            s = e.op("Identity", [s], out=sum_out)
        if ctx.opset >= 17:
            e.op("LayerNormalization", [s, gamma] + ([beta] if beta else []),
                 out=n.output[0], axis=-1, epsilon=eps)
            return
        d = e.op("Sub", [s, _reduce_mean(ctx, e, s)])
        var = _reduce_mean(ctx, e, e.op("Mul", [d, d]))
        y = e.op("Mul", [e.op("Div", [d, e.op("Sqrt", [e.op("Add", [var, e.const(eps)])])]), gamma])
        if beta:
            e.op("Add", [y, beta], out=n.output[0])
        else:
            e.op("Identity", [y], out=n.output[0])


@decomposition("", "Det", "closed-form determinant of 2x2 / 3x3 matrices (Gather/Mul/Sub)")
class _Det:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        shp = ctx.shape(ctx.node.input[0])
        if shp is None or len(shp) < 2:
            return False, "the input's rank is unknown (run infer_shapes)"
        if shp[-1] not in (2, 3) or shp[-2] != shp[-1]:
            return False, (f"matrices are {shp[-2]}x{shp[-1]}: only static 2x2 and 3x3 have a "
                           "closed form here")
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x = ctx.node.input[0]
        shp = ctx.shape(x)
        r, n = len(shp), shp[-1]
        rows = [e.op("Gather", [x, e.const(i, np.int64, "i")], axis=r - 2) for i in range(n)]
        a = [[e.op("Gather", [rows[i], e.const(j, np.int64, "j")], axis=r - 2) for j in range(n)]
             for i in range(n)]
        mul = lambda p, q: e.op("Mul", [p, q])  # noqa: E731
        sub = lambda p, q: e.op("Sub", [p, q])  # noqa: E731
        if n == 2:
            e.op("Sub", [mul(a[0][0], a[1][1]), mul(a[0][1], a[1][0])], out=ctx.node.output[0])
            return
        c0 = sub(mul(a[1][1], a[2][2]), mul(a[1][2], a[2][1]))
        c1 = sub(mul(a[1][0], a[2][2]), mul(a[1][2], a[2][0]))
        c2 = sub(mul(a[1][0], a[2][1]), mul(a[1][1], a[2][0]))
        t = sub(mul(a[0][0], c0), mul(a[0][1], c1))
        e.op("Add", [t, mul(a[0][2], c2)], out=ctx.node.output[0])


def _elements(ctx: Context, e: Emit, x: str, n: int) -> List[List[str]]:
    """a[i][j] = x[..., i, j] as tensors of shape [...] (Gather twice)."""
    r = len(ctx.shape(x))
    rows = [e.op("Gather", [x, e.const(i, np.int64, "i")], axis=r - 2) for i in range(n)]
    return [[e.op("Gather", [rows[i], e.const(j, np.int64, "j")], axis=r - 2) for j in range(n)]
            for i in range(n)]


def _unsqueeze(ctx: Context, e: Emit, x: str, axes: List[int]) -> str:
    if ctx.opset >= 13:
        return e.op("Unsqueeze", [x, e.const(axes, np.int64, "axes")])
    return e.op("Unsqueeze", [x], axes=axes)


def _square_check(ctx: Context, what: str) -> Tuple[bool, str]:
    shp = ctx.shape(ctx.node.input[0])
    if shp is None or len(shp) < 2:
        return False, "the input's rank is unknown (run infer_shapes)"
    if shp[-1] not in (2, 3) or shp[-2] != shp[-1]:
        return False, (f"matrices are {shp[-2]}x{shp[-1]}: only static 2x2 and 3x3 have a "
                       f"closed-form {what} here")
    return _float_input(ctx)


@decomposition("com.microsoft", "Inverse", "closed-form inverse of 2x2 / 3x3 matrices (adjugate / det)")
class _Inverse:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        return _square_check(ctx, "inverse")

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x = ctx.node.input[0]
        n = ctx.shape(x)[-1]
        a = _elements(ctx, e, x, n)
        mul = lambda p, q: e.op("Mul", [p, q])  # noqa: E731
        sub = lambda p, q: e.op("Sub", [p, q])  # noqa: E731
        neg = lambda p: e.op("Neg", [p])  # noqa: E731
        if n == 2:
            det = sub(mul(a[0][0], a[1][1]), mul(a[0][1], a[1][0]))
            adj = [[a[1][1], neg(a[0][1])], [neg(a[1][0]), a[0][0]]]
        else:
            def cof(i: int, j: int) -> str:
                r = [k for k in range(3) if k != i]
                c = [k for k in range(3) if k != j]
                m = sub(mul(a[r[0]][c[0]], a[r[1]][c[1]]), mul(a[r[0]][c[1]], a[r[1]][c[0]]))
                return m if (i + j) % 2 == 0 else neg(m)
            cofs = [[cof(i, j) for j in range(3)] for i in range(3)]
            det = e.op("Add", [e.op("Add", [mul(a[0][0], cofs[0][0]), mul(a[0][1], cofs[0][1])]),
                               mul(a[0][2], cofs[0][2])])
            adj = [[cofs[j][i] for j in range(3)] for i in range(3)]  # transpose of cofactors
        rows = [e.op("Concat", [_unsqueeze(ctx, e, v, [-1]) for v in row], axis=-1) for row in adj]
        m = e.op("Concat", [_unsqueeze(ctx, e, r_, [-2]) for r_ in rows], axis=-2)
        e.op("Div", [m, _unsqueeze(ctx, e, det, [-1, -2])], out=ctx.node.output[0])


@decomposition("", "AffineGrid", "2D affine grid: constant base grid MatMul theta^T, reshaped",
               advice=MATRIX_UNSUPPORTED["AffineGrid"])
class _AffineGrid:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        size = constant_value(ctx.proto, ctx.node.input[1])
        if size is None:
            return False, (f"the output size ('{ctx.node.input[1]}') is not a constant: the "
                           "model computes it at run time")
        if len(size) != 4:
            return False, f"only 2D grids (size of length 4) are decomposed, got length {len(size)}"
        return _float_input(ctx)

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        n, _, h, w = (int(v) for v in constant_value(ctx.proto, ctx.node.input[1]))
        align = bool(ctx.attr("align_corners", 0))

        def coords(k: int) -> np.ndarray:
            if align:
                return np.linspace(-1.0, 1.0, k) if k > 1 else np.zeros(1)
            return (2.0 * np.arange(k) + 1.0) / k - 1.0

        ys, xs = np.meshgrid(coords(h), coords(w), indexing="ij")
        base = np.stack([xs.ravel(), ys.ravel(), np.ones(h * w)], axis=1)[None]  # [1, HW, 3]
        theta_t = e.op("Transpose", [ctx.node.input[0]], perm=[0, 2, 1])  # [N, 3, 2]
        g = e.op("MatMul", [e.const(base, tag="base_grid"), theta_t])  # [N, HW, 2]
        e.op("Reshape", [g, e.const([n, h, w, 2], np.int64, "shape")], out=ctx.node.output[0])


@decomposition("", "CenterCropPad", "Slice (crop) + Pad with zeros, for static input shapes",
               advice=MATRIX_UNSUPPORTED["CenterCropPad"])
class _CenterCropPad:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        shp = ctx.shape(ctx.node.input[0])
        target = constant_value(ctx.proto, ctx.node.input[1])
        if target is None:
            return False, "the target shape is not a constant"
        if shp is None:
            return False, "the input rank is unknown (run infer_shapes)"
        axes = ctx.attr("axes") or list(range(len(shp)))
        dyn = [a for a in axes if not isinstance(shp[a % len(shp)], int)]
        if dyn:
            return False, (f"input dims {dyn} are dynamic: the crop offsets depend on them "
                           "(set_input_shapes first)")
        return True, ""

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        x = ctx.node.input[0]
        shp = ctx.shape(x)
        r = len(shp)
        target = [int(v) for v in constant_value(ctx.proto, ctx.node.input[1])]
        axes = [a % r for a in (ctx.attr("axes") or list(range(r)))]
        starts, ends, sl_axes = [], [], []
        pads_b, pads_a = [0] * r, [0] * r
        for ax, t in zip(axes, target):
            have = shp[ax]
            if have > t:
                s = (have - t) // 2
                starts.append(s)
                ends.append(s + t)
                sl_axes.append(ax)
            elif have < t:
                pads_b[ax] = (t - have) // 2
                pads_a[ax] = t - have - pads_b[ax]
        y = x
        need_pad = any(pads_b) or any(pads_a)
        if sl_axes:
            y = e.op("Slice", [y, e.const(starts, np.int64, "starts"), e.const(ends, np.int64, "ends"),
                                e.const(sl_axes, np.int64, "axes")],
                     out=None if need_pad else ctx.node.output[0])
        if need_pad:
            e.op("Pad", [y, e.const(pads_b + pads_a, np.int64, "pads")], out=ctx.node.output[0],
                 mode="constant")
        if not sl_axes and not need_pad:
            e.op("Identity", [y], out=ctx.node.output[0])


# ---------------------------------------------------------------------- scatter with add
# index_add_ / scatter_add_ (a GNN's message aggregation) export as ScatterND /
# ScatterElements with reduction='add', which TensorRT's parser refuses. Along axis 0 they are
# a matrix product: out = data + onehot(index, N)^T @ updates, with onehot[m, n] = (index[m] ==
# n); the sums run in another order than onnxruntime's (float rounding, no other change). The
# one-hot matrix holds (number of indices) x N values.
_ONEHOT_LIMIT = 1 << 26  # values of the one-hot matrix, where both sizes are known


def _scatter_add_check(ctx: Context, kind: str) -> Tuple[bool, str]:
    red = ctx.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red != "add":
        return False, f"reduction '{red}' (only 'add' is a matrix product)"
    dt = ctx.dtype(ctx.node.input[0])
    if dt not in FLOATS:
        return False, ("the data's dtype is unknown (run infer_shapes)" if not dt else
                       "integer data: TensorRT's MatMul computes in float only")
    data, idx = ctx.shape(ctx.node.input[0]), ctx.shape(ctx.node.input[1])
    if not data or idx is None:
        return False, "the data's or the indices' rank is unknown (run infer_shapes)"
    if kind == "ScatterND":
        if not idx or idx[-1] != 1:
            return False, ("indices address more than the first axis (last dim "
                           f"{idx[-1] if idx else '?'}): only index_add along axis 0 is done")
        count = [d for d in idx[:-1]]
    else:
        if int(ctx.attr("axis", 0)) % len(data) != 0:
            return False, "axis is not 0"
        rest = [d for sh in (data[1:], idx[1:]) for d in sh]
        if any(d != 1 for d in rest):
            return False, ("per-element indices (a dim other than axis 0 is not 1): "
                           "each column would need its own one-hot matrix")
        count = idx[:1]
    n = data[0]
    if all(isinstance(d, int) for d in count) and isinstance(n, int):
        m = int(np.prod(count)) if count else 1
        if m * n > _ONEHOT_LIMIT:
            return False, (f"the one-hot matrix would hold {m} x {n} values: too large; keep "
                           "it in onnxruntime (`workbench fix --split`) or use a plugin")
    return True, ("one-hot matrix product; the one-hot matrix holds (indices) x "
                  f"{n if isinstance(n, int) else 'N'} values at run time")


def _scatter_add_build(ctx: Context, e: Emit) -> None:
    import onnx

    data, idx, upd = ctx.node.input[:3]
    ft = ctx.dtype(data)
    e.np_dtype = _np_dtype(ft)
    i64 = np.int64
    flat = e.op("Reshape", [idx, e.const([-1], i64, "flat")])
    if ctx.dtype(idx) != onnx.TensorProto.INT64:
        flat = e.op("Cast", [flat], to=onnx.TensorProto.INT64)
    shape = e.op("Shape", [data])
    n = e.op("Gather", [shape, e.const(0, i64, "zero")], axis=0)
    # negative indices count from the end
    flat = e.op("Where", [e.op("Less", [flat, e.const(0, i64, "zero")]),
                          e.op("Add", [flat, n]), flat])
    rows = e.op("Range", [e.const(0, i64, "zero"), n, e.const(1, i64, "one")])
    hot = e.op("Cast", [e.op("Equal", [e.op("Unsqueeze", [flat, e.const([1], i64, "ax1")]),
                                        e.op("Unsqueeze", [rows, e.const([0], i64, "ax0")])])],
               to=ft)  # [M, N]
    m_cols = e.op("Reshape", [upd, e.op("Concat", [e.op("Shape", [flat]),
                                                   e.const([-1], i64, "rest")], axis=0)])
    summed = e.op("MatMul", [e.op("Transpose", [hot], perm=[1, 0]), m_cols])  # [N, P]
    e.op("Add", [data, e.op("Reshape", [summed, shape])], out=ctx.node.output[0])


for _op, _summary in (
        ("ScatterND", "reduction='add' along axis 0 (index_add_) -> data + one-hot(indices)^T "
                      "MatMul updates"),
        ("ScatterElements", "reduction='add' along axis 0 with one index per row (scatter_add_ "
                            "of a column) -> data + one-hot(indices)^T MatMul updates")):
    REGISTRY[("", _op)] = Decomposition("", _op, _summary, partial(_scatter_add_check, kind=_op),
                                        _scatter_add_build)


@decomposition("", "BitwiseNot", "~x == -1 - x for signed int32/int64 (two's complement)")
class _BitwiseNot:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        dt = ctx.dtype(ctx.node.input[0])
        if dt not in (6, 7):
            return False, ("only signed int32/int64 have the -1 - x identity with types TensorRT "
                           "computes on")
        return True, ""

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        dt = _np_dtype(ctx.dtype(ctx.node.input[0]))
        e.op("Sub", [e.const(-1, dt), ctx.node.input[0]], out=ctx.node.output[0])


@decomposition("", "NonZero", "NonZero of a constant -> its (precomputed) indices")
class _NonZero:
    @staticmethod
    def check(ctx: Context) -> Tuple[bool, str]:
        if constant_value(ctx.proto, ctx.node.input[0]) is None:
            return False, ("its input is computed at run time, so the output shape depends on the "
                           "data: no static rewrite is exact (TensorRT-RTX has no NonZero plugin); "
                           "rewrite the model to use a mask (Where/Mul) instead of indices")
        return True, ""

    @staticmethod
    def build(ctx: Context, e: Emit) -> None:
        val = constant_value(ctx.proto, ctx.node.input[0])
        idx = np.array(np.nonzero(val), dtype=np.int64)
        e.op("Identity", [e.const(idx, np.int64, "indices")], out=ctx.node.output[0])


def find_decomposition(node: Any) -> Optional[Decomposition]:
    return REGISTRY.get((_dom(node.domain), node.op_type))


@register
class Decompose(Recipe):
    name = "decompose"
    summary = ("replace a node (or every node of an op) with an equivalent subgraph of standard "
               "ops from the decomposition registry")
    params = (Param("node", "str", None, "node name or id"),
              Param("op", "str", None, "every node of this op type (instead of node)"))
    preserves_semantics = True
    fixes = codes.OP_REJECTED + (codes.UNSUPPORTED_NODE, codes.INVALID_NODE,
                                 codes.UNSUPPORTED_ATTRIBUTE) + codes.SCATTER_REDUCTION
    priority = 30

    def can_fix(self, finding: Any, ctx: Any) -> bool:
        idx = ctx.node_index(finding)
        if not (super().can_fix(finding, ctx) and idx is not None
                and find_decomposition(ctx.proto.graph.node[idx]) is not None):
            return False
        if finding.code in codes.SCATTER_REDUCTION:  # an attribute's value, not the op: only
            return self._applies(ctx, idx)             # the reduction it rewrites ('add')
        return True

    def _applies(self, ctx: Any, idx: int) -> bool:
        return ctx.cached(f"decompose.pre.{idx}", lambda: self.precondition(
            ctx.proto, node=ctx.ids[idx], op=None)).applies

    def propose(self, finding: Any, ctx: Any) -> List[Proposal]:
        idx = ctx.node_index(finding)
        n, nid = ctx.proto.graph.node[idx], ctx.ids[idx]
        pre = self.precondition(ctx.proto, node=nid, op=None)
        if pre.applies:
            return [Proposal(nid, n.op_type, self.name, {"node": nid}, pre.reason,
                             code=finding.code)]
        if "dynamic" in pre.reason:
            # a static-shape precondition may be met by fixing the input shapes first
            return [Proposal(nid, n.op_type, "set_input_shapes", {"shapes": None}, pre.reason,
                             auto=False, code=finding.code)]
        return []

    def next_step(self, finding: Any, ctx: Any) -> Any:
        """The decompose command where it would apply; where only dynamic shapes stop it, that
        it needs static shapes first; nothing where it cannot (e.g. a 4x4 Det): advice that
        fails when run is worse than none."""
        if not finding.nodes or not self.can_fix(finding, ctx):
            return None
        idx = ctx.node_index(finding)
        pre = ctx.cached(f"decompose.pre.{idx}",
                         lambda: self.precondition(ctx.proto, node=ctx.ids[idx], op=None))
        recipe = "decompose:node=" + finding.nodes[0]
        if pre.applies:
            return fix_step(recipe, "replaces it with standard ops")
        if "dynamic" in pre.reason:
            return fix_step(recipe, "replaces it with standard ops once its input shapes are "
                            "static (--recipe set_input_shapes:shapes=... first; "
                            f"{pre.reason})")
        return None

    def retracts(self, finding: Any, ctx: Any) -> Optional[Tuple[str, str]]:
        """Where the table's hint for the op describes this node's decomposition (AffineGrid:
        'decompose into MatMul + Reshape on a constant base grid') and it does not apply for
        a reason static shapes would not cure (an output size computed at run time): those
        words and why not."""
        if not finding.nodes or not self.can_fix(finding, ctx):
            return None
        idx = ctx.node_index(finding)
        d = find_decomposition(ctx.proto.graph.node[idx])
        pre = ctx.cached(f"decompose.pre.{idx}",
                         lambda: self.precondition(ctx.proto, node=ctx.ids[idx], op=None))
        if d is None or not d.advice or pre.applies or "dynamic" in pre.reason:
            return None
        why = pre.reason.split("): ", 1)[-1]  # (without "node X (Op): ")
        return d.advice, f"the decompose recipe does not apply to it: {why}"

    def _targets(self, proto: Any, node: Optional[str], op: Optional[str]) -> List[int]:
        if node:
            return [find_node_index(proto, node)]
        if op:
            return [i for i, n in enumerate(proto.graph.node) if n.op_type == op]
        return [i for i, n in enumerate(proto.graph.node) if find_decomposition(n)]

    def precondition(self, model: ModelLike, node: Optional[str] = None, op: Optional[str] = None) -> Precondition:
        proto = as_model(model).with_weights()
        idxs = self._targets(proto, node, op)
        ids = node_ids(proto)
        if not idxs:
            return Precondition(False, f"no node of op {op}" if op else
                                "no node has an entry in the decomposition registry", [])
        types = tensor_types(infer_types(proto))
        ok, why_not = [], []
        for i in idxs:
            n = proto.graph.node[i]
            d = find_decomposition(n)
            if d is None:
                known = ", ".join(sorted(o for _, o in REGISTRY))
                why_not.append(f"node {ids[i]} ({n.op_type}): no decomposition registered "
                               f"(registry: {known})")
                continue
            good, why = d.check(Context(proto, n, types, opset_of(proto)))
            if not good:
                why_not.append(f"node {ids[i]} ({n.op_type}): {why}")
            else:
                ok.append((ids[i], n.op_type, d.summary))
        if not ok:
            return Precondition(False, "; ".join(why_not), [ids[i] for i in idxs])
        reason = "; ".join(f"applies to node {nid} ({opn}) because it has an exact rewrite: {s}"
                           for nid, opn, s in ok[:4])
        if len(ok) > 4:
            reason += f" (and {len(ok) - 4} more)"
        if why_not:
            reason += "; skipped: " + "; ".join(why_not[:3])
        return Precondition(True, reason, [o[0] for o in ok])

    def _apply(self, proto: Any, node: Optional[str] = None, op: Optional[str] = None) -> Any:
        types = tensor_types(infer_types(proto))
        ids = node_ids(proto)
        targets = set(self._targets(proto, node, op))
        opset = opset_of(proto)
        new_nodes, new_inits = [], []
        for i, n in enumerate(proto.graph.node):
            d = find_decomposition(n) if i in targets else None
            ctx = Context(proto, n, types, opset)
            if d is None or not d.check(ctx)[0]:
                new_nodes.append(n)
                continue
            e = Emit(proto, ids[i], ctx.dtype(n.input[0]) if n.input else None)
            e.taken.update(x.name for x in new_nodes)
            e.taken.update(t.name for t in new_inits)
            d.build(ctx, e)
            new_nodes.extend(e.nodes)
            new_inits.extend(e.inits)
        g = proto.graph
        nodes = list(new_nodes)
        del g.node[:]
        g.node.extend(nodes)
        g.initializer.extend(new_inits)
        if opset < 17 and any(n.op_type == "LayerNormalization" for n in nodes):
            pass  # never emitted below opset 17 (see _SkipLayerNorm)
        # drop opset imports of custom domains no node uses any more
        used = {_dom(n.domain) for n in g.node}
        keep = [o for o in proto.opset_import if _dom(o.domain) == "" or _dom(o.domain) in used]
        del proto.opset_import[:]
        proto.opset_import.extend(keep)
        return proto
