"""Single-op ONNX models (built with onnx.helper) for asking the real parser about one op.

Each case is a tiny valid graph around the op of interest: `build(name) -> ModelProto`. Ops that
consume sequences or optionals are fed by the op that makes one (SequenceConstruct, Optional),
so the graph stays well-formed; `target_nodes(name)` names the node(s) the case is about.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64, I32, U8, B, S = (TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                         TensorProto.UINT8, TensorProto.BOOL, TensorProto.STRING)
OPSET = 21

# An input: (name, dtype, shape) for a graph input, or (name, ndarray) for an initializer.
In = Tuple[Any, ...]


def _const(name: str, value: Any, dtype: Any = None) -> In:
    return (name, np.array(value, dtype=dtype))


def _model(nodes: List[onnx.NodeProto], inputs: Sequence[In], outputs: Sequence[Tuple[str, int]],
           opset: int = OPSET, domains: Sequence[Tuple[str, int]] = ()) -> onnx.ModelProto:
    g_inputs, inits = [], []
    for spec in inputs:
        if len(spec) == 2:
            inits.append(numpy_helper.from_array(spec[1], spec[0]))
        else:
            g_inputs.append(helper.make_tensor_value_info(spec[0], spec[1], spec[2]))
    g_outputs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
    graph = helper.make_graph(nodes, "single_op", g_inputs, g_outputs, initializer=inits)
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    m = helper.make_model(graph, opset_imports=imports, producer_name="workbench-tests")
    m.ir_version = 10
    return _fill_output_types(m)


def _fill_output_types(m: onnx.ModelProto) -> onnx.ModelProto:
    """Give graph outputs the shapes ONNX shape inference finds (rank-only where it cannot)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False)
    except Exception:
        inferred = m
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in m.graph.output:
        v = known.get(out.name)
        if v is not None and v.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(v.type)
        elif not out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.SetInParent()  # unknown dims, unknown rank made explicit
    return m


def single(op: str, inputs: Sequence[In], outputs: Sequence[Tuple[str, int]], *,
           name: Optional[str] = None, domain: str = "", opset: int = OPSET,
           input_names: Optional[List[str]] = None, **attrs: Any) -> onnx.ModelProto:
    """One node `name` (default: the op) of type `op` fed by `inputs`."""
    names = input_names if input_names is not None else [s[0] for s in inputs]
    node = helper.make_node(op, names, [o[0] for o in outputs], name=name or op, domain=domain,
                            **attrs)
    domains = [(domain, 1)] if domain else []
    return _model([node], inputs, outputs, opset=opset, domains=domains)


def _seq_then(op: str, extra_inputs: Sequence[In], outputs: Sequence[Tuple[str, int]],
              extra_names: Sequence[str] = (), **attrs: Any) -> onnx.ModelProto:
    """SequenceConstruct(x, y) -> `op`(seq, extras...) -> outputs."""
    mk = helper.make_node("SequenceConstruct", ["x", "y"], ["seq"], name="SequenceConstruct")
    node = helper.make_node(op, ["seq"] + list(extra_names), [o[0] for o in outputs], name=op,
                            **attrs)
    ins = [("x", F, [2, 3]), ("y", F, [2, 3])] + list(extra_inputs)
    return _model([mk, node], ins, outputs)


def _to_length(first: onnx.NodeProto, inputs: Sequence[In]) -> onnx.ModelProto:
    """`first` makes a sequence `seq2`; SequenceLength turns it into a tensor output."""
    ln = helper.make_node("SequenceLength", ["seq2"], ["n"], name="SequenceLength")
    return _model([first, ln], inputs, [("n", I64)])


def _seq_construct_then_length(op: str, names: List[str], extra: Sequence[In],
                               **attrs: Any) -> onnx.ModelProto:
    mk = helper.make_node("SequenceConstruct", ["x", "y"], ["seq"], name="SequenceConstruct")
    node = helper.make_node(op, ["seq"] + names, ["seq2"], name=op, **attrs)
    ln = helper.make_node("SequenceLength", ["seq2"], ["n"], name="SequenceLength")
    return _model([mk, node, ln], [("x", F, [2, 3]), ("y", F, [2, 3])] + list(extra),
                  [("n", I64)])


def _qlinear_conv() -> onnx.ModelProto:
    return single("QLinearConv", [
        ("x", U8, [1, 1, 4, 4]), _const("xs", 0.1, np.float32), _const("xz", 0, np.uint8),
        _const("w", np.ones((1, 1, 2, 2)), np.uint8), _const("ws", 0.1, np.float32),
        _const("wz", 0, np.uint8), _const("ys", 0.1, np.float32), _const("yz", 0, np.uint8)],
        [("y", U8)])


def _qlinear_matmul() -> onnx.ModelProto:
    return single("QLinearMatMul", [
        ("a", U8, [2, 3]), _const("as", 0.1, np.float32), _const("az", 0, np.uint8),
        _const("b", np.ones((3, 4)), np.uint8), _const("bs", 0.1, np.float32),
        _const("bz", 0, np.uint8), _const("ys", 0.1, np.float32), _const("yz", 0, np.uint8)],
        [("y", U8)])


def _sequence_map() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Relu", ["bi"], ["bo"], name="body_relu")], "body",
        [helper.make_tensor_value_info("bi", F, None)],
        [helper.make_tensor_value_info("bo", F, None)])
    mk = helper.make_node("SequenceConstruct", ["x", "y"], ["seq"], name="SequenceConstruct")
    node = helper.make_node("SequenceMap", ["seq"], ["seq2"], name="SequenceMap", body=body)
    ln = helper.make_node("SequenceLength", ["seq2"], ["n"], name="SequenceLength")
    return _model([mk, node, ln], [("x", F, [2, 3]), ("y", F, [2, 3])], [("n", I64)])


def _optional_chain(last: str) -> onnx.ModelProto:
    mk = helper.make_node("Optional", ["x"], ["opt"], name="Optional")
    out_t = B if last == "OptionalHasElement" else F
    nodes = [mk, helper.make_node(last, ["opt"], ["y"], name=last)]
    return _model(nodes, [("x", F, [4])], [("y", out_t)])


def _tfidf() -> onnx.ModelProto:
    return single("TfIdfVectorizer", [("x", I64, [2, 4])], [("y", F)], max_gram_length=2,
                  min_gram_length=1, max_skip_count=0, mode="TF", ngram_counts=[0, 2],
                  ngram_indexes=[0, 1, 2], pool_int64s=[1, 2, 1, 2])


# Ops the onnx-tensorrt matrix (10.15) marks "N": one well-formed model each.
UNSUPPORTED_CASES: Dict[str, Any] = {
    "AffineGrid": lambda: single("AffineGrid", [
        ("theta", F, [1, 2, 3]), _const("size", [1, 1, 4, 4], np.int64)], [("g", F)]),
    "Bernoulli": lambda: single("Bernoulli", [("x", F, [2, 3])], [("y", F)]),
    "BitShift": lambda: single("BitShift", [("a", TensorProto.UINT32, [4]),
                                            ("b", TensorProto.UINT32, [4])],
                               [("y", TensorProto.UINT32)], direction="LEFT"),
    "BitwiseAnd": lambda: single("BitwiseAnd", [("a", I32, [4]), ("b", I32, [4])], [("y", I32)]),
    "BitwiseNot": lambda: single("BitwiseNot", [("a", I32, [4])], [("y", I32)]),
    "BitwiseOr": lambda: single("BitwiseOr", [("a", I32, [4]), ("b", I32, [4])], [("y", I32)]),
    "BitwiseXor": lambda: single("BitwiseXor", [("a", I32, [4]), ("b", I32, [4])], [("y", I32)]),
    "Col2Im": lambda: single("Col2Im", [("x", F, [1, 4, 4]), _const("img", [3, 3], np.int64),
                                        _const("blk", [2, 2], np.int64)], [("y", F)]),
    "CenterCropPad": lambda: single("CenterCropPad", [
        ("x", F, [4, 5]), _const("shape", [3, 3], np.int64)], [("y", F)]),
    "Compress": lambda: single("Compress", [("x", F, [4]), ("c", B, [4])], [("y", F)]),
    "ConcatFromSequence": lambda: _seq_then("ConcatFromSequence", [], [("out", F)], axis=0),
    "ConvInteger": lambda: single("ConvInteger", [("x", U8, [1, 1, 4, 4]),
                                                  _const("w", np.ones((1, 1, 2, 2)), np.uint8)],
                                  [("y", I32)]),
    "DFT": lambda: single("DFT", [("x", F, [1, 8, 1])], [("y", F)]),
    "Det": lambda: single("Det", [("x", F, [3, 3])], [("y", F)]),
    "DynamicQuantizeLinear": lambda: single("DynamicQuantizeLinear", [("x", F, [4])],
                                            [("y", U8), ("ys", F), ("yz", U8)]),
    "ImageDecoder": lambda: single("ImageDecoder", [("b", U8, [100])], [("img", U8)]),
    "MatMulInteger": lambda: single("MatMulInteger", [("a", U8, [2, 3]),
                                                      _const("b", np.ones((3, 4)), np.uint8)],
                                    [("y", I32)]),
    "MaxRoiPool": lambda: single("MaxRoiPool", [("x", F, [1, 1, 8, 8]),
                                                _const("rois", [[0, 0, 0, 4, 4]], np.float32)],
                                 [("y", F)], pooled_shape=[2, 2]),
    "MaxUnpool": lambda: single("MaxUnpool", [("x", F, [1, 1, 2, 2]), ("i", I64, [1, 1, 2, 2])],
                                [("y", F)], kernel_shape=[2, 2], strides=[2, 2]),
    "MelWeightMatrix": lambda: single("MelWeightMatrix", [
        _const("bins", 8, np.int64), _const("dft", 16, np.int64), _const("rate", 8000, np.int64),
        _const("lo", 0.0, np.float32), _const("hi", 4000.0, np.float32)], [("y", F)]),
    "Multinomial": lambda: single("Multinomial", [("x", F, [1, 4])], [("y", I32)]),
    "NegativeLogLikelihoodLoss": lambda: single("NegativeLogLikelihoodLoss", [
        ("x", F, [2, 3]), ("t", I64, [2])], [("y", F)]),
    "Optional": lambda: _optional_chain("OptionalGetElement"),
    "OptionalGetElement": lambda: _optional_chain("OptionalGetElement"),
    "OptionalHasElement": lambda: _optional_chain("OptionalHasElement"),
    "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul,
    "RegexFullMatch": lambda: single("RegexFullMatch", [("s", S, [2])], [("y", B)], pattern="a.*"),
    "SequenceAt": lambda: _seq_then("SequenceAt", [_const("pos", 0, np.int64)], [("out", F)],
                                    extra_names=["pos"]),
    "SequenceConstruct": lambda: _seq_then("SequenceLength", [], [("n", I64)]),
    "SequenceEmpty": lambda: _to_length(helper.make_node("SequenceEmpty", [], ["seq2"],
                                                         name="SequenceEmpty"), [("x", F, [1])]),
    "SequenceErase": lambda: _seq_construct_then_length("SequenceErase", [], []),
    "SequenceInsert": lambda: _seq_construct_then_length("SequenceInsert", ["z"],
                                                         [("z", F, [2, 3])]),
    "SequenceLength": lambda: _seq_then("SequenceLength", [], [("n", I64)]),
    "SequenceMap": _sequence_map,
    "SoftmaxCrossEntropyLoss": lambda: single("SoftmaxCrossEntropyLoss", [
        ("x", F, [2, 3]), ("t", I64, [2])], [("y", F)]),
    "SplitToSequence": lambda: _to_length(helper.make_node("SplitToSequence", ["x"], ["seq2"],
                                                           name="SplitToSequence"),
                                          [("x", F, [4, 2])]),
    "StringConcat": lambda: single("StringConcat", [("a", S, [2]), ("b", S, [2])], [("y", S)]),
    "StringNormalizer": lambda: single("StringNormalizer", [("a", S, [2])], [("y", S)]),
    "StringSplit": lambda: single("StringSplit", [("a", S, [2])], [("y", S), ("z", I64)]),
    "TfIdfVectorizer": _tfidf,
    "Unique": lambda: single("Unique", [("x", F, [6])], [("y", F)]),
}


def target_nodes(case: str) -> List[str]:
    """The node name(s) a case is about (the op's node; SequenceConstruct for its own case)."""
    if case == "SequenceConstruct":
        return ["SequenceConstruct"]
    if case == "Optional":
        return ["Optional"]
    return [case]


def build(case: str) -> onnx.ModelProto:
    return UNSUPPORTED_CASES[case]()


# --- attribute restrictions ------------------------------------------------------------------
def resize(mode: str = "cubic", **attrs: Any) -> onnx.ModelProto:
    return single("Resize", [("x", F, [1, 1, 4, 4]), _const("roi", np.zeros(0), np.float32),
                             _const("scales", [1, 1, 2, 2], np.float32)], [("y", F)],
                  mode=mode, **attrs)


def topk(k: int, n: int = 8192, **attrs: Any) -> onnx.ModelProto:
    return single("TopK", [("x", F, [1, n]), _const("k", [k], np.int64)],
                  [("v", F), ("i", I64)], **attrs)


def scatternd(reduction: str = "add") -> onnx.ModelProto:
    return single("ScatterND", [("data", F, [4, 4]), _const("idx", [[1]], np.int64),
                                ("upd", F, [1, 4])], [("y", F)], reduction=reduction)


def maxpool_indices() -> onnx.ModelProto:
    return single("MaxPool", [("x", F, [1, 1, 4, 4])], [("y", F), ("ind", I64)],
                  kernel_shape=[2, 2])


def maxpool_plain() -> onnx.ModelProto:
    return single("MaxPool", [("x", F, [1, 1, 4, 4])], [("y", F)], kernel_shape=[2, 2])


def quantize(zero_point: int = 3, op: str = "QuantizeLinear") -> onnx.ModelProto:
    if op == "QuantizeLinear":
        return single(op, [("x", F, [4]), _const("s", 0.1, np.float32),
                           _const("z", zero_point, np.int8)], [("y", TensorProto.INT8)])
    return single(op, [("x", TensorProto.INT8, [4]), _const("s", 0.1, np.float32),
                       _const("z", zero_point, np.int8)], [("y", F)])


def cumsum_runtime_axis() -> onnx.ModelProto:
    return single("CumSum", [("x", F, [4, 5]), ("axis", I64, [])], [("y", F)])


def cumsum_const_axis() -> onnx.ModelProto:
    return single("CumSum", [("x", F, [4, 5]), _const("axis", 1, np.int64)], [("y", F)])


def custom_domain_op() -> onnx.ModelProto:
    return single("MyCustomOp", [("x", F, [4])], [("y", F)], name="my_custom",
                  domain="com.example")


def nonzero() -> onnx.ModelProto:
    return single("NonZero", [("x", F, [4, 4])], [("y", I64)])


# --- where TensorRT-RTX departs from the published matrix (support_rules.DISAGREEMENTS) --------
def deform_conv() -> onnx.ModelProto:
    return single("DeformConv", [("x", F, [1, 1, 4, 4]),
                                 _const("w", np.ones((1, 1, 2, 2)), np.float32),
                                 ("off", F, [1, 8, 3, 3])], [("y", F)])


def roi_align() -> onnx.ModelProto:
    return single("RoiAlign", [("x", F, [1, 1, 8, 8]), ("r", F, [2, 4]), ("bi", I64, [2])],
                  [("y", F)])


def lstm_batch_first() -> onnx.ModelProto:
    return single("LSTM", [("x", F, [1, 2, 3]), _const("w", np.ones((1, 16, 3)), np.float32),
                           _const("r", np.ones((1, 16, 4)), np.float32)], [("y", F)],
                  hidden_size=4, layout=1)


def onehot_runtime_depth() -> onnx.ModelProto:
    return single("OneHot", [("i", I64, [3]), ("depth", I64, [1]),
                             _const("v", [0, 1], np.float32)], [("y", F)])


def maxpool_1d() -> onnx.ModelProto:
    return single("MaxPool", [("x", F, [1, 1, 8])], [("y", F)], kernel_shape=[2])


def grid_sample_5d() -> onnx.ModelProto:
    return single("GridSample", [("x", F, [1, 1, 2, 4, 4]), ("g", F, [1, 2, 4, 4, 3])],
                  [("y", F)])


def swish() -> onnx.ModelProto:
    return single("Swish", [("x", F, [4])], [("y", F)], opset=24)


def bitcast() -> onnx.ModelProto:
    return single("BitCast", [("x", F, [4])], [("y", I32)], opset=26, to=int(I32))


def cumprod() -> onnx.ModelProto:
    return single("CumProd", [("x", F, [4, 5]), _const("axis", 1, np.int64)], [("y", F)],
                  opset=26)


def swiglu() -> onnx.ModelProto:
    return single("SwiGLU", [("a", F, [2, 4]), ("b", F, [2, 4])], [("y", F)], opset=28)


def avgpool_1d() -> onnx.ModelProto:
    return single("AveragePool", [("x", F, [1, 1, 8])], [("y", F)], kernel_shape=[2])


def lppool_1d() -> onnx.ModelProto:
    return single("LpPool", [("x", F, [1, 1, 8])], [("y", F)], kernel_shape=[2])
