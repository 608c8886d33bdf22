"""The ONNX | engine split view in a real JupyterLab + headless chromium on the H200 ResNet-50
FP16 fixture: clicking an engine layer selects its ONNX nodes, clicking an ONNX node selects
the layer(s) built from it."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import H200

pytestmark = pytest.mark.browser
ONNX_VIEW = "window.__wbGraphViews[window.__wbGraphViews.length - 2]"
ENGINE_VIEW = "window.__wbGraphViews[window.__wbGraphViews.length - 1]"


def _py(lab, expr):
    out = lab.run_cell(f"import json as _j; print(_j.dumps({expr}))")
    return json.loads(out.strip().splitlines()[-1])


def _click(lab, view, element_id, shift=False):
    lab.page.evaluate(f"() => {view}.root.scrollIntoView({{block: 'center'}})")
    lab.page.evaluate(f"(id) => {view}.fitTo([id], false)", element_id)
    lab.page.wait_for_timeout(250)
    p = lab.page.evaluate(f"(id) => {view}.nodeClientXY(id)", element_id)
    if shift:
        lab.page.keyboard.down("Shift")
    lab.page.mouse.click(p["x"], p["y"])
    if shift:
        lab.page.keyboard.up("Shift")


def _open_split(lab, stem: str, notebook: str) -> None:
    """A notebook showing SplitView(STEM_fp16.layers.json, STEM.structure.onnx) from the H200
    fixtures, run until both views have painted."""
    for name in (f"{stem}.structure.onnx", f"{stem}_fp16.layers.json", f"{stem}_fp16.profile.json"):
        shutil.copy(H200 / name, lab.server.root / name)
    lab.open_notebook(notebook, [
        "from widgets.splitview import SplitView\n"
        f"split = SplitView('{stem}_fp16.layers.json', '{stem}.structure.onnx',"
        f" profile='{stem}_fp16.profile.json', height=460)\n"
        "split"])
    lab.run_all()
    lab.page.wait_for_function(
        "() => window.__wbGraphViews && window.__wbGraphViews.length >= 2 && "
        f"{ENGINE_VIEW}.root.dataset.firstPaint && {ONNX_VIEW}.root.dataset.firstPaint", timeout=60000)


def test_split_view_selects_across_onnx_and_engine(lab):
    _open_split(lab, "resnet50", "split.ipynb")
    # an engine layer fusing several ONNX nodes
    layer, nodes = _py(lab, "next([e, split.nodes_of[e]] for e in split.engine.data.ids "
                            "if len(split.nodes_of.get(e, [])) > 1)")
    _click(lab, ENGINE_VIEW, layer)
    lab.page.wait_for_function(
        f"(ns) => ns.every((n) => JSON.parse({ONNX_VIEW}.root.dataset.selected).includes(n))",
        arg=nodes, timeout=15000)
    assert sorted(_py(lab, "split.onnx.selected")) == sorted(nodes)
    lab.screenshot_element(".jupyter-widgets.widget-hbox", "graph-split-engine-click.png")
    # and back: an ONNX node selects the layer built from it
    _click(lab, ONNX_VIEW, nodes[0])
    lab.page.wait_for_function(
        f"(l) => JSON.parse({ENGINE_VIEW}.root.dataset.selected).includes(l)", arg=layer, timeout=15000)
    assert layer in _py(lab, "split.engine.selected")
    lab.screenshot_element(".jupyter-widgets.widget-hbox", "graph-split-onnx-click.png")
    assert not lab.blocked, lab.blocked


def test_a_foreign_node_range_opens_in_place_and_selects_its_onnx_nodes(lab):
    """H200 BERT FP16: Myelin fused the encoder into one ForeignNode layer, drawn as one group;
    a click opens it where it stands (the other boxes move sideways by at most half the width
    it gained, boxes above it not at all) and its member boxes select their ONNX nodes."""
    _open_split(lab, "bert_small", "split_bert.ipynb")
    gid = _py(lab, "next(e for e in split.graph.element_of_layer if e.startswith('scope:'))")
    covered = _py(lab, f"sorted(split.graph.member_of[m] for m in split.engine.structure.members({gid[6:]!r}))")
    assert len(covered) > 100
    # shift+click selects the whole range: every ONNX node it was built from
    _click(lab, ENGINE_VIEW, gid, shift=True)
    lab.page.wait_for_function(
        f"(n) => JSON.parse({ONNX_VIEW}.root.dataset.selected).length > 0", arg=len(covered), timeout=15000)
    # the ONNX boxes selected draw exactly those nodes (Constants folded into their readers' boxes)
    drawn = _py(lab, "(lambda v, s, sel: sorted(s.ids[k] for k in range(s.n_nodes) if v.data.ids[int("
                     "v.data.visible_of[k])] in sel))(split.onnx, split.onnx.structure, set(split.onnx.selected))")
    assert set(covered) <= set(drawn)
    extra = _py(lab, f"sorted({{split.onnx.structure.model.index.op(split.onnx.structure.model.index.position[n])"
                     f" for n in set({drawn!r}) - set({covered!r})}})")
    assert set(extra) <= {"Constant", "Identity"}, extra  # weights folded into range members' boxes
    # a click opens it where it stands
    others = [i for i in _py(lab, "split.engine.data.ids") if i != gid]
    before = {i: lab.page.evaluate(f"(id) => {ENGINE_VIEW}.worldXY(id)", i) for i in others}
    w_g = _py(lab, f"float(split.engine.data.width[split.engine.data.index({gid!r})])")
    _click(lab, ENGINE_VIEW, gid)
    lab.page.wait_for_function(f"(g) => !{ENGINE_VIEW}.graph.hasNode(g)", arg=gid, timeout=15000)
    lab.page.wait_for_timeout(300)
    lab.screenshot_element(".jupyter-widgets.widget-hbox", "graph-split-foreign-open.png")
    # the bound: half the width the group gained (members' extent minus the group box), in px
    grow = _py(lab, f"(lambda d, m, w: max(0.0, float(max(d.x[d.index(i)] + d.width[d.index(i)] / 2 for i in m)"
                    " - min(d.x[d.index(i)] - d.width[d.index(i)] / 2 for i in m)) - w))(split.engine.data,"
                    f" [i for i in split.engine.data.ids if i not in {others!r}], {w_g})")
    assert _py(lab, f"{gid[6:]!r} in split.engine.expanded")
    moved = 0
    for i in others:
        a, b = before[i], lab.page.evaluate(f"(id) => {ENGINE_VIEW}.worldXY(id)", i)
        assert b is not None, i
        assert abs(b["x"] - a["x"]) <= grow * 100 / 2 + 1, (i, a, b, grow)
        assert b["y"] >= a["y"] - 1e-3, (i, a, b)  # nothing moves up
        moved += b["y"] > a["y"] + 1
    assert moved >= 1  # what lies below the range made room for its members
    # a member box selects its ONNX node
    member, node = _py(lab, "next([e, split.graph.member_of[e]] for e in split.engine.data.ids "
                            "if split.graph.member_of.get(e, '').endswith('/Range'))")
    _click(lab, ENGINE_VIEW, member)
    lab.page.wait_for_function(
        f"(n) => JSON.parse({ONNX_VIEW}.root.dataset.selected).includes(n)", arg=node, timeout=15000)
    assert _py(lab, "split.onnx.selected") == [node]
    assert not lab.blocked, lab.blocked


def test_compare_panel_shows_the_split_view_with_errors_on_both_sides(lab):
    """resnet_tiny: onnxruntime FP32 vs its FP16 conversion, with the layer information of the
    model's real FP16 engine: the panel's 'ONNX | engine' button opens the split view, both
    sides drawn in the error colours (the worst node and the worst layer in the hottest)."""
    from browser_support import REPO

    root = lab.server.root
    shutil.copy(REPO / "sample_models" / "resnet_tiny.onnx", root / "resnet_tiny.onnx")
    shutil.copy(REPO / "sample_models" / "calib" / "resnet_tiny.npz", root / "resnet_tiny.npz")
    shutil.copy(REPO / "tests" / "data" / "timing" / "resnet_tiny_fp16.layers.json", root / "layers.json")
    lab.open_notebook("compare_split.ipynb", [
        "from widgets import ComparePanel\nfrom workbench.precision import convert\n"
        "convert('resnet_tiny.onnx', 'fp16', measure=False).save('resnet_tiny.fp16.onnx')\n"
        "c = ComparePanel('resnet_tiny.onnx', 'resnet_tiny.fp16.onnx', inputs='resnet_tiny.npz',"
        " layers='layers.json')\nc"])
    lab.run_all(timeout=300)
    lab.run_cell("_ = c.wait(120)", timeout=300)
    btn = lab.page.locator("button", has_text="ONNX | engine")
    btn.wait_for(timeout=30000)
    lab.page.wait_for_function("(b) => !b.disabled", arg=btn.element_handle(), timeout=30000)
    btn.click()
    lab.page.wait_for_function(
        "() => window.__wbGraphViews && window.__wbGraphViews.length >= 2 && "
        f"{ENGINE_VIEW}.root.dataset.firstPaint && {ONNX_VIEW}.root.dataset.firstPaint"
        f" && Number({ENGINE_VIEW}.root.dataset.colored) > 0 && Number({ONNX_VIEW}.root.dataset.colored) > 0",
        timeout=60000)
    hot = _py(lab, "c.split.onnx.scale['stops'][-1][1]")
    worst_node = _py(lab, "max((n for n in c.error_by_node() if n in c.split.onnx.data.ids),"
                          " key=lambda n: min(c.error_by_node()[n], 1e6))")
    worst_layer = _py(lab, "(lambda e: max((k for k in c.split.nodes_of if k in c.split.engine.data.ids"
                           " and not c.split.table.layers.layers[c.split.layer_of[k]].is_reformat"
                           " and any(n in e for n in c.split.nodes_of[k])), key=lambda k: max(min(e[n], 1e6)"
                           " for n in c.split.nodes_of[k] if n in e)))(c.error_by_node())")
    # colours, legend and scale reach each view as separate widget messages: wait (bounded) for
    # the hottest colour to be drawn on the worst node and layer, then read it
    for view, target in ((ONNX_VIEW, worst_node), (ENGINE_VIEW, worst_layer)):
        try:
            lab.page.wait_for_function(f"([id, hot]) => {view}.displayedColor(id) === hot",
                                       arg=[target, hot], timeout=30000)
        except Exception:
            pass  # the assertion below says what was drawn instead
        assert lab.page.evaluate(f"(id) => {view}.displayedColor(id)", target) == hot
    # several error levels drawn on the engine side, not one flat colour
    levels = lab.page.evaluate(f"() => new Set({ENGINE_VIEW}.graph.nodes().map((i) => "
                               f"{ENGINE_VIEW}.displayedColor(i))).size")
    assert levels >= 3
    lab.page.evaluate(f"() => {ENGINE_VIEW}.root.scrollIntoView({{block: 'center'}})")
    lab.screenshot_element(".jupyter-widgets.widget-hbox", "graph-split-compare-errors.png")
    assert not lab.blocked, lab.blocked
