"""plotly figures in JupyterLab + chromium: `widgets.figure.Figure` (the panels' figure), several at
once, loads plotly's module once per page and keeps the updates sent while the page still loads it
(replayed in order). plotly's own FigureWidget is reported beside it: it loads the 4.9 MB module
once per figure inside anywidget's 2 s initialize window, which on a loaded machine leaves some
figures empty for good."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

DRAWN = r"""
(sel) => [...document.querySelectorAll(sel + ' .js-plotly-plot')].map((gd) => ({
  drawn: !!(gd.data && gd.data.length && gd._fullLayout),
  title: (gd._fullLayout && gd._fullLayout.title && gd._fullLayout.title.text) || '',
  ys: gd.data && gd.data[0] ? Array.from(gd.data[0].y) : [],
}))
"""


def cells(kind: str, n: int) -> list:
    make = ("from widgets.figure import Figure as F" if kind == "ours"
            else "from plotly.graph_objects import FigureWidget as F")
    return [
        "import ipywidgets as w\n" + make + "\n"
        f"figs = [F(layout=dict(height=180, width=260)) for _ in range({n})]\n"
        "for i, f in enumerate(figs):\n    f.add_bar(x=['a', 'b'], y=[i, i + 1])\n"
        f"box = w.HBox(figs); box.add_class('{kind}-figs'); display(box)\n"
        # sent right after the views were asked for: they reach a page still loading plotly
        "for i, f in enumerate(figs):\n    f.layout.title = f'late {i}'\n    f.data[0].y = [10 + i, 20 + i]\n",
    ]


def states(lab, kind: str, n: int, timeout_ms: int = 60000) -> list:
    waited, got = 0, []
    while waited < timeout_ms:
        got = lab.page.evaluate(DRAWN, f".{kind}-figs")
        if len(got) == n and all(g["drawn"] and g["title"].startswith("late") for g in got):
            break
        lab.page.wait_for_timeout(500)
        waited += 500
    return got


# Holds the page's shared plotly import 2.5 s for every figure after the first (the loader
# keeps one promise per page under this key): their late updates then always reach a page still
# loading plotly, however fast the machine (on a quiet one the module was in before they came,
# and nothing was left to replay).
HOLD_PLOTLY = r"""
(() => {
  const KEY = Symbol.for("trt-workbench.plotly-widget-module");
  let held;
  Object.defineProperty(globalThis, KEY, {
    configurable: true,
    get() { return held; },
    set(p) { held = p && new Promise((resolve) => setTimeout(() => resolve(p), 2500)); },
  });
})();
"""


def test_figures_load_plotly_once_and_keep_updates_sent_while_loading(lab):
    n = 4
    lab.page.add_init_script(HOLD_PLOTLY)
    errors = []
    lab.page.on("console", lambda m: errors.append(m.text) if "Failed to initialize" in m.text else None)
    lab.page.on("pageerror", lambda e: errors.append(str(e)) if "Failed to initialize" in str(e) else None)
    lab.open_notebook("figs.ipynb", cells("ours", n))
    lab.run_all(timeout=300)
    ours = states(lab, "ours", n)
    stats = lab.page.evaluate("() => globalThis.__trtWorkbenchFigures")
    lab.run_cell(cells("plain", n)[0], timeout=120)
    plain = states(lab, "plain", n, timeout_ms=30000)
    lab.screenshot("figures-load.png")
    print("plotly FigureWidget on the same page:",
          sum(g["drawn"] for g in plain), "of", n, "drew;", len(errors), "anywidget initialize timeouts")
    assert len(ours) == n, ours
    assert stats["loads"] == 1, stats                     # one plotly module for n figures
    # the late updates did arrive while plotly loaded: replayed, or held by a later full state
    assert stats["replayed"] + stats["superseded"] > 0, stats
    for i, g in enumerate(sorted(ours, key=lambda g: g["title"])):
        assert g["drawn"], ours
        assert g["title"] == f"late {i}", ours           # the relayout sent while loading
        assert g["ys"] == [10 + i, 20 + i], ours          # the restyle sent while loading
    assert not lab.blocked, lab.blocked


# A panel's pattern: the figure is made, its background work starts at once and fills it from a
# thread, and the panel (a box holding the figure) is the cell's value. Depending on the delay
# the update reaches the page before the figure's model exists, before its module has loaded,
# while plotly loads, or after it has drawn: every case must draw it, and the kernel's figure
# must keep its data (the page's first report must not reset it).
DELAYS = (0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8, 1.5)
PANEL_CELL = (
    "import threading, time\nimport ipywidgets as w\nfrom widgets.figure import Figure\n"
    "late = []\n"
    f"for i, d in enumerate({DELAYS!r}):\n"
    "    f = Figure(layout=dict(height=150, width=200, title='empty'))\n"
    "    f.add_bar(x=[], y=[], marker=dict(color=[]))\n"
    "    def fill(f=f, i=i, d=d):\n"
    "        time.sleep(d)\n"
    "        with f.batch_update():\n"
    "            f.data[0].x = list(range(i + 2))\n"
    "            f.data[0].y = [i + 1.0 + k for k in range(i + 2)]\n"
    "            f.data[0].marker.color = ['#d62728'] * (i + 2)\n"
    "            f.layout.title = f'late {i}'\n"
    "    threading.Thread(target=fill, daemon=True).start()\n"
    "    late.append(f)\n"
    "box = w.HBox(late); box.add_class('panel-figs'); box")


def test_figures_filled_from_a_thread_at_any_moment_draw_and_keep_their_data(lab):
    n = len(DELAYS)
    lab.open_notebook("panel-figs.ipynb", [PANEL_CELL])
    lab.run_all(timeout=300)
    got = states(lab, "panel", n)
    lab.page.wait_for_timeout(1500)  # (any report from the page back to the kernel lands)
    got = lab.page.evaluate(DRAWN, ".panel-figs")
    kernel = lab.run_cell("print([len(f.data[0].y) for f in late])")
    assert kernel.strip().splitlines()[-1] == str([i + 2 for i in range(n)]), kernel
    assert len(got) == n, got
    for i, g in enumerate(sorted(got, key=lambda g: g["title"])):
        assert g["drawn"] and g["title"] == f"late {i}", (DELAYS[i], got)
        assert g["ys"] == [i + 1.0 + k for k in range(i + 2)], (DELAYS[i], got)
