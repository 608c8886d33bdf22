"""Shared test fixtures: paths to the real fixtures and an isolated workspace home."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The commands tests start (`workbench`, `lint-imports`, `python3`, git's notebook filter) come
# from the environment running the tests, also when it is not activated
# (`.venv/bin/python -m pytest`, the README's test command): its bin folder first on PATH.
_ENV_BIN = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _ENV_BIN:
    os.environ["PATH"] = _ENV_BIN + os.pathsep + os.environ.get("PATH", "")

FIXTURES = REPO / "tests" / "data" / "fixtures"  # real TensorRT data, copied in with its licences
POLY = FIXTURES / "polygraphy-models"
H200 = FIXTURES / "trt86-h200"
A100 = FIXTURES / "trex-a100-resnet"
SAMPLES = REPO / "sample_models"
ARTIFACTS = REPO / "test-artifacts"  # screenshots and reports CI keeps in its log


def layout_bench():
    """benchmarks/graph_layout.py as a module (its generated transformers, its real graphs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("graph_layout_bench",
                                                  REPO / "benchmarks" / "graph_layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Every test gets its own WORKBENCH_HOME so workspaces never leak between tests."""
    home = tmp_path_factory.mktemp("wbhome")
    monkeypatch.setenv("WORKBENCH_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def crash_lib(tmp_path_factory) -> str:
    """A real onnxruntime custom-op library whose op segfaults (compiled here; skip without cc)."""
    from ort_models import build_crash_library

    lib = build_crash_library(tmp_path_factory.mktemp("crashlib"))
    if lib is None:
        pytest.skip("no C compiler to build the crashing custom-op library")
    return lib


def shown_text(html_text: str) -> str:
    """What a panel's HTML shows as text: tags (`<wbr>` break chances, nowrap spans) dropped,
    entities decoded; tests look for a command or a node name in it."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))
