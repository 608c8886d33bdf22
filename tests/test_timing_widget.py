"""TimingPanel widget state without a browser: clicks, colour-by, heat map on a real GraphView."""
from __future__ import annotations

import pytest
from plotly.callbacks import InputDeviceState, Points

from conftest import H200, REPO
from widgets.graphview import GraphView
from widgets.timing import HEAT_COLORS, TimingPanel, heat_mapping
from workbench.core.errors import WorkbenchError
from workbench.timing import LayerTable, compare

R50 = H200 / "resnet50.structure.onnx"
DATA = REPO / "tests" / "data" / "timing"


def _click(panel, trace_index, point):
    tr = panel.bars.data[trace_index]
    tr._dispatch_on_click(Points(point_inds=[point], xs=[tr.x[point]], ys=[tr.y[point]],
                                 trace_name=tr.name, trace_index=trace_index), InputDeviceState())
    return tr.customdata[point]


@pytest.fixture(scope="module")
def tables():
    t16 = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json", onnx=R50)
    t32 = LayerTable.build(H200 / "resnet50_fp32.layers.json", H200 / "resnet50_fp32.profile.json", onnx=R50)
    return t16, t32


def test_click_selects_layer_and_its_onnx_nodes_in_the_graph_view(tables):
    t16, t32 = tables
    gv = GraphView(R50)
    p = TimingPanel(t16, vs=t32, graph_view=gv, names=("fp16", "fp32"), top=40)
    assert p.tab_titles == ["Layers", "Scopes", "Compare", "Findings", "vs PyTorch"]
    # bars: one trace per layer type among the 40 slowest, slowest first overall
    shown = [n for tr in p.bars.data for n in tr.customdata]
    assert len(shown) == 40
    slowest = t16.df.sort_values("time_ms", ascending=False).iloc[0]["name"]
    conv = next(i for i, tr in enumerate(p.bars.data) if tr.name == "CaskConvolution")
    k = list(p.bars.data[conv].customdata).index(slowest)
    name = _click(p, conv, k)
    assert name == slowest == "/conv1/Conv + /relu/Relu"
    assert p.selected_layer == name and p.selected_nodes == ["/conv1/Conv", "/relu/Relu"]
    assert set(gv.highlighted) == {"/conv1/Conv", "/relu/Relu"} and gv.selected == gv.highlighted
    assert p.bars.data[conv].selectedpoints == (k,)
    assert "CaskConvolution" in p.detail.value and "metadata" in p.detail.value
    # a reformat bar selects the nodes of the layer it serves
    ref = next(i for i, tr in enumerate(p.bars.data) if tr.name == "Reformat")
    names = list(p.bars.data[ref].customdata)
    j = names.index("Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu/Relu")
    _click(p, ref, j)
    assert p.selected_nodes == ["/conv1/Conv", "/relu/Relu"] and "reformat serving" in p.detail.value
    assert p.bars.data[conv].selectedpoints in ((), None)


def test_colour_by_precision_and_layer_count_update_in_place(tables):
    t16, _ = tables
    p = TimingPanel(t16, top=30)
    fig_id = id(p.bars)
    p.color_by.value = "precision"
    assert {tr.name for tr in p.bars.data} == {"FP16", "FP32"} and id(p.bars) == fig_id
    p.top.value = 10
    assert sum(len(tr.customdata) for tr in p.bars.data) == 10
    fp32 = next(i for i, tr in enumerate(p.bars.data) if tr.name == "FP32")
    assert _click(p, fp32, 0) == p.selected_layer  # handlers re-attached after the redraw
    assert p.graph_view is None and p.heat_btn.disabled


def test_heat_map_colours_graph_by_time(tables):
    t16, _ = tables
    gv = GraphView(R50)
    p = TimingPanel(t16, graph_view=gv)
    mapping = p.heatmap()
    nt = t16.node_times()
    hottest = nt.sort_values("time_ms").iloc[-1]["node_id"]
    coolest = nt[nt["time_ms"] > 0].sort_values("time_ms").iloc[0]["node_id"]
    assert mapping[hottest] == HEAT_COLORS[-1] and mapping[coolest] == HEAT_COLORS[0]
    assert mapping["/Flatten"] == "#d9d9d9"  # folded away by TensorRT: no time
    assert [c for _, c in gv.legend][:5] == HEAT_COLORS[::-1] and gv.legend[-1][0] == "no time"
    assert len(gv.colors) > 0
    assert heat_mapping(t16)[0] == mapping


def test_compare_view_and_header_figures(tables):
    t16, t32 = tables
    p = TimingPanel(t16, vs=t32, names=("fp16", "fp32"))
    c = compare(t32, t16, ("fp32", "fp16"))
    assert p.comparison["speedup"] == pytest.approx(c["speedup"])
    assert f"x{c['speedup']:.2f} vs fp32" in p.header.value
    assert [tr.name for tr in p.compare_fig.data] == ["fp32", "fp16"]
    conv = list(p.compare_fig.data[0].x).index("CaskConvolution")
    assert p.compare_fig.data[0].y[conv] == pytest.approx(
        next(r["fp32_ms"] for r in c["by_type"] if r["type"] == "CaskConvolution"))
    assert "reformat-heavy" in p.findings_html.value


def test_latency_tab_from_a_live_capture_and_panel_without_profile():
    onnx = REPO / "sample_models" / "resnet_tiny.onnx"
    p = TimingPanel(DATA / "resnet_tiny_fp16.layers.json", DATA / "resnet_tiny_fp16.profile.json",
                    onnx=onnx, graph_view=GraphView(onnx))
    assert "Latency" in p.tab_titles and "P50" in p.header.value
    hist = p.latency_fig.data[0]
    assert len(hist.x) == len(p.table.profile.latency_ms)
    bare = TimingPanel(H200 / "resnet50_fp16.layers.json", onnx=R50, graph_view=GraphView(R50))
    assert "no profile" in bare.header.value and "Scopes" not in bare.tab_titles
    with pytest.raises(WorkbenchError, match="no per-layer times"):
        bare.heatmap()


def test_treemap_click_selects_a_scope_and_graph_selection_lights_layers(tables):
    t16, _ = tables
    gv = GraphView(R50, expand_all=True)
    p = TimingPanel(t16, graph_view=gv, top=107)
    tm = p.treemap.data[0]
    k = list(tm.ids).index("/layer1/layer1.0")
    tm._dispatch_on_click(Points(point_inds=[k], xs=[], ys=[], trace_name=None, trace_index=0),
                          InputDeviceState())
    nt = t16.node_times()
    want = sorted(nt[nt["node"].str.startswith("/layer1/layer1.0/")]["node_id"])
    assert p.selected_scope == "/layer1/layer1.0" and sorted(p.selected_nodes) == want
    assert sorted(gv.selected) == want and len(want) == 8  # 3 convs, 3 relus, downsample, Add
    # the reverse: selecting a node in the graph view lights the layer(s) that cover it
    gv.selected = ["/layer2/layer2.1/relu_1/Relu"]
    assert p.graph_layers == ["/layer2/layer2.1/conv2/Conv + /layer2/layer2.1/relu_1/Relu"]
    lit = [tr.customdata[i] for tr in p.bars.data for i in (tr.selectedpoints or ())]
    assert lit == p.graph_layers
    # a selection pushed by the panel itself does not bounce back
    p.select_layer("/maxpool/MaxPool")
    assert p.graph_layers == ["/layer2/layer2.1/conv2/Conv + /layer2/layer2.1/relu_1/Relu"]


def test_selecting_a_layer_shows_its_nodes_not_their_collapsed_group(tables):
    """06_timing: selecting a layer inside a collapsed scope selected the group
    ('scope:/layer4/layer4.0') and left the view at the top of the model; now the scope opens,
    the layer's ONNX nodes are selected and the layout's focus (the first paint's zoom) is
    them; the rest of the model stays collapsed."""
    fp16 = tables[0]
    view = GraphView(R50, height=420)
    before = len(view.data.ids)
    assert "scope:/layer4/layer4.0" in view.data.ids  # collapsed at first
    panel = TimingPanel(fp16, graph_view=view, top=40)
    layer = "/layer4/layer4.0/conv2/Conv + /layer4/layer4.0/relu_1/Relu"
    ids = panel.select_layer(layer)
    want = ["/layer4/layer4.0/conv2/Conv", "/layer4/layer4.0/relu_1/Relu"]
    assert ids == want and view.selected == want and view.highlighted == want
    assert view.graph["focus"] == want
    assert "/layer4/layer4.0" in view.expanded and "scope:/layer4/layer4.0" not in view.data.ids
    assert "scope:/layer4/layer4.1" in view.data.ids  # the other scopes keep their groups
    assert before < len(view.data.ids) < before + 20
    panel.heatmap()  # colouring keeps the selection
    assert view.selected == want
