"""Every notebook and every HTML report fits a 1280- and a 1400-px window, as a person sees it.

Notebooks: the top-level notebooks/*.ipynb and every course chapter in English and Chinese with
the answers filled in (make_course's teacher's copy), each opened in the session's JupyterLab and
run there with a live kernel (widgets, plotly figures and the graph view draw as they do for a
user), then read at 1280 px and again at 1400 px. Reports: the static timing report and the
variant matrix's Pareto page, opened from disk with no network.

What fails: content wider than its output area or the page (a table must wrap, or scroll inside
a box of its own), a widget box spilling past its edge (tests/browser/layout.py), two text
labels of one plotly figure drawn over each other (tick labels, point and bar text, annotations,
titles, legend entries), and a `None` / `NaN` / `nan` shown in a table cell or a label.
Screenshots of every rich output (tables, plots, widgets) at 1400 px, and at 1280 px where
that width has a problem, and of each report at both widths go to test-artifacts/pages-fit/."""
from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest

from browser_support import ARTIFACTS, REPO, loopback_only, new_lab_page

from .layout import check_every_view, undrawn_plots

pytestmark = pytest.mark.browser
WIDTHS = (1280, 1400)
SHOTS = ARTIFACTS / "pages-fit"
COURSE_DIR = REPO / "notebooks" / "course"
NOTEBOOKS = [f"notebooks/{p.name}" for p in sorted((REPO / "notebooks").glob("*.ipynb"))]
COURSE = [f"course/{lang}/{p.name}" for lang in ("en", "zh")
          for p in sorted((COURSE_DIR / lang).glob("*.ipynb"))]

# Labels of one plotly figure that overlap (boxes shrunk by 1 px: touching is not overlapping),
# and the texts that read None / NaN. Hidden text (uniformtext 'hide', a collapsed legend) and
# text outside the figure's own box do not count.
PLOT_JS = r"""
(root) => {
  const LABELS = '.xtick text, .ytick text, .textpoint text, text.bartext, .annotation-text, '
    + '.gtitle, .g-xtitle text, .g-ytitle text, .legendtext, .g-x2title text, .g-y2title text';
  const seen = (el) => { const r = el.getBoundingClientRect(); const cs = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && cs.display !== 'none' && cs.visibility !== 'hidden'
      && parseFloat(cs.opacity || '1') > 0 && el.textContent.trim() !== '';};
  const overlaps = [], missing = [];
  for (const gd of root.querySelectorAll('.js-plotly-plot')) {
    if (!gd.getBoundingClientRect().width) continue;
    const title = (gd.querySelector('.gtitle') || {}).textContent || gd.id || 'plot';
    const texts = [...gd.querySelectorAll(LABELS)].filter(seen);
    const boxes = texts.map((t) => [t.textContent.trim(), t.getBoundingClientRect()]);
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, A] = boxes[i], [b, B] = boxes[j];
      if (A.left < B.right - 1 && B.left < A.right - 1 && A.top < B.bottom - 1 && B.top < A.bottom - 1)
        overlaps.push(`${title.slice(0, 40)}: "${a.slice(0, 30)}" over "${b.slice(0, 30)}"`);
    }
    for (const t of gd.querySelectorAll('svg text')) if (seen(t)
        && /(^|[\s:=(\[{'"])(None|NaN|nan)($|[\s,;)\]}'"])/.test(t.textContent))
      missing.push(`plot label "${t.textContent.trim().slice(0, 60)}"`);
  }
  const cells = root.querySelectorAll('td, th, .widget-label, .widget-readout, button, '
    + '.widget-html-content b, .widget-html-content span, .widget-html-content li');
  for (const c of cells) {
    const text = (c.innerText || '').trim();
    if (/^(None|NaN|nan|<NA>|NaT)$/.test(text) || /(^|[\s:=(\[{'"])(None|NaN|nan)($|[\s,;)\]}'"])/.test(
        c.tagName === 'TD' || c.tagName === 'TH' ? text : ''))
      missing.push(`<${c.tagName.toLowerCase()}> "${text.slice(0, 60)}"`);
  }
  return {overlaps, missing};
}
"""

# the page itself: no horizontal scroll, and nothing drawn past the window's right edge
PAGE_JS = r"""
() => {
  const W = document.documentElement.clientWidth;
  const out = [];
  const scroll = document.scrollingElement.scrollWidth;
  if (scroll > W + 1) out.push(`the page scrolls sideways: ${scroll} px wide in a ${W}-px window`);
  for (const el of document.body.querySelectorAll('*')) {
    if (el instanceof SVGElement && el.parentElement instanceof SVGElement) continue;
    let clipped = false;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') { clipped = true; break; }
    const r = el.getBoundingClientRect();
    const up = el.parentElement && el.parentElement !== document.body
      && el.parentElement.getBoundingClientRect().right > W + 1;  // (its box is reported)
    if (!clipped && !up && r.width > 0 && r.right > W + 1)
      out.push(`<${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}> reaches ${Math.round(r.right)} px`
               + ` in a ${W}-px window: "${(el.innerText || '').trim().slice(0, 40)}"`);
    const cs = getComputedStyle(el);
    if (cs.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'svg'
        && !el.classList.contains('wb-scroll'))
      out.push(`<${el.tagName.toLowerCase()}> scrolls sideways: ${el.scrollWidth} > ${el.clientWidth} px`);
  }
  return [...new Set(out)].slice(0, 20);
}
"""

RICH = "table, .js-plotly-plot, .jupyter-widgets, canvas, img"


def _make_course() -> Any:
    spec = importlib.util.spec_from_file_location("make_course", COURSE_DIR / "make_course.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pages_root(lab_server) -> Path:
    """A copy of what the notebooks read (notebooks/, sample_models/, tests/data) and the course
    with its answers, under the lab's root: the notebooks run as in the repository, the
    repository is left as it was."""
    import nbformat

    root = lab_server.root / "pages-fit"
    (root / "tests").mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns(
        "course", ".ipynb_checkpoints", "__pycache__"))
    shutil.copytree(REPO / "sample_models", root / "sample_models")
    shutil.copytree(REPO / "tests" / "data", root / "tests" / "data")
    for rel, nb in _make_course().render(solutions=True, course=str(COURSE_DIR)).items():
        path = root / "course" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
    SHOTS.mkdir(parents=True, exist_ok=True)
    return root


def _slug(rel: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", rel.replace(".ipynb", ""))


def _screenshot(page: Any, out: Any, path: Path) -> None:
    """A screenshot of one output; one taller than the window is taken with the window
    stretched to hold it (JupyterLab scrolls the notebook inside a window-sized box)."""
    height = out.bounding_box()["height"]
    size = page.viewport_size
    if height + 200 > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": int(height) + 300})
        page.wait_for_timeout(300)
        out.scroll_into_view_if_needed()
    out.screenshot(path=str(path))
    if page.viewport_size != size:
        page.set_viewport_size(size)
        page.wait_for_timeout(300)


def _check_outputs(lab: Any, rel: str, width: int) -> List[str]:
    """Every output of the open notebook at the page's current width: its problems, one line
    each; screenshots of the rich ones."""
    page = lab.page
    cells = page.locator(".jp-Notebook .jp-Cell")
    problems: List[str] = []
    checked = 0
    for i in range(cells.count()):
        cell = cells.nth(i)
        out = cell.locator(".jp-OutputArea")
        if not out.count() or not out.locator(".jp-OutputArea-output").count():
            continue
        checked += 1
        box = out.bounding_box()
        if box is None or box["y"] < 0 or box["y"] > page.viewport_size["height"] - 50:
            out.scroll_into_view_if_needed()
            page.wait_for_timeout(100)  # content-visibility: the cell lays out once on screen
        found = check_every_view(page, out)
        got: Dict[str, List[str]] = out.evaluate(PLOT_JS)
        found += [f"labels overlap: {o}" for o in got["overlaps"]]
        found += [f"shows a missing value: {m}" for m in got["missing"]]
        text = out.inner_text()
        if "Traceback (most recent call last)" in text:
            found.append("an error: " + text[:300])
        problems += [f"cell {i}: {p}" for p in dict.fromkeys(found)]
        if (width == WIDTHS[-1] or found) and out.locator(RICH).count():
            _screenshot(page, out, SHOTS / f"{_slug(rel)}-{width}-c{i:02d}.png")
    if not checked:  # (a notebook that showed nothing was not looked at)
        problems.append("no output to check: did the notebook run?")
    return problems


OPEN_JS = r"""
async (path) => {
  const app = window.jupyterapp;
  await app.restored;  // (its commands are registered once the app is restored)
  await app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
}
"""
READY_JS = r"""
(path) => {
  const w = window.jupyterapp && window.jupyterapp.shell && window.jupyterapp.shell.currentWidget;
  if (!w || !w.context || w.context.path !== path) return false;
  const s = w.sessionContext && w.sessionContext.session;
  return !!(s && s.kernel && s.kernel.status === 'idle');
}
"""
# stop the notebook's kernel (19 of them would not fit a CI machine's memory) and close it
# without the unsaved-changes dialog (running it changed its outputs)
CLOSE_JS = r"""
async () => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w || !w.context) return;
  await w.sessionContext.shutdown();
  w.context.model.dirty = false;
  w.close();
}
"""


@pytest.fixture(scope="module")
def notebook_page(browser, lab_server, pages_root):
    """One JupyterLab page for every notebook (a notebook opens in it as a user opens one from
    the file browser; loading JupyterLab once, not 19 times). Tall, so that most outputs are
    on screen whole: the width is what is tested."""
    lab = new_lab_page(browser, lab_server, viewport=(WIDTHS[0], 2400))
    lab.page.goto(f"{lab_server.url}/lab?reset&token={lab_server.token}")
    lab.page.wait_for_function("() => !!(window.jupyterapp && window.jupyterapp.shell)",
                               timeout=120_000)
    try:
        yield lab
    finally:
        lab.page.context.close()


@pytest.mark.parametrize("rel", NOTEBOOKS + COURSE)
def test_every_notebook_output_fits_1280_and_1400_px(notebook_page, rel):
    lab = notebook_page
    path = f"pages-fit/{rel}"
    lab.console.clear()
    lab.page.set_viewport_size({"width": WIDTHS[0], "height": 2400})
    try:
        lab.page.evaluate(OPEN_JS, path)
        lab.page.wait_for_function(READY_JS, arg=path, timeout=120_000)
        lab.run_all(timeout=400)
        # what panels compute in the background reaches the page (their plots draw)
        lab.page.wait_for_timeout(1000)
        undrawn_plots(lab.page, lab.page.locator(".jp-Notebook"))
        problems: List[str] = []
        for width in WIDTHS:
            lab.page.set_viewport_size({"width": width, "height": 2400})
            lab.page.wait_for_timeout(600)  # plotly and the widgets follow the resize
            problems += [f"@{width}px {p}" for p in _check_outputs(lab, rel, width)]
        assert not problems, f"{rel}:\n" + "\n".join(problems)
        assert not lab.blocked, lab.blocked
    except Exception:
        lab.screenshot(f"pages-fit/FAILED-{_slug(rel)}.png")
        print("browser console:\n" + "\n".join(lab.console[-30:]))
        raise
    finally:
        try:
            lab.page.evaluate(CLOSE_JS)
        except Exception:  # the page may be gone; the test's own failure is what matters
            pass


# ----------------------------------------------------------------------------- HTML reports
def _timing_report(folder: Path) -> Path:
    """The static timing report of an FP16 ResNet-50 against its FP32 engine (H200 captures)."""
    from conftest import H200
    from workbench.render.timing_report import write_report
    from workbench.timing import LayerTable

    onnx = H200 / "resnet50.structure.onnx"
    t16 = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                           onnx=onnx)
    t32 = LayerTable.build(H200 / "resnet50_fp32.layers.json", H200 / "resnet50_fp32.profile.json",
                           onnx=onnx)
    return write_report(folder / "timing.html", t16, vs=t32, names=("fp16", "fp32"))


@pytest.fixture(scope="module")
def matrix_page(tmp_path_factory) -> Path:
    """A real variant matrix's pareto.html: two sample models, FP32 and FP16, for sm89 and
    sm120, built ahead of time on this CPU (each variant through `run_variant`, the body of the
    matrix's Ray task; ~15 s) with accuracy from 2 samples."""
    import os

    from workbench.matrix.plan import plan_matrix
    from workbench.matrix.run import run_variant, write_pareto
    from workbench.matrix.store import ResultsStore

    home = tmp_path_factory.mktemp("matrix-home")
    old = os.environ.get("WORKBENCH_HOME")
    os.environ["WORKBENCH_HOME"] = str(home)  # (a module fixture: the per-test home is not set yet)
    try:
        models = [REPO / "sample_models" / f"{m}.onnx" for m in ("resnet_tiny", "bert_tiny")]
        store = ResultsStore(tmp_path_factory.mktemp("matrix"))
        results = []
        for v in plan_matrix(models, ["fp32", "fp16"], ["sm89", "sm120"], opt_levels=[0]):
            r = run_variant(v.to_dict(), {"engine_dir": str(store.engines_dir.resolve()),
                                          "samples": 2})
            store.save(r)
            results.append(r)
        assert [r["status"] for r in results] == ["ok"] * 8, [r.get("error") for r in results]
        return Path(write_pareto(store, results)["pareto_html"])
    finally:
        if old is None:
            os.environ.pop("WORKBENCH_HOME", None)
        else:
            os.environ["WORKBENCH_HOME"] = old


@pytest.fixture(scope="module")
def reports(tmp_path_factory, matrix_page) -> Dict[str, Path]:
    folder = tmp_path_factory.mktemp("reports")
    return {"timing-report": _timing_report(folder), "matrix-pareto": matrix_page}


@pytest.mark.parametrize("name", ["timing-report", "matrix-pareto"])
def test_every_html_report_fits_1280_and_1400_px(browser, reports, name):
    blocked: List[str] = []
    errors: List[str] = []
    ctx = browser.new_context(viewport={"width": WIDTHS[0], "height": 1000})
    try:
        loopback_only(ctx, blocked)
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(reports[name].as_uri())
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0",
                               timeout=30_000)
        problems: List[str] = []
        body = page.locator("body")
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(800)  # responsive plots relayout on resize
            assert undrawn_plots(page, body) == 0
            found = page.evaluate(PAGE_JS)
            got = body.evaluate(PLOT_JS)
            found += [f"labels overlap: {o}" for o in got["overlaps"]]
            found += [f"shows a missing value: {m}" for m in got["missing"]]
            problems += [f"@{width}px {p}" for p in found]
            page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        assert not problems, f"{name}:\n" + "\n".join(problems)
        assert errors == [] and blocked == [], (errors, blocked)
        if name == "timing-report":
            _same_colour_per_layer_type(page)
    finally:
        ctx.close()


# {layer type: colour} as drawn: the per-layer bars (a trace per type) and the breakdown by type
# (one trace, a colour per bar)
COLOURS_JS = r"""
() => {
  const bars = document.getElementById('layers-by-type')._fullData;
  const by = document.getElementById('by-type')._fullData[0];
  return {bars: Object.fromEntries(bars.map((t) => [t.name, t.marker.color])),
          by: Object.fromEntries(by.x.map((x, i) => [x, by.marker.color[i]]))};
}
"""


def _same_colour_per_layer_type(page: Any) -> None:
    """The report's two charts by layer type give each type the one colour of
    workbench.timing.colours ("Reformat" was grey in one and brown in the other)."""
    from workbench.timing.colours import layer_type_colour

    got = page.evaluate(COLOURS_JS)
    common = set(got["bars"]) & set(got["by"])
    assert {"Reformat", "CaskConvolution"} <= common, got
    for layer_type in common:
        assert got["bars"][layer_type] == got["by"][layer_type] == layer_type_colour(layer_type)
