"""One reading of a model's Q/DQ nodes for every command (`workbench.qdq`): the nodes they
quantize and their precision, read from the graph's structure and types, not from the tensor
names one quantizer writes."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench import qdq
from workbench.build.engine import explicit_quantization_flags
from workbench.comparison import infer_precision

SAMPLES = Path(__file__).resolve().parents[1] / "sample_models"


def _qdq_conv(zp_type: int, zp_as_constant: bool) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(W through its own Q/DQ) -> Relu, tensors named as NVIDIA ModelOpt
    names them (`input_quantizer`, `weight_quantizer`), not as onnxruntime does."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "conv.weight")
    scale = numpy_helper.from_array(np.array(0.02, np.float32), "amax_scale")
    zp_val = helper.make_tensor("zp", zp_type, [], [0])
    nodes, inits = [], [w, scale]
    if zp_as_constant:
        nodes.append(helper.make_node("Constant", [], ["zp"], name="zp_const", value=zp_val))
    else:
        inits.append(zp_val)
    nodes += [
        helper.make_node("QuantizeLinear", ["x", "amax_scale", "zp"], ["x_q"],
                         name="conv/input_quantizer/QuantizeLinear"),
        helper.make_node("DequantizeLinear", ["x_q", "amax_scale", "zp"], ["x_dq"],
                         name="conv/input_quantizer/DequantizeLinear"),
        helper.make_node("QuantizeLinear", ["conv.weight", "amax_scale", "zp"], ["w_q"],
                         name="conv/weight_quantizer/QuantizeLinear"),
        helper.make_node("DequantizeLinear", ["w_q", "amax_scale", "zp"], ["w_dq"],
                         name="conv/weight_quantizer/DequantizeLinear"),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["c"], name="conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu/Relu"),
    ]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_the_quantized_nodes_are_read_from_the_graph_not_from_tensor_names():
    m = _qdq_conv(TensorProto.INT8, zp_as_constant=False)
    assert qdq.quantized_nodes(m) == {"conv/Conv"}
    assert qdq.quantized_nodes(m.graph) == {"conv/Conv"}  # a graph is read as its model
    assert qdq.qdq_precisions(m) == ["int8"]
    assert infer_precision(m) == "int8"
    assert explicit_quantization_flags(m.graph) == ["INT8"]


def test_an_fp8_zero_point_held_by_a_constant_makes_the_model_fp8_everywhere():
    """compare inferred INT8 for this model (it read zero points from initializers only)
    while build set the FP8 flag: both now read the same."""
    m = _qdq_conv(TensorProto.FLOAT8E4M3FN, zp_as_constant=True)
    assert qdq.qdq_precisions(m) == ["fp8"]
    assert infer_precision(m) == "fp8"
    assert explicit_quantization_flags(m.graph) == ["FP8"]


def test_a_qdq_without_zero_point_is_uint8_and_a_float_model_has_no_qdq():
    m = _qdq_conv(TensorProto.INT8, zp_as_constant=False)
    for n in m.graph.node:
        if n.op_type in qdq.QDQ_OPS:
            del n.input[2:]
    assert qdq.qdq_precisions(m) == ["int8"] and qdq.quantized_nodes(m) == {"conv/Conv"}
    plain = onnx.load(str(SAMPLES / "resnet_tiny.onnx"))
    assert qdq.qdq_precisions(plain) == [] and qdq.quantized_nodes(plain) == set()
    assert infer_precision(plain) == "fp32"


def test_precision_reports_the_nodes_it_quantized_the_way_compare_judges_them():
    """`precision --to int8`'s report and compare's culprit set are one reading."""
    from workbench.precision import convert

    q = convert(SAMPLES / "resnet_tiny.onnx", "int8",
                calibration=str(SAMPLES / "calib" / "resnet_tiny.npz"))
    nodes = qdq.quantized_nodes(q.proto)
    ops = {n.name: n.op_type for n in q.proto.graph.node}
    assert nodes and {ops[n] for n in nodes} <= {"Conv", "Gemm", "MatMul", "Add",
                                                 "GlobalAveragePool", "MaxPool", "Relu",
                                                 "Flatten", "AveragePool", "Concat"}
    assert sorted(nodes) == q.report["quantized_nodes"]


def test_a_concat_between_qdq_pairs_sends_the_exclusion_to_its_quantized_reader():
    """compare blamed a Concat of a Q/DQ segmentation head ('--exclude /Concat_2'); precision
    then warned the exclusion had no effect and named the reader. compare names the reader."""
    from workbench.comparison import compare_tensor
    from workbench.compare.layer_compare import LayerwiseReport, TensorError, divergence_findings

    s = numpy_helper.from_array(np.array(0.02, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    w = numpy_helper.from_array(np.ones((2, 6, 1, 1), np.float32), "w")
    nodes = []
    for x in ("a", "b"):
        nodes += [helper.make_node("QuantizeLinear", [x, "s", "z"], [f"{x}_q"], name=f"{x}/Q"),
                  helper.make_node("DequantizeLinear", [f"{x}_q", "s", "z"], [f"{x}_dq"],
                                   name=f"{x}/DQ")]
    nodes += [helper.make_node("Concat", ["a_dq", "b_dq"], ["cat"], name="/Concat_2", axis=1),
              helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["cat_q"], name="cat/Q"),
              helper.make_node("DequantizeLinear", ["cat_q", "s", "z"], ["cat_dq"], name="cat/DQ"),
              helper.make_node("Conv", ["cat_dq", "w"], ["y"], name="/cls/Conv")]
    vi = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 4, 4]) for x in ("a", "b")]
    g = helper.make_graph(nodes, "g", vi, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                         None)], [s, z, w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert qdq.quantized_nodes(m) == {"/Concat_2", "/cls/Conv"}
    assert qdq.requantized_readers(m) == {"/Concat_2": ["/cls/Conv"]}
    ref = [np.linspace(0, 1, 96, dtype=np.float32)]
    t = TensorError.of(compare_tensor("cat", ref, [ref[0] + 0.1], 0.01, 0.01), "/Concat_2",
                       "Concat", 0.2)
    rep = LayerwiseReport("onnxruntime", "onnxruntime", 0.01, 0.01, 1, tensors=[t],
                          precision="int8", quantized_nodes=qdq.quantized_nodes(m),
                          requantized=qdq.requantized_readers(m))
    assert rep.suggested_exclusions() == ["/cls/Conv"]
    (f,) = [x for x in divergence_findings(rep) if x.code == "precision-loss"]
    assert "--exclude /cls/Conv" in f.hint and "--exclude /Concat_2" not in f.hint
    assert "computes nothing of its own" in f.message
