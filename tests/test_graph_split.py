"""The ONNX | engine split view (widgets.splitview) on the H200 ResNet-50 FP16 fixture: the
engine graph is made of the engine's layers, each box lists its ONNX nodes, and selection
maps both ways through the timing mapping."""
from __future__ import annotations

import pytest

from conftest import H200
from workbench.errors import WorkbenchError
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
