"""The ONNX | engine split view (widgets.splitview) on the H200 ResNet-50 FP16 fixture: the
engine graph is made of the engine's layers, each box lists its ONNX nodes, and selection
maps both ways through the timing mapping."""
from __future__ import annotations

import pytest

from conftest import H200
from workbench.core.errors import WorkbenchError
from widgets.splitview import SplitView, engine_model, layer_id

R50 = H200 / "resnet50.structure.onnx"


@pytest.fixture(scope="module")
def split():
    return SplitView(H200 / "resnet50_fp16.layers.json", R50, profile=H200 / "resnet50_fp16.profile.json")


def test_engine_graph_has_one_box_per_layer_listing_its_onnx_nodes(split):
    s = split.engine.structure
    layers = split.table.layers.layers
    assert s.n_nodes == len(layers)
    assert s.ids[: s.n_nodes] == [layer_id(lay.name) for lay in layers]
    # types are the titles; edges follow the tensors layers hand on
    k = next(i for i, lay in enumerate(layers) if "conv1/Conv" in lay.name and not lay.is_reformat)
    assert s.ops[s.op[k]] == layers[k].type.replace(" ", "")
    assert len(s.src) >= s.n_nodes - 1
    lines = s.weights()[k].split("\n")
    assert lines == [n.rsplit("/", 1)[-1] for n in split.nodes_of[s.ids[k]]][:4]
    assert "/" not in "".join(s.ids[: s.n_nodes])  # layer names do not read as ONNX scopes
    proto = engine_model(split.table)
    assert len(proto.graph.node) == len(layers) and proto.graph.input


def test_selecting_a_layer_selects_its_onnx_nodes_and_back(split):
    fused = next(e for e in split.engine.structure.ids if len(split.nodes_of.get(e, [])) > 1)
    nodes = split.select_layers([fused.replace("\u2215", "/")])
    assert nodes == split.nodes_of[fused]
    assert sorted(split.onnx.selected) == sorted(nodes)  # revealed: drawn, not hidden in groups
    assert sorted(split.onnx.highlighted) == sorted(nodes)
    assert split.selected_layers() == [fused.replace("\u2215", "/")]
    back = split.select_nodes([nodes[0]])
    # the layer built from it (and a reformat copy feeding it, mapped to the same nodes)
    assert fused in back and sorted(split.engine.selected) == sorted(back)
    assert all(nodes[0] in split.nodes_of[b] for b in back)


def test_split_view_needs_the_onnx_model():
    with pytest.raises(WorkbenchError, match="needs the ONNX model"):
        SplitView(H200 / "resnet50_fp16.layers.json", None)


BERT = H200 / "bert_small.structure.onnx"


@pytest.fixture(scope="module")
def bert_split():
    return SplitView(H200 / "bert_small_fp16.layers.json", BERT, profile=H200 / "bert_small_fp16.profile.json")


def _foreign(split):
    k = next(k for k, m in enumerate(split.table.df["mapping"]) if m == "foreign-range")
    return k, split.table.layers.layers[k]


def test_a_foreign_node_range_is_a_collapsed_group_of_its_onnx_nodes(bert_split):
    k, lay = _foreign(bert_split)
    covered = [str(n) for n in bert_split.table.df["onnx_nodes"][k]]
    assert len(covered) > 100  # Myelin fused the whole encoder
    gid = bert_split.graph.element_of_layer[k]
    d = bert_split.engine.data
    assert gid.startswith("scope:") and gid in d.ids
    assert d.labels[d.index(gid)] == f"Myelin: {len(covered)} ONNX nodes"
    # one member per ONNX node it was built from, mapped back to exactly that node
    s = bert_split.engine.structure
    members = s.members(gid[len("scope:"):])
    assert sorted(bert_split.graph.member_of[m] for m in members) == sorted(covered)
    # the reformat copies stay boxes of their own; everything else is one box per layer
    assert len(d) == len(bert_split.table.layers.layers) - 1 + 1 + len(s.model.graph.input) + len(s.model.graph.output)
    # edges at the boundary: the renamed output tensors leave from the members writing the
    # ONNX tensors the reformat copies hand on (looked through the copy)
    for j, other in enumerate(bert_split.table.layers.layers):
        if not other.is_reformat:
            continue
        onnx_out = other.outputs[0].name   # 'last_hidden_state' / 'pooler_output'
        writer = s.model.index.producer[other.inputs[0].name]
        onnx_writer = bert_split.table.index.graph_index.producer[onnx_out]
        assert bert_split.graph.member_of[s.ids[writer]] == bert_split.table.index.ids[onnx_writer]
    # a member box carries its ONNX node's weight lines
    mm = next(m for m in members if bert_split.graph.member_of[m].endswith("/query/MatMul"))
    assert s.weights()[s.ids.index(mm)].startswith("B <256x256>")


def test_a_foreign_group_expands_in_place_by_a_bounded_shift(bert_split):
    k, lay = _foreign(bert_split)
    view = bert_split.engine
    gid = bert_split.graph.element_of_layer[k]
    d0 = view.data
    view.expand(gid)
    d1 = view.data
    assert gid not in d1.ids and len(d1) > len(d0) + 10
    # the lone '/m' scope inside opened with it: its children (encoder, pooler, ...) show
    assert any(i.endswith("/m/encoder") for i in d1.ids)
    members = [i for i in d1.ids if i not in d0.ids]
    lo = min(d1.x[d1.index(i)] - d1.width[d1.index(i)] / 2 for i in members)
    hi = max(d1.x[d1.index(i)] + d1.width[d1.index(i)] / 2 for i in members)
    g = d0.index(gid)
    grow_w = max(0.0, (hi - lo) - d0.width[g])
    grow_r = max(d1.rank[d1.index(i)] for i in members) - d0.rank[g]
    for i in d0.ids:
        if i == gid:
            continue
        a, b = d0.index(i), d1.index(i)
        assert abs(d1.x[b] - d0.x[a]) <= grow_w / 2 + 1e-4, i
        assert d1.rank[b] - d0.rank[a] in (0, grow_r), i
    # selection through the open group: one ONNX node <-> its member box (drawn at this level);
    # a node deeper down selects the collapsed scope holding it
    member = next(i for i in members if i in bert_split.graph.member_of and view.structure.op[
        view.structure.ids.index(i)] == view.structure.ops.index("Range"))
    node = bert_split.graph.member_of[member]
    inner = bert_split.select_nodes([node])
    assert member in inner  # beside it: the reformat copies whose time is attributed to the range
    assert all(e == member or bert_split.table.layers.layers[bert_split.layer_of[e]].is_reformat
               for e in inner), inner
    deep = next(n for n in bert_split.table.df["onnx_nodes"][k] if n.endswith("/pooler/activation/Tanh"))
    assert any(e.endswith("/m/pooler") for e in bert_split.select_nodes([deep]))
    assert lay.name in bert_split.selected_layers()
    view.select([member])  # a click on the member box
    assert bert_split.onnx.selected == [node]
    view.collapse(gid[len("scope:"):])
    assert gid in view.data.ids
