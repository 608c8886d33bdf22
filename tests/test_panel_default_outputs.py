"""Every panel, used with its defaults on models in a git checkout, leaves the checkout clean:
its outputs go to the model's workspace (`outputs/`, the engine cache), shown in the panel with
a field to save elsewhere, never beside the user's model unless asked (PrecisionPanel wrote
`sample_models/resnet_tiny.fp16.onnx`, untracked, so `git status` was dirty)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import SAMPLES

TIMING = Path(__file__).resolve().parent / "data" / "timing"
PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                           *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def checkout(tmp_path):
    """A git checkout holding the samples (committed): what a user's repository looks like."""
    repo = tmp_path / "repo"
    shutil.copytree(SAMPLES, repo / "sample_models")
    for name in ("resnet_tiny_fp16.layers.json", "resnet_tiny_fp16.profile.json"):
        shutil.copy(TIMING / name, repo / name)
    np.savez(repo / "sample_models" / "overflow_inputs.npz",
             input=np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "samples")
    assert _git(repo, "status", "--porcelain") == ""
    return repo


def test_every_panel_with_its_defaults_leaves_the_checkout_clean(checkout, monkeypatch):
    from widgets import (BuildPanel, ComparePanel, FixPanel, Inspector, PrecisionPanel,
                         TimingPanel)
    from workbench.engines.engine import BuildConfig
    from workbench.core.model import open_model
    from workbench.core.workspace import workspace_for
    from workbench.worker.client import WorkerClient

    monkeypatch.chdir(checkout)  # a notebook at the repository's top level, relative paths
    sm = Path("sample_models")

    ins = Inspector(str(sm / "bert_tiny.onnx"))
    ins.run_check(wait=True)

    fix = FixPanel(str(sm / "needs_fixing.onnx"), graph=False)
    fix.wait(300)
    fix.auto_fix()
    assert fix.wait(300).supported
    ws = workspace_for(open_model(sm / "needs_fixing.onnx"))
    assert fix.export_path.value == str(ws.outputs_dir / "needs_fixing.fixed.onnx")
    out = fix.export()  # the default: the "save as" field, in the workspace
    assert out == ws.outputs_dir / "needs_fixing.fixed.onnx" and out.is_file()
    assert str(out) in fix.status.value

    prec = PrecisionPanel(str(sm / "resnet_tiny.onnx"),
                          calibration=str(sm / "calib" / "resnet_tiny.npz"))
    ws = workspace_for(open_model(sm / "resnet_tiny.onnx"))
    assert prec.output.value == str(ws.outputs_dir / "resnet_tiny.fp16.onnx")
    res = prec.convert()
    assert res is not None and prec.output_path == ws.outputs_dir / "resnet_tiny.fp16.onnx"
    assert prec.output_path.is_file() and str(prec.output_path) in prec.status.value
    prec.target.value = "int8"  # the default name follows the target, still in the workspace
    assert prec.output.value == str(ws.outputs_dir / "resnet_tiny.int8.onnx")

    cmp = ComparePanel(str(sm / "fp16_overflow.onnx"), target="fp16",
                       inputs=str(sm / "overflow_inputs.npz"))
    cmp.wait(300)
    cmp.start(cmp.run_search)
    cmp.wait(600)
    assert cmp.search is not None and "/scale/Mul" in cmp.search.excluded

    client = WorkerClient()
    try:
        build = BuildPanel(str(sm / "resnet_tiny.onnx"),
                           BuildConfig(profiles=PROFILE, target="sm89",
                                       builder_optimization_level=0), client=client)
        assert build.output.value == ""  # the engine cache, unless a file is typed
        build.start()
        br = build.wait(600)
        assert br is not None and Path(br.engine_path).is_file()
        assert str(workspace_for(open_model(sm / "resnet_tiny.onnx")).dir) in br.engine_path
    finally:
        client.close()

    TimingPanel("resnet_tiny_fp16.layers.json", profile="resnet_tiny_fp16.profile.json",
                onnx=str(sm / "resnet_tiny.onnx"))

    assert _git(checkout, "status", "--porcelain", "--ignored") == ""
    # asked for, a panel writes where it is told (beside the model is fine then)
    prec.target.value = "fp16"
    prec.output.value = str(sm / "mine.fp16.onnx")
    prec.convert()
    assert _git(checkout, "status", "--porcelain") == "?? sample_models/mine.fp16.onnx\n"
