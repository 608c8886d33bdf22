"""Every panel in a real JupyterLab + headless chromium: each renders as widgets (not a text
repr), shows no error, finishes its background work while the kernel stays free, and leaves a
screenshot per panel in test-artifacts/ for review."""
from __future__ import annotations

import shutil

import pytest

from browser_support import REPO

pytestmark = pytest.mark.browser
SAMPLES = REPO / "sample_models"
TIMING = REPO / "tests" / "data" / "timing"

PANELS = {  # name -> (cell source that leaves the panel as the cell's value, wait expression)
    "inspector": ("from widgets import Inspector\np = Inspector('bert_tiny.onnx')\np", "p.wait(120)"),
    "fix": ("from widgets import FixPanel\nf = FixPanel('needs_fixing.onnx')\nf", "f.wait(120)"),
    "precision": ("from widgets import PrecisionPanel\nq = PrecisionPanel('resnet_tiny.onnx')\nq",
                  "q.wait(120)"),
    # the README's quick-start form: no candidate, the model converted to the target at once
    "compare": ("from widgets import ComparePanel\n"
                "c = ComparePanel('resnet_tiny.onnx', target='fp16', inputs='resnet_tiny.npz')\nc",
                "c.wait(120)"),
    "build": ("from widgets import BuildPanel\nb = BuildPanel('resnet_tiny.onnx')\nb", "b.wait(120)"),
    "timing": ("from widgets import TimingPanel\n"
               "t = TimingPanel('resnet_tiny_fp16.layers.json', "
               "profile='resnet_tiny_fp16.profile.json', onnx='resnet_tiny.onnx')\nt", "None"),
}


def test_every_panel_renders_without_error(lab):
    root = lab.server.root
    for name in ("bert_tiny.onnx", "needs_fixing.onnx", "resnet_tiny.onnx"):
        shutil.copy(SAMPLES / name, root / name)
    shutil.copy(SAMPLES / "calib" / "resnet_tiny.npz", root / "resnet_tiny.npz")
    for name in ("resnet_tiny_fp16.layers.json", "resnet_tiny_fp16.profile.json"):
        shutil.copy(TIMING / name, root / name)
    names = list(PANELS)
    lab.open_notebook("panels.ipynb", [PANELS[n][0] for n in names])
    lab.run_all(timeout=300)
    # the panels' background work (parser check, auto compare) ends; the kernel answered meanwhile
    waits = ", ".join(PANELS[n][1] for n in names)
    lab.run_cell(f"_ = ({waits})", timeout=300)
    for i, name in enumerate(names):
        text = lab.cell_output(i)
        assert "Traceback" not in text and "Error:" not in text.split("\n")[0], (name, text[:600])
        out = lab.page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea")
        out.scroll_into_view_if_needed()
        assert out.locator(".widget-box, .widget-html, .jupyter-widgets").count() > 0, \
            f"{name}: no widget rendered ({text[:200]})"
        lab.page.wait_for_timeout(300)
        if name == "compare":  # the chart shows the per-tensor errors the report holds
            said = lab.run_cell(
                "print(repr(c.status.value[:300]), c.figure.data[0]._props.keys(), "
                "c.figure.data[0]._prop_defaults, c.figure._last_trace_edit_id)\n"
                "print(len(c.report.tensors), len(c.figure.data[0].y))")
            assert int(said.split()[-1]) > 0, said
            # and the page shows the verdict, how the candidate ran and the next step
            lab.page.wait_for_timeout(500)
            shown = out.inner_text()
            assert "outputs PASS" in shown and "FP16 emulated on onnxruntime CPU" in shown, \
                shown[:600]
            assert "no node needs to stay FP32" in shown, shown[:600]
        (REPO / "test-artifacts").mkdir(exist_ok=True)
        out.screenshot(path=str(REPO / "test-artifacts" / f"panel-{name}-1400.png"))
    assert not lab.blocked, lab.blocked
