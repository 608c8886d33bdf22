"""Each recipe on real models (samples, Polygraphy fixtures), including a refusal per recipe.
Parser verdicts come from the real TensorRT-RTX 1.7 parser through workbench.support.checker.check."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from conftest import POLY, SAMPLES
from surgery_models import (bloater, det4, nonzero_dynamic, qdq_conv_runtime_input,
                            qdq_uint8_128, resnet_baked_batch, single_op_cases)
from workbench.runtime.equivalence import run, verify
from workbench.core.errors import WorkbenchError
from workbench.surgery.recipes import get_recipe, list_recipes
from workbench.surgery.changes import apply_recipe


def load(name):
    return onnx.load(str(POLY / name))


def rtx(proto, tmp_path, name="m.onnx"):
    from workbench.support.checker import check

    p = tmp_path / name
    onnx.save(proto, str(p))
    return check(str(p), backend="tensorrt-rtx")


def test_registry_lists_every_recipe_with_semantics_flag():
    names = {r["name"]: r for r in list_recipes()}
    for want in ("fold_constants", "cleanup", "infer_shapes", "set_input_shapes", "remove_node",
                 "rename_duplicates", "extract_subgraph", "insert_cast", "decompose",
                 "replace_with_plugin", "symmetric_qdq"):
        assert want in names
    assert names["fold_constants"]["preserves_semantics"] is True
    assert names["insert_cast"]["preserves_semantics"] is False


# ------------------------------------------------------------------ fold constants
def test_fold_constants_folds_const_foldable():
    m = load("const_foldable.onnx")
    before = m.SerializeToString()
    ok, reason, nodes = get_recipe("fold_constants").precondition(m)
    assert ok and len(nodes) == 2 and "constant" in reason
    ch = apply_recipe(m, "fold_constants")
    assert [n.op_type for n in ch.proto.graph.node] == ["Add"]
    assert ch.verification.status == "equivalent" and ch.verification.max_abs_diff == 0
    assert len(ch.diff["nodes_removed"]) == 2
    assert m.SerializeToString() == before  # the input model is never modified


def test_fold_constants_refuses_when_nothing_is_constant():
    ok, reason, _ = get_recipe("fold_constants").precondition(load("conv.onnx"))
    assert not ok and "nothing to fold" in reason


def test_fold_constants_threshold_keeps_bloater_small():
    m = bloater(1024)  # Expand/Tile would make a 16 MiB constant
    size = m.ByteSize()
    ok, reason, nodes = get_recipe("fold_constants").precondition(m)
    assert ok and "small_add" in nodes and "stay unfolded" in reason and "tile" in reason
    ch = apply_recipe(m, "fold_constants")
    assert ch.proto.ByteSize() < size + 1024  # only shape annotations are added
    init_bytes = lambda p: sum(t.ByteSize() for t in p.graph.initializer)  # noqa: E731
    assert init_bytes(ch.proto) <= init_bytes(m)
    assert any(n.op_type == "Tile" for n in ch.proto.graph.node)
    assert ch.verification.equivalent
    grown = apply_recipe(m, "fold_constants", {"size_threshold": 0})  # 0 = no limit
    assert grown.proto.ByteSize() > 10 * size
    only_big = onnx.ModelProto()
    only_big.CopyFrom(m)
    del only_big.graph.node[3:]
    only_big.graph.node[2].output[0] = "out"
    ok, reason, _ = get_recipe("fold_constants").precondition(only_big)
    assert not ok and "bloat" in reason


# ------------------------------------------------------------------ cleanup, infer shapes
def test_cleanup_removes_dead_node_and_refuses_clean_graph():
    ch = apply_recipe(load("cleanable.onnx"), "cleanup")
    assert "G" in ch.diff["nodes_removed"] and ch.verification.equivalent
    ok, reason, _ = get_recipe("cleanup").precondition(load("conv.onnx"))
    assert not ok and "nothing to clean" in reason


def test_infer_shapes_fills_value_info_then_refuses():
    m = load("residual_block.onnx")
    ch = apply_recipe(m, "infer_shapes")
    vis = {v.name: v for v in ch.proto.graph.value_info}
    assert "gpu_0/pool1_1" in vis
    dims = [d.dim_value for d in vis["gpu_0/pool1_1"].type.tensor_type.shape.dim][1:]
    assert dims == [64, 56, 56]
    ok, reason, _ = get_recipe("infer_shapes").precondition(ch.proto)
    assert not ok and "already" in reason


# ------------------------------------------------------------------ input shapes / dynamic batch
def test_dynamic_batch_rewrites_baked_reshape(tmp_path):
    m = resnet_baked_batch()
    ok, reason, nodes = get_recipe("set_input_shapes").precondition(m, batch="N")
    assert ok and nodes == ["/flatten/Flatten"], reason
    ch = apply_recipe(m, "set_input_shapes", {"batch": "N"})
    assert ch.verification.equivalent and ch.verification.input_shapes["input"][0] == 1
    dim0 = ch.proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim0.dim_param == "N"
    x = np.random.default_rng(1).standard_normal((3, 3, 32, 32)).astype(np.float32)
    out = run(ch.proto, {"input": x})["logits"]
    assert out.shape == (3, 10)
    ref = np.concatenate([run(m, {"input": x[i:i + 1]})["logits"] for i in range(3)])
    assert np.max(np.abs(out - ref)) < 1e-5
    # the real parser takes the dynamic-batch result
    assert rtx(ch.proto, tmp_path).supported


def test_set_input_shapes_static_override_and_refusals():
    m = load("dynamic_identity.onnx")
    ch = apply_recipe(m, "set_input_shapes", {"shapes": {"X": "1x2x4x6"}})
    assert [d.dim_value for d in ch.proto.graph.input[0].type.tensor_type.shape.dim] == [1, 2, 4, 6]
    assert ch.verification.equivalent and ch.verification.input_shapes["X"] == [1, 2, 4, 6]
    ok, reason, _ = get_recipe("set_input_shapes").precondition(ch.proto, shapes={"X": "1x2x4x6"})
    assert not ok and "already" in reason
    with pytest.raises(WorkbenchError, match="no graph input named 'Y'"):
        get_recipe("set_input_shapes").precondition(m, shapes={"Y": "1x2"})
    with pytest.raises(WorkbenchError, match="rank"):
        get_recipe("set_input_shapes").precondition(m, shapes={"X": "1x2"})


# ------------------------------------------------------------------ remove node
def test_remove_identity_is_exact_and_multi_input_refused():
    ch = apply_recipe(load("cleanable.onnx"), "remove_node", {"node": "I"})
    assert ch.preserves_semantics and ch.verification.equivalent
    assert [o.name for o in ch.proto.graph.output] == ["i"]
    assert "I" in ch.diff["nodes_removed"]
    ok, reason, _ = get_recipe("remove_node").precondition(load("reducable.onnx"),
                                                          node="onnx_graphsurgeon_node_5")
    assert not ok and "input_index" in reason
    # a dtype-changing Cast cannot be bypassed
    ok, reason, _ = get_recipe("remove_node").precondition(load("loop.onnx"),
                                                          node="while_cond_158_while_Less__13")
    assert not ok and "dtype" in reason
    with pytest.raises(WorkbenchError, match="no node named"):
        get_recipe("remove_node").precondition(load("conv.onnx"), node="nope")


def test_remove_non_identity_changes_semantics_but_is_kept():
    ch = apply_recipe(load("needs_constraints.onnx"), "remove_node", {"node": "Sub"})
    assert not ch.preserves_semantics and ch.kept
    assert ch.verification.status == "different"


# ------------------------------------------------------------------ rename duplicates
def test_rename_duplicates_makes_dup_graph_parse(tmp_path):
    m = load("bad_graph_with_dup_value_info.onnx")
    before = rtx(m, tmp_path, "before.onnx")
    assert not before.supported
    ch = apply_recipe(m, "rename_duplicates")
    assert [i.name for i in ch.proto.graph.input] == ["inp"]
    assert rtx(ch.proto, tmp_path, "after.onnx").supported
    x = np.ones((4, 4), np.float32)
    assert np.allclose(run(ch.proto, {"inp": x})["add_out_0"], 2 * x)
    ok, reason, _ = get_recipe("rename_duplicates").precondition(load("conv.onnx"))
    assert not ok and "no duplicate" in reason


def test_rename_duplicate_node_and_tensor_names():
    m = load("reducable.onnx")
    m.graph.node[1].name = m.graph.node[0].name
    ch = apply_recipe(m, "rename_duplicates")
    names = [n.name for n in ch.proto.graph.node]
    assert len(set(names)) == len(names)
    assert ch.verification.status == "unverified" and "same node name" in ch.verification.reason
    x, y = np.array([1.5], np.float32), np.array([2.0], np.float32)
    out = run(ch.proto, {"X0": x, "Y0": y})
    assert out["identity_out_6"][0] == pytest.approx(3.5)


# ------------------------------------------------------------------ extract subgraph
def test_extract_subgraph_matches_original_intermediates():
    m = load("residual_block.onnx")
    ch = apply_recipe(m, "extract_subgraph", {"inputs": ["gpu_0/pool1_1"],
                                              "outputs": ["gpu_0/res2_0_branch1_bn_1"]})
    assert [n.op_type for n in ch.proto.graph.node] == ["Conv", "BatchNormalization"]
    assert ch.verification.status == "unverified"  # different inputs/outputs: not comparable
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    for t in ("gpu_0/pool1_1", "gpu_0/res2_0_branch1_bn_1"):
        probe.graph.output.append(onnx.helper.make_tensor_value_info(t, 1, None))
    ref = run(probe, {"gpu_0/data_0": x})
    got = run(ch.proto, {"gpu_0/pool1_1": ref["gpu_0/pool1_1"]})
    assert np.max(np.abs(got["gpu_0/res2_0_branch1_bn_1"] - ref["gpu_0/res2_0_branch1_bn_1"])) < 1e-5
    ok, reason, _ = get_recipe("extract_subgraph").precondition(
        m, inputs=["gpu_0/res2_0_branch2a_bn_1"], outputs=["gpu_0/res2_0_branch2c_bn_2"])
    assert not ok and "gpu_0/data_0" in reason


# ------------------------------------------------------------------ insert cast
def test_insert_cast_round_trip_reports_difference():
    m = load("conv.onnx")
    ch = apply_recipe(m, "insert_cast", {"tensor": "a", "to": "float16", "round_trip": True})
    assert ch.kept and not ch.preserves_semantics
    assert ch.verification.status == "different" and 1e-4 < ch.verification.max_abs_diff < 0.1
    assert sorted(n.op_type for n in ch.proto.graph.node) == ["Cast", "Cast", "Conv"]
    ok, reason, _ = get_recipe("insert_cast").precondition(m, tensor="a", to="float32")
    assert not ok and "already" in reason
    with pytest.raises(WorkbenchError, match="unknown dtype"):
        get_recipe("insert_cast").precondition(m, tensor="a", to="float7")


# ------------------------------------------------------------------ decompositions
@pytest.mark.parametrize("op", sorted(single_op_cases()))
def test_decomposition_is_exact_and_parses(op, tmp_path):
    m = single_op_cases()[op]
    assert not rtx(m, tmp_path, "before.onnx").supported, f"{op} should be rejected by the parser"
    ok, reason, nodes = get_recipe("decompose").precondition(m)
    assert ok and "exact rewrite" in reason, reason
    ch = apply_recipe(m, "decompose")
    assert ch.kept and ch.verification.equivalent, ch.verification
    assert ch.verification.max_abs_diff < 1e-5
    assert all(n.op_type != op for n in ch.proto.graph.node)
    assert rtx(ch.proto, tmp_path, "after.onnx").supported


def test_decomposition_refusals():
    ok, reason, _ = get_recipe("decompose").precondition(det4())
    assert not ok and "4x4" in reason
    ok, reason, _ = get_recipe("decompose").precondition(nonzero_dynamic())
    assert not ok and "depends on the data" in reason
    ok, reason, _ = get_recipe("decompose").precondition(load("capability.onnx"))
    assert not ok and "registry" in reason
    nf = onnx.load(str(SAMPLES / "needs_fixing.onnx"))
    ok, reason, _ = get_recipe("decompose").precondition(nf, node="/fc/Gemm")
    assert not ok and "no decomposition registered" in reason


def test_decompose_refuses_dynamic_crop_axis():
    m = single_op_cases()["CenterCropPad"]
    m.graph.input[0].type.tensor_type.shape.dim[1].Clear()
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "h"
    ok, reason, _ = get_recipe("decompose").precondition(m)
    assert not ok and "dynamic" in reason


# ------------------------------------------------------------------ plugins
def test_replace_with_plugin_writes_plugin_node_the_parser_looks_up(tmp_path):
    m = load("capability.onnx")
    ch = apply_recipe(m, "replace_with_plugin", {"nodes": ["Fake1"], "plugin": "FakePlugin",
                                                 "version": "2", "namespace": "acme",
                                                 "attrs": {"alpha": "0.5"}})
    pn = [n for n in ch.proto.graph.node if n.op_type == "FakePlugin"][0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in pn.attribute}
    assert attrs["plugin_version"] == b"2" and attrs["plugin_namespace"] == b"acme"
    assert attrs["alpha"] == pytest.approx(0.5)
    assert list(pn.input) == ["A"] and list(pn.output) == ["B"]
    assert not ch.preserves_semantics and ch.verification.status == "unverified"
    rep = rtx(ch.proto, tmp_path)
    ops = {u["op"] for u in rep.unsupported}
    assert "FakePlugin" in ops and not any(u["node"] == "Fake1" for u in rep.unsupported)


def test_replace_with_plugin_refusals():
    m = load("capability.onnx")
    ok, reason, _ = get_recipe("replace_with_plugin").precondition(
        m, nodes=["Fake1"], plugin="Relu", domain="")
    assert not ok and "standard ONNX op" in reason
    ok, reason, _ = get_recipe("replace_with_plugin").precondition(
        m, nodes=["Fake1", "Fake2"], plugin="P")
    assert not ok and "convex" in reason and "Add1" in reason


# ------------------------------------------------------------------ symmetric Q/DQ
def test_symmetric_qdq_on_qdq_conv_is_exact_for_its_constant(tmp_path):
    m = load("qdq_conv.onnx")
    assert not rtx(m, tmp_path, "before.onnx").supported
    ok, reason, nodes = get_recipe("symmetric_qdq").precondition(m)
    assert ok and "constant" in reason
    ch = apply_recipe(m, "symmetric_qdq")
    assert ch.verification.equivalent and ch.verification.max_abs_diff == 0
    zps = [t for t in ch.proto.graph.initializer if t.name.endswith("_sym")]
    assert zps and onnx.numpy_helper.to_array(zps[0]).dtype == np.int8
    assert not np.any(onnx.numpy_helper.to_array(zps[0]))
    assert rtx(ch.proto, tmp_path, "after.onnx").supported


def test_symmetric_qdq_refuses_runtime_input_with_zero_point_84():
    ok, reason, _ = get_recipe("symmetric_qdq").precondition(qdq_conv_runtime_input())
    assert not ok and "not exact" in reason and "84" in reason
    with pytest.raises(WorkbenchError, match="does not apply"):
        apply_recipe(qdq_conv_runtime_input(), "symmetric_qdq")


def test_symmetric_qdq_uint8_128_is_exact_for_any_input():
    m = qdq_uint8_128()
    ok, reason, _ = get_recipe("symmetric_qdq").precondition(m)
    assert ok and "every input" in reason
    big = {"x": (np.random.default_rng(3).standard_normal((1, 3, 3, 130)) * 400).astype(np.float32)}
    ch = apply_recipe(m, "symmetric_qdq", inputs=big)  # values far into saturation
    assert ch.verification.equivalent and ch.verification.max_abs_diff == 0


def test_not_equivalent_change_is_refused_unless_forced(monkeypatch):
    """A 'semantics-preserving' recipe that breaks the outputs is not kept (force keeps it)."""
    from workbench.surgery.recipes import decompose as dec

    orig = dec.REGISTRY[("com.microsoft", "QuickGelu")]
    broken = dec.Decomposition(orig.domain, orig.op, orig.summary, orig.check,
                               lambda ctx, e: e.op("Sigmoid", [ctx.node.input[0]],
                                                   out=ctx.node.output[0]))
    monkeypatch.setitem(dec.REGISTRY, ("com.microsoft", "QuickGelu"), broken)
    m = single_op_cases()["QuickGelu"]
    ch = apply_recipe(m, "decompose")
    assert not ch.kept and ch.verification.status == "different" and "force" in ch.note
    forced = apply_recipe(m, "decompose", force=True)
    assert forced.kept and forced.forced


def test_verify_relative_tolerance_for_large_values():
    from workbench.runtime.equivalence import compare_outputs

    a = {"y": np.array([1e6, 1.0], np.float32)}
    assert compare_outputs(a, {"y": np.array([1e6 + 1.0, 1.0], np.float32)}).equivalent
    assert not compare_outputs(a, {"y": np.array([1e6, 1.0 + 1e-4], np.float32)}).equivalent
    assert not compare_outputs({"y": np.array([np.nan])}, {"y": np.array([0.0])}).equivalent


def _gn_model(opset):
    """GroupNormalization over [2, 6, 5, 4], 3 groups: opset 18 scales per group ([3]),
    opset 21 per channel ([6]); then an opset-20 Gelu (tanh) at opset >= 20."""
    from onnx import TensorProto as T, helper as h, numpy_helper as nh

    rng = np.random.default_rng(4)
    n_scale = 3 if opset < 21 else 6
    inits = [nh.from_array(rng.uniform(0.5, 1.5, n_scale).astype(np.float32), "scale"),
             nh.from_array(rng.standard_normal(n_scale).astype(np.float32), "bias")]
    nodes = [h.make_node("GroupNormalization", ["x", "scale", "bias"], ["g"], num_groups=3,
                         epsilon=1e-5, name="/gn/GroupNormalization")]
    last = "g"
    if opset >= 20:
        nodes.append(h.make_node("Gelu", ["g"], ["y"], approximate="tanh", name="/act/Gelu"))
        last = "y"
    g = h.make_graph(nodes, "gn", [h.make_tensor_value_info("x", T.FLOAT, [2, 6, 5, 4])],
                     [h.make_tensor_value_info(last, T.FLOAT, [2, 6, 5, 4])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_and_gelu_decompose_exactly_for_older_parsers(opset, tmp_path):
    """TensorRT 8.6 has no Gelu importer (opset 20) and reads GroupNormalization's scale per
    group (opset 18): an opset-21 export (per-channel scale) failed there with 'scale
    dimensions not compatible for normalization'. Both decompose into standard ops."""
    m = _gn_model(opset)
    ch = apply_recipe(m, "decompose", {"op": "GroupNormalization"})
    assert ch.kept and ch.verification.equivalent, ch.verification
    assert ch.verification.max_abs_diff < 1e-5
    ops = [n.op_type for n in ch.proto.graph.node]
    assert "GroupNormalization" not in ops and "InstanceNormalization" in ops
    if opset >= 20:
        ch2 = apply_recipe(ch.proto, "decompose", {"op": "Gelu"})
        assert ch2.kept and ch2.verification.equivalent and ch2.verification.max_abs_diff < 1e-5
        assert "Gelu" not in [n.op_type for n in ch2.proto.graph.node]
        assert "Tanh" in [n.op_type for n in ch2.proto.graph.node]
        ch = ch2
    assert rtx(ch.proto, tmp_path, "after.onnx").supported


def test_group_norm_decomposition_refuses_what_it_cannot_repeat():
    from onnx import TensorProto as T, helper as h

    m = _gn_model(18)
    m.graph.input[0].CopyFrom(h.make_tensor_value_info("x", T.FLOAT, [2, "C", 5, 4]))
    ok, reason, _ = get_recipe("decompose").precondition(m, op="GroupNormalization")
    assert not ok and "channel count is dynamic" in reason
