"""A Q/DQ (INT8) candidate's advice names only nodes whose exclusion changes the model. A float
node that shares the DQ in front of a quantized op (a ReduceMax reading the same DQ as a
MatMul, pointnet) has no Q/DQ of its own: keeping it in FP32 changed nothing (rel 0.268 ->
0.269). Its error is the quantized reader's rounding, so the advice names that reader, the
way an FP16 culprit already in FP32 names where its input is rounded (`rounding.CandidateTypes`).
Real onnxruntime runs and quantizer, a model made with onnx.helper."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from workbench import compare
from workbench.core import qdq
from workbench.compare.layer_compare import find_exclusions
from workbench.precision.transform import convert


def shared_dq(path):
    """x -> /fc0 -> /fc1 -> /relu -> {/fc2 -> y, /rmax -> m}: the quantizer puts one Q/DQ on r for
    /fc2; /rmax reads that DQ too. Calibration data with outliers: entropy clips r's range,
    so the largest values (what ReduceMax picks) come out clipped."""
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="/fc0"),
         helper.make_node("MatMul", ["h0", "w1"], ["h"], name="/fc1"),
         helper.make_node("Relu", ["h"], ["r"], name="/relu"),
         helper.make_node("MatMul", ["r", "w2"], ["y"], name="/fc2"),
         helper.make_node("ReduceMax", ["r"], ["m"], name="/rmax", axes=[1], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("m", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor("w0", TensorProto.FLOAT, [16, 16], np.eye(16).ravel().tolist()),
         helper.make_tensor("w1", TensorProto.FLOAT, [16, 32],
                            (rng.standard_normal(512) / 4).tolist()),
         helper.make_tensor("w2", TensorProto.FLOAT, [32, 4],
                            (rng.standard_normal(128) / 4).tolist())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    x = rng.standard_normal((64, 16)).astype(np.float32)
    x[::16] *= 8
    return path, {"x": x}


def test_a_float_node_sharing_a_dq_is_advised_as_the_quantized_reader(tmp_path):
    model, feed = shared_dq(tmp_path / "m.onnx")
    q = convert(str(model), "int8", calibration=[feed], measure=False).proto
    # /rmax reads a DQ output, but the Q/DQ is /fc2's: it is no quantized node
    assert any(n.name == "/rmax" and n.input[0].endswith("DequantizeLinear_Output")
               for n in q.graph.node)
    assert qdq.quantized_nodes(q) == {"/fc0", "/fc1", "/fc2"} and qdq.bystanders(q) == {"/rmax"}
    rep = compare.layerwise(model, q, [feed])
    assert not rep.outputs_pass
    (rmax,) = [t for t in rep.culprits() if t.node == "/rmax"]
    assert rmax.added > 0.1
    assert rep.already_fp32(rmax) and rep.to_exclude(rmax) == ["/fc2"]
    assert "/rmax" not in rep.suggested_exclusions()
    (f,) = [f for f in rep.findings if f.code == "precision-loss" and f.nodes[0] == "/rmax"]
    assert "not quantized in the candidate" in f.message and "rounding of /fc2" in f.message
    assert "--exclude /fc2 " in f.hint and "--exclude /rmax" not in f.hint
    # the advice changes the model: with /fc2 kept, /rmax reads r in float and adds nothing
    kept = convert(str(model), "int8", calibration=[feed], exclude_nodes=["/fc2"],
                   measure=False).proto
    after = compare.layerwise(model, kept, [feed])
    m_before = next(t for t in rep.tensors if t.tensor == "m")
    m_after = next(t for t in after.tensors if t.tensor == "m")
    assert m_after.added < 0.01 < m_before.added
    assert "/rmax" not in {t.node for t in after.culprits()}


def test_the_int8_search_never_spends_a_round_on_an_unquantized_node(tmp_path):
    """Two culprits a round: before, round 1 kept /fc2 and /rmax (the latter a no-op)."""
    model, feed = shared_dq(tmp_path / "m.onnx")
    s = find_exclusions(str(model), "int8", calibration=[feed], feeds=[feed], per_round=2)
    assert len(s.rounds) >= 2 and s.rounds[1]["excluded"][0] == "/fc2"
    assert all("/rmax" not in r["excluded"] for r in s.rounds)
