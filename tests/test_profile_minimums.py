"""The default profile's min follows the graph's lower bounds (TopK's K, a kernel without
padding, a constant Gather index), and says why; count axes of int inputs are not token axes;
index inputs read through Gather/Unsqueeze stay within what they index at the min."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from workbench.runtime.equivalence import make_inputs_at
from workbench.core.inputs import is_item_count
from workbench.precision.minsizes import static_minimums
from workbench.precision.profiles import (Profile, default_profile, default_profile_finding,
                                          run_at_profiles)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def pointnet_like(k: int = 16):
    """points [num_points, 3] -> MatMul -> Squeeze -> TopK(K) along num_points."""
    w = numpy_helper.from_array(np.ones((3, 1), np.float32), "w")
    kk = numpy_helper.from_array(np.array([k], np.int64), "k")
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    return _model(
        [helper.make_node("MatMul", ["points", "w"], ["s"], name="/score/MatMul"),
         helper.make_node("Squeeze", ["s", "ax"], ["sq"], name="/Squeeze"),
         helper.make_node("TopK", ["sq", "k"], ["vals", "idx"], name="/TopK", axis=-1)],
        [helper.make_tensor_value_info("points", TensorProto.FLOAT, ["num_points", 3])],
        [helper.make_tensor_value_info("vals", TensorProto.FLOAT, [k])], [w, kk, ax])


def test_topk_raises_the_default_min_and_says_why():
    m = pointnet_like(16)
    assert static_minimums(m) == {"num_points": (16, "/TopK takes the top 16 along it")}
    prof, rules = default_profile(m)
    assert prof["points"] == ((16, 3), (128, 3), (1024, 3))
    assert rules["num_points"].startswith("16..128..1024: a count of items")
    assert rules["num_points"].endswith("; min 16: /TopK takes the top 16 along it")
    assert "min 16: /TopK" in default_profile_finding(prof, rules).message
    # onnxruntime runs the model at every shape of the raised profile ...
    assert run_at_profiles(m, [prof]) == ([], 3)
    # ... and refuses the min of 1 the profile had before, naming the node
    low = Profile({"points": ((1, 3), (128, 3), (1024, 3))})
    cannot, _ = run_at_profiles(m, [low])
    assert [(f.code, f.nodes, f.extra["at"]) for f in cannot] == \
        [("profile-cannot-run", ["/TopK"], "min")]


def test_topk_larger_than_opt_moves_opt_and_max():
    m = pointnet_like(300)
    prof, rules = default_profile(m)
    assert prof["points"] == ((300, 3), (300, 3), (1024, 3))
    assert "min 300: /TopK takes the top 300 along it" in rules["num_points"]


def test_conv_without_padding_and_constant_gather_bound_a_sequence_axis():
    """features [batch, time, 8] -> Transpose -> Conv k=5, no padding: time >= 5; a Gather of
    frame 9 along time: time >= 10 (the larger wins, and is the reason given)."""
    w = numpy_helper.from_array(np.ones((8, 8, 5), np.float32), "w")
    nine = numpy_helper.from_array(np.array(9, np.int64), "nine")
    m = _model(
        [helper.make_node("Transpose", ["features"], ["t"], name="/T", perm=[0, 2, 1]),
         helper.make_node("Conv", ["t", "w"], ["c"], name="/conv/Conv"),
         helper.make_node("Gather", ["features", "nine"], ["g"], name="/pick", axis=1)],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "time", 8])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, None)], [w, nine])
    mins = static_minimums(m)
    assert mins == {"time": (10, "/pick reads index 9 along it")}
    prof, rules = default_profile(m)
    assert prof["features"] == ((1, 10, 8), (1, 128, 8), (16, 512, 8))
    assert rules["time"] == ("10..128..512: a sequence axis (named so); "
                             "min 10: /pick reads index 9 along it")
    assert rules["batch"].startswith("1..1..16")  # (the batch keeps its range)
    assert run_at_profiles(m, [prof]) == ([], 3)
    # the Conv alone: its kernel is the bound; padding 2+2 makes any size run
    m.graph.node.pop()
    m.graph.output.pop()
    assert static_minimums(m) == \
        {"time": (5, "/conv/Conv slides a 5-wide kernel along it without padding")}
    m.graph.node[1].attribute.append(helper.make_attribute("pads", [2, 2]))
    assert static_minimums(m) == {}


def test_unnamed_dynamic_dim_is_keyed_by_input_and_axis():
    m = pointnet_like(16)
    m.graph.input[0].type.tensor_type.shape.dim[0].ClearField("dim_param")
    assert static_minimums(m) == {("points", 0): (16, "/TopK takes the top 16 along it")}
    prof, _ = default_profile(m)
    assert prof["points"][0] == (16, 3)


def gnn_like():
    """x [num_nodes, 4], edge_index int64 [2, num_edges]: dst = edge_index[1] -> Unsqueeze ->
    ScatterElements into x along num_nodes (as torch's scatter_add exports)."""
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    return _model(
        [helper.make_node("Gather", ["edge_index", "one"], ["dst"], name="node_select", axis=0),
         helper.make_node("Unsqueeze", ["dst", "ax"], ["ind"], name="node_unsqueeze"),
         helper.make_node("Cast", ["ind"], ["upd"], name="node_cast", to=TensorProto.FLOAT),
         helper.make_node("ScatterElements", ["x", "ind", "upd"], ["y"],
                          name="node_scatter_add", axis=0, reduction="add")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["num_nodes", 1]),
         helper.make_tensor_value_info("edge_index", TensorProto.INT64, [2, "num_edges"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["num_nodes", 1])], [one, ax])


def test_count_axis_of_an_int_input_is_not_a_token_axis():
    assert is_item_count("num_edges") and is_item_count("n_nodes") and \
        is_item_count("box_count")
    assert not any(is_item_count(d) for d in ("num_tokens", "seq_len", "batch", "s0", None))
    prof, rules = default_profile(gnn_like())
    assert prof["edge_index"] == ((2, 1), (2, 128), (2, 1024))
    assert rules["num_edges"] == \
        "1..128..1024: a count of items (num_edges: named so), not a token axis"
    assert "token axis" not in rules["num_nodes"]


def test_index_read_through_gather_and_unsqueeze_stays_in_range_at_the_min():
    """At num_nodes 1 the only valid node index is 0: the sample inputs must say so (the model
    runs there), not index node 1 and report the profile's min as one it cannot run."""
    m = gnn_like()
    feed = make_inputs_at(m, {"x": (1, 1), "edge_index": (2, 7)})
    assert feed["edge_index"].shape == (2, 7) and not feed["edge_index"].any()
    feed = make_inputs_at(m, {"x": (5, 1), "edge_index": (2, 64)}, seed=3)
    assert 0 <= feed["edge_index"].min() and feed["edge_index"].max() <= 4
    assert feed["edge_index"].max() > 1  # (the whole range, not only 0 and 1)
    prof, _ = default_profile(m)
    assert run_at_profiles(m, [prof]) == ([], 3)
