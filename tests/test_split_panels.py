"""The ONNX | engine split view used by the Timing and Compare panels (no browser): the Timing
panel on the H200 ResNet-50 FP16 fixture drives both sides and takes clicks from both; the
Compare panel colours both sides by the real per-tensor errors of resnet_tiny (onnxruntime FP32
vs its FP16 conversion) with the real engine layer information of that model's FP16 engine."""
from __future__ import annotations

import math

import pytest
from plotly.callbacks import InputDeviceState, Points

from conftest import H200, REPO, SAMPLES
from widgets.compare import ComparePanel
from widgets.splitview import SplitView
from widgets.timing import TimingPanel
from workbench.precision.transform import convert
from workbench.timing import LayerTable

R50 = H200 / "resnet50.structure.onnx"
TIMING = REPO / "tests" / "data" / "timing"


@pytest.fixture(scope="module")
def t16():
    return LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json", onnx=R50)


def _click_bar(panel, name):
    for ti, tr in enumerate(panel.bars.data):
        names = list(tr.customdata)
        if name in names:
            k = names.index(name)
            tr._dispatch_on_click(Points(point_inds=[k], xs=[tr.x[k]], ys=[tr.y[k]], trace_name=tr.name,
                                         trace_index=ti), InputDeviceState())
            return ti, k
    raise AssertionError(name)


def test_timing_panel_drives_a_split_view_both_ways(t16):
    split = SplitView(t16, R50)
    p = TimingPanel(t16, graph_view=split, top=40)
    assert p.split is split and p.graph_view is split.onnx and "Graph" not in p.tab_titles
    name = "/conv1/Conv + /relu/Relu"
    _click_bar(p, name)
    # the bar selects the layer on the engine side and its ONNX nodes on the ONNX side
    assert split.selected_layers() == [name]
    assert sorted(split.onnx.selected) == ["/conv1/Conv", "/relu/Relu"]
    # a click on the engine side lights up that layer's bar
    other = next(n for n in t16.df.sort_values("time_ms", ascending=False)["name"][:40]
                 if n != name and "Reformat" not in n and t16.node_ids_of(n))
    split.engine.selected = [split.graph.element_of_layer[int(t16.df.index[t16.df["name"] == other][0])]]
    assert other in p.graph_layers
    lit = [tr.customdata[i] for tr in p.bars.data for i in (tr.selectedpoints or ())]
    assert other in lit
    # the heat map colours both sides: ONNX nodes by node time, engine layers by layer time
    p.heatmap(levels=12)
    assert split.onnx.scale["title"].startswith("time") and split.engine.scale["title"].startswith("layer time")
    d = split.engine.data
    slow = t16.df.sort_values("time_ms", ascending=False).iloc[0]
    fast = t16.df[t16.df["time_ms"] > 0].sort_values("time_ms").iloc[0]
    col = dict(zip(d.ids, split.engine.colors))
    ramp = [c for _, c in split.engine.scale["stops"]]
    el = split.graph.element_of_layer
    assert col[el[int(slow["index"])]] == ramp[-1] and col[el[int(fast["index"])]] == ramp[0]


def test_timing_panel_with_the_onnx_model_opens_a_split_view_in_its_graph_tab(t16):
    p = TimingPanel(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json", onnx=R50, top=20)
    assert p.tab_titles[-1] == "Graph" and p.split is None  # built when the tab is opened
    p.select_layer("/conv1/Conv + /relu/Relu")
    p.tabs.selected_index = p.tab_titles.index("Graph")
    assert isinstance(p.split, SplitView) and p.graph_box.children == (p.split,)
    # the selection made before opening shows on both sides
    assert p.split.selected_layers() == ["/conv1/Conv + /relu/Relu"]
    assert sorted(p.split.onnx.selected) == ["/conv1/Conv", "/relu/Relu"]
    assert not p.heat_btn.disabled


@pytest.fixture(scope="module")
def compare_panel(tmp_path_factory):
    fp16 = tmp_path_factory.mktemp("cmp") / "r16.onnx"
    convert(SAMPLES / "resnet_tiny.onnx", "fp16", measure=False).save(fp16)
    p = ComparePanel(SAMPLES / "resnet_tiny.onnx", fp16, inputs=SAMPLES / "calib" / "resnet_tiny.npz",
                     layers=TIMING / "resnet_tiny_fp16.layers.json")
    p.wait(300)
    assert p.error is None and p.report is not None
    return p


def test_compare_panel_shows_the_error_heat_map_on_both_sides(compare_panel):
    p = compare_panel
    assert not p.split_btn.disabled and p.split is None
    p.split_btn.click()
    split = p.split
    assert isinstance(split, SplitView) and p.split_box.children == (split,)
    err = {n: max(r if math.isfinite(r) else 1e6, 1e-12) for n, r in p.error_by_node().items()}
    # ONNX side: every node with an error value is coloured, the worst in the hottest colour
    onnx_cols = dict(zip(split.onnx.data.ids, split.onnx.colors))
    ramp = [c for _, c in split.onnx.scale["stops"]]
    worst = max((n for n in err if n in onnx_cols), key=err.get)
    assert onnx_cols[worst] == ramp[-1]
    assert split.onnx.scale["title"].startswith("relative error")
    # engine side: a layer carries the worst error of the ONNX nodes it was built from
    eng_cols = dict(zip(split.engine.data.ids, split.engine.colors))
    layers = split.table.layers.layers
    per = {e: max(err[n] for n in ns if n in err) for e, ns in split.nodes_of.items()
           if e in eng_cols and any(n in err for n in ns) and not layers[split.layer_of[e]].is_reformat}
    reformats = [e for e in eng_cols if e in split.layer_of and layers[split.layer_of[e]].is_reformat]
    assert reformats and all(eng_cols[e] is None for e in reformats)  # no error of their own
    assert any(len([n for n in split.nodes_of[e] if n in err]) > 1 for e in per)  # fused layers
    level = {e: ramp.index(eng_cols[e]) for e in per}
    by_value = sorted(per, key=per.get)
    assert level[by_value[0]] == 0 and level[by_value[-1]] == len(ramp) - 1
    assert all(level[a] <= level[b] for a, b in zip(by_value, by_value[1:]))  # monotone in error
    worst_engine = by_value[-1]
    assert worst in split.nodes_of[worst_engine] or per[worst_engine] == err[worst]
    # selection still syncs: the worst layer selects its ONNX nodes
    nodes = split.select_layers([split.table.layers.layers[split.layer_of[worst_engine]].name])
    assert nodes and set(nodes) <= set(split.onnx.structure.ids)


def test_compare_panel_without_layer_information_has_no_split_view(tmp_path):
    p = ComparePanel(SAMPLES / "resnet_tiny.onnx", run=False)
    assert p.split_btn.disabled and p.engine_layers() is None
    with pytest.raises(Exception, match="no engine layer information"):
        p.split_view()
