"""Make the README's tour screenshots (docs/img/*.png) in a real JupyterLab + Debian's chromium,
at 1280 px, offline, from the bundled samples and the recorded H200 data:

    .venv/bin/python docs/make_screenshots.py   # ~2 min on a laptop CPU

Each image is the top of one panel (at most MAX_HEIGHT px), so the files stay small.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from browser_support import LabServer, launch_browser, new_lab_page  # noqa: E402

OUT = REPO / "docs" / "img"
MAX_HEIGHT = 560
H200 = REPO / "tests" / "data" / "fixtures" / "trt86-h200"
CELLS = {  # image name -> cell (the panel is the cell's value)
    "tour-inspector": "from widgets import Inspector\nInspector('bert_tiny.onnx')",
    "tour-fix": "from widgets import FixPanel\nf = FixPanel('needs_fixing.onnx')\nf.wait(120)\nf",
    "tour-compare": ("from widgets import ComparePanel\n"
                     "c = ComparePanel('fp16_overflow.onnx', target='fp16', "
                     "inputs='fp16_overflow.npz', run=False)\nc.run_search()\nc"),
    "tour-timing": ("from widgets import TimingPanel\n"
                    "TimingPanel('resnet50_fp16.layers.json', profile='resnet50_fp16.profile.json', "
                    "onnx='resnet50.structure.onnx', vs=('resnet50_fp32.layers.json', "
                    "'resnet50_fp32.profile.json'), names=('fp16', 'fp32'), top=25)"),
}
SETUP = ("import numpy as np\n"
         "np.savez('fp16_overflow.npz', input=np.random.default_rng(2)"
         ".standard_normal((4, 64)).astype(np.float32))")


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="wb-shots-"))
    os.environ["WORKBENCH_HOME"] = str(base / "home")  # a fresh workspace: no earlier fixes
    server = LabServer(base).start()
    try:
        for name in ("bert_tiny.onnx", "needs_fixing.onnx", "fp16_overflow.onnx"):
            shutil.copy(REPO / "sample_models" / name, server.root / name)
        for name in ("resnet50.structure.onnx", "resnet50_fp16.layers.json",
                     "resnet50_fp16.profile.json", "resnet50_fp32.layers.json",
                     "resnet50_fp32.profile.json"):
            shutil.copy(H200 / name, server.root / name)
        with sync_playwright() as p:
            browser = launch_browser(p)
            lab = new_lab_page(browser, server, viewport=(1280, 1400))
            names = list(CELLS)
            lab.open_notebook("tour.ipynb", [SETUP] + [CELLS[n] for n in names])
            lab.run_all(timeout=300)
            lab.page.wait_for_timeout(1500)
            for i, name in enumerate(names, start=1):
                out = lab.page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea")
                out.evaluate("(e) => e.scrollIntoView({block: 'start'})")
                lab.page.wait_for_timeout(500)
                box = out.bounding_box()
                clip = {"x": box["x"], "y": box["y"], "width": box["width"],
                        "height": min(box["height"], MAX_HEIGHT)}
                lab.page.screenshot(path=str(OUT / f"{name}.png"), clip=clip)
                print(OUT / f"{name}.png")
            assert not lab.blocked, lab.blocked
            browser.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
