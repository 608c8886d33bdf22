"""Running the notebooks changes nothing git would commit: the clean filter
(scripts/strip_notebook.py, configured by scripts/git_filters.sh, named in .gitattributes) drops
outputs, counts and widget state, so `git diff` is empty and `git add` stages nothing (`git status`
lists the file until then: it trusts the changed size without running the filter). An edit to a
cell still shows. Exercised with real git in a scratch repository."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "notebooks" / "01_inspect.ipynb"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    (root / "notebooks").mkdir()
    for rel in ("scripts/strip_notebook.py", "scripts/git_filters.sh", ".gitattributes"):
        shutil.copy(REPO / rel, root / rel)
    shutil.copy(NOTEBOOK, root / "notebooks" / NOTEBOOK.name)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.invalid")
    git(root, "config", "user.name", "t")
    subprocess.run(["bash", "scripts/git_filters.sh"], cwd=root, check=True)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "notebooks")
    return root


def run_notebook_outputs(path: Path, source_edit: str = "") -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    for i, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = i + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
        cell.setdefault("metadata", {})["execution"] = {"iopub.status.idle": "2026-12-01T00:00:00Z"}
        if source_edit and i == 0:
            cell["source"] = source_edit
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    path.write_text(json.dumps(nb, indent=1, sort_keys=True), encoding="utf-8")  # as Jupyter saves


def test_committed_notebooks_are_already_in_the_filters_form():
    for rel in git(REPO, "ls-files", "*.ipynb").split():
        data = (REPO / rel).read_bytes()
        out = subprocess.run([sys.executable, str(REPO / "scripts" / "strip_notebook.py")], input=data,
                             capture_output=True, check=True).stdout
        assert out == data, f"{rel} is not stored in the clean filter's form"


def test_outputs_do_not_show_but_edits_do(clone: Path):
    nb = clone / "notebooks" / NOTEBOOK.name
    run_notebook_outputs(nb)
    assert git(clone, "diff") == ""
    git(clone, "add", "-A")
    assert git(clone, "diff", "--cached") == ""            # nothing to commit
    assert git(clone, "status", "--porcelain") == ""
    staged = json.loads(git(clone, "show", f":notebooks/{NOTEBOOK.name}"))
    assert all(c["outputs"] == [] for c in staged["cells"] if c["cell_type"] == "code")
    run_notebook_outputs(nb, source_edit="print('edited')")
    assert git(clone, "status", "--porcelain").split() == ["M", f"notebooks/{NOTEBOOK.name}"]
    assert "edited" in git(clone, "diff")


def test_the_filter_passes_anything_else_through():
    for data in (b"not json at all", b'{"a": 1}', "\u00e9".encode()):
        out = subprocess.run([sys.executable, str(REPO / "scripts" / "strip_notebook.py")], input=data,
                             capture_output=True, check=True).stdout
        assert out == data


def test_what_jupyterlab_writes_about_its_kernel_does_not_show(clone: Path):
    """JupyterLab saves its kernel's display name and the interpreter's details: a new user's
    run of the notebooks showed them as modified (14 lines of metadata each)."""
    nb = clone / "notebooks" / NOTEBOOK.name
    run_notebook_outputs(nb)
    data = json.loads(nb.read_text(encoding="utf-8"))
    data["metadata"]["kernelspec"]["display_name"] = "Python 3 (ipykernel)"
    data["metadata"]["language_info"] = {
        "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
        "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3", "version": "3.11.7"}
    nb.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    assert git(clone, "diff") == ""
    git(clone, "add", "-A")
    assert git(clone, "status", "--porcelain") == ""
