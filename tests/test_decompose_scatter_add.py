"""index_add_ / scatter_add_ (a GNN's aggregation) export as ScatterND / ScatterElements with
reduction='add', which TensorRT's parser refuses; along axis 0 decompose rewrites them as a
one-hot matrix product. Checked against onnxruntime and the real TensorRT-RTX parser."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h

from workbench.support.checker import check
from workbench.surgery.changes import apply_recipe
from workbench.surgery.recipes import get_recipe
from workbench.surgery.session import FixSession


def _gnn(kind: str = "nd", *, idx_last: int = 1, cols: int = 1, reduction: str = "add",
         dtype: int = T.FLOAT, n: object = "num_nodes", e: object = "num_edges") -> onnx.ModelProto:
    """messages [E, F] summed into nodes [N, F] at dst [E] (ScatterND, index_add_), or a
    degree count [N, cols] (ScatterElements, scatter_add_ of ones at dst)."""
    f = 4
    nodes = [h.make_node("Gather", ["edge_index", "one"], ["dst"], axis=0, name="/dst")]
    if kind == "nd":
        nodes += [h.make_node("Unsqueeze", ["dst", "ax1"], ["dst1"], name="/unsq"),
                  h.make_node("Mul", ["x", "two"], ["msg_x"], name="/msg_x"),
                  h.make_node("Gather", ["msg_x", "src"], ["msg"], axis=0, name="/gather"),
                  h.make_node("Gather", ["edge_index", "zero"], ["src"], axis=0, name="/src"),
                  h.make_node("Mul", ["x", "zero_f"], ["zeros"], name="/zeros"),
                  h.make_node("ScatterND", ["zeros", "dst1" if idx_last == 1 else "dst2",
                                            "msg"], ["y"], reduction=reduction,
                              name="/ScatterND")]
        if idx_last != 1:
            nodes.insert(2, h.make_node("Concat", ["dst1", "dst1"], ["dst2"], axis=1,
                                        name="/cat"))
        out = h.make_tensor_value_info("y", dtype, [n, f])
    else:
        nodes += [h.make_node("Unsqueeze", ["dst", "ax1"], ["dst1"], name="/unsq"),
                  h.make_node("Tile", ["dst1", "tiles"], ["idx"], name="/tile"),
                  h.make_node("Cast", ["idx"], ["ones_i"], to=dtype, name="/ones_i"),
                  h.make_node("Mul", ["ones_i", "zero_d"], ["z0"], name="/z0"),
                  h.make_node("Add", ["z0", "one_d"], ["ones"], name="/ones"),
                  h.make_node("Slice", ["x", "s0", "s1", "s_ax"], ["xcol"], name="/xcol"),
                  h.make_node("Mul", ["xcol", "zero_d"], ["zeros"], name="/zeros"),
                  h.make_node("Tile", ["zeros", "tiles"], ["zeros_t"], name="/ztile"),
                  h.make_node("ScatterElements", ["zeros_t", "idx", "ones"], ["y"], axis=0,
                              reduction=reduction, name="/scatter_add")]
        out = h.make_tensor_value_info("y", dtype, [n, cols])
    np_dt = h.tensor_dtype_to_np_dtype(dtype)
    inits = [onnx.numpy_helper.from_array(np.array(v, dtype=t), k) for k, v, t in [
        ("one", 1, np.int64), ("zero", 0, np.int64), ("ax1", [1], np.int64),
        ("two", 2.0, np.float32), ("zero_f", 0.0, np.float32),
        ("tiles", [1, cols], np.int64), ("zero_d", 0, np_dt), ("one_d", 1, np_dt),
        ("s0", [0], np.int64), ("s1", [1], np.int64), ("s_ax", [1], np.int64)]]
    x_type = T.FLOAT if kind == "nd" else dtype
    g = h.make_graph(nodes, "gnn", [h.make_tensor_value_info("x", x_type, [n, f]),
                                    h.make_tensor_value_info("edge_index", T.INT64, [2, e])],
                     [out], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _feeds(n_nodes=6, n_edges=11, seed=0):
    rng = np.random.default_rng(seed)
    ei = rng.integers(0, n_nodes, size=(2, n_edges))
    ei[1, :3] = min(2, n_nodes - 1)  # repeated destinations: the sums are what matters
    if n_edges > 3:
        ei[1, 3] = -1  # a negative index counts from the end
    return {"x": rng.standard_normal((n_nodes, 4)).astype(np.float32),
            "edge_index": ei.astype(np.int64)}


def _run(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@pytest.mark.parametrize("kind", ["nd", "elements"])
def test_scatter_add_along_axis_0_becomes_a_one_hot_matmul_tensorrt_parses(kind, tmp_path):
    m = _gnn(kind)
    before = tmp_path / "before.onnx"
    onnx.save(m, str(before))
    rep = check(str(before), backend="tensorrt-rtx")
    assert not rep.supported and rep.unsupported[0]["code"].endswith("-reduction")
    op = "ScatterND" if kind == "nd" else "ScatterElements"
    ch = apply_recipe(m, "decompose", {"op": op})
    assert ch.kept and ch.verification.equivalent, ch.verification
    ops = [n.op_type for n in ch.proto.graph.node]
    assert op not in ops and "MatMul" in ops and "Equal" in ops
    for seed, (nn, ne) in enumerate([(6, 11), (1, 4), (40, 200)]):
        feeds = _feeds(nn, ne, seed)
        want, got = _run(m, feeds), _run(ch.proto, feeds)
        assert want.shape == got.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    after = tmp_path / "after.onnx"
    onnx.save(ch.proto, str(after))
    assert check(str(after), backend="tensorrt-rtx").supported


@pytest.mark.parametrize("kw,why", [
    ({"idx_last": 2}, "address more than the first axis"),
    ({"kind": "elements", "cols": 3}, "per-element indices"),
    ({"reduction": "mul"}, "reduction 'mul'"),
    ({"kind": "elements", "dtype": T.INT64}, "integer data"),
    ({"n": 100000, "e": 5000}, "would hold 5000 x 100000 values"),
])
def test_what_is_not_a_one_hot_product_is_refused_with_its_reason(kw, why):
    kind = kw.pop("kind", "nd")
    m = _gnn(kind, **kw)
    op = "ScatterND" if kind == "nd" else "ScatterElements"
    ok, reason, _ = get_recipe("decompose").precondition(m, op=op)
    assert not ok and why in reason, reason


def test_fix_auto_takes_a_gnn_to_a_whole_engine(tmp_path):
    """`workbench fix --auto` on an index_add_ + scatter_add_ GNN: the split route was the only
    way; now every node parses."""
    m = _gnn("nd")
    path = tmp_path / "gnn.onnx"
    onnx.save(m, str(path))
    s = FixSession(str(path), backend="tensorrt-rtx", start="original",
                   output=tmp_path / "gnn.fixed.onnx")
    res = s.auto_fix()
    assert res.supported, res.remaining
    assert [st["proposal"]["recipe"] for st in res.steps if st.get("kept")] == ["decompose"]


def test_build_points_at_the_exact_rewrite_instead_of_splitting(tmp_path):
    """With an exact recipe for the refused node, `build` says to fix first (a whole engine
    beats an engine + onnxruntime tail), in words that fit that reason."""
    from workbench.engines.engine import BuildConfig, BuildFailed, build_engine

    path = tmp_path / "gnn.onnx"
    onnx.save(_gnn("nd"), str(path))
    with pytest.raises(BuildFailed) as e:
        build_engine(path, BuildConfig(target="sm89", builder_optimization_level=0))
    assert "ScatterND at '/ScatterND' has an exact rewrite" in e.value.hint
    fix = e.value.next_steps[0]  # the step: fix --auto, with the -o it requires
    assert (fix.verb, fix.args) == ("fix", (str(path),))
    assert dict(fix.flags) == {"-o": str(path).replace(".onnx", ".fixed.onnx"), "--auto": None}
    assert fix.why.startswith("rewrites ScatterND at '/ScatterND' exactly")
    said = [f for f in e.value.findings if f.code == "no-split"]
    assert len(said) == 1 and said[0].message.startswith(
        "the build did not split the model at the refused nodes: ScatterND")
    assert said[0].nodes == ["/ScatterND"] and said[0].next_steps == [fix]
