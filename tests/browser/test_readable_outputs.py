"""What a new user reads in JupyterLab at its default layout (output area ~850-900 px): the
05_build migration table fits the output area (it was a Markdown table ~1100 px wide, cut at the
edge), and the Timing panel's text is at least 11 px with no two axis labels overlapping (its
tick labels were 9 px, bar and treemap text shrunk to ~7 px). Measured in the real browser."""
from __future__ import annotations

import shutil

import pytest

from browser_support import REPO, new_lab_page

from .layout import layout_problems, undrawn_plots, views

pytestmark = pytest.mark.browser
TIMING = REPO / "tests" / "data" / "timing"
MIGRATION = ("from IPython.display import HTML\nfrom workbench.engines.export import migration_html\n"
             "HTML(migration_html())")
TIMING_PANEL = ("from widgets import TimingPanel\n"
                "t = TimingPanel('resnet_tiny_fp16.layers.json', "
                "profile='resnet_tiny_fp16.profile.json', "
                "onnx='resnet_tiny.onnx', vs=('resnet_tiny_fp32.layers.json', "
                "'resnet_tiny_fp32.profile.json'), names=('fp16', 'fp32'))\nt")

# every visible text of the plots: its font size, and for the tick labels of each axis whether
# two of them overlap (boxes shrunk by 0.5 px: touching is not overlapping)
TEXT_JS = r"""
(root) => {
  const seen = (el) => { const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).display !== 'none'
      && getComputedStyle(el).visibility !== 'hidden' && el.textContent.trim() !== ''; };
  const sizes = [];
  for (const el of root.querySelectorAll('.js-plotly-plot svg text')) {
    if (!seen(el)) continue;
    sizes.push([el.textContent.trim().slice(0, 40), parseFloat(getComputedStyle(el).fontSize)]);
  }
  const overlaps = [];
  const axes = '.js-plotly-plot .yaxislayer-above, .js-plotly-plot .xaxislayer-above';
  for (const ax of root.querySelectorAll(axes)) {
    const boxes = [...ax.querySelectorAll('text')].filter(seen)
      .map((t) => [t.textContent, t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, A] = boxes[i], [b, B] = boxes[j];
      if (A.left < B.right - 0.5 && B.left < A.right - 0.5
          && A.top < B.bottom - 0.5 && B.top < A.bottom - 0.5)
        overlaps.push(`${a} / ${b}`);
    }
  }
  return {sizes, overlaps};
}
"""


@pytest.fixture(scope="module")
def root(lab_server):
    shutil.copy(REPO / "sample_models" / "resnet_tiny.onnx", lab_server.root / "resnet_tiny.onnx")
    for name in ("resnet_tiny_fp16.layers.json", "resnet_tiny_fp16.profile.json",
                 "resnet_tiny_fp32.layers.json", "resnet_tiny_fp32.profile.json"):
        shutil.copy(TIMING / name, lab_server.root / name)
    return lab_server.root


@pytest.mark.parametrize("width", [1280, 1100])  # output area ~850 px (the default) and ~670 px
def test_migration_table_fits_the_output_area(browser, lab_server, root, width):
    lab = new_lab_page(browser, lab_server, viewport=(width, 1000))
    try:
        lab.open_notebook(f"migration-{width}.ipynb", [MIGRATION])
        lab.run_all()
        out = lab.page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".jp-OutputArea-output")
        m = out.evaluate("""(e) => { const t = e.querySelector('.wb-migration table');
            const cells = [...t.querySelectorAll('td, th')];
            return {area: e.clientWidth, scroll: e.scrollWidth,
                    table: t.getBoundingClientRect().width,
                    box: t.parentElement.clientWidth, boxScroll: t.parentElement.scrollWidth,
                    rows: t.querySelectorAll('tbody tr').length,
                    cellsSpill: cells.filter((c) => c.scrollWidth > c.clientWidth + 1).length,
                    font: Math.min(...cells.map((c) => parseFloat(getComputedStyle(c).fontSize))),
                    align: [...new Set(cells.map((c) => getComputedStyle(c).textAlign))]}; }""")
        assert 600 < m["area"] < 950, m  # the output area this width gives
        assert m["rows"] == 12 and m["font"] >= 12, m
        assert m["scroll"] <= m["area"] and m["table"] <= m["area"], m   # nothing past the edge
        assert m["boxScroll"] <= m["box"] and m["cellsSpill"] == 0, m    # no sideways scroll
        assert m["align"] == ["left"], m
        assert layout_problems(out) == []
        assert not lab.blocked, lab.blocked
    finally:
        lab.page.context.close()


def test_timing_panel_text_is_readable_and_labels_do_not_overlap(browser, lab_server, root):
    lab = new_lab_page(browser, lab_server, viewport=(1280, 1000))
    try:
        lab.open_notebook("timing-text.ipynb", [TIMING_PANEL])
        lab.run_all(timeout=180)
        out = lab.page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".jp-OutputArea")
        tabs = views(out)
        seen = {}
        for i in range(tabs.count()):
            name = tabs.nth(i).inner_text().strip()
            if name in ("Findings", "Graph", "vs PyTorch"):  # (no chart: a list, the graph
                continue  # view, the torch comparison's table or why there is none)
            tabs.nth(i).click()
            lab.page.wait_for_timeout(500)
            assert undrawn_plots(lab.page, out) == 0, name
            got = out.evaluate(TEXT_JS)
            seen[name] = got
            small = [t for t in got["sizes"] if t[1] < 11]
            assert got["sizes"] and not small, (name, small[:10])
            assert got["overlaps"] == [], (name, got["overlaps"][:5])
        assert {"Layers", "Scopes", "Compare", "Latency"} <= set(seen), list(seen)
        # the long fused-layer names are cut on the axis (the hover has them whole)
        layers = [t for t, _ in seen["Layers"]["sizes"] if "\u2026" in t]
        assert layers, seen["Layers"]["sizes"][:10]
        assert not lab.blocked, lab.blocked
    finally:
        lab.page.context.close()
