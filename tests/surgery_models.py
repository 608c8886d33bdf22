"""Models for the surgery tests, derived from the real samples/fixtures or built per op with
onnx.helper (one node each, for ops TensorRT-RTX 1.7's parser rejects)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import POLY, SAMPLES

F = T.FLOAT
vi = h.make_tensor_value_info


def _model(nodes, ins, outs, inits, opset=17, ms=True):
    g = h.make_graph(nodes, "g", ins, outs, [nh.from_array(v, k) for k, v in inits.items()])
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid("com.microsoft", 1)] if ms else [])
    m = h.make_model(g, opset_imports=ops)
    m.ir_version = 9
    return m


def single_op_cases():
    """name -> model with one op the 1.7 parser rejects and the registry decomposes."""
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {
        "FastGelu": _model([h.make_node("FastGelu", ["x", "b"], ["y"], domain="com.microsoft", name="fg")],
                           [vi("x", F, [2, 8, 16])], [vi("y", F, [2, 8, 16])], {"b": r(16)}),
        "BiasGelu": _model([h.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft", name="bg")],
                           [vi("x", F, [2, 8, 16])], [vi("y", F, [2, 8, 16])], {"b": r(16)}),
        "QuickGelu": _model([h.make_node("QuickGelu", ["x"], ["y"], domain="com.microsoft", name="qg",
                                         alpha=1.5)], [vi("x", F, [2, 8, 16])], [vi("y", F, [2, 8, 16])], {}),
        "FusedMatMul": _model([h.make_node("FusedMatMul", ["x", "w"], ["y"], domain="com.microsoft",
                                           name="fm", alpha=0.5, transB=1)],
                              [vi("x", F, [2, 8, 16])], [vi("y", F, [2, 8, 4])], {"w": r(4, 16)}),
        "SkipLayerNormalization": _model(
            [h.make_node("SkipLayerNormalization", ["x", "s", "g", "be", "bi"], ["y", "", "", "sum"],
                         domain="com.microsoft", name="sln", epsilon=1e-5),
             h.make_node("Relu", ["sum"], ["z"], name="relu")],
            [vi("x", F, [2, 8, 16]), vi("s", F, [2, 8, 16])], [vi("y", F, [2, 8, 16]), vi("z", F, [2, 8, 16])],
            {"g": r(16), "be": r(16), "bi": r(16)}),
        "Inverse": _model([h.make_node("Inverse", ["x"], ["y"], domain="com.microsoft", name="inv")],
                          [vi("x", F, [4, 3, 3])], [vi("y", F, [4, 3, 3])], {}),
        "AffineGrid": _model([h.make_node("AffineGrid", ["t", "s"], ["y"], name="ag", align_corners=1)],
                             [vi("t", F, [2, 2, 3])], [vi("y", F, [2, 5, 7, 2])],
                             {"s": np.array([2, 3, 5, 7], np.int64)}, opset=20, ms=False),
        "Det": _model([h.make_node("Det", ["x"], ["y"], name="det")], [vi("x", F, [4, 3, 3])],
                      [vi("y", F, [4])], {}, ms=False),
        "CenterCropPad": _model([h.make_node("CenterCropPad", ["x", "s"], ["y"], name="ccp", axes=[1, 2])],
                                [vi("x", F, [2, 7, 6])], [vi("y", F, [2, 4, 9])],
                                {"s": np.array([4, 9], np.int64)}, opset=18, ms=False),
        "BitwiseNot": _model([h.make_node("BitwiseNot", ["x"], ["y"], name="bn")], [vi("x", T.INT32, [2, 8])],
                             [vi("y", T.INT32, [2, 8])], {}, opset=18, ms=False),
        "NonZero": _model([h.make_node("NonZero", ["c"], ["nz"], name="nz"),
                           h.make_node("Cast", ["nz"], ["nzf"], to=1, name="cast"),
                           h.make_node("ReduceSum", ["nzf"], ["r"], keepdims=0, name="sum"),
                           h.make_node("Add", ["x", "r"], ["y"], name="add")],
                          [vi("x", F, [2])], [vi("y", F, [2])],
                          {"c": np.array([[0, 1, 0], [1, 1, 0]], np.float32)}, ms=False),
    }


def det4():
    return _model([h.make_node("Det", ["x"], ["y"], name="det")], [vi("x", F, [4, 4])], [vi("y", F, [])], {},
                  ms=False)


def nonzero_dynamic():
    return _model([h.make_node("NonZero", ["x"], ["y"], name="nz")], [vi("x", F, [4])],
                  [vi("y", T.INT64, [1, None])], {}, ms=False)


def resnet_baked_batch():
    """resnet_tiny with batch fixed to 1 and Flatten replaced by Reshape(shape=[1, 64]): the
    classic export that bakes the batch size into a Reshape constant."""
    m = onnx.load(str(SAMPLES / "resnet_tiny.onnx"))
    m.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    m.graph.output[0].type.tensor_type.shape.dim[0].Clear()
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    feat = None
    for n in m.graph.node:
        if n.op_type == "Flatten":
            n.op_type = "Reshape"
            del n.attribute[:]
            n.input.append("flatten_shape")
        if n.op_type == "Gemm":
            feat = [t for t in m.graph.initializer if t.name == n.input[1]][0].dims[1]
    m.graph.initializer.append(nh.from_array(np.array([1, feat], np.int64), "flatten_shape"))
    del m.graph.value_info[:]
    return m


def qdq_conv_runtime_input():
    """qdq_conv.onnx with its quantized tensor `x` turned into a graph input (values at run time)."""
    m = onnx.load(str(POLY / "qdq_conv.onnx"))
    x = [t for t in m.graph.initializer if t.name == "x"][0]
    m.graph.input.append(vi("x", F, list(x.dims)))
    m.graph.initializer.remove(x)
    return m


def qdq_uint8_128():
    """qdq_conv.onnx with uint8 zero points of 128 and `x` at run time: exact for every input."""
    m = qdq_conv_runtime_input()
    zp = [t for t in m.graph.initializer if t.name == "y_zero_point"][0]
    zp.CopyFrom(nh.from_array(np.full(3, 128, np.uint8), "y_zero_point"))
    return m


def bloater(n: int = 1024):
    """A constant-fold bloater: a 1x1 constant Expanded to [n, n] then Tiled to [2n, 2n] and
    added to the input (folding would store a 16 MiB constant for n=1024), plus a small
    foldable Add that folding should still fold."""
    nodes = [h.make_node("Expand", ["one", "shape"], ["big"], name="expand"),
             h.make_node("Tile", ["big", "reps"], ["bigger"], name="tile"),
             h.make_node("Add", ["x", "bigger"], ["y"], name="add"),
             h.make_node("Add", ["a", "b"], ["ab"], name="small_add"),
             h.make_node("Add", ["y", "ab"], ["out"], name="add2")]
    return _model(nodes, [vi("x", F, [2 * n, 2 * n])], [vi("out", F, [2 * n, 2 * n])],
                  {"one": np.ones((1, 1), np.float32), "shape": np.array([n, n], np.int64),
                   "reps": np.array([2, 2], np.int64), "a": np.ones((1, 1), np.float32),
                   "b": np.ones((1, 1), np.float32)}, opset=13, ms=False)
