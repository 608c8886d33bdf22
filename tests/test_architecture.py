"""Architecture contracts: the import-linter contracts in pyproject.toml hold (layers, a core that
imports nothing above it, worker server modules that stay stdlib/TensorRT-only, no UI library in
the engine room, no import cycles). Runs `lint-imports` as CI's README test command does."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    return subprocess.run([exe, "--no-cache"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_import_contracts_are_kept():
    p = _lint_imports()
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "KEPT" in p.stdout and "BROKEN" not in p.stdout


def test_contracts_cover_every_layer_package():
    """A new workbench module or package must be named in a contract, or it escapes every rule."""
    text = (REPO / "pyproject.toml").read_text()
    contracts = text.split("[tool.importlinter]", 1)[1]
    names = {p.stem for p in (REPO / "workbench").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    missing = sorted(n for n in names if f'"workbench.{n}' not in contracts)
    assert not missing, f"add these to a contract in pyproject.toml: {missing}"
