"""Every panel fits a JupyterLab notebook at 1280 and 1400 px: no plot wider than its container,
no truncated button / label / path text, no box past the output area's edge (checked on the
bounding boxes in the real browser, every tab and accordion section opened). Screenshots of each
panel at each width are kept in test-artifacts/panel-layout-<name>-<width>.png."""
from __future__ import annotations

import shutil

import pytest

from browser_support import ARTIFACTS, REPO, new_lab_page

from .layout import check_every_view

pytestmark = pytest.mark.browser
SAMPLES = REPO / "sample_models"
TIMING = REPO / "tests" / "data" / "timing"

# name -> cell source leaving the panel as the cell's value. Paths are absolute (as a user's
# usually are) so that the path fields hold realistic, long values.
SETUP = ("import os\nfrom pathlib import Path\nHERE = Path(os.getcwd()).resolve()\n"
         "from workbench.engines.spec import BuildConfig\n"
         "from workbench.precision import convert\n"
         "convert(str(HERE / 'resnet_tiny.onnx'), 'fp16', measure=False)"
         ".save(str(HERE / 'resnet_tiny.fp16.onnx'))")
PANELS = {
    "inspector": SETUP + "\nfrom widgets import Inspector\np = Inspector(str(HERE / 'bert_tiny.onnx'))\np",
    "inspector-failing": ("p2 = Inspector(str(HERE / 'needs_fixing.onnx'))\n"
                          "p2.run_check()\np2"),
    "fix": "from widgets import FixPanel\nf = FixPanel(str(HERE / 'needs_fixing.onnx'))\nf",
    "precision": ("from widgets import PrecisionPanel\n"
                  "q = PrecisionPanel(str(HERE / 'resnet_tiny.onnx'), "
                  "calibration=str(HERE / 'resnet_tiny.npz'))\nq.validate_calibration()\nq"),
    "compare": ("from widgets import ComparePanel\n"
                "c = ComparePanel(str(HERE / 'resnet_tiny.onnx'), str(HERE / 'resnet_tiny.fp16.onnx'),"
                " target='fp16', inputs=str(HERE / 'resnet_tiny.npz'))\nc"),
    "build": ("from widgets import BuildPanel\n"
              "b = BuildPanel(str(HERE / 'resnet_tiny.onnx'), BuildConfig(target='sm89', "
              "builder_optimization_level=0, profiles=[{'input': [[1, 3, 32, 32], [4, 3, 32, 32], "
              "[32, 3, 32, 32]]}]))\nb.start()\nb"),
    "timing": ("from widgets import TimingPanel\n"
               "t = TimingPanel(str(HERE / 'resnet_tiny_fp16.layers.json'), "
               "profile=str(HERE / 'resnet_tiny_fp16.profile.json'), "
               "onnx=str(HERE / 'resnet_tiny.onnx'), vs=(str(HERE / 'resnet_tiny_fp32.layers.json'), "
               "str(HERE / 'resnet_tiny_fp32.profile.json')), names=('fp16', 'fp32'))\nt"),
}
WAIT = "_ = (p.wait(120), p2.wait(120), f.wait(120), q.wait(120), c.wait(120), b.wait(300))"


@pytest.fixture(scope="module")
def notebook_root(lab_server):
    root = lab_server.root
    for name in ("bert_tiny.onnx", "needs_fixing.onnx", "resnet_tiny.onnx"):
        shutil.copy(SAMPLES / name, root / name)
    shutil.copy(SAMPLES / "calib" / "resnet_tiny.npz", root / "resnet_tiny.npz")
    for name in ("resnet_tiny_fp16.layers.json", "resnet_tiny_fp16.profile.json",
                 "resnet_tiny_fp32.layers.json", "resnet_tiny_fp32.profile.json"):
        shutil.copy(TIMING / name, root / name)
    return root


@pytest.mark.parametrize("width", [1280, 1400])
def test_every_panel_fits_the_notebook(browser, lab_server, notebook_root, width, request):
    lab = new_lab_page(browser, lab_server, viewport=(width, 1400))
    try:
        names = list(PANELS)
        lab.open_notebook(f"layout-{width}.ipynb", [PANELS[n] for n in names])
        lab.run_all(timeout=300)
        lab.run_cell(WAIT, timeout=400)
        lab.page.wait_for_timeout(500)  # the last trait updates reach the page
        report = {}
        ARTIFACTS.mkdir(exist_ok=True)
        for i, name in enumerate(names):
            text = lab.cell_output(i)
            assert "Traceback" not in text, (name, text[:600])
            out = lab.page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea")
            out.scroll_into_view_if_needed()
            assert out.locator(".widget-box").count() > 0, f"{name}: no widget rendered"
            problems = check_every_view(lab.page, out)
            if problems:
                report[name] = problems
            out.screenshot(path=str(ARTIFACTS / f"panel-layout-{name}-{width}.png"))
        assert not report, "\n".join(f"{n} @ {width}px: {p}" for n, ps in report.items() for p in ps)
        assert not lab.blocked, lab.blocked
    except Exception:
        lab.screenshot(f"FAILED-layout-{width}.png")
        print("browser console:\n" + "\n".join(lab.console[-40:]))
        raise
    finally:
        lab.page.context.close()


LONG_FINDINGS = (
    "import ipywidgets as W\nfrom widgets.base import findings_html\n"
    "path = '/tmp/a-user/with/a/long/folder/name/models/convnext_qdq.onnx'\n"
    "node = '/b/b.1/Constant_1_output_0_DequantizeLinear'\n"
    "msg = ('DequantizeLinear has a non-zero zero point (-128); TensorRT supports symmetric '\n"
    "       'quantization only (TensorRT\\'s parser: shiftIsAllZeros(zeroPoint): Non-zero zero '\n"
    "       'point is not supported. Please set kENABLE_UINT8_AND_ASYMMETRIC_QUANTIZATION_DLA)')\n"
    "hint = (f'`workbench fix {path} -o {path[:-5]}.fixed.onnx --recipe emulate_quantized` '\n"
    "        'rewrites the quantized ops into exact float emulation; or re-quantize with '\n"
    "        '`workbench precision` (zero point 0)')\n"
    "W.VBox([W.HTML(findings_html([{'severity': 'error', 'code': 'qdq-zero-point', "
    "'message': msg, 'nodes': [node], 'hint': hint}, {'severity': 'warning', "
    "'code': 'cached-by-other-version', 'message': 'short', 'nodes': [], 'hint': ''}]))])")

COLUMN_JS = r"""
(root) => {
  const t = root.querySelector('table.wb-findings');
  const T = t.getBoundingClientRect();
  const cells = [...t.querySelectorAll('tr')[1].children].map((c) => c.getBoundingClientRect());
  return {table: T.width, message: cells[2].width, right: Math.max(...cells.map((c) => c.right)),
          tableRight: T.right, code: t.querySelectorAll('tr')[2].children[1].scrollWidth,
          codeBox: t.querySelectorAll('tr')[2].children[1].clientWidth};
}
"""


@pytest.mark.parametrize("width", [1280, 1400])
def test_a_findings_table_with_long_names_and_paths_keeps_its_message_readable(
        browser, lab_server, width):
    """A new user's FixPanel on an onnxruntime-quantized model: a long node name and a
    command with a long path took the automatic table layout's width; the message wrapped a
    word a line (~70 px) and the next step ran past the panel's edge."""
    lab = new_lab_page(browser, lab_server, viewport=(width, 1000))
    try:
        lab.open_notebook(f"findings-{width}.ipynb", [LONG_FINDINGS])
        lab.run_all(timeout=120)
        out = lab.page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".jp-OutputArea")
        out.scroll_into_view_if_needed()
        assert out.locator("table.wb-findings").count() == 1
        assert not check_every_view(lab.page, out)
        m = out.evaluate(COLUMN_JS)
        out.screenshot(path=str(ARTIFACTS / f"findings-long-{width}.png"))
        assert m["right"] <= m["tableRight"] + 1, m  # nothing past the table's edge
        assert m["message"] >= 0.25 * m["table"], m  # a readable message column
        assert m["code"] <= m["codeBox"] + 1, m  # a long code wraps at its hyphens
    finally:
        lab.page.context.close()
