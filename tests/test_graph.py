"""Layout correctness of workbench.graphs.layout on generated and hand-made broken graphs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import REPO, SAMPLES, layout_bench
from workbench.graphs import layout as wg
from workbench.core.model import model_from_proto


@pytest.fixture(scope="module")
def bert1k():
    return model_from_proto(layout_bench().transformer_like(1000))


def _vi(name, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, [1])


def _model(nodes, inputs=("x",), outputs=("y",), inits=()):
    g = helper.make_graph(nodes, "g", [_vi(i) for i in inputs], [_vi(o) for o in outputs],
                          initializer=list(inits))
    return model_from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _check_layout(d: wg.GraphData):
    e = d.edges
    # every edge goes strictly downwards (the model is a DAG)
    assert np.all(d.rank[e[:, 0]] < d.rank[e[:, 1]])
    assert np.allclose(d.y, d.rank)
    # no two elements of a rank closer than 1
    key = np.lexsort((d.x, d.rank))
    r, x = d.rank[key], d.x[key]
    same = r[1:] == r[:-1]
    assert np.all(np.diff(x)[same] >= 1.0 - 1e-4)


def test_full_layout_ranks_respect_edges_and_no_overlap(bert1k):
    gs = wg.GraphStructure(bert1k)
    d = gs.view(gs.scopes)
    assert len(d) == len(bert1k.graph.node) + 2 + 2  # nodes + 2 inputs + 2 outputs
    assert d.ids[: gs.n_nodes] == bert1k.node_ids
    assert (d.kind == wg.NODE).sum() == gs.n_nodes and (d.kind == wg.GROUP).sum() == 0
    assert d.edges.shape[0] > gs.n_nodes  # transformer: branching + residuals
    _check_layout(d)
    # longest path: a node's rank is at least one more than each producer's
    assert d.rank[d.index("/encoder/layer.1/attention/self/Softmax")] > \
        d.rank[d.index("/encoder/layer.0/output/LayerNorm/Add_1")]
    # graph inputs are small nodes above their consumers; labels are the last name segment
    i = d.index("input:input_ids")
    assert d.kind[i] == wg.INPUT and d.labels[i] == "input_ids"
    assert d.labels[d.index("/encoder/layer.0/attention/self/Softmax")] == "Softmax"
    assert d.ops[d.op[d.index("/encoder/layer.0/attention/self/Softmax")]] == "Softmax"
    assert not d.findings and not d.flags.any()


def test_barycentre_sweeps_reduce_crossings():
    # 6 layers of 20 nodes, 2 random edges per node to the next layer, random initial order
    rng = np.random.default_rng(0)
    L, W = 6, 20
    es = np.array([l * W + i for l in range(L - 1) for i in range(W) for _ in range(2)])
    ed = np.array([(l + 1) * W + j for l in range(L - 1) for i in range(W)
                   for j in rng.choice(W, 2, replace=False)])
    vpos = (np.arange(L * W) // W) * 1000 + rng.permutation(L * W)

    def crossings(sweeps):
        x, y, r = wg._layered_layout(L * W, es, ed, vpos, sweeps=sweeps)
        a, b = x[es], x[ed]
        same = r[es][:, None] == r[es][None]
        return int(np.sum(same & (((a[:, None] - a[None]) * (b[:, None] - b[None])) < 0))) // 2

    assert crossings(4) < 0.85 * crossings(0)


def test_collapsed_view_groups_and_expand(bert1k):
    gs = wg.GraphStructure(bert1k)
    d = gs.view()  # default: scopes opened level by level within the budget
    assert len(d) <= wg.default_budget(gs.n_nodes)
    groups = [i for i, k in enumerate(d.kind) if k == wg.GROUP]
    assert groups
    # sizes of visible elements add up to every element exactly once
    assert int(d.size.sum()) == gs.n
    _check_layout(d)
    gid = "scope:/encoder/layer.0/attention"
    assert gid in d.ids
    members = gs.members("/encoder/layer.0/attention")
    assert d.size[d.index(gid)] == len(members) == 44
    # expanding one group replaces it by its children (sub-scopes and direct nodes)
    d2 = gs.view(set(d.expanded) | {"/encoder/layer.0/attention"})
    assert gid not in d2.ids
    assert "scope:/encoder/layer.0/attention/self" in d2.ids
    assert "scope:/encoder/layer.0/attention/output" in d2.ids
    assert len(d2) == len(d) - 1 + 2
    assert int(d2.size.sum()) == gs.n
    _check_layout(d2)
    # collapsing the encoder hides every layer
    d3 = gs.view({"/embeddings"})
    assert "scope:/encoder" in d3.ids and not any("layer." in i for i in d3.ids)
    assert d3.size[d3.index("scope:/encoder")] == sum(
        1 for i in bert1k.node_ids if i.startswith("/encoder/"))
    # the enclosing-scope index of a visible element names its parent scope
    k = d2.index("scope:/encoder/layer.0/attention/self")
    assert d2.scopes[d2.scope[k]] == "/encoder/layer.0/attention"
    assert gs.scope_path_of("/encoder/layer.0/attention/self/Softmax")[:2] == [
        "/encoder", "/encoder/layer.0"]


def test_layout_function_and_json_payload(bert1k):
    full = wg.layout(bert1k, collapse=False)
    assert (full.kind == wg.GROUP).sum() == 0
    coll = wg.layout(bert1k)
    assert (coll.kind == wg.GROUP).sum() > 0 and len(coll) < len(full)
    exp = wg.layout(bert1k, expanded=[])
    assert set(exp.ids) >= {"scope:/encoder", "scope:/embeddings", "scope:/pooler"}
    d = json.loads(json.dumps(coll.to_dict()))
    assert len(d["edges"]) == 2 * coll.edges.shape[0]
    assert len(d["x"]) == len(d["ids"]) == len(d["op"]) == len(d["kind"])


def test_cycle_is_broken_and_flagged():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="first"),
        helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
        helper.make_node("Relu", ["b"], ["c"], name="loop_relu"),
        helper.make_node("Neg", ["b"], ["y"], name="last"),
    ]
    d = wg.layout(_model(nodes), collapse=False)
    codes = {f.code: f for f in d.findings}
    assert set(codes["graph-cycle"].nodes) == {"loop_add", "loop_relu"}
    flagged = {d.ids[i] for i in np.nonzero(d.flags & wg.FLAG_CYCLE)[0]}
    assert flagged == {"loop_add", "loop_relu"}
    assert len(d) == 4 + 2 and np.isfinite(d.x).all()
    # all but the back-edge go downwards
    e = d.edges
    assert int(np.sum(d.rank[e[:, 0]] >= d.rank[e[:, 1]])) == 1


def test_dangling_input_and_duplicate_names_flagged():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="dup"),
        helper.make_node("Add", ["a", "ghost"], ["b"], name="reads_ghost"),
        helper.make_node("Relu", ["b"], ["y"], name="dup"),
        helper.make_node("Relu", ["a"], ["b"], name="makes_b_again"),
    ]
    d = wg.layout(_model(nodes), collapse=False)
    by = {f.code: f for f in d.findings}
    assert by["dangling-input"].nodes == ["reads_ghost"] and by["dangling-input"].tensors == ["ghost"]
    assert by["duplicate-node-name"].nodes == ["dup#0", "dup#1"]
    assert set(by["duplicate-tensor-producer"].nodes) == {"reads_ghost", "makes_b_again"}
    flags = dict(zip(d.ids, d.flags.tolist()))
    assert flags["reads_ghost"] & wg.FLAG_DANGLING
    assert flags["dup#0"] & wg.FLAG_DUPLICATE_NAME and flags["dup#1"] & wg.FLAG_DUPLICATE_NAME
    assert flags["makes_b_again"] & wg.FLAG_DUPLICATE_OUTPUT
    assert d.labels[d.index("dup#1")] == "dup#1"  # same-named nodes are told apart
    assert all(f.severity in ("error", "warning") and f.hint for f in d.findings)


def test_collapsed_group_carries_member_flags_and_cycle_from_collapsing():
    # /a/n1 -> root -> /a/n2: collapsing /a makes a 2-cycle in the view, which is no finding
    nodes = [
        helper.make_node("Relu", ["x"], ["t1"], name="/a/n1"),
        helper.make_node("Relu", ["t1"], ["t2"], name="mid"),
        helper.make_node("Add", ["t2", "nowhere"], ["y"], name="/a/n2"),
    ]
    gs = wg.GraphStructure(_model(nodes))
    d = gs.view([])
    assert "scope:/a" in d.ids
    g = d.index("scope:/a")
    assert d.flags[g] & wg.FLAG_DANGLING  # the dangling member's flag shows on its group
    assert [f.code for f in d.findings] == ["dangling-input"]
    assert np.isfinite(d.x).all() and d.size[g] == 2


def test_subgraph_outer_references_become_edges():
    then_g = helper.make_graph([helper.make_node("Relu", ["a"], ["t"], name="inner")], "then",
                               [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["a"], ["e"], name="inner2")], "else",
                               [], [_vi("e")])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="producer"),
        helper.make_node("Cast", ["x"], ["c"], name="cond", to=TensorProto.BOOL),
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
    ]
    d = wg.layout(_model(nodes), collapse=False)
    e = {(d.ids[a], d.ids[b]) for a, b in d.edges.tolist()}
    assert ("producer", "branch") in e and not d.findings


def test_accepts_path_and_proto(tmp_path, bert1k):
    p = tmp_path / "m.onnx"
    p.write_bytes(bert1k.proto.SerializeToString())
    a = wg.layout(str(p), collapse=False)
    b = wg.layout(bert1k.proto, collapse=False)
    assert a.ids == b.ids and np.allclose(a.x, b.x)


def _cli(capsys, *argv):
    from workbench.cli import main

    try:
        rc = main(list(argv))
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_graph_layout_json_and_findings(tmp_path, capsys, bert1k):
    p = tmp_path / "m.onnx"
    p.write_bytes(bert1k.proto.SerializeToString())
    out = tmp_path / "layout.json"
    rc, text, _ = _cli(capsys, "graph", str(p), "-o", str(out))
    assert rc == 0 and "collapsed scopes" in text and "/encoder/layer.0/attention" in text
    d = json.loads(out.read_text())
    assert len(d["ids"]) == len(d["x"]) <= wg.default_budget(len(bert1k.graph.node))
    rc, text, _ = _cli(capsys, "graph", str(p), "--all", "--json")
    assert rc == 0 and len(json.loads(text)["ids"]) == len(bert1k.graph.node) + 4
    rc, text, _ = _cli(capsys, "graph", str(p), "--expand", "/encoder/layer.0/attention", "--json")
    ids = json.loads(text)["ids"]
    assert "scope:/encoder/layer.0/attention/self" in ids
    rc, _, err = _cli(capsys, "graph", str(p), "--expand", "/nope")
    assert rc == 2 and "no scope '/nope'" in err and "\n" not in err.strip()
    # a broken model: findings printed, exit 1
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="reads_ghost")]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(_model(nodes).proto.SerializeToString())
    rc, text, _ = _cli(capsys, "graph", str(bad))
    assert rc == 1 and "dangling-input" in text and "reads_ghost" in text


def test_single_wrapping_scope_is_opened_by_default():
    # every node under one scope (e.g. Caffe2's gpu_0/...): showing one group would be useless
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < 99 else "y"],
                              name=f"gpu_0/relu_{i}") for i in range(100)]
    gs = wg.GraphStructure(_model(nodes))
    d = gs.view()
    assert "gpu_0" in d.expanded and len(d) == 100 + 2
    # a small default budget still wins when the first level is big enough on its own
    assert len(wg.GraphStructure(_model(nodes)).view(max_visible=5)) == 102


def test_collapsed_groups_of_the_same_name_get_distinct_labels():
    """Two layers' 'attention/self' scopes read 'layer.0/attention/self (20)' and
    'layer.1/...', not two 'self (20)' a reader cannot tell apart."""
    from collections import Counter

    from workbench.graphs.layout import layout

    d = layout(str(SAMPLES / "bert_tiny.onnx")).to_dict()
    labels = [lb for i, lb in zip(d["ids"], d["labels"]) if i.startswith("scope:")]
    assert labels and not [lb for lb, c in Counter(labels).items() if c > 1], labels
    assert "layer.0/attention/self (20)" in labels and "layer.1/attention/self (20)" in labels
    assert all(not lb.startswith("self ") for lb in labels)


# -- boxes, bends, crossing reduction ----------------------------------------------------------
FIX86 = REPO / "tests" / "data" / "fixtures" / "trt86-h200"


def _light(name):
    import onnx

    p = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / name
    if not p.exists():
        pytest.skip(f"onnx does not ship {name}")
    return p


def test_weights_fold_into_boxes_with_schema_names_and_widths():
    gs = wg.GraphStructure(FIX86 / "resnet50.structure.onnx")
    d = gs.view(gs.scopes)
    i = d.index("/conv1/Conv")
    assert d.info[i] == "W <64x3x7x7>\nB <64>"
    # initializers are not elements; the box is wide enough for its longest line
    assert not any(x.startswith("input:conv1") for x in d.ids)
    assert d.width[i] >= (len("W <64x3x7x7>") * wg.CHAR_PX + wg.BOX_PAD_PX) / wg.UNIT_PX - 1e-6
    assert len(d.info) == len(d) and d.width.shape == (len(d),)


def test_edge_labels_carry_dtype_and_shape(bert1k):
    proto = layout_bench().transformer_like(200)
    from onnx import shape_inference

    m = model_from_proto(shape_inference.infer_shapes(proto))
    gs = wg.GraphStructure(m)
    d = gs.view(gs.scopes)
    assert len(d.edge_labels) == d.edges.shape[0]
    k = [n for n, (s, t) in enumerate(d.edges.tolist()) if d.ids[s] == "input:input_ids"][0]
    vt = m.index.value("input_ids")
    assert d.edge_labels[k] == "int64 " + "x".join(str(x) for x in vt.shape)


def test_long_edges_bend_beside_boxes_not_through_them():
    gs = wg.GraphStructure(FIX86 / "bert_small.structure.onnx")
    d = gs.view(gs.scopes)
    r = d.rank
    span = np.abs(r[d.edges[:, 0]] - r[d.edges[:, 1]])
    assert np.array_equal(np.diff(d.bend_ptr), span - 1) and span.max() > 5
    # every bend point keeps clear of each box on its rank
    for k in np.nonzero(span > 1)[0][:80]:
        lo = min(r[d.edges[k, 0]], r[d.edges[k, 1]])
        for j, bx in enumerate(d.bend_x[d.bend_ptr[k]:d.bend_ptr[k + 1]].tolist()):
            on = np.nonzero(r == lo + 1 + j)[0]
            clear = np.abs(d.x[on] - bx) - d.width[on] / 2
            assert np.all(clear >= wg.DUMMY_WIDTH / 2 + wg.GAP - 1e-3), (d.ids[d.edges[k, 0]], j)
    _check_layout(d)


def test_crossing_count_matches_brute_force_and_shared_trunks_count_once():
    # two edges from source 0 share a trunk down to rank 1; edge 1 -> 4 crosses it once as
    # drawn, and crosses both edges when every pair of edges counts
    x = np.array([0.0, 1.0, -1.0, 1.0, -1.0])
    rank = np.array([0, 0, 2, 2, 1])
    edges = np.array([[0, 2], [0, 3], [1, 4]])
    ptr, bends = np.array([0, 1, 2, 2]), np.array([0.0, 0.0])
    assert wg.layer_crossings(x, rank, edges, ptr, bends) == 1
    assert wg.layer_crossings(x, rank, edges, ptr, bends, drawn=False) == 2
    assert wg.layer_crossings(x, rank, edges[:2], ptr[:3], bends) == 0
    rng = np.random.default_rng(3)
    v = rng.integers(0, 30, 300)
    assert wg._inversions(v) == sum(int(v[i] > v[j]) for i in range(300) for j in range(i + 1, 300))


@pytest.mark.parametrize("name,dot_crossings", [("light_inception_v1.onnx", 21),
                                                ("light_inception_v2.onnx", 10),
                                                ("light_resnet50.onnx", 0),
                                                ("light_densenet121.onnx", 0),
                                                ("bert_small.structure.onnx", 54)])
def test_crossings_no_worse_than_graphviz_dot(name, dot_crossings):
    """dot's crossings on these graphs (benchmarks/graph_layout.py, Graphviz 2.43/7.x, same
    boxes) are the bar; the layout meets it."""
    gs = wg.GraphStructure(FIX86 / name if name.startswith("bert") else _light(name))
    d = gs.view(gs.scopes)
    assert wg.layer_crossings(d.x, d.rank, d.edges, d.bend_ptr, d.bend_x) <= dot_crossings
    _check_layout(d)


def _random_layered(seed, sizes, p=0.5):
    """Ranks of the given sizes, each element linked to each of the next rank's with
    probability p: (R, starts, counts, ss, sd) as `_mincross` takes them."""
    rng = np.random.default_rng(seed)
    R = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    pairs = [(starts[r] + i, starts[r + 1] + j) for r in range(len(sizes) - 1)
             for i in range(sizes[r]) for j in range(sizes[r + 1]) if rng.random() < p]
    ss, sd = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    return R, starts, np.array(sizes), ss, sd


def _fewest_crossings(R, starts, counts, ss, sd):
    """The minimum over every order of every rank (brute force)."""
    import itertools

    best = None
    for combo in itertools.product(*[list(itertools.permutations(range(c))) for c in counts]):
        pos = np.concatenate([np.array(pr) for pr in combo])
        c = wg._segment_crossings(pos, R, ss, sd)
        best = c if best is None else min(best, c)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_mincross_finds_the_fewest_crossings_of_small_layered_graphs(seed):
    R, starts, counts, ss, sd = _random_layered(seed, (3, 4, 3))
    n = R.size
    pos = np.arange(n) - starts[R]
    before = wg._segment_crossings(pos, R, ss, sd)
    order, got = wg._mincross(np.arange(n), R, starts, counts, ss, sd, n,
                              np.arange(n, dtype=np.float64), before)
    assert sorted(order.tolist()) == list(range(n)) and np.array_equal(R[order], R)
    new = np.empty(n, dtype=np.int64)
    new[order] = np.arange(n) - starts[R[order]]
    assert got == wg._segment_crossings(new, R, ss, sd)
    assert got == _fewest_crossings(R, starts, counts, ss, sd) < before


@pytest.mark.parametrize("sizes", [(3, 4, 3, 2), (40, 60, 50)])  # pairs compared / merge sort
def test_crossings_per_rank_gap(sizes):
    R, starts, counts, ss, sd = _random_layered(5, sizes, p=0.2)
    pos = np.random.default_rng(1).permutation(R.size) % 7 + 7 * R  # any distinct order per rank
    pos = np.argsort(np.argsort(pos)) - starts[R]
    want = np.zeros(len(sizes), dtype=np.int64)
    for i in range(ss.size):
        for j in range(i + 1, ss.size):
            if R[ss[i]] == R[ss[j]]:
                du, dl = pos[ss[i]] - pos[ss[j]], pos[sd[i]] - pos[sd[j]]
                want[R[ss[i]]] += du * dl < 0
    got = wg._gap_crossings(pos, R, ss, sd, len(sizes))
    assert got.tolist() == want.tolist() and want.sum() > 0
    assert wg._segment_crossings(pos, R, ss, sd) == want.sum()


def test_transpositions_with_ties_count_exactly():
    R, starts, counts, ss, sd = _random_layered(3, (6, 8, 8, 6), p=0.3)
    n = R.size
    pos = np.arange(n) - starts[R]
    before = wg._segment_crossings(pos, R, ss, sd)
    order, claimed = wg._transpose(np.arange(n), pos, R, starts, ss, sd, n, before, ties=True)
    new = np.empty(n, dtype=np.int64)
    new[order] = np.arange(n) - starts[R[order]]
    assert np.array_equal(new, pos)  # positions kept up to date in place
    assert claimed == wg._segment_crossings(new, R, ss, sd) < before


@pytest.mark.parametrize("size", [1000, 5000])  # the full ordering; the one for big graphs
def test_benchmark_transformer_graphs_are_drawn_without_crossings(size):
    """The BERT-like graphs of benchmarks/graph_layout.py have a drawing without crossings;
    both orderings (the full one, and at 5000 nodes, over FULL_SWEEPS_LIMIT elements and
    bends, the cheaper one for big graphs) find it."""
    gs = wg.GraphStructure(model_from_proto(layout_bench().transformer_like(size)))
    d = gs.view(gs.scopes)
    assert d.crossings == 0
    assert wg.layer_crossings(d.x, d.rank, d.edges, d.bend_ptr, d.bend_x) == 0


def test_rank_sweeps_beat_the_file_order():
    gs = wg.GraphStructure(_light("light_inception_v2.onnx"))
    d0 = gs.view(gs.scopes, sweeps=0)
    d = gs.view(gs.scopes)
    c0 = wg.layer_crossings(d0.x, d0.rank, d0.edges, d0.bend_ptr, d0.bend_x)
    c = wg.layer_crossings(d.x, d.rank, d.edges, d.bend_ptr, d.bend_x)
    assert c < 0.2 * c0, (c, c0)


def test_expand_in_place_moves_the_rest_by_a_bounded_shift():
    gs = wg.GraphStructure(FIX86 / "bert_small.structure.onnx")
    exp = gs.default_expanded()
    d0 = gs.view(exp)
    groups = [i for i in d0.ids if i.startswith(wg.GROUP_PREFIX)]
    g = max(groups, key=lambda i: d0.size[d0.index(i)])
    d1 = gs.expand_in_place(d0, g[len(wg.GROUP_PREFIX):], exp | {g[len(wg.GROUP_PREFIX):]})
    full = gs.view(exp | {g[len(wg.GROUP_PREFIX):]})
    assert d1.ids == full.ids and len(d1) > len(d0)
    common = [i for i in d0.ids if i in d1.ids]
    members = [i for i in d1.ids if i not in d0.ids]
    lo = min(d1.x[d1.index(i)] - d1.width[d1.index(i)] / 2 for i in members)
    hi = max(d1.x[d1.index(i)] + d1.width[d1.index(i)] / 2 for i in members)
    grow_w = max(0.0, (hi - lo) - d0.width[d0.index(g)])
    grow_r = max(d1.rank[d1.index(i)] for i in members) - d0.rank[d0.index(g)]
    for i in common:
        a, b = d0.index(i), d1.index(i)
        assert abs(d1.x[b] - d0.x[a]) <= grow_w / 2 + 1e-4, i
        assert d1.rank[b] - d0.rank[a] in (0, grow_r), i
    # members sit inside the group's old place (ranks from its rank down)
    assert min(d1.rank[d1.index(i)] for i in members) == d0.rank[d0.index(g)]
    _check_layout(d1)
    span = np.abs(d1.rank[d1.edges[:, 0]] - d1.rank[d1.edges[:, 1]])
    assert np.array_equal(np.diff(d1.bend_ptr), span - 1)


def test_every_edge_keeps_one_bend_per_rank_when_a_group_opens_in_place():
    """Opening each group of a detector's default view in place: every edge still bends once
    per rank between its ends (an edge leaving an element on the group's own rank used to
    skip the rows the group gained, drawn straight across the opened members), kept edges
    keep their bends moved as the elements, and gained rows repeat the edge's place."""
    gs = wg.GraphStructure(REPO / "tests" / "data" / "zoo" / "fcos_resnet50_fpn.structure.onnx")
    d0 = gs.view()
    groups = [i for i in d0.ids if i.startswith(wg.GROUP_PREFIX)]
    assert len(groups) >= 4
    for g in groups:
        scope = g[len(wg.GROUP_PREFIX):]
        d1 = gs.expand_in_place(d0, scope, set(d0.expanded) | {scope})
        span = np.abs(d1.rank[d1.edges[:, 0]] - d1.rank[d1.edges[:, 1]])
        assert np.array_equal(np.diff(d1.bend_ptr), span - 1), scope
        r_g = int(d0.rank[d0.index(g)])
        for k, (a, b) in enumerate(d1.edges.tolist()):
            up = a if d1.rank[a] <= d1.rank[b] else b
            if d1.ids[up] in d0.ids and d1.rank[up] == r_g and d1.ids[a] in d0.ids \
                    and d1.ids[b] in d0.ids:
                # from the group's rank down: straight below the upper element first
                bends = d1.bend_x[d1.bend_ptr[k]:d1.bend_ptr[k + 1]]
                grow_r = len(bends) - (int(d0.rank[d0.index(d1.ids[b if up == a else a])])
                                       - r_g - 1)
                assert np.allclose(bends[:grow_r], d1.x[up]), (scope, d1.ids[a], d1.ids[b])


def _inception_like(blocks=4):
    """Inception-style blocks of four scoped branches joined by a Concat (no weights)."""
    nodes, x = [], "image"

    def conv(name, src):  # two nodes, as Conv + Relu
        nodes.append(helper.make_node("Neg", [src], [name + "_n"], name=name + "/Neg"))
        nodes.append(helper.make_node("Relu", [name + "_n"], [name + "_o"], name=name + "/Relu"))
        return name + "_o"

    for b in range(blocks):
        p = f"/inception{b}"
        outs = [conv(p + "/branch1x1", x),
                conv(p + "/branch3x3/conv2", conv(p + "/branch3x3/conv1", x)),
                conv(p + "/branch5x5/conv3", conv(p + "/branch5x5/conv2",
                                                  conv(p + "/branch5x5/conv1", x)))]
        nodes.append(helper.make_node("MaxPool", [x], [p + "/pool_o"], name=p + "/pool/MaxPool",
                                      kernel_shape=[3, 3], pads=[1] * 4))
        outs.append(conv(p + "/branch_pool", p + "/pool_o"))
        nodes.append(helper.make_node("Concat", outs, [p + "/Concat_o"], name=p + "/Concat",
                                      axis=1))
        x = p + "/Concat_o"
    return _model(nodes, inputs=("image",), outputs=(x,))


def test_every_branch_of_an_inception_block_opens_in_place():
    """A new user's inception-like CNN: opening a branch group in place raised IndexError
    (an edge from a sibling group on the opened group's rank, with no bends in the old
    drawing and after the last bent edge, was looked up past the end of bend_x)."""
    gs = wg.GraphStructure(_inception_like(8))
    d0 = gs.view()  # each block's branches collapsed
    groups = [i for i in d0.ids if i.startswith(wg.GROUP_PREFIX)]
    assert len(groups) >= 12
    for g in groups:
        scope = g[len(wg.GROUP_PREFIX):]
        d1 = gs.expand_in_place(d0, scope, set(d0.expanded) | {scope})
        assert d1.ids == gs.view(set(d0.expanded) | {scope}).ids and len(d1) > len(d0)
        span = np.abs(d1.rank[d1.edges[:, 0]] - d1.rank[d1.edges[:, 1]])
        assert np.array_equal(np.diff(d1.bend_ptr), span - 1), scope
        assert np.isfinite(d1.bend_x).all() and np.isfinite(d1.x).all()


def _visible_graph(path):
    """(m, es, ed, vpos, width) of a real model's fully expanded view, as `view` lays it out."""
    gs = wg.GraphStructure(path)
    d = gs.view(gs.scopes, sweeps=0)
    vpos = np.arange(len(d))
    return len(d), d.edges[:, 0].astype(np.int64), d.edges[:, 1].astype(np.int64), vpos, d.width


def test_transpositions_remove_exactly_the_crossings_they_count():
    m, es, ed, vpos, width = _visible_graph(FIX86 / "bert_small.structure.onnx")
    r, a, b, vp = wg._ranks(m, es, ed, vpos)
    lay = wg._order_ranks(m, r, a, b, vp, np.asarray(width, dtype=np.float64), 0)  # no reduction
    R, n, order = lay["R"], lay["n"], lay["order"]
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n) - lay["starts"][R[order]]
    before = wg._segment_crossings(pos, R, lay["ss"], lay["sd"])
    new, claimed = wg._transpose(order, pos.copy(), R, lay["starts"], lay["ss"], lay["sd"], n, before)
    npos = np.empty(n, dtype=np.int64)
    npos[new] = np.arange(n) - lay["starts"][R[new]]
    assert claimed == wg._segment_crossings(npos, R, lay["ss"], lay["sd"]) < before
    assert sorted(new.tolist()) == list(range(n)) and np.array_equal(R[new], np.sort(R))


def test_layout_keeps_the_ranking_drawn_with_fewer_crossings():
    m, es, ed, vpos, width = _visible_graph(FIX86 / "bert_small.structure.onnx")
    w = np.asarray(width, dtype=np.float64)
    got = []
    for pull_all in (True, False):
        r, a, b, vp = wg._ranks(m, es, ed, vpos, pull_all=pull_all)
        assert np.all(r[b] > r[a])  # either ranking points every edge downwards
        got.append(wg._order_ranks(m, r, a, b, vp, w, 4, final=False))
    assert got[0]["best"] != got[1]["best"]
    better = min(got, key=lambda g: g["best"])
    before = better["best"]
    lay = wg._sugiyama(m, es, ed, vpos, width=w)
    assert lay.crossings == wg._refine(better, 4)["best"] <= before
    assert wg.layer_crossings(lay.x, lay.rank, np.stack([es, ed], 1), lay.bend_ptr, lay.bend_x) == lay.crossings
