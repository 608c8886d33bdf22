"""A model with a planted FP16 overflow at a realistic size (sample_models/fp16_overflow.onnx
scaled up): shared by the engine bisection on the GPU (tests/gpu/test_engine_compare.py) and
the layer-precision plumbing tests that parse it with the real TensorRT-RTX on a CPU."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PLANTED = ["/planted/scale", "/planted/sq", "/planted/sum", "/planted/sqrt", "/planted/eps",
           "/planted/div"]


def planted_overflow(d: int = 1024, blocks: int = 6, seed: int = 4) -> onnx.ModelProto:
    """sample_models/fp16_overflow.onnx at a realistic size: `blocks` MatMul+Add+Relu layers
    of width d, then the planted chain (a x2e4 gain past FP16's max, a decomposed L2 norm
    whose sum of squares overflows FP16), then a head."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    x = "input"
    for k in range(blocks):
        w = (rng.standard_normal((d, d)) * math.sqrt(2.0 / d)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"b{k}.w"),
                  numpy_helper.from_array(np.zeros(d, np.float32), f"b{k}.b")]
        nodes += [helper.make_node("MatMul", [x, f"b{k}.w"], [f"/b{k}/mm"], name=f"/b{k}/MatMul"),
                  helper.make_node("Add", [f"/b{k}/mm", f"b{k}.b"], [f"/b{k}/add"],
                                   name=f"/b{k}/Add"),
                  helper.make_node("Relu", [f"/b{k}/add"], [f"/b{k}/relu"], name=f"/b{k}/Relu")]
        x = f"/b{k}/relu"
    inits += [numpy_helper.from_array(np.array(2e4, np.float32), "gain"),
              numpy_helper.from_array(np.array([-1], np.int64), "axes"),
              numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
              numpy_helper.from_array(rng.standard_normal((d, 16)).astype(np.float32), "head.w")]
    nodes += [helper.make_node("Mul", [x, "gain"], ["/planted/h"], name=PLANTED[0]),
              helper.make_node("Mul", ["/planted/h", "/planted/h"], ["/planted/h2"],
                               name=PLANTED[1]),
              helper.make_node("ReduceSum", ["/planted/h2", "axes"], ["/planted/ss"],
                               name=PLANTED[2], keepdims=1),
              helper.make_node("Sqrt", ["/planted/ss"], ["/planted/n"], name=PLANTED[3]),
              helper.make_node("Add", ["/planted/n", "eps"], ["/planted/ne"], name=PLANTED[4]),
              helper.make_node("Div", ["/planted/h", "/planted/ne"], ["/planted/y"],
                               name=PLANTED[5]),
              helper.make_node("MatMul", ["/planted/y", "head.w"], ["output"], name="/head/MatMul")]
    g = helper.make_graph(nodes, "planted_overflow",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", d])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 16])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m
