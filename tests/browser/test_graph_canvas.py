"""The graph view's drawing in headless chromium on real graphs, without JupyterLab: the widget's
bundle on a localhost page (benchmarks/graph_render.py's StaticPage) fed the real wire payload.
Boxes show their op type and never overlapping labels; the ResNet-50 FP16 time heat map shows
many colour levels; weights and inputs/outputs drawn; search next/previous; screenshots go to
test-artifacts/."""
from __future__ import annotations

import base64
import importlib.util
import json
import sys

import pytest

from browser_support import ARTIFACTS, REPO
from conftest import H200

pytestmark = pytest.mark.browser
BERT = H200 / "bert_small.structure.onnx"
R50 = H200 / "resnet50.structure.onnx"


def _render_mod():
    spec = importlib.util.spec_from_file_location("graph_render_bench", REPO / "benchmarks" / "graph_render.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["graph_render_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def page(browser):
    """A plain page in the session's chromium (one Playwright per process: a second
    sync_playwright() inside the first one's loop is refused)."""
    mod = _render_mod()
    pg = browser.new_page(viewport={"width": 1280, "height": 820})
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    sp = mod.StaticPage(pg)
    sp.errors = errors
    try:
        yield sp
    finally:
        sp.close()
        pg.close()


def _shot(sp, name):
    ARTIFACTS.mkdir(exist_ok=True)
    sp.page.locator(".wb-graph").screenshot(path=str(ARTIFACTS / name))


def _overlaps(labels):
    out = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if a["x0"] < b["x1"] - 0.5 and b["x0"] < a["x1"] - 0.5 and a["y0"] < b["y1"] - 0.5 and b["y0"] < a["y1"] - 0.5:
                out.append((a["text"], b["text"]))
    return out


def test_bert_opening_view_every_box_shows_its_op_and_no_label_overlaps(page):
    from widgets.graphview import GraphView

    view = GraphView(BERT)
    page.open(view.data, height=700)
    st = page.state()
    assert int(st["nodes"]) == len(view.data)
    inside = page.js("""(() => { const r = h.root.querySelector('canvas').getBoundingClientRect();
        return h.graph.nodes().filter((id) => { const b = h.nodeClientBox(id);
          return b.x0 >= r.left && b.x1 <= r.right && b.y0 >= r.top && b.y1 <= r.bottom; }); })()""")
    assert len(inside) >= 10, inside
    labels = page.js("h.drawnLabels()")
    by_id = {}
    for lab in labels:
        by_id.setdefault(lab["id"], []).append(lab["text"])
    d = view.data
    for nid in inside:
        i = d.index(nid)
        title = d.ops[d.op[i]] if d.kind[i] == 0 else d.labels[i]
        assert title in by_id.get(nid, []), (nid, title, by_id.get(nid))
    assert not _overlaps(labels)
    # weights folded into boxes are drawn as lines ('W <...>' style), inputs are boxes too
    assert any("<" in t for ts in by_id.values() for t in ts)
    _shot(page, "graph-canvas-bert-opening.png")
    # the whole graph (Fit): still no two labels overlap (those that do not fit are hidden)
    page.js("h.fitTo([], false)")
    page.js("h.drawNow()")
    assert not _overlaps(page.js("h.drawnLabels()"))
    _shot(page, "graph-canvas-bert-fit.png")
    # zoomed in: node names and edge labels join, still without overlaps
    page.js("h.fitTo([arg], false)", d.ids[len(d) // 2])
    page.js("h.drawNow()")
    zoomed = page.js("h.drawnLabels()")
    assert len(zoomed) > 0 and not _overlaps(zoomed)
    _shot(page, "graph-canvas-bert-zoomed.png")
    assert not page.errors, page.errors


def test_resnet50_fp16_heat_map_has_ten_colour_levels_at_fit_zoom(page):
    from widgets.graphview import GraphView
    from widgets.timing import TimingPanel

    view = GraphView(R50, expand_all=True)
    panel = TimingPanel(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                        onnx=R50, graph_view=view)
    mapping = panel.heatmap(levels=16)
    assert len(set(mapping.values())) >= 10
    page.open(view.data, height=700, colors=view.colors, legend=view.legend, scale=view.scale)
    page.js("h.fitTo([], false)")
    page.js("h.drawNow()")
    assert int(page.state()["colored"]) > 50
    # distinct heat colours in the drawn canvas pixels (not just in the payload)
    png = page.page.locator(".wb-graph canvas.wb-main").screenshot()
    seen = page.page.evaluate("""async ([b64, ramp]) => {
        const img = new Image(); img.src = 'data:image/png;base64,' + b64; await img.decode();
        const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
        const g = c.getContext('2d'); g.drawImage(img, 0, 0);
        const d = g.getImageData(0, 0, img.width, img.height).data;
        const want = ramp.map((h) => [1, 3, 5].map((k) => parseInt(h.slice(k, k + 2), 16)));
        const hit = new Set();
        for (let i = 0; i < d.length; i += 4)
          want.forEach((w, j) => { if (Math.abs(d[i] - w[0]) < 6 && Math.abs(d[i + 1] - w[1]) < 6 && Math.abs(d[i + 2] - w[2]) < 6) hit.add(j); });
        return hit.size; }""", [base64.b64encode(png).decode(), sorted(set(mapping.values()))])
    assert seen >= 10, seen
    legend = page.page.inner_text(".wb-graph .wb-legend")
    assert "time (ms)" in legend and "no data" in legend
    _shot(page, "graph-canvas-resnet50-fp16-heat.png")
    # a node without time is white with an outline, not a grey dot
    d = view.data
    no_time = [d.ids[i] for i in range(len(d)) if not view.colors[i] and d.kind[i] == 0]
    if no_time:
        assert page.js("h.displayedColor(arg)", no_time[0]) == "#ffffff"
    assert not page.errors, page.errors


def test_a_highlight_fades_the_heat_map_around_it_instead_of_wiping_it(page):
    """TimingPanel.select_layer then heatmap() (06_timing): the highlighted layer's nodes keep
    their colour; the others are faded, not the flat grey that hid every level."""
    from widgets.graphview import GraphView
    from widgets.timing import TimingPanel

    view = GraphView(R50, expand_all=True)
    panel = TimingPanel(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                        onnx=R50, graph_view=view)
    mapping = panel.heatmap(levels=16)
    d = view.data
    lit = [d.ids[i] for i in range(len(d)) if view.colors[i]][:2]
    page.open(d, height=700, colors=view.colors, legend=view.legend, scale=view.scale,
              highlighted=lit)
    page.js("h.drawNow()")
    others = [i for i in range(len(d)) if view.colors[i] and d.ids[i] not in lit]
    shown = page.js("arg.map((id) => h.displayedColor(id))", [d.ids[i] for i in others])
    assert page.js("arg.map((id) => h.displayedColor(id))", lit) == \
        [view.colors[d.index(x)] for x in lit]
    assert "#e4e4e4" not in shown
    for i, got in zip(others, shown):  # each: the overlay colour mixed 60% with white
        c = [int(view.colors[i][k:k + 2], 16) for k in (1, 3, 5)]
        want = "#" + "".join(f"{round(v + (255 - v) * 0.6):02x}" for v in c)
        assert got == want, (d.ids[i], view.colors[i], got)
    assert len(set(shown)) >= 10 and len(set(mapping.values())) >= 10
    _shot(page, "graph-canvas-resnet50-heat-highlighted.png")
    assert not page.errors, page.errors


def test_search_next_previous_walks_the_matches(page):
    from widgets.graphview import GraphView

    view = GraphView(R50, expand_all=True)
    view.search = "Add"
    page.open(view.data, height=600, highlighted=view.highlighted)
    hits = page.js("[h.stepMatch(1), h.stepMatch(1), h.stepMatch(-1)]")
    assert hits[0] in view.highlighted and hits[1] in view.highlighted and hits[0] != hits[1]
    assert hits[2] == hits[0]
    assert page.js("JSON.parse(h.root.dataset.selected)") == [hits[0]]
    # breadcrumbs name the scopes of the selection
    crumbs = page.page.inner_text(".wb-graph .wb-crumbs")
    assert crumbs.startswith("graph") and "›" in crumbs
    assert not page.errors, page.errors


def test_group_expands_in_place_and_the_rest_barely_moves(page):
    from widgets.graphview import GraphView

    view = GraphView(BERT)
    d0 = view.data
    groups = [i for i in d0.ids if i.startswith("scope:")]
    g = max(groups, key=lambda i: d0.size[d0.index(i)])
    page.open(d0, height=600)
    before = {i: page.js("h.worldXY(arg)", i) for i in d0.ids}
    view.expand(g)  # what a click on the group does (the toggle message)
    d1 = view.data
    page.open(d1, height=600)
    after = {i: page.js("h.worldXY(arg)", i) for i in d1.ids}
    members = [i for i in d1.ids if i not in d0.ids]
    assert members and g not in d1.ids
    xs = [after[i]["x"] for i in members]
    grow_px = max(0.0, (max(xs) - min(xs)) + 200 - d0.width[d0.index(g)] * 100)
    r_g = d0.rank[d0.index(g)]
    for i in d0.ids:
        if i not in after:
            continue
        dx = abs(after[i]["x"] - before[i]["x"])
        assert dx <= grow_px / 2 + 1, (i, dx)
        if d0.rank[d0.index(i)] < r_g:  # above the group: not moved at all
            assert abs(after[i]["y"] - before[i]["y"]) < 0.5 and dx < 0.5, i
    _shot(page, "graph-canvas-bert-expanded-in-place.png")
    assert not page.errors, page.errors


def test_first_frame_draws_what_an_eager_scene_draws_and_the_store_answers(page):
    """The first frame makes only the edges its rows need and leaves the minimap for the
    next frame: the opening view drawn again once every edge exists (after Fit) is the same
    picture, the minimap is drawn by the time the first frame is on screen, and the lazily
    filled element store answers as a filled one would."""
    from widgets.graphview import GraphView

    view = GraphView(BERT, expand_all=True)
    d = view.data
    page.open(d, height=700)
    st = page.state()
    assert int(st["firstFrame"]) >= int(st["firstPaint"]) >= int(st["renderStart"])
    timings = json.loads(st["timings"])
    assert {"decode_ms", "scene_ms", "first_frame_ms"} <= set(timings)
    canvas = page.page.locator(".wb-graph canvas.wb-main")
    opening = canvas.screenshot()
    cam = page.js("h.camera.getState()")
    page.js("h.fitTo([], false)")
    page.js("h.drawNow()")
    page.js("h.camera.setState(arg)", {"x": cam["x"], "y": cam["y"], "scale": cam["scale"]})
    page.js("h.drawNow()")
    assert canvas.screenshot() == opening
    # the minimap shows the graph's dots (not only its frame)
    dots = page.page.evaluate("""() => { const c = document.querySelector('.wb-graph canvas.wb-minimap');
        const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 0 && !(px[i] > 200 && px[i + 1] < 80)) n++;
        return n; }""")
    assert dots > 100, dots
    # the element store: order, edges, attributes and lookups
    assert page.js("h.graph.order") == len(d)
    assert page.js("h.graph.size") == len({(int(a), int(b)) for a, b in d.edges})
    a, b = (d.ids[int(k)] for k in d.edges[0])
    assert page.js("h.graph.hasEdge(arg[0], arg[1])", [a, b]) and not page.js("h.graph.hasEdge(arg[1], arg[0])", [a, b])
    k = len(d) // 2
    attrs = page.js("h.graph.getNodeAttributes(arg)", d.ids[k])
    assert attrs["index"] == k and attrs["label"] == d.labels[k]
    assert sorted(page.js("h.graph.filterNodes((n, a) => a.kind === 'input')")) == \
        sorted(i for i in d.ids if i.startswith("input:"))
    assert not page.errors, page.errors
