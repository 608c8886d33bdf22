"""timing-capture's PyTorch comparison: the plumbing on the CPU. Without torch the result and
the panel say so; with torch (a CPU build on the path given by WORKBENCH_TEST_TORCH_PATH, e.g.
`pip install --target DIR torch`), a module factory and a TorchScript file are timed in
eager FP32 in a child process, FP16 modes say they need CUDA, and each row names its source."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import H200, REPO
from widgets.timing import TimingPanel
from workbench.timing import LayerTable
from workbench.timing.vs_torch import compare, feeds_for, lines, torch_available

TORCH_PATH = os.environ.get("WORKBENCH_TEST_TORCH_PATH", "/tmp/engine_torch")
ENGINE = {"p50_ms": 0.75}
GRAPH = {"p50_ms": 0.47, "p99_ms": 0.5}


def _torch_env():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), TORCH_PATH]))
    ok = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                        capture_output=True).returncode == 0
    return env if ok else None


def test_without_torch_the_result_says_why():
    if torch_available() is None:
        pytest.skip("torch imports in this Python: the no-torch message is not reachable")
    feeds = {"input": np.zeros((1, 3, 8, 8), np.float32)}
    cmp = compare(ENGINE, GRAPH, feeds, "torchvision.models:resnet50")
    assert cmp["available"] is False and "torch is not installed" in cmp["reason"]
    assert [r["what"] for r in cmp["rows"]] == ["TensorRT engine, plain enqueue",
                                                "TensorRT engine, CUDA graph"]
    assert any("torch is not installed" in ln for ln in lines(cmp))


def test_feeds_follow_the_onnx_dtypes_and_timed_shapes():
    f = feeds_for({"input_ids": [2, 16], "attention_mask": [2, 16]},
                  onnx=REPO / "sample_models" / "bert_tiny.onnx")
    assert f["input_ids"].dtype == np.int64 and f["input_ids"].shape == (2, 16)
    g = feeds_for({"input": [1, 3, 32, 32]})
    assert g["input"].dtype == np.float32 and g["input"].std() > 0.5


def test_panel_shows_the_comparison_with_sources_or_why_not():
    t = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json")
    p = TimingPanel(t)
    assert "vs PyTorch" in p.tab_titles
    assert "no PyTorch comparison" in p.vs_torch_html.value
    cmp = {"available": True, "shapes": {"input": [1, 3, 224, 224]}, "rows": [
        {"what": "TensorRT engine, CUDA graph", "p50_ms": 0.44, "vs_torch_compile": 0.61,
         "source": {"host": "gpu-box", "backend_version": "8.6.0"}},
        {"what": "torch compile fp16", "mode": "compile_fp16", "p50_ms": 0.72,
         "source": {"host": "gpu-box", "gpu": "NVIDIA H100", "torch": "2.11.0",
                    "clocks": "1980 MHz"}}]}
    p.show_vs_torch(cmp)
    html = p.vs_torch_html.value
    assert "0.4400" in html and "0.61x" in html and "NVIDIA H100" in html
    assert "clocks 1980 MHz" in html and "torch 2.11.0" in html


CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from workbench.timing.vs_torch import compare
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)}
    out = {}
    for spec in sys.argv[1:]:
        out[spec] = compare({"p50_ms": 0.5}, {"p50_ms": 0.3}, feeds, spec, iterations=5)
    print(json.dumps(out))
""")


def test_torch_factory_and_torchscript_are_timed_in_this_process(tmp_path):
    env = _torch_env()
    if env is None:
        pytest.skip(f"no torch under {TORCH_PATH} (set WORKBENCH_TEST_TORCH_PATH)")
    (tmp_path / "tinynet.py").write_text(textwrap.dedent("""
        import torch
        def make():
            return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
        def save(path):
            torch.jit.script(make()).save(path)
    """))
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    ts = tmp_path / "tiny.pt"
    subprocess.run([sys.executable, "-c", f"import tinynet; tinynet.save({str(ts)!r})"],
                   env=env, check=True, timeout=300)
    r = subprocess.run([sys.executable, "-c", CHILD, "tinynet:make", str(ts)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for spec, cmp in res.items():
        assert cmp["available"] is True, spec
        rows = {row.get("mode"): row for row in cmp["rows"]}
        assert rows["eager_fp32"]["p50_ms"] > 0
        assert rows["eager_fp32"]["source"]["timer"] == "wall clock"
        assert rows["eager_fp32"]["source"]["torch"].startswith("2.")
        assert "CUDA only" in rows["eager_fp16"]["reason"]
        assert "clocks" in cmp["source"]


def test_bad_torch_model_names_the_flag():
    env = _torch_env()
    if env is None:
        pytest.skip(f"no torch under {TORCH_PATH}")
    r = subprocess.run([sys.executable, "-c",
                        "from workbench.timing.vs_torch import load_torch_model as l\n"
                        "from workbench.core.errors import WorkbenchError\n"
                        "try:\n l('no_such_mod:f')\nexcept WorkbenchError as e:\n"
                        " print(e.field, '|', e.message)"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert "--torch-model | cannot load 'no_such_mod:f'" in r.stdout
