"""Models for the float-lowering tests, built with onnx.helper: each reproduces a way the FP16
conversion of real exported models breaks (control flow with outer-scope values, loop and scan
bodies, a CLIP-style vision block mixing operand types), with feeds to run them."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

F = T.FLOAT
vi = h.make_tensor_value_info


def _model(nodes, ins, outs, inits, opset=17):
    g = h.make_graph(nodes, "g", ins, outs, [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _r(rng, *s, scale=0.5):
    return (rng.standard_normal(s) * scale).astype(np.float32)


def if_outer_scope() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """Detection-style post-processing: an If whose branches read FP32 values of the outer graph
    (a Conv output, initializers) and run float math of their own (a Conv with bias inside).
    onnxconverter-common re-sorts the main graph by explicit inputs only and puts the If before
    the Conv: "Nodes in a graph must be topologically sorted"."""
    rng = np.random.default_rng(0)
    w, b, w2 = _r(rng, 4, 3, 3, 3), _r(rng, 4), _r(rng, 4, 4, 1, 1)
    then = h.make_graph(
        [h.make_node("Conv", ["feat", "w2", "b"], ["t1"], name="then/conv"),
         h.make_node("Sigmoid", ["t1"], ["t2"], name="then/sig"),
         h.make_node("Mul", ["t2", "scale"], ["then_out"], name="then/mul")],
        "then", [], [vi("then_out", F, None)])
    els = h.make_graph(
        [h.make_node("Relu", ["feat"], ["e1"], name="else/relu"),
         h.make_node("Add", ["e1", "b4"], ["else_out"], name="else/add")],
        "else", [], [vi("else_out", F, None)])
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["feat"], name="conv", pads=[1, 1, 1, 1]),
        # the condition comes from elsewhere (a score threshold, a box count): the If's only
        # explicit input is ready before the Conv its branches read
        h.make_node("If", ["flag"], ["y0"], name="if", then_branch=then, else_branch=els),
        h.make_node("Add", ["y0", "feat"], ["y"], name="add"),
    ]
    inits = {"w": w, "b": b, "w2": w2, "scale": np.array(1.5, np.float32),
             "b4": _r(rng, 4, 1, 1)}
    m = _model(nodes, [vi("x", F, [1, 3, 8, 8]), vi("flag", T.BOOL, [])],
               [vi("y", F, [1, 4, 8, 8])], inits)
    return m, {"x": _r(rng, 1, 3, 8, 8, scale=1.0), "flag": np.array(True)}


def loop_body() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """A Loop carrying a float state through a MatMul + Tanh with an outer-scope weight, and a
    scan output per iteration."""
    rng = np.random.default_rng(1)
    body = h.make_graph(
        [h.make_node("MatMul", ["s_in", "wl"], ["mm"], name="body/mm"),
         h.make_node("Add", ["mm", "bl"], ["ad"], name="body/add"),
         h.make_node("Tanh", ["ad"], ["s_out"], name="body/tanh"),
         h.make_node("Identity", ["cond_in"], ["cond_out"], name="body/cond"),
         h.make_node("Mul", ["s_out", "half"], ["scan_out"], name="body/mul")],
        "body", [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("s_in", F, [2, 8])],
        [vi("cond_out", T.BOOL, []), vi("s_out", F, [2, 8]), vi("scan_out", F, [2, 8])])
    nodes = [h.make_node("Relu", ["x"], ["s0"], name="relu"),
             h.make_node("Loop", ["trip", "cond"], [], name="loop", body=body),
             h.make_node("Sigmoid", ["final"], ["y"], name="sig")]
    nodes[1].input.append("s0")
    nodes[1].output.extend(["final", "stack"])
    inits = {"trip": np.array(3, np.int64), "cond": np.array(True), "wl": _r(rng, 8, 8),
             "bl": _r(rng, 8), "half": np.array(0.5, np.float32)}
    m = _model(nodes, [vi("x", F, [2, 8])], [vi("y", F, [2, 8]), vi("stack", F, [3, 2, 8])],
               inits)
    return m, {"x": _r(rng, 2, 8, scale=1.0)}


def scan_body() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """A Scan accumulating rows (state + row * outer gain) - the RNN-style body."""
    rng = np.random.default_rng(2)
    body = h.make_graph(
        [h.make_node("Mul", ["row", "gain"], ["scaled"], name="scan/mul"),
         h.make_node("Add", ["acc_in", "scaled"], ["acc_out"], name="scan/add"),
         h.make_node("Relu", ["acc_out"], ["per_row"], name="scan/relu")],
        "scan_body", [vi("acc_in", F, [6]), vi("row", F, [6])],
        [vi("acc_out", F, [6]), vi("per_row", F, [6])])
    nodes = [h.make_node("Scan", ["acc0", "x"], ["acc", "rows"], name="scan", body=body,
                         num_scan_inputs=1),
             h.make_node("Softmax", ["rows"], ["y"], name="softmax", axis=-1)]
    m = _model(nodes, [vi("x", F, [5, 6]), vi("acc0", F, [6])],
               [vi("acc", F, [6]), vi("y", F, [5, 6])], {"gain": _r(rng, 6)})
    return m, {"x": _r(rng, 5, 6, scale=1.0), "acc0": np.zeros(6, np.float32)}


def clip_block() -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """A CLIP-style vision stem: patch-embedding Conv with a bias shared with an excluded path,
    class token Concat, position embedding Add, pre-LayerNorm, one attention head with a
    Where mask and a scale Constant, a Clip/Pad pair, a Resize with FP32 scales and a Cast from
    int64 feeding float math. Converting with the head Add kept FP32 leaves onnxconverter-common's
    Conv with an FP32 bias and FP16 data: "Type parameter (T) of Optype (Conv) bound to
    different types"."""
    rng = np.random.default_rng(3)
    d = 8
    inits = {
        "pw": _r(rng, d, 3, 4, 4), "pb": _r(rng, d), "cls": _r(rng, 1, 1, d),
        "pos": _r(rng, 1, 5, d), "ln_g": np.ones(d, np.float32), "ln_b": np.zeros(d, np.float32),
        "wq": _r(rng, d, d), "wk": _r(rng, d, d), "wv": _r(rng, d, d),
        "shape3": np.array([1, d, 4], np.int64), "perm_dummy": np.array([0], np.int64),
        "mask": np.array([[True, True, True, True, False]]), "neg": np.array(-1e4, np.float32),
        "lo": np.array(-3.0, np.float32), "hi": np.array(3.0, np.float32),
        "pads": np.array([0, 0, 0, 0, 0, 1, 0, 0], np.int64),
        "padv": np.array(0.25, np.float32), "scales": np.array([1, 1, 2, 1], np.float32),
        "roi": np.array([], np.float32), "idx": np.array([0, 1, 2, 3, 4], np.int64),
    }
    nodes = [
        h.make_node("Conv", ["x", "pw", "pb"], ["pe"], name="patch/conv", strides=[4, 4]),
        h.make_node("Reshape", ["pe", "shape3"], ["pe3"], name="patch/reshape"),
        h.make_node("Transpose", ["pe3"], ["tok"], name="patch/transpose", perm=[0, 2, 1]),
        h.make_node("Concat", ["cls", "tok"], ["seq"], name="cat", axis=1),
        h.make_node("Cast", ["idx"], ["idxf"], name="idx/cast", to=F),
        h.make_node("Unsqueeze", ["idxf", "ax2"], ["idxf2"], name="idx/unsq"),
        h.make_node("Mul", ["idxf2", "small"], ["idxs"], name="idx/mul"),
        h.make_node("Add", ["seq", "pos"], ["s1"], name="pos/add"),
        h.make_node("Add", ["s1", "idxs"], ["s2"], name="idx/add"),
        h.make_node("LayerNormalization", ["s2", "ln_g", "ln_b"], ["n1"], name="ln", axis=-1),
        h.make_node("MatMul", ["n1", "wq"], ["q"], name="q"),
        h.make_node("MatMul", ["n1", "wk"], ["k"], name="k"),
        h.make_node("MatMul", ["n1", "wv"], ["v"], name="v"),
        h.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        h.make_node("MatMul", ["q", "kt"], ["sc0"], name="scores"),
        h.make_node("Constant", [], ["c_scale"], name="scale_const",
                    value=nh.from_array(np.array(d ** -0.5, np.float32))),
        h.make_node("Mul", ["sc0", "c_scale"], ["sc1"], name="scale"),
        h.make_node("Where", ["mask", "sc1", "neg"], ["sc2"], name="mask"),
        h.make_node("Softmax", ["sc2"], ["p"], name="softmax", axis=-1),
        h.make_node("MatMul", ["p", "v"], ["att"], name="att"),
        h.make_node("Clip", ["att", "lo", "hi"], ["cl"], name="clip"),
        h.make_node("Unsqueeze", ["cl", "ax"], ["cl4"], name="unsq4"),
        h.make_node("Pad", ["cl4", "pads", "padv"], ["pd"], name="pad"),
        h.make_node("Resize", ["pd", "roi", "scales"], ["rs"], name="resize", mode="nearest"),
        h.make_node("ReduceMean", ["rs"], ["pooled"], name="pool", keepdims=0, axes=[1, 2]),
        # the bias is shared with a path the user keeps FP32 (excluded)
        h.make_node("Add", ["pooled", "pb"], ["y"], name="head/add"),
    ]
    inits.update({"ax": np.array([0], np.int64), "ax2": np.array([0, 2], np.int64), "small": np.array(0.01, np.float32)})
    del inits["perm_dummy"]
    nodes[24] = h.make_node("ReduceMean", ["rs", "rax"], ["pooled"], name="pool", keepdims=0)
    inits["rax"] = np.array([1, 2], np.int64)
    m = _model(nodes, [vi("x", F, [1, 3, 8, 8])], [vi("y", F, [1, 8])], inits, opset=18)
    return m, {"x": _r(rng, 1, 3, 8, 8, scale=1.0)}


CASES = {"if_outer_scope": if_outer_scope, "loop_body": loop_body, "scan_body": scan_body,
         "clip_block": clip_block}
