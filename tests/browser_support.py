"""Real-browser test support: a JupyterLab server and Debian's chromium driven by Playwright.

Put browser tests in tests/browser/ (a package, so its conftest.py does not shadow
tests/conftest.py): that conftest provides the fixtures below, one JupyterLab and one chromium
for the whole session. Mark tests `@pytest.mark.browser` (they run in CI).

    @pytest.mark.browser
    def test_panel(lab):                      # lab: a LabPage (fresh page, shared server)
        (lab.server.root / "m.onnx").write_bytes(...)       # the notebook folder
        lab.open_notebook("t.ipynb", ["from widgets import Inspector", "Inspector('m.onnx')"])
        lab.run_all()                          # waits until every code cell has executed
        print(lab.run_cell("print(1 + 1)"))    # '2' (appends a cell, returns its output text)
        lab.screenshot("panel.png")            # whole page, under test-artifacts/
        lab.screenshot_element(".my-widget", "widget.png")
        assert not lab.blocked                 # URLs the no-network routing aborted

Fixtures: `lab_server` (session: one JupyterLab on a random 127.0.0.1 port, known token, temp
root and Jupyter config/data/runtime/settings/workspaces dirs, `overrides.json` with
autoStartDefaultKernel and no news fetch, `window.jupyterapp` exposed; stopped by PID, its
kernels too), `browser` (session: /usr/bin/chromium headless with the CI flags), `lab` (per
test: a new context + page whose every non-loopback request is aborted and recorded in
`lab.blocked`; on failure a FAILED-<test>.png, the console and the server log tail are kept).
For a plain page (an HTML report), `browser.new_page()` then `loopback_only(page, blocked)`.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence
from urllib.parse import urlparse

import pytest

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}
OVERRIDES = {
    "@jupyterlab/notebook-extension:tracker": {"autoStartDefaultKernel": True},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/extensionmanager-extension:plugin": {"enabled": False},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A JupyterLab process with everything it writes kept under `base`."""

    def __init__(self, base: Path, *, root: Optional[Path] = None, repo: Path = REPO,
                 env: Optional[dict] = None):
        """`root`: the folder JupyterLab serves (default base/root); `repo`: the checkout whose
        code the kernels import (first on PYTHONPATH; a fresh clone in the tour test);
        `env`: more environment variables (e.g. WORKBENCH_HOME)."""
        self.base = base
        self.root = root if root is not None else base / "root"
        self.repo = repo
        self.extra_env = dict(env or {})
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = base / "jupyterlab.log"
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> "LabServer":
        for d in ("root", "config", "data", "runtime", "ipython", "settings", "user-settings",
                  "workspaces"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        (self.base / "settings" / "overrides.json").write_text(json.dumps(OVERRIDES))
        env = dict(os.environ)
        env.update({
            "JUPYTER_CONFIG_DIR": str(self.base / "config"),
            "JUPYTER_DATA_DIR": str(self.base / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
            "IPYTHONDIR": str(self.base / "ipython"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.base / "user-settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.base / "workspaces"),
            "PYTHONPATH": os.pathsep.join([str(self.repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        })
        env.update(self.extra_env)
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--ServerApp.token={self.token}", "--ServerApp.password=",
               f"--ServerApp.root_dir={self.root}",
               f"--LabApp.app_settings_dir={self.base / 'settings'}",
               f"--LabApp.user_settings_dir={self.base / 'user-settings'}",
               f"--LabApp.workspaces_dir={self.base / 'workspaces'}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
               "--ServerApp.terminals_enabled=False"]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({self.proc.returncode}); log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"JupyterLab did not answer within {timeout:.0f}s; log:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server and the kernels it started, by PID."""
        if self.proc is None:
            return
        import psutil

        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            kids = []
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for k in kids:
            try:
                k.kill()
            except psutil.Error:
                pass
        self._log.close()
        self.proc = None


class LabPage:
    """One browser page on the lab server, with helpers to open notebooks and run cells."""

    def __init__(self, server: LabServer, page: Any, blocked: List[str]):
        self.server = server
        self.page = page
        self.blocked = blocked
        self.console: List[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))

    def write_notebook(self, name: str, cells: Sequence[str]) -> Path:
        import nbformat

        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        path = self.server.root / name
        nbformat.write(nb, str(path))
        return path

    def open_notebook(self, name: str, cells: Optional[Sequence[str]] = None,
                      timeout: float = 90.0) -> None:
        """(Write and) open a notebook; returns once its kernel is idle."""
        if cells is not None:
            self.write_notebook(name, cells)
        self.page.goto(f"{self.server.url}/lab/tree/{name}?reset&token={self.server.token}")
        self.page.wait_for_function(
            """(name) => {
                const app = window.jupyterapp;
                if (!app || !app.shell) return false;
                const w = app.shell.currentWidget;
                if (!w || !w.context || !w.context.path.endsWith(name)) return false;
                const s = w.sessionContext && w.sessionContext.session;
                return !!(s && s.kernel && s.kernel.status === 'idle');
            }""", arg=name, timeout=timeout * 1000)

    def _wait_cells(self, indices: Optional[List[int]], timeout: float) -> None:
        self.page.wait_for_function(
            """(idx) => {
                const w = window.jupyterapp.shell.currentWidget;
                const cells = w.content.widgets;
                const want = idx === null ? cells.map((_, i) => i) : idx;
                const k = w.sessionContext.session.kernel;
                return k.status === 'idle' && want.every((i) => cells[i].model.type !== 'code'
                    || (cells[i].model.executionCount !== null && !cells[i].node.querySelector(
                        '.jp-InputArea-prompt') ?.textContent.includes('*')));
            }""", arg=indices, timeout=timeout * 1000)

    def run_all(self, timeout: float = 120.0) -> None:
        """Run every cell and wait for them all."""
        self.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        self._wait_cells(None, timeout)

    def run_index(self, idx: int, timeout: float = 60.0) -> str:
        """Run the notebook's cell number `idx` and wait for it; returns its output text."""
        self.page.evaluate(
            """(i) => {
                const nb = window.jupyterapp.shell.currentWidget.content;
                nb.activeCellIndex = i;
                return window.jupyterapp.commands.execute('notebook:run-cell');
            }""", idx)
        self._wait_cells([idx], timeout)
        return self.cell_output(idx)

    def run_cell(self, code: str, timeout: float = 60.0) -> str:
        """Append a code cell, run it, return its output text (stdout, results, errors)."""
        idx = self.page.evaluate(
            """async (code) => {
                const app = window.jupyterapp;
                const nb = app.shell.currentWidget.content;
                nb.activeCellIndex = nb.widgets.length - 1;
                await app.commands.execute('notebook:insert-cell-below');
                const cell = nb.activeCell;
                cell.model.sharedModel.setSource(code);
                const i = nb.widgets.indexOf(cell);
                await app.commands.execute('notebook:run-cell');
                return i;
            }""", code)
        self._wait_cells([idx], timeout)
        return self.cell_output(idx)

    def cell_output(self, idx: int) -> str:
        return self.page.evaluate(
            """(i) => {
                const cell = window.jupyterapp.shell.currentWidget.content.widgets[i];
                return cell.outputArea ? cell.outputArea.node.innerText.trim() : '';
            }""", idx)

    def screenshot(self, name: str, **kwargs: Any) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), **kwargs)
        return path


    def screenshot_element(self, selector: str, name: str) -> Path:
        """Screenshot of the last element matching `selector` (scrolled into view)."""
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        loc = self.page.locator(selector).last
        loc.scroll_into_view_if_needed()
        loc.screenshot(path=str(path))
        return path


def launch_browser(playwright: Any) -> Any:
    """Debian's chromium, headless, no GPU, no background network."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup.sh does)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def loopback_only(target: Any, blocked: List[str]) -> None:
    """Route a Playwright context or page so that every request that is not to the loopback
    interface (or a data:/blob:/file: URL) is aborted and recorded in `blocked`."""

    def route(r: Any) -> None:
        url = r.request.url
        host = urlparse(url).hostname or ""
        if url.startswith(("data:", "blob:", "about:", "file:")) or host in LOOPBACK:
            r.continue_()
        else:
            blocked.append(url)
            r.abort()

    target.route("**/*", route)


def new_lab_page(browser: Any, server: LabServer, viewport=(1400, 1000)) -> LabPage:
    """A page in a fresh context that aborts every request not to the loopback interface."""
    ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    blocked: List[str] = []
    loopback_only(ctx, blocked)
    return LabPage(server, ctx.new_page(), blocked)


# -- fixtures (imported by tests/browser/conftest.py; import them into any module that needs them)
@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    server = LabServer(tmp_path_factory.mktemp("jupyterlab")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_browser(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def lab(browser: Any, lab_server: LabServer, request: pytest.FixtureRequest) -> Iterator[LabPage]:
    page = new_lab_page(browser, lab_server)
    try:
        yield page
    finally:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            try:
                page.screenshot(f"FAILED-{request.node.name}.png")
            except Exception:  # the page may be gone; the failure itself is what matters
                pass
            print("browser console:\n" + "\n".join(page.console[-40:]))
            print("jupyterlab log tail:\n" + lab_server.log_tail(2000))
        page.page.context.close()
