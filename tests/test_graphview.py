"""GraphView widget state without a browser: wire format, search, expand/collapse messages,
colours, highlight, and the Inspector's detail pane bound to the selection."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import SAMPLES
from workbench.core.errors import Finding, WorkbenchError
from workbench.core.model import model_from_proto, open_model
from widgets import graphview as gvmod
from widgets.graphview import SEP, GraphView, wire_payload

BERT = SAMPLES / "bert_tiny.onnx"


@pytest.fixture(scope="module")
def bert():
    return open_model(BERT)


def _front(view, **msg):
    """What the browser sends on a click/button."""
    view._on_front_msg(view, msg, [])


def test_wire_payload_is_binary_and_round_trips(bert):
    v = GraphView(bert)
    w = v.graph
    d = v.data
    assert w["n"] == len(d) and w["ids"].split(SEP) == d.ids and w["labels"].split(SEP) == d.labels
    assert np.array_equal(np.frombuffer(w["x"], "<f4"), d.x)
    assert np.array_equal(np.frombuffer(w["y"], "<f4"), d.y)
    assert np.array_equal(np.frombuffer(w["edges"], "<i4").reshape(-1, 2), d.edges)
    assert np.array_equal(np.frombuffer(w["kind"], "u1"), d.kind)
    assert all(isinstance(w[k], bytes) for k in ("x", "y", "op", "kind", "size", "flags", "edges"))
    # the default view of the BERT sample keeps scopes collapsed
    assert any(i.startswith("scope:") for i in d.ids) and len(d) < len(bert.graph.node)


def test_search_highlights_groups_hiding_matches_and_clears(bert):
    v = GraphView(bert)
    v.search = "Softmax"
    softmax = [i for i in bert.node_ids if bert.node_by_id(i).op_type == "Softmax"]
    assert softmax
    expect = {v.data.ids[int(v.data.visible_of[v.structure.element_index(s)])] for s in softmax}
    assert set(v.highlighted) == expect
    assert all(h.startswith("scope:") for h in v.highlighted)  # hidden in collapsed scopes
    v.search = ""
    assert v.highlighted == []


def test_toggle_collapse_reset_messages(bert):
    v = GraphView(bert)
    group = next(i for i in v.data.ids if i.startswith("scope:"))
    n0 = len(v.data)
    _front(v, type="toggle", id=group)
    assert group not in v.data.ids and group[6:] in v.expanded
    assert len(v.data) > n0 and v.graph["n"] == len(v.data)
    assert v.graph["focus"] and all(f in v.data.ids for f in v.graph["focus"])
    member = v.structure.members(group[6:])[0]
    assert member in v.data.ids or any(d.startswith(group + "/") for d in v.data.ids)
    _front(v, type="toggle", id=bert.node_ids[0])  # a node: nothing to expand
    assert len(v.data) > n0
    # "Collapse" on a child (a node directly in the scope, or a sub-scope) closes the scope
    child = next(i for i in v.data.ids if i.startswith(group + "/") or (
        i in bert.node_ids and v.structure.scope_path_of(i)[-1:] == [group[6:]]))
    _front(v, type="collapse", ids=[child])
    assert group in v.data.ids and len(v.data) == n0
    _front(v, type="reset")
    assert len(v.data) == n0
    _front(v, type="painted", ms=123.0)
    assert v.first_paint_ms == 123.0
    with pytest.raises(WorkbenchError, match="no scope"):
        v.expand("/no/such/scope")


def test_color_by_group_takes_legend_priority(bert):
    v = GraphView(bert)
    group = next(i for i in v.data.ids if i.startswith("scope:"))
    members = v.structure.members(group[6:])
    mapping = {m: "#00ff00" for m in members}
    mapping[members[-1]] = "#ff0000"
    v.color_by(mapping, legend={"bad": "#ff0000", "good": "#00ff00"})
    assert len(v.colors) == len(v.data)
    assert v.colors[v.data.index(group)] == "#ff0000"  # one red member colours the group red
    assert v.legend == [["bad", "#ff0000"], ["good", "#00ff00"]]
    # without a legend: the most common member colour
    v.color_by(mapping)
    assert v.colors[v.data.index(group)] == "#00ff00"
    # colours follow re-layouts
    v.expand(group)
    assert len(v.colors) == len(v.data)
    assert v.colors[v.data.index(members[-1])] == "#ff0000" if members[-1] in v.data.ids else True
    v.clear_colors()
    assert v.colors == [] and v.legend == []
    with pytest.raises(WorkbenchError, match="none of the"):
        v.color_by({"nope": "#000000"})


def test_color_by_op_and_findings(bert):
    v = GraphView(bert, expand_all=True)
    colours = v.color_by_op()
    for nid in bert.node_ids[:20]:
        op = bert.node_by_id(nid).op_type
        if op in colours:
            assert v.colors[v.data.index(nid)] == colours[op]
    assert v.legend[0][0].startswith(next(iter(colours)))
    # collapsed: a scope of one op takes that op's colour, a mixed scope the group colour
    c = GraphView(bert)
    c.color_by_op()
    for i, gid in enumerate(c.data.ids):
        if gid.startswith("scope:"):
            ops = {bert.node_by_id(m).op_type for m in c.structure.members(gid[6:])}
            want = colours.get(ops.pop(), gvmod.OTHER_COLOR) if len(ops) == 1 else gvmod.MIXED_COLOR
            assert c.colors[i] == want, gid
    target = bert.node_ids[3]
    v.color_by_findings([Finding("error", "x", "m", nodes=[target]),
                         Finding("warning", "y", "m", nodes=[target, bert.node_ids[4]]).to_dict()])
    assert v.colors[v.data.index(target)] == gvmod.SEVERITY_COLORS["error"]
    assert v.colors[v.data.index(bert.node_ids[4])] == gvmod.SEVERITY_COLORS["warning"]
    assert v.colors[v.data.index(bert.node_ids[5])] == gvmod.OK_COLOR
    assert [x[0] for x in v.legend] == ["error (1)", "warning (1)", "info (0)", "no finding"]


def test_highlight_and_select_map_hidden_nodes_to_groups(bert):
    v = GraphView(bert)
    hidden = next(i for i in bert.node_ids if i not in v.data.ids
                  and bert.node_by_id(i).op_type not in ("Constant", "Identity"))
    lit = v.highlight([hidden])
    assert len(lit) == 1 and lit[0].startswith("scope:") and hidden in v.structure.members(lit[0][6:])
    v.select([hidden])
    assert v.selected == lit
    assert hidden in v.selected_nodes()


def test_flags_survive_on_broken_graph():
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])  # noqa: E731
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n"),
             helper.make_node("Add", ["a", "ghost"], ["y"], name="n")]
    g = helper.make_graph(nodes, "g", [vi("x")], [vi("y")])
    v = GraphView(model_from_proto(helper.make_model(g)), expand_all=True)
    flags = dict(zip(v.data.ids, np.frombuffer(v.graph["flags"], "<i4").tolist()))
    assert flags["n#0"] and flags["n#1"]
    assert {f.code for f in v.findings} == {"duplicate-node-name", "dangling-input"}


def test_missing_bundle_is_a_clear_error(bert, monkeypatch, tmp_path):
    monkeypatch.setattr(gvmod, "_BUNDLE", tmp_path / "graphview.js")
    with pytest.raises(WorkbenchError, match="npm run build") as e:
        GraphView(bert)
    assert e.value.file == str(tmp_path / "graphview.js")


def test_missing_stylesheet_is_a_clear_error(bert, monkeypatch, tmp_path):
    monkeypatch.setattr(gvmod, "_STYLE", tmp_path / "graphview.css")
    with pytest.raises(WorkbenchError, match="npm run build") as e:
        GraphView(bert)
    assert e.value.file == str(tmp_path / "graphview.css")


def test_the_view_carries_its_stylesheet(bert):
    v = GraphView(bert)
    assert v._css == gvmod._STYLE.read_text(encoding="utf-8") and ".wb-graph" in v._css


def test_inspector_detail_pane_follows_graph_selection(bert):
    from widgets import Inspector

    ins = Inspector(BERT, static_check=False)
    view = ins.graph_view
    assert view is not None and ins.graph_slot.children == (view,)
    nid = next(i for i in view.data.ids if i in ins.details and ins.details[i].op == "Gather")
    view.selected = [nid]  # what a click in the browser does
    text = re.sub(r"<[^>]+>", " ", ins.detail_pane.children[0].value)
    d = ins.details[nid]
    assert nid in text and "Gather" in text
    assert all(t.dtype in text for t in d.output_info if t)
    # a group: the pane lists its members
    group = next(i for i in view.data.ids if i.startswith("scope:"))
    view.selected = [group]
    text = ins.detail_pane.children[0].value
    assert group in text and view.structure.members(group[6:])[0] in text
    # a graph input: its dtype and shape (dynamic dims marked)
    view.selected = ["input:input_ids"]
    text = re.sub(r"<[^>]+>", "", ins.detail_pane.children[0].value)
    assert "graph input input_ids" in text and "int64" in text and "batch" in text


def test_names_holding_the_wire_separator_travel_as_lists():
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])  # noqa: E731
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="a" + SEP + "b")], "g",
                          [vi("x")], [vi("y")])
    v = GraphView(model_from_proto(helper.make_model(g)))
    assert v.graph["ids"] == ["a" + SEP + "b", "input:x", "output:y"]
    assert isinstance(wire_payload(v.data)["labels"], list)


def test_inspector_colours_the_graph_by_support_findings():
    from widgets import Inspector

    ins = Inspector(SAMPLES / "needs_fixing.onnx")  # static rules run on open
    refused = {n for f in ins.report.findings if f.severity == "error" for n in f.nodes}
    assert refused
    view = ins.graph_view
    red = {i for i, c in zip(view.data.ids, view.colors) if c == gvmod.SEVERITY_COLORS["error"]}
    assert red == {view.data.ids[k] for k in view.data.visible_index(refused, view.structure)}
    assert view.legend[0] == [f"error ({len(refused)})", gvmod.SEVERITY_COLORS["error"]]
    # picking a failing node highlights it in the graph
    ins.failing_select.value = ins.failing_select.options[0][1]
    assert view.highlighted == view._visible_ids(view._elements([ins.failing_select.value]))


def test_constants_fold_into_their_reader_and_light_it(bert):
    v = GraphView(bert, expanded=v_all(bert))
    s = v.structure
    folded = [s.ids[k] for k in range(s.n_nodes) if s.ops[s.op[k]] == "Constant"
              and s.ids[k] not in v.data.ids]
    assert folded, "bert_tiny has Constant nodes with a single reader"
    k = s.element_index(folded[0])
    reader = [int(d) for a, d in zip(s.src.tolist(), s.dst.tolist()) if a == k]
    assert v.highlight([folded[0]]) == [s.ids[reader[0]]]
    # expand_all shows every node again, constants as their own boxes
    v.expand_all()
    assert folded[0] in v.data.ids and len(v.data) == s.n


def v_all(model):
    from workbench.graphs.layout import GraphStructure

    return GraphStructure(model).scopes


def test_color_by_values_is_a_continuous_scale_with_many_levels():
    from conftest import H200
    from widgets.timing import TimingPanel

    r50 = H200 / "resnet50.structure.onnx"
    v = GraphView(r50, expand_all=True)
    p = TimingPanel(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                    onnx=r50, graph_view=v)
    mapping = p.heatmap(levels=16)
    nt = p.table.node_times(include_attributed=True)
    nt = nt[nt["time_ms"] > 0]
    ramp = gvmod.heat_ramp(16)
    hot = nt.sort_values("time_ms").iloc[-1]["node_id"]
    cold = nt.sort_values("time_ms").iloc[0]["node_id"]
    assert mapping[hot] == ramp[-1] and mapping[cold] == ramp[0]
    assert len(set(mapping.values())) >= 10 and len(set(ramp)) == 16
    assert v.scale["title"] == "time (ms) · log" and len(v.scale["stops"]) == 16
    drawn = [c for c in v.colors if c]
    assert len(set(drawn)) >= 10
    # nodes without time have no colour: the front end draws them white with an outline
    assert any(c is None for c in v.colors)
    with pytest.raises(WorkbenchError, match="no values"):
        v.color_by_values({})
    v.clear_colors()
    assert v.scale == {} and v.colors == []


def test_wire_payload_carries_boxes_weights_and_bends():
    from conftest import H200

    v = GraphView(H200 / "resnet50.structure.onnx", expand_all=True)
    w = wire_payload(v.data)
    n, e = len(v.data), v.data.edges.shape[0]
    assert len(w["width"]) == 4 * n and len(w["bend_start"]) == len(w["bend_count"]) == 4 * e
    start, count = np.frombuffer(w["bend_start"], "<i4"), np.frombuffer(w["bend_count"], "<i4")
    assert np.array_equal(count, np.diff(v.data.bend_ptr)) and count.sum() > 0
    assert (start + count).max() * 4 <= len(w["bend_x"])
    assert "W <64x3x7x7>" in w["info"].split(SEP)[v.data.index("/conv1/Conv")]
    assert len(w["edge_labels"].split(SEP)) == e or e == 1


def test_the_bends_of_edges_that_share_a_trunk_are_sent_once():
    """A mask read by every layer: its edges run down one dummy chain, so the wire holds that
    trunk once and every edge still decodes to exactly its own bends."""
    import sys

    from conftest import REPO
    sys.path.insert(0, str(REPO / "benchmarks"))
    from graph_layout import transformer_like
    from workbench.core.model import model_from_proto

    v = GraphView(model_from_proto(transformer_like(1000)), expand_all=True)
    d = v.data
    w = wire_payload(d)
    start, count = np.frombuffer(w["bend_start"], "<i4"), np.frombuffer(w["bend_count"], "<i4")
    xs = np.frombuffer(w["bend_x"], "<f4")
    for e in range(d.edges.shape[0]):
        assert np.array_equal(xs[start[e]:start[e] + count[e]],
                              d.bend_x[d.bend_ptr[e]:d.bend_ptr[e + 1]]), e
    # the mask's long edges down the encoder share a trunk: 6568 bends, 1633 sent
    assert d.bend_x.size > 3 * xs.size
    j = d.to_dict()  # the JSON form (`workbench graph --json`) stores them the same way
    assert j["bend_start"] == start.tolist() and j["bend_count"] == count.tolist()
    assert len(j["bend_x"]) == xs.size


def test_a_group_that_fails_to_open_stays_closed_in_the_views_state(bert, monkeypatch):
    """A re-layout that raises leaves `expanded` as it was (the view still draws the group
    collapsed; it used to list the scope as open)."""
    v = GraphView(bert)
    group = next(i for i in v.data.ids if i.startswith("scope:"))
    before = v.expanded

    def boom(*a, **k):
        raise RuntimeError("layout failed")

    monkeypatch.setattr(v.structure, "expand_in_place", boom)
    monkeypatch.setattr(v.structure, "view", boom)
    with pytest.raises(RuntimeError, match="layout failed"):
        v.expand(group)
    assert v.expanded == before and group in v.data.ids


def test_shared_bends_keeps_an_edge_whose_bends_leave_the_trunk():
    """Edges from one upper element share the longest one's bends only where every bend
    matches; one that differs keeps its own, and every edge decodes to its own bends."""
    from workbench.graphs.layout import shared_bends

    rank = np.array([0, 3, 2, 3, 1])
    edges = np.array([[0, 1], [0, 2], [0, 3], [4, 1]])  # 0 -> three readers, 4 -> one
    ptr = np.array([0, 2, 3, 5, 6])
    bx = np.array([1.0, 1.5, 1.0, 1.0, 2.5, 7.0], dtype=np.float32)  # edge 2 bends elsewhere
    start, count, xs = shared_bends(rank, edges, ptr, bx)
    for e in range(len(edges)):
        assert np.array_equal(xs[start[e]:start[e] + count[e]], bx[ptr[e]:ptr[e + 1]]), e
    assert start[1] == start[0]        # a prefix of the trunk: shared
    assert start[2] != start[0]        # its second bend differs: its own copy
    assert xs.size == 5
