"""One reading of a model's Q/DQ nodes for every command (`workbench.core.qdq`): the nodes they
quantize and their precision, read from the graph's structure and types, not from the tensor
names one quantizer writes."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from workbench.core import qdq
from workbench.engines.engine import explicit_quantization_flags
from workbench.runtime.comparison import infer_precision

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
    from workbench.runtime.comparison import compare_tensor
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


def test_a_relu_folded_into_its_conv_is_not_compared_under_the_name_it_left(tmp_path):
    """onnxruntime's quantizer drops a Relu before a Q (the Q clips) and names the Conv's
    output as the Relu's was: compare matched pre-Relu against post-Relu values ('rel 1.32' as
    the first divergence). A name another op took over is said, not compared; a rewrite that
    makes the name with a new op (a decomposition) is still compared."""
    from workbench import compare

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)

    def model(nodes):
        return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                                 opset_imports=[helper.make_opsetid("", 17)])

    ref = model([helper.make_node("Conv", ["x", "w"], ["c"], name="/conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["/relu_out"], name="/relu"),
                 helper.make_node("Sigmoid", ["/relu_out"], ["s"], name="/sig"),
                 helper.make_node("Abs", ["s"], ["y"], name="/abs")])
    folded = model([helper.make_node("Conv", ["x", "w"], ["/relu_out"], name="/conv",
                                     pads=[1, 1, 1, 1]),
                    helper.make_node("Relu", ["/relu_out"], ["r2"], name="/relu2"),
                    helper.make_node("Sigmoid", ["r2"], ["s"], name="/sig"),
                    helper.make_node("Abs", ["s"], ["y"], name="/abs")])
    data = tmp_path / "x.npz"
    np.savez(data, x=rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    rep = compare.layerwise(ref, folded, calibration=str(data))
    assert "/relu_out" not in {t.tensor for t in rep.tensors}
    (f,) = [x for x in rep.findings if x.code == "other-producer"]
    assert "'/relu_out': Relu in the reference, Conv in the candidate" in f.message
    assert rep.outputs_pass and "s" in {t.tensor for t in rep.tensors}
    # a decomposition: Sigmoid rewritten as 1 / (1 + exp(-x)), the last node (Reciprocal)
    # making the name: the same values, compared
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    dec = model([helper.make_node("Conv", ["x", "w"], ["c"], name="/conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["/relu_out"], name="/relu"),
                 helper.make_node("Neg", ["/relu_out"], ["n"], name="/neg"),
                 helper.make_node("Exp", ["n"], ["e"], name="/exp"),
                 helper.make_node("Add", ["e", "one"], ["d"], name="/add"),
                 helper.make_node("Reciprocal", ["d"], ["s"], name="/sig"),
                 helper.make_node("Abs", ["s"], ["y"], name="/abs")])
    dec.graph.initializer.append(one)
    rep = compare.layerwise(ref, dec, calibration=str(data))
    assert "s" in {t.tensor for t in rep.tensors} and not [
        x for x in rep.findings if x.code == "other-producer"]
