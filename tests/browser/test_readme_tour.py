"""The README's "A five-minute tour", as a new user meets it: a fresh `git clone`, the demo
`scripts/setup.sh` ends with (`scripts/demo.sh`, which leaves its history in the workspace),
then JupyterLab at the clone's top level and the tour's cells, parsed from README.md (so the
test follows the README), run one by one in headless chromium. Each panel must show what the
README says of it, and the clone's `git status` shows nothing but the tour notebook afterwards.
Screenshots: test-artifacts/tour-*.png."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import List

import pytest

from browser_support import ARTIFACTS, REPO, LabServer, new_lab_page

pytestmark = pytest.mark.browser
REFUSED = ("/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu")


def tour_cells(readme: Path) -> List[str]:
    """The ```python blocks of README.md's "A five-minute tour" section, in order (the
    numbered steps indent theirs)."""
    text = readme.read_text(encoding="utf-8")
    m = re.search(r"^## A five-minute tour\n(.*?)^## ", text, re.S | re.M)
    assert m, "README.md has no '## A five-minute tour' section"
    blocks = re.findall(r"^( *)```python\n(.*?)^\1```", m.group(1), re.S | re.M)
    return [textwrap.dedent(body).strip() for _, body in blocks]


def test_tour_cells_parse_from_the_readme():
    cells = tour_cells(REPO / "README.md")
    assert cells[0].startswith("from widgets import")
    for panel in ("Inspector(", "FixPanel(", "PrecisionPanel(", "ComparePanel(", "BuildPanel(",
                  "TimingPanel("):
        assert sum(panel in c for c in cells) == 1, panel
    for c in cells:
        compile(c, "<tour>", "exec")  # runnable as written: no `...` placeholders
        assert "..." not in c, c


@pytest.fixture(scope="module")
def after_setup(tmp_path_factory):
    """A fresh clone of this checkout, its compiled layout as set-up builds it, and the demo
    run there with a workspace home of its own (what set-up leaves behind)."""
    base = tmp_path_factory.mktemp("tour")
    clone, home = base / "clone", base / "home"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    for so in (REPO / "workbench").glob("_layout*.so"):  # built by set-up's pip install
        shutil.copy(so, clone / "workbench" / so.name)
    env = {**os.environ, "PYTHONPATH": str(clone), "WORKBENCH_HOME": str(home)}
    r = subprocess.run(["bash", "scripts/demo.sh"], cwd=clone, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return base, clone, home


def _text(out) -> str:
    return out.inner_text()


def _wait_text(lab, out, pattern: str, timeout_s: float = 240) -> str:
    """Wait until the cell's output shows `pattern` (a regex); returns the text."""
    lab.page.wait_for_function(
        """([el, pat]) => new RegExp(pat).test(el.innerText)""",
        arg=[out.element_handle(), pattern], timeout=timeout_s * 1000)
    return _text(out)


def _shot(lab, out, name: str) -> None:
    """The top of a cell's output as the user sees it (scrolled to it, at most one screen)."""
    out.evaluate("(e) => e.scrollIntoView({block: 'start'})")
    lab.page.wait_for_timeout(400)
    box = out.bounding_box()
    if box and box["height"] > 5:  # (the import cell shows nothing)
        view = lab.page.viewport_size
        lab.page.screenshot(path=str(ARTIFACTS / name), clip={
            "x": box["x"], "y": max(box["y"], 0), "width": min(box["width"], view["width"]),
            "height": min(box["height"], view["height"] - max(box["y"], 0))})


def _click(out, name: str) -> None:
    btn = out.locator("button", has_text=name).first
    btn.scroll_into_view_if_needed()
    btn.click()


def test_the_readme_tour_shows_what_the_readme_says(browser, after_setup):
    base, clone, home = after_setup
    server = LabServer(base / "lab", root=clone, repo=clone,
                       env={"WORKBENCH_HOME": str(home)}).start()
    lab = new_lab_page(browser, server, viewport=(1400, 1000))
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        cells = tour_cells(clone / "README.md")
        lab.open_notebook("tour.ipynb", cells)
        seen = set()
        for i, cell in enumerate(cells):
            text = lab.run_index(i, timeout=300)
            assert "Traceback" not in text and "Error" not in text.split("\n")[0], (cell, text[:800])
            out = lab.page.locator(".jp-Notebook .jp-Cell").nth(i).locator(".jp-OutputArea")
            if "Inspector(" in cell:
                seen.add("inspector")
                text = _wait_text(lab, out, r"parameters")
                for card in ("nodes", "parameters", "opset", "inputs / outputs"):
                    assert card in text, (card, text[:800])
                assert out.locator(".js-plotly-plot").count() >= 1  # the op histogram
                assert "Check with TensorRT" in text and out.locator("canvas").count() >= 1
                assert out.locator(".wb-dyn, [title*='dynamic']").count() >= 1 or \
                    re.search(r"batch|seq", text), text[:800]
            elif "FixPanel(" in cell:
                seen.add("fix")
                # (the header and the findings table are two widgets: wait for both)
                text = _wait_text(lab, out, r"^(?=[\s\S]*NOT supported)" + "".join(
                    f"(?=[\\s\\S]*{re.escape(n)})" for n in REFUSED))
                assert "(0 change(s) from the original)" in text, text[:800]
                lab.page.wait_for_function("(el) => el.querySelectorAll('select option')"
                                           ".length >= 3", arg=out.element_handle())
                opts = [o.replace("\xa0", " ") for o in out.locator("select option")
                        .all_inner_texts()]
                for node in REFUSED:  # each refused node listed, with a recipe proposed
                    assert node in text, (node, text[:1500])
                    assert any(o.endswith(f" on {node}") for o in opts), (node, opts)
                assert "3 earlier changes of this model exist" in text, text[:1500]
                assert out.locator("button", has_text="Open them").count() == 1
                _shot(lab, out, "tour-fix-opened.png")
                _click(out, "Auto-fix")
                text = _wait_text(lab, out, r"tensorrt-rtx: supported")
                assert "(3 change(s) from the original)" in text, text[:800]
            elif "PrecisionPanel(" in cell:
                seen.add("precision")
                value = out.locator("input[type=text]").evaluate_all(
                    "(els) => els.map((e) => e.value)")
                dest = [v for v in value if v.endswith("resnet_tiny.fp16.onnx")]
                assert dest and dest[0].startswith(str(home)) and "/outputs/" in dest[0], value
                _click(out, "Convert")
                text = _wait_text(lab, out, r"wrote .*resnet_tiny\.fp16\.onnx")
                assert str(home) in text and Path(dest[0]).is_file()
            elif "ComparePanel(" in cell:
                seen.add("compare")
                text = _wait_text(lab, out, r"outputs (PASS|FAIL)")
                assert out.locator(".js-plotly-plot").count() >= 1  # error per tensor
                _click(out, "Find FP32 nodes")
                text = _wait_text(lab, out, r"fp16: (NOT )?within budget", 600)
                m = re.search(r"fp16: within budget(?: \([^)]*\))? with (\d+) node\(s\) kept in "
                              r"FP32: ([^\n]*)", text)
                assert m and int(m.group(1)) == 6, text[-1500:]
                kept = re.findall(r"--exclude (\S+)", m.group(2))
                assert len(kept) == 6 and "/scale/Mul" in kept, kept
                assert all(n.startswith("/norm/") for n in kept if n != "/scale/Mul"), kept
            elif "BuildPanel(" in cell:
                seen.add("build")
                _click(out, "Build")
                text = _wait_text(lab, out, r"engine\s", 600)
                text = _wait_text(lab, out, r"cached as|tensorrt-rtx", 600)
                shown = out.evaluate("(e) => Array.from(e.querySelectorAll('textarea'))"
                                     ".map((t) => t.value).join('\\n')")
                assert "--saveEngine" in shown or "trtexec" in shown or "tensorrt_rtx" in shown, \
                    shown[:800]
                assert "FAILED" not in text.upper().split("FINDINGS")[0], text[:1200]
            elif "TimingPanel(" in cell:
                seen.add("timing")
                text = _text(out)
                tabs = [t.strip() for t in out.locator(".lm-TabBar-tab, .p-TabBar-tab")
                        .all_inner_texts()]
                assert tabs == ["Layers", "Scopes", "Compare", "Findings", "vs PyTorch", "Graph"], tabs
                assert "x3.34 vs fp32" in text, text[:400]
                assert out.locator(".js-plotly-plot").count() >= 1
            lab.page.wait_for_timeout(500)
            if out.is_visible():
                _shot(lab, out, f"tour-{i}.png")
        assert seen == {"inspector", "fix", "precision", "compare", "build", "timing"}, seen
        assert not lab.blocked, lab.blocked
        # nothing the panels wrote lands in the checkout: only the user's own notebook
        st = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
        assert st.splitlines() == ["?? tour.ipynb"], st
    finally:
        lab.page.context.close()
        server.stop()
