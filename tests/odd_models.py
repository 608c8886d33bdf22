"""Unusual but legitimate (or plausibly broken) ONNX files real users have, made with
onnx.helper into a folder (tests/test_odd_models.py; nothing here is committed as a file).

`make_zoo(folder)` writes every model and returns {name: path}; each maker writes its model
(and any external data) under `folder` and returns the .onnx path.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
OPSET = [helper.make_opsetid("", 17)]


def _model(graph: onnx.GraphProto, opset=None, ir: int = 8, **kw) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=opset or OPSET, producer_name="odd", **kw)
    m.ir_version = ir
    return m


def _save(m: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(m.SerializeToString())
    return path


def _conv_graph(name: str = "g") -> onnx.GraphProto:
    w = numpy_helper.from_array(np.random.RandomState(0).randn(4, 3, 3, 3).astype(np.float32), "conv.w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "conv.b")
    return helper.make_graph(
        [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        name, [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], [w, b])


def _externalize(m: onnx.ModelProto, locations: Dict[str, str], folder: Path) -> None:
    """Move the named initializers' bytes to files at `locations` (relative to `folder`)."""
    for init in m.graph.initializer:
        loc = locations.get(init.name)
        if loc is None:
            continue
        raw = numpy_helper.to_array(init).tobytes()
        target = (folder / loc)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(raw)
        init.ClearField("float_data")
        init.ClearField("raw_data")
        init.data_location = TensorProto.EXTERNAL
        del init.external_data[:]
        for k, v in (("location", loc), ("offset", "0"), ("length", str(len(raw)))):
            e = init.external_data.add()
            e.key, e.value = k, v


# ----------------------------------------------------------------------------- makers
def init_as_input(d: Path) -> Path:
    g = _conv_graph()
    for init in g.initializer:  # old exporters (IR < 4) list every weight as an input too
        g.input.append(helper.make_tensor_value_info(init.name, F, list(init.dims)))
    return _save(_model(g, ir=3, opset=[helper.make_opsetid("", 9)]), d / "init_as_input.onnx")


def ext_subfolder(d: Path) -> Path:
    m = _model(_conv_graph())
    _externalize(m, {"conv.w": "weights/conv_w.bin"}, d / "ext_sub")
    return _save(m, d / "ext_sub" / "model.onnx")


def ext_outside(d: Path) -> Path:
    m = _model(_conv_graph())
    _externalize(m, {"conv.w": "../outside_w.bin"}, d / "ext_out" / "m")
    return _save(m, d / "ext_out" / "m" / "model.onnx")


def ext_missing(d: Path) -> Path:
    m = _model(_conv_graph())
    _externalize(m, {"conv.w": "gone.bin"}, d / "ext_missing")
    (d / "ext_missing" / "gone.bin").unlink()
    return _save(m, d / "ext_missing" / "model.onnx")


def truncated(d: Path) -> Path:
    data = _model(_conv_graph()).SerializeToString()
    p = d / "truncated.onnx"
    p.write_bytes(data[: len(data) * 2 // 3])
    return p


def zero_node(d: Path) -> Path:
    g = helper.make_graph([], "g", [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("x", F, [1, 4])])
    return _save(_model(g), d / "zero_node.onnx")


def unused_input(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4]),
                           helper.make_tensor_value_info("unused", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    return _save(_model(g), d / "unused_input.onnx")


def unnamed_nodes(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"]),
                           helper.make_node("Sigmoid", ["a"], ["b"]),
                           helper.make_node("Add", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    return _save(_model(g), d / "unnamed_nodes.onnx")


def dup_node_names(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="n"),
                           helper.make_node("Sigmoid", ["a"], ["b"], name="n"),
                           helper.make_node("Add", ["a", "b"], ["y"], name="n")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    return _save(_model(g), d / "dup_node_names.onnx")


def _typed_input(d: Path, name: str, dtype: int, nodes: List[onnx.NodeProto], out_type: int,
                 shape=(2, 3)) -> Path:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", out_type, list(shape))])
    return _save(_model(g), d / f"{name}.onnx")


def bool_input(d: Path) -> Path:
    return _typed_input(d, "bool_input", TensorProto.BOOL,
                        [helper.make_node("Not", ["x"], ["n"], name="not"),
                         helper.make_node("Cast", ["n"], ["y"], name="cast", to=F)], F)


def int64_input(d: Path) -> Path:
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["s"], name="add"),
                           helper.make_node("Cast", ["s"], ["y"], name="cast", to=F)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [2, 3])],
                          [helper.make_tensor_value_info("y", F, [2, 3])], [one])
    return _save(_model(g), d / "int64_input.onnx")


def string_input(d: Path) -> Path:
    return _typed_input(d, "string_input", TensorProto.STRING,
                        [helper.make_node("Identity", ["x"], ["y"], name="ident")],
                        TensorProto.STRING)


def uint8_input(d: Path) -> Path:
    return _typed_input(d, "uint8_input", TensorProto.UINT8,
                        [helper.make_node("Cast", ["x"], ["f"], name="cast", to=F),
                         helper.make_node("Relu", ["f"], ["y"], name="relu")], F)


def scalar_input(d: Path) -> Path:
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"], name="mul")], "g",
                          [helper.make_tensor_value_info("x", F, [])],
                          [helper.make_tensor_value_info("y", F, [])], [two])
    return _save(_model(g), d / "scalar_input.onnx")


def shared_symbolic(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("a", F, ["batch", 4]),
                           helper.make_tensor_value_info("b", F, ["batch", 4])],
                          [helper.make_tensor_value_info("y", F, ["batch", 4])])
    return _save(_model(g), d / "shared_symbolic.onnx")


def odd_dims(d: Path) -> Path:
    x = helper.make_tensor_value_info("x", F, [1, 4])
    x.type.tensor_type.shape.dim[0].ClearField("dim_value")
    x.type.tensor_type.shape.dim[0].dim_param = ""
    x.type.tensor_type.shape.dim[1].dim_value = -1
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x],
                          [helper.make_tensor_value_info("y", F, None)])
    return _save(_model(g), d / "odd_dims.onnx")


def opset22(d: Path) -> Path:
    g = _conv_graph()
    g.node.append(helper.make_node("Selu", ["y"], ["z"], name="selu"))  # Selu-22, Conv-22
    g.output[0].CopyFrom(helper.make_tensor_value_info("z", F, [1, 4, 8, 8]))
    return _save(_model(g, opset=[helper.make_opsetid("", 22)], ir=10), d / "opset22.onnx")


def ml_domain(d: Path) -> Path:
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Normalizer", ["r"], ["y"], name="normalizer", domain="ai.onnx.ml",
                          norm="L2")], "g",
        [helper.make_tensor_value_info("x", F, [2, 4])],
        [helper.make_tensor_value_info("y", F, [2, 4])])
    return _save(_model(g, opset=OPSET + [helper.make_opsetid("ai.onnx.ml", 3)]),
                 d / "ml_domain.onnx")


def custom_domain(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("FancyOp", ["r"], ["y"], name="fancy",
                                            domain="com.example", alpha=0.5)], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    return _save(_model(g, opset=OPSET + [helper.make_opsetid("com.example", 1)]),
                 d / "custom_domain.onnx")


def local_function(d: Path) -> Path:
    fn = helper.make_function(
        "local.fn", "SwishLike", ["a"], ["b"],
        [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["b"])],
        [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("SwishLike", ["x"], ["h"], name="swish",
                                            domain="local.fn"),
                           helper.make_node("Relu", ["h"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    m = _model(g, opset=OPSET + [helper.make_opsetid("local.fn", 1)])
    m.functions.append(fn)
    return _save(m, d / "local_function.onnx")


def if_outer_scope(d: Path) -> Path:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")],
                               "then", [], [helper.make_tensor_value_info("t", F, [1, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")],
                               "else", [], [helper.make_tensor_value_info("e", F, [1, 4])])
    g = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
         helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        "g", [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    return _save(_model(g), d / "if_outer_scope.onnx")


def loop(d: Path) -> Path:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"], name="body_add")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", F, [1, 4])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [1, 4])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)], "g",
        [helper.make_tensor_value_info("x", F, [1, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4])],
        [numpy_helper.from_array(np.array(3, np.int64), "trip"),
         numpy_helper.from_array(np.array(True), "cond")])
    return _save(_model(g), d / "loop.onnx")


def wrong_value_info(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                           helper.make_node("Sigmoid", ["a"], ["y"], name="sig")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    g.value_info.append(helper.make_tensor_value_info("a", F, [1, 7, 2]))
    return _save(_model(g), d / "wrong_value_info.onnx")


def fp16_model(d: Path) -> Path:
    H = TensorProto.FLOAT16
    w = numpy_helper.from_array(np.random.RandomState(1).randn(4, 4).astype(np.float16), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
                           helper.make_node("Relu", ["m"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", H, [2, 4])],
                          [helper.make_tensor_value_info("y", H, [2, 4])], [w])
    return _save(_model(g), d / "fp16_model.onnx")


def bf16_initializers(d: Path) -> Path:
    vals = np.random.RandomState(2).randn(4, 4).astype(np.float32)
    w = helper.make_tensor("w_bf16", TensorProto.BFLOAT16, [4, 4],
                           (vals.view(np.uint32) >> 16).astype(np.uint16).tobytes(), raw=True)
    g = helper.make_graph([helper.make_node("Cast", ["w_bf16"], ["w"], name="cast_w", to=F),
                           helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")], "g",
                          [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4])], [w])
    return _save(_model(g), d / "bf16_initializers.onnx")


def many_ext_files(d: Path) -> Path:
    rng = np.random.RandomState(3)
    nodes, inits, prev = [], [], "x"
    for i in range(40):
        inits.append(numpy_helper.from_array(rng.randn(8, 8).astype(np.float32) * 0.3, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"h{i}"], name=f"mm{i}"))
        prev = f"h{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 8])], inits)
    m = _model(g)
    _externalize(m, {f"w{i}": f"shards/part{i:03d}.bin" for i in range(40)}, d / "many_ext")
    return _save(m, d / "many_ext" / "model.onnx")


def unicode_names(d: Path) -> Path:
    w = numpy_helper.from_array(np.ones((4,), np.float32), "权重 w")
    g = helper.make_graph(
        [helper.make_node("Add", ["输入 x", "权重 w"], ["中间 ü"], name="加法 node/1"),
         helper.make_node("Relu", ["中间 ü"], ["输出 y"], name="relu é 2")], "g",
        [helper.make_tensor_value_info("输入 x", F, [1, 4])],
        [helper.make_tensor_value_info("输出 y", F, [1, 4])], [w])
    return _save(_model(g), d / "dír mit Leer 空格" / "模型 ü.onnx")


def output_is_initializer(d: Path) -> Path:
    c = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 4), "const_out")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4]),
                           helper.make_tensor_value_info("const_out", F, [1, 4])], [c])
    return _save(_model(g), d / "output_is_initializer.onnx")


def no_inputs(d: Path) -> Path:
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], name="const",
                          value=numpy_helper.from_array(np.ones((2, 2), np.float32))),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g", [],
        [helper.make_tensor_value_info("y", F, [2, 2])])
    return _save(_model(g), d / "no_inputs.onnx")


def optional_empty_input(d: Path) -> Path:
    mx = numpy_helper.from_array(np.array(0.5, np.float32), "max")
    g = helper.make_graph([helper.make_node("Clip", ["x", "", "max"], ["y"], name="clip")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])], [mx])
    return _save(_model(g), d / "optional_empty_input.onnx")


def input_is_also_output(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4]),
                           helper.make_tensor_value_info("x", F, [1, 4])])
    return _save(_model(g), d / "input_is_also_output.onnx")


def _empty_tensor(name: str, dtype: int, dims: List[int]) -> onnx.TensorProto:
    """An initializer with a shape and no data (what weightless exports write)."""
    t = onnx.TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    return t


def weightless(d: Path) -> Path:
    g = _conv_graph()
    del g.initializer[:]
    g.initializer.extend([_empty_tensor("conv.w", F, [4, 3, 3, 3]),
                          _empty_tensor("conv.b", F, [4])])
    return _save(_model(g), d / "weightless.onnx")


def weightless_qdq(d: Path) -> Path:
    I8 = TensorProto.INT8
    inits = [_empty_tensor("w_q", I8, [4, 3, 3, 3]), _empty_tensor("w_s", F, []),
             _empty_tensor("w_z", I8, []), _empty_tensor("x_s", F, []),
             _empty_tensor("x_z", I8, [])]
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "x_s", "x_z"], ["xq"], name="qx"),
         helper.make_node("DequantizeLinear", ["xq", "x_s", "x_z"], ["xd"], name="dqx"),
         helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["wd"], name="dqw"),
         helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], inits)
    return _save(_model(g), d / "weightless_qdq.onnx")


def sparse_initializer(d: Path) -> Path:
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "w")  # (its name)
    indices = numpy_helper.from_array(np.array([1, 3], np.int64), "w_indices")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["s"], name="add"),
                           helper.make_node("Relu", ["s"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    g.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [4]))
    return _save(_model(g), d / "sparse_initializer.onnx")


def zero_size_dim(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [0, 4])],
                          [helper.make_tensor_value_info("y", F, [0, 4])])
    return _save(_model(g), d / "zero_size_dim.onnx")


def unshaped_input(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, None)],
                          [helper.make_tensor_value_info("y", F, None)])
    return _save(_model(g), d / "unshaped_input.onnx")


def bf16_compute(d: Path) -> Path:
    """An Erf computed in BF16: onnxruntime's CPU build has no such kernel (the model's
    fault, not the inputs')."""
    B = TensorProto.BFLOAT16
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["xb"], name="to_bf16", to=B),
                           helper.make_node("Erf", ["xb"], ["eb"], name="erf"),
                           helper.make_node("Cast", ["eb"], ["y"], name="to_fp32", to=F)], "g",
                          [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4])])
    return _save(_model(g), d / "bf16_compute.onnx")


def old_opset(d: Path) -> Path:
    """Add-6 (opset 6): onnxruntime has no kernel that old; TensorRT refuses opset < 7 too."""
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 4])])
    return _save(_model(g, opset=[helper.make_opsetid("", 6)], ir=3), d / "old_opset.onnx")


def sequence_output(d: Path) -> Path:
    """A graph whose output is a sequence of tensors of different shapes."""
    split = numpy_helper.from_array(np.array([1, 3], np.int64), "split")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                           helper.make_node("SplitToSequence", ["r", "split"], ["seq"],
                                            name="to_seq", axis=1)], "g",
                          [helper.make_tensor_value_info("x", F, [2, 4])],
                          [helper.make_tensor_value_info("seq", onnx.TensorProto.UNDEFINED,
                                                         None)], [split])
    g.output[0].type.CopyFrom(helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(F, [2, None])))
    return _save(_model(g), d / "sequence_output.onnx")


def mvn(d: Path) -> Path:
    g = helper.make_graph([helper.make_node("MeanVarianceNormalization", ["x"], ["m"],
                                            name="mvn"),
                           helper.make_node("Relu", ["m"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", F, [1, 3, 4, 4])])
    return _save(_model(g, opset=[helper.make_opsetid("", 13)]), d / "mvn.onnx")


def roi_align(d: Path) -> Path:
    """Conv -> RoiAlign: TensorRT-RTX's importer needs its ROIAlign plugin, which cannot be
    created without a usable GPU (the machine's fault on a CPU machine)."""
    w = numpy_helper.from_array(np.full((2, 3, 1, 1), 0.5, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["feat"], name="/conv"),
         helper.make_node("RoiAlign", ["feat", "rois", "batch_indices"], ["pooled"],
                          name="/roi", output_height=2, output_width=2, sampling_ratio=2)],
        "roi", [helper.make_tensor_value_info("image", F, [1, 3, 8, 8]),
                helper.make_tensor_value_info("rois", F, [2, 4]),
                helper.make_tensor_value_info("batch_indices", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("pooled", F, [2, 2, 2, 2])], [w])
    return _save(_model(g, opset=[helper.make_opsetid("", 16)]), d / "roi_align.onnx")


MAKERS: Dict[str, Callable[[Path], Path]] = {f.__name__: f for f in (
    init_as_input, ext_subfolder, ext_outside, ext_missing, truncated, zero_node, unused_input,
    unnamed_nodes, dup_node_names, bool_input, int64_input, string_input, uint8_input,
    scalar_input, shared_symbolic, odd_dims, opset22, ml_domain, custom_domain, local_function,
    if_outer_scope, loop, wrong_value_info, fp16_model, bf16_initializers, many_ext_files,
    unicode_names, output_is_initializer, no_inputs, optional_empty_input,
    input_is_also_output, weightless, weightless_qdq, sparse_initializer, zero_size_dim,
    unshaped_input, bf16_compute, old_opset, sequence_output, mvn, roi_align)}


def make_zoo(folder: Path) -> Dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {name: make(folder) for name, make in MAKERS.items()}
