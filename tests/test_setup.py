"""scripts/setup.sh where `python3` is marked externally managed (PEP 668), as Debian 12's and
Ubuntu 24.04's are: pip refuses to install into it, so set-up makes a virtual environment (.venv)
and installs everything there. The real `python -m venv` and `pip install -e ".[test]"` run (from
the machine's package index or cache); `--python-only` skips the Debian packages, npm and the main
job, which need root and minutes. With a virtual environment already active, set-up installs into
it and .venv links to it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

MARKER = "EXTERNALLY-MANAGED"
# what `pip install -e .` and setup.sh read: the project, not its tests or data
PROJECT = ["pyproject.toml", "setup.py", "README.md", "scripts", "workbench", "widgets"]


def _probe(python: str, code: str) -> str:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, cwd="/",
                          env=_clean_env(os.environ.get("PATH", ""))).stdout.strip()


def _clean_env(path: str, **extra: str) -> dict:
    """The environment of a new user's shell: no active venv, no PYTHONPATH pointing at a checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_CURRENT_TEST")}
    env.update(PATH=path, **extra)
    return env


IS_MANAGED = ("import os, sys, sysconfig; print(sys.prefix == sys.base_prefix and "
              f"os.path.isfile(os.path.join(sysconfig.get_path('stdlib'), '{MARKER}')))")


def _debian_python() -> str | None:
    """Debian's/Ubuntu's own /usr/bin/python3 when it is marked and can make a venv."""
    py = "/usr/bin/python3"
    if not os.access(py, os.X_OK):
        return None
    ok = _probe(py, IS_MANAGED + "; import ensurepip, sys; print(sys.version_info >= (3, 9))")
    return py if ok == "True\nTrue" else None


def _marked_copy(dest: Path) -> str:
    """A copy of this interpreter (its standard library, headers and shared library, not its
    site-packages) with the EXTERNALLY-MANAGED marker in its stdlib folder."""
    base = Path(sys.base_prefix)
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (dest / "bin").mkdir(parents=True)
    shutil.copy2(Path(sys.base_prefix) / "bin" / ver, dest / "bin" / ver)
    skip = shutil.ignore_patterns("site-packages", "dist-packages", "__pycache__", "test", "tests")
    shutil.copytree(base / "lib" / ver, dest / "lib" / ver, ignore=skip, symlinks=True)
    for lib in (base / "lib").glob(f"lib{ver}*.so*"):
        shutil.copy2(lib, dest / "lib" / lib.name)
    if (base / "include" / ver).is_dir():
        shutil.copytree(base / "include" / ver, dest / "include" / ver)
    (dest / "lib" / ver / "site-packages").mkdir()
    stdlib = Path(_probe(str(dest / "bin" / ver), "import sysconfig; print(sysconfig.get_path('stdlib'))"))
    assert stdlib == dest / "lib" / ver, f"the copy does not run from its own folder: {stdlib}"
    (stdlib / MARKER).write_text("[externally-managed]\nError=this Python is managed by the system\n")
    return str(dest / "bin" / ver)


def _project_copy(dest: Path) -> Path:
    ignore = shutil.ignore_patterns("node_modules", "__pycache__", "*.so", "*.egg-info")
    dest.mkdir()
    for name in PROJECT:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture
def workdir(tmp_path):
    """tmp_path, emptied afterwards: each environment set-up makes is about 1.4 GB."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.timeout(1500)
def test_setup_makes_and_uses_a_venv_where_python3_is_externally_managed(workdir):
    tmp_path = workdir
    base = _debian_python() or _marked_copy(tmp_path / "managed-python")
    assert _probe(base, IS_MANAGED) == "True", f"{base} is not marked externally managed"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").symlink_to(base)   # first on PATH, as on a stock Debian/Ubuntu
    path = os.pathsep.join([str(shim), "/usr/local/bin", "/usr/bin", "/bin"])
    # the marker holds: pip (where this Python has it) refuses to install into it
    pip = subprocess.run([str(shim / "python3"), "-m", "pip", "install", "--dry-run", "pip"],
                         capture_output=True, text=True, timeout=120, env=_clean_env(path))
    assert "No module named pip" in pip.stderr or "externally-managed-environment" in pip.stderr, pip.stderr

    repo = _project_copy(tmp_path / "clone")
    start = time.monotonic()
    run = subprocess.run(["bash", "scripts/setup.sh", "--python-only"], cwd=repo, capture_output=True,
                         text=True, timeout=1200, env=_clean_env(path))
    took = time.monotonic() - start
    print(f"setup.sh --python-only: {took:.0f} s")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "virtual environment .venv, made from" in run.stdout, run.stdout

    venv_py = repo / ".venv" / "bin" / "python"
    has_headers = _probe(base, "import os, sysconfig; print(os.path.exists(os.path.join("
                               "sysconfig.get_paths()['include'], 'Python.h')))") == "True"
    probe = subprocess.run(
        [str(venv_py), "-c", "import sys, workbench, tensorrt_rtx_bindings, jupyterlab, pytest, playwright, "
         "anywidget; print(sys.prefix != sys.base_prefix); print(workbench.__file__); "
         "import importlib.util as u; print(u.find_spec('workbench.graphs._layout') is not None)"],
        capture_output=True, text=True, timeout=120, env=_clean_env(path), cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-2000:]
    in_venv, module, layout = probe.stdout.split()
    assert in_venv == "True" and Path(module).resolve() == (repo / "workbench" / "__init__.py").resolve()
    assert layout == str(has_headers), "the compiled graph layout was not built in the venv"
    cli = subprocess.run([str(repo / ".venv" / "bin" / "workbench"), "--help"], capture_output=True,
                         text=True, timeout=120, env=_clean_env(path))
    assert cli.returncode == 0 and "inspect" in cli.stdout
    # nothing went into the managed Python itself
    assert _probe(base, "import importlib.util as u; print(u.find_spec('workbench'))") == "None"

    # a virtual environment already active (and no .venv yet): set-up installs into it and
    # .venv links to it, so the README's test command runs there
    other = _project_copy(tmp_path / "clone2")
    active = repo / ".venv"
    again = subprocess.run(["bash", "scripts/setup.sh", "--python-only"], cwd=other, capture_output=True,
                           text=True, timeout=1200,
                           env=_clean_env(str(active / "bin") + os.pathsep + path, VIRTUAL_ENV=str(active)))
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert (other / ".venv").is_symlink() and (other / ".venv").resolve() == active.resolve()
    moved = _probe(str(other / ".venv" / "bin" / "python"), "import workbench; print(workbench.__file__)")
    assert Path(moved).resolve() == (other / "workbench" / "__init__.py").resolve()


def test_the_readme_and_ci_run_the_tests_in_the_environment_setup_makes():
    """README's two commands stay two, and CI runs exactly the README's test command."""
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Set up (two commands)", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["bash scripts/setup.sh", ".venv/bin/python -m pytest -q"], commands
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci and "bash scripts/setup.sh --no-demo" in ci
    assert "/.venv" in (REPO / ".gitignore").read_text().split()


def test_debian_package_probe_sees_a_candidate_apt_cache_prints_in_pieces(tmp_path):
    """setup.sh asks apt-cache whether this release has a package. apt-cache writes its answer
    in several writes; a probe that stops reading at the first match (`| grep -q` under
    pipefail) got SIGPIPE and said "no" for chromium, graphviz and the fonts on stock Debian 12:
    the browser tests then had no browser. The probe must read the answer whole."""
    import re
    import stat

    src = (REPO / "scripts" / "setup.sh").read_text()
    probe = re.search(r"^has_candidate\(\) \{.*?\}$", src, re.S | re.M)
    assert probe, "setup.sh defines has_candidate()"
    fake = tmp_path / "bin" / "apt-cache"
    fake.parent.mkdir()
    # like apt-cache policy: the candidate early, then the version table in later writes
    fake.write_text("#!/bin/bash\n"
                    "case \"$2\" in\n"
                    "  present) printf '%s:\\n  Installed: (none)\\n  Candidate: 1.0-1\\n' \"$2\";\n"
                    "           for i in $(seq 200); do sleep 0.001; printf '     1.0-%s 500\\n' $i;"
                    " done ;;\n"
                    "  nocandidate) printf '%s:\\n  Installed: (none)\\n  Candidate: (none)\\n' \"$2\" ;;\n"
                    "  *) exit 0 ;;\n"
                    "esac\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    script = ("set -euo pipefail\n" + probe.group(0) + "\n"
              "for p in present nocandidate absent; do\n"
              "  if has_candidate $p; then echo \"$p yes\"; else echo \"$p no\"; fi\n"
              "done\n")
    env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                         env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:3] == ["present yes", "nocandidate no", "absent no"], run.stdout
