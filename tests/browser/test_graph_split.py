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


def _click(lab, view, element_id):
    lab.page.evaluate(f"() => {view}.root.scrollIntoView({{block: 'center'}})")
    lab.page.evaluate(f"(id) => {view}.fitTo([id], false)", element_id)
    lab.page.wait_for_timeout(250)
    p = lab.page.evaluate(f"(id) => {view}.nodeClientXY(id)", element_id)
    lab.page.mouse.click(p["x"], p["y"])


def test_split_view_selects_across_onnx_and_engine(lab):
    for name in ("resnet50.structure.onnx", "resnet50_fp16.layers.json", "resnet50_fp16.profile.json"):
        shutil.copy(H200 / name, lab.server.root / name)
    lab.open_notebook("split.ipynb", [
        "from widgets.splitview import SplitView\n"
        "split = SplitView('resnet50_fp16.layers.json', 'resnet50.structure.onnx',"
        " profile='resnet50_fp16.profile.json', height=460)\n"
        "split"])
    lab.run_all()
    lab.page.wait_for_function(
        "() => window.__wbGraphViews && window.__wbGraphViews.length >= 2 && "
        f"{ENGINE_VIEW}.root.dataset.firstPaint && {ONNX_VIEW}.root.dataset.firstPaint", timeout=60000)
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
