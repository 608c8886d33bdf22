"""The widgets in Voila: a notebook with a panel (ipywidgets 8 + plotly FigureWidgets) and the
graph view (an anywidget) served by `voila` on 127.0.0.1 renders in chromium: the panel's boxes,
its bar chart, the graph view painted on its canvas, a second tab's figure once the tab is opened;
no error on the page beyond the two known ones below, no request off the loopback interface except
Voila's own Font Awesome link. (Kernel -> figure updates after a click are not checked: in Voila
0.5.13 + anywidget 0.11 they did not show here; see the README's Voila note.)"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import nbformat
import pytest

from browser_support import ARTIFACTS, REPO, LabServer, free_port, loopback_only

pytestmark = pytest.mark.browser
SAMPLES = REPO / "sample_models"
TIMING = REPO / "tests" / "data" / "timing"

# Voila 0.5's lab template links Font Awesome from a CDN (offline: the icons are missing, nothing
# else); and with several anywidget models arriving at once, anywidget 0.11 logs an unhandled
# "Failed to initialize model" after its 2 s timeout while the views still render (the assertions
# below check that). JupyterLab logs neither for the same notebook.
VOILA_CDN = ["https://cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free@%5E5/css/all.min.css",
             "https://cdn.jsdelivr.net/npm/@fortawesome/fontawesome-free@%5E5/css/v4-shims.min.css"]
KNOWN_CONSOLE = {"error: Failed to load resource: net::ERR_FAILED",
                 "pageerror: [anywidget] Failed to initialize model."}

CELLS = [
    "from widgets import GraphView, TimingPanel\n"
    "view = GraphView('resnet_tiny.onnx', height=360)\n"
    "panel = TimingPanel('resnet_tiny_fp16.layers.json', profile='resnet_tiny_fp16.profile.json',\n"
    "                    onnx='resnet_tiny.onnx', graph_view=view, top=12)\n"
    "display(panel, view)",
]


class VoilaServer(LabServer):
    """`voila notebook.ipynb` on a random loopback port, Jupyter paths kept under `base`
    (log tail and stop-by-PID as the JupyterLab fixture's)."""

    def __init__(self, base: Path, notebook: Path):
        self.base, self.notebook = base, notebook
        self.port = free_port()
        self.log_path = base / "voila.log"
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 90.0) -> "VoilaServer":
        for d in ("config", "data", "runtime", "ipython"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update({"JUPYTER_CONFIG_DIR": str(self.base / "config"),
                    "JUPYTER_DATA_DIR": str(self.base / "data"),
                    "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
                    "IPYTHONDIR": str(self.base / "ipython"),
                    "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
        cmd = [sys.executable, "-m", "voila", str(self.notebook), "--no-browser",
               f"--port={self.port}", "--Voila.ip=127.0.0.1", "--Voila.port_retries=0",
               "--show_tracebacks=True", "--ServerApp.token=", "--ServerApp.password="]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.notebook.parent, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"voila exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}api/kernelspecs", timeout=2):
                    return self
            except urllib.error.HTTPError:
                return self  # it answers (the API may be closed): the server is up
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"voila did not answer within {timeout:.0f}s:\n{self.log_tail()}")


@pytest.fixture
def voila_server(tmp_path: Path) -> Iterator[VoilaServer]:
    pytest.importorskip("voila", reason="voila is in the test extras: pip install -e '.[test]'")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(SAMPLES / "resnet_tiny.onnx", root / "resnet_tiny.onnx")
    for name in ("resnet_tiny_fp16.layers.json", "resnet_tiny_fp16.profile.json"):
        shutil.copy(TIMING / name, root / name)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = root / "dashboard.ipynb"
    nbformat.write(nb, str(path))
    server = VoilaServer(tmp_path, path).start()
    try:
        yield server
    finally:
        server.stop()


def test_panel_and_graph_view_render_in_voila(browser, voila_server):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1000})
    blocked: list = []
    loopback_only(ctx, blocked)
    page = ctx.new_page()
    console: list = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    try:
        page.goto(voila_server.url, timeout=120_000)
        # the panel: ipywidgets 8 boxes with its bar chart (plotly's FigureWidget) inside
        page.wait_for_selector(".jupyter-widgets.widget-box", timeout=120_000)
        page.wait_for_selector(".plot-container", timeout=120_000)
        # the graph view: the anywidget's ESM module ran and painted the graph
        page.wait_for_function("() => window.__wbGraphViews && window.__wbGraphViews.length"
                               " && window.__wbGraphViews[0].root.dataset.firstPaint",
                               timeout=120_000)
        text = page.inner_text("body")
        assert "Traceback" not in text and "Error" not in text.split("\n")[0], text[:800]
        graph = page.locator(".wb-graph").first
        box = graph.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 300 and box["x"] + box["width"] <= 1280, box
        assert page.locator(".wb-graph canvas").count() > 0
        # the latency tab's figure renders when its tab is opened
        page.locator(".lm-TabBar-tab, .p-TabBar-tab", has_text="Latency").first.click()
        page.wait_for_function("() => document.querySelectorAll('.plot-container').length >= 2",
                               timeout=60_000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "voila-timing-graphview-1280.png"), full_page=True)
        errors = [c for c in console if c.startswith(("error", "pageerror"))
                  and c not in KNOWN_CONSOLE]
        assert not errors, errors
        assert set(blocked) <= set(VOILA_CDN), blocked
    except Exception:
        print("browser console:\n" + "\n".join(console[-40:]))
        print("voila log:\n" + voila_server.log_tail())
        raise
    finally:
        ctx.close()
