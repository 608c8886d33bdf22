"""On a real GPU with TensorRT <= 10 (the 8.6 rig: WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python):
the float emulation of onnxruntime-quantized models builds, a split prefix builds, and the
EfficientNMS_TRT rewrite builds with TensorRT's own plugin library. Skipped with a reason where
no such TensorRT with CUDA is usable (CI has none)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ helpers

from quant_models import detector, quantized  # noqa: E402
from workbench.support.checker import check  # noqa: E402
from workbench.surgery.recipes import get_recipe  # noqa: E402
from workbench.surgery.split import split_model  # noqa: E402
from gpu_rig import open_gpu_worker  # noqa: E402


@pytest.fixture(scope="module")
def trt_worker():
    w, _cuda, info = open_gpu_worker()
    yield w, info
    w.close()


def _why(rep):
    return [(u.get("node"), u.get("op"), u.get("reason")) for u in rep.unsupported]


@pytest.mark.parametrize("kind,mode", [("mlp", "dynamic"), ("cnn", "dynamic"), ("cnn", "qop"),
                                       ("branchy", "qop-int8")])
def test_emulated_quantized_models_build(trt_worker, tmp_path, kind, mode):
    w, _ = trt_worker
    _, q = quantized(tmp_path, kind, mode)
    out = tmp_path / "emulated.onnx"
    onnx.save(get_recipe("emulate_quantized").apply(onnx.load(str(q))), str(out))
    rep = check(str(out), backend="tensorrt", build=True, client=w)
    assert rep.supported, _why(rep)
    assert rep.build and rep.build["built"], rep.build


def test_split_prefix_builds_and_chains_exactly(trt_worker, tmp_path):
    """TensorRT 8.6 may import NonZero itself: then there is no tail; either way the prefix
    builds and prefix-then-tail (onnxruntime) equals the original."""
    w, _ = trt_worker
    path = tmp_path / "det.onnx"
    onnx.save(detector(), str(path))
    res = split_model(path, backend="tensorrt", build=True, client=w)
    assert res.supported and res.report.build["built"], res.rounds
    assert res.verification.status == "equivalent"


def _plugin_library(python: str):
    code = ("import glob, os, tensorrt_libs; d = os.path.dirname(tensorrt_libs.__file__); "
            "print((sorted(glob.glob(os.path.join(d, 'libnvinfer_plugin.so*'))) or [''])[0])")
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lib = r.stdout.strip()
    return lib if r.returncode == 0 and lib and Path(lib).is_file() else None


def test_efficient_nms_builds_with_tensorrts_plugin_library(trt_worker, tmp_path):
    w, _ = trt_worker
    lib = _plugin_library(w.python)
    if lib is None:
        pytest.skip(f"no libnvinfer_plugin beside the tensorrt wheel of {w.python}")
    out = tmp_path / "enms.onnx"
    m = get_recipe("efficient_nms").apply(detector(nms=True), node="/post/nms",
                                          max_output_boxes=10)
    onnx.save(m, str(out))
    rep = check(str(out), backend="tensorrt", build=True, client=w, plugins=[lib])
    assert rep.supported, _why(rep)
    assert rep.build and rep.build["built"], rep.build
