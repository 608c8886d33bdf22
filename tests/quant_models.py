"""onnxruntime-quantized models for the quantized-op tests: small FP32 models built with
onnx.helper, then `quantize_dynamic` or `quantize_static` (QOperator format) on them."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

F = T.FLOAT
vi = h.make_tensor_value_info


def _model(nodes, ins, outs, inits, opset=17):
    g = h.make_graph(nodes, "g", ins, outs, [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return _model([h.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
                   h.make_node("Add", ["m1", "b1"], ["a1"], name="bias1"),
                   h.make_node("Relu", ["a1"], ["r1"], name="relu"),
                   h.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
                   h.make_node("Add", ["m2", "b2"], ["y"], name="bias2")],
                  [vi("x", F, ["N", 16])], [vi("y", F, ["N", 8])],
                  {"w1": r(16, 32), "b1": r(32), "w2": r(32, 8), "b2": r(8)})


def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    r = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    return _model([h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
                   h.make_node("Relu", ["c1"], ["r1"], name="relu"),
                   h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1],
                               strides=[2, 2], name="conv2"),
                   h.make_node("Sigmoid", ["c2"], ["s"], name="sigmoid"),
                   h.make_node("GlobalAveragePool", ["s"], ["y"], name="gap")],
                  [vi("x", F, ["N", 3, 16, 16])], [vi("y", F, ["N", 4, 1, 1])],
                  {"w1": r(8, 3, 3, 3), "b1": r(8), "w2": r(4, 8, 3, 3), "b2": r(4)})


def branchy() -> onnx.ModelProto:
    """Two conv branches joined by Mul, Add and Concat, with LeakyRelu, then an AveragePool:
    QLinearMul/Add/Concat/LeakyRelu/AveragePool after static quantization."""
    rng = np.random.default_rng(2)
    r = lambda *s: (0.3 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    return _model([h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
                   h.make_node("LeakyRelu", ["c1"], ["l1"], alpha=0.1, name="leaky"),
                   h.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
                   h.make_node("Mul", ["l1", "c2"], ["m"], name="mul"),
                   h.make_node("Add", ["m", "c2"], ["a"], name="add"),
                   h.make_node("Concat", ["a", "l1"], ["cat"], axis=1, name="concat"),
                   h.make_node("AveragePool", ["cat"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                               pads=[1, 1, 1, 1], name="pool")],
                  [vi("x", F, ["N", 3, 8, 8])], [vi("y", F, ["N", 8, 4, 4])],
                  {"w1": r(4, 3, 3, 3), "b1": r(4), "w2": r(4, 3, 3, 3), "b2": r(4)})


MODELS = {"mlp": mlp, "cnn": cnn, "branchy": branchy}
SHAPES = {"mlp": (2, 16), "cnn": (2, 3, 16, 16), "branchy": (2, 3, 8, 8)}


def quantized(folder: Path, kind: str, mode: str) -> Tuple[Path, Path]:
    """(float model, quantized model) paths. mode: "dynamic" (quantize_dynamic, reduce_range), "dynamic-full" (its defaults),
    "qop" (quantize_static QOperator, uint8 activations), "qop-int8" (QOperator, int8
    activations, per-channel int8 weights)."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    folder = Path(folder)
    fp32 = folder / f"{kind}.onnx"
    if not fp32.is_file():
        onnx.save(MODELS[kind](), str(fp32))
    out = folder / f"{kind}_{mode}.onnx"
    if mode in ("dynamic", "dynamic-full"):
        # reduce_range (7-bit weights) is onnxruntime's own advice for x86 CPUs without VNNI,
        # whose u8s8 kernels saturate int16 pair sums: then onnxruntime computes the exact
        # integers the emulation computes. "dynamic-full" keeps the 8-bit default.
        quantize_dynamic(str(fp32), str(out), reduce_range=(mode == "dynamic"))
        return fp32, out
    rng = np.random.default_rng(3)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.data = iter([{"x": rng.standard_normal(SHAPES[kind]).astype(np.float32)}
                              for _ in range(4)])

        def get_next(self) -> Dict[str, np.ndarray]:
            return next(self.data, None)

    extra = {} if mode == "qop" else {"per_channel": True, "activation_type": QuantType.QInt8,
                                      "weight_type": QuantType.QInt8}
    quantize_static(str(fp32), str(out), Reader(), quant_format=QuantFormat.QOperator, **extra)
    return fp32, out


def feeds(kind: str, n: int = 12, seed: int = 0):
    """Inputs for a model: zeros, all positive, then random ones of growing range."""
    rng = np.random.default_rng(seed)
    out = [np.zeros(SHAPES[kind], np.float32),
           np.abs(rng.standard_normal(SHAPES[kind])).astype(np.float32)]
    for k in range(n):
        out.append((rng.standard_normal(SHAPES[kind]) * (0.5 + 1.5 * k / max(n - 1, 1))).astype(np.float32))
    return out


def detector(nms: bool = False, nonzero_after: bool = False) -> onnx.ModelProto:
    """A detection-style model: a small conv backbone predicts 4 box values and a score per
    cell; a score threshold + NonZero + Gather tail keeps the confident boxes (TensorRT-RTX
    refuses NonZero). The raw scores are an output too (made by the prefix). With `nms`, a
    NonMaxSuppression op selects the boxes instead, and `nonzero_after` adds a NonZero reading
    the kept boxes after it."""
    rng = np.random.default_rng(4)
    r = lambda *s: (0.5 * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [h.make_node("Conv", ["images", "w1", "b1"], ["f1"], pads=[1, 1, 1, 1], name="/backbone/conv1"),
             h.make_node("Relu", ["f1"], ["r1"], name="/backbone/relu1"),
             h.make_node("Conv", ["r1", "w2", "b2"], ["head"], name="/head/conv"),
             h.make_node("Reshape", ["head", "shape"], ["flat"], name="/head/reshape"),
             h.make_node("Transpose", ["flat"], ["cells"], perm=[1, 0], name="/head/transpose"),
             h.make_node("Slice", ["cells", "s0", "s4", "ax1"], ["boxes"], name="/head/boxes"),
             h.make_node("Slice", ["cells", "s4", "s5", "ax1"], ["logit2d"], name="/head/logit"),
             h.make_node("Squeeze", ["logit2d", "ax1"], ["logit"], name="/head/squeeze"),
             h.make_node("Sigmoid", ["logit"], ["scores"], name="/head/sigmoid")]
    outs = [vi("scores", F, [64])]
    if not nms:
        nodes += [h.make_node("Greater", ["scores", "thr"], ["mask"], name="/post/threshold"),
                  h.make_node("NonZero", ["mask"], ["nz"], name="/post/nonzero"),
                  h.make_node("Squeeze", ["nz", "ax0"], ["keep"], name="/post/squeeze"),
                  h.make_node("Gather", ["boxes", "keep"], ["kept_boxes"], axis=0, name="/post/gather_boxes"),
                  h.make_node("Gather", ["scores", "keep"], ["kept_scores"], axis=0, name="/post/gather_scores")]
        outs = [vi("kept_boxes", F, ["K", 4]), vi("kept_scores", F, ["K"])] + outs
    else:
        nodes += [h.make_node("Unsqueeze", ["boxes", "ax0"], ["b3"], name="/post/boxes3"),
                  h.make_node("Reshape", ["scores", "sshape"], ["s3"], name="/post/scores3"),
                  h.make_node("NonMaxSuppression", ["b3", "s3", "maxk", "iou", "thr"], ["sel"],
                              name="/post/nms"),
                  h.make_node("Gather", ["sel", "col2", ], ["sel_box"], axis=1, name="/post/col"),
                  h.make_node("Gather", ["boxes", "sel_box"], ["kept_boxes"], axis=0, name="/post/gather")]
        outs = [vi("kept_boxes", F, ["K", 4])] + outs
        if nonzero_after:
            nodes += [h.make_node("Greater", ["kept_boxes", "zero"], ["positive"], name="/post/positive"),
                      h.make_node("NonZero", ["positive"], ["where"], name="/post/nonzero")]
            outs.append(vi("where", T.INT64, [2, "P"]))
    inits = {"w1": r(8, 3, 3, 3), "b1": r(8), "w2": r(5, 8, 1, 1), "b2": r(5),
             "shape": i64(5, 64), "s0": i64(0), "s4": i64(4), "s5": i64(5), "ax1": i64(1),
             "ax0": i64(0), "thr": np.array([0.9], np.float32) if not nms else np.array(0.3, np.float32),
             "sshape": i64(1, 1, 64), "maxk": i64(10), "iou": np.array(0.5, np.float32),
             "col2": np.array(2, np.int64), "zero": np.array(0, np.float32)}
    used = {x for n in nodes for x in n.input}
    return _model(nodes, [vi("images", F, [1, 3, 8, 8])], outs,
                  {k: v for k, v in inits.items() if k in used})
