"""The HTML timing report opens in headless Chromium with no network and draws its plots."""
from __future__ import annotations

import pytest

from browser_support import loopback_only
from conftest import H200
from workbench.timing import LayerTable
from workbench.render.timing_figures import layer_bar_data
from workbench.render.timing_report import write_report

pytestmark = pytest.mark.browser



def test_report_renders_offline_in_chromium(browser, tmp_path, artifacts_dir):
    """Uses the session's shared Debian chromium (tests/browser_support.py): one Playwright per
    process, every non-loopback request aborted and recorded."""
    onnx = H200 / "resnet50.structure.onnx"
    t16 = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json", onnx=onnx)
    t32 = LayerTable.build(H200 / "resnet50_fp32.layers.json", H200 / "resnet50_fp32.profile.json", onnx=onnx)
    path = write_report(tmp_path / "timing.html", t16, vs=t32, names=("fp16", "fp32"))
    blocked, errors = [], []
    ctx = browser.new_context(viewport={"width": 1300, "height": 1000})
    try:
        loopback_only(ctx, blocked)
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_function("document.querySelectorAll('.plotly .main-svg').length >= 6",
                               timeout=30_000)
        n_svg = page.evaluate("document.querySelectorAll('.plotly .main-svg').length")
        traces = page.evaluate("""() => Object.fromEntries(
            [...document.querySelectorAll('.plotly-graph-div')].map(d => [d.id, d._fullData.length]))""")
        bars = page.evaluate("document.querySelectorAll('#layers-by-type .bars path').length")
        tree = page.evaluate("document.querySelectorAll('#scope-treemap g.slice').length")
        page.screenshot(path=str(artifacts_dir / "timing_report.png"), full_page=False)
    finally:
        ctx.close()
    assert errors == [] and blocked == []
    assert n_svg >= 6
    expected_types = set(layer_bar_data(t16, "type")["group"])
    assert traces["layers-by-type"] == len(expected_types)
    assert traces["by-type"] == 1 and traces["scope-treemap"] == 1
    assert traces["compare-types"] == 2 and traces["compare-nodes"] == 2
    assert bars >= 50  # one bar per listed layer (top 60 of 107 timed layers)
    assert tree > 5
