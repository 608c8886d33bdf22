"""TensorRT-RTX's RoiAlign importer has its ROIAlign plugin, but the plugin cannot be created on
a machine without a usable GPU ("Cuda Error in ROIAlignV3: 35 (CUDA driver version is
insufficient ...)", then "ROIAlign plugin was not found"). `check` said "no built-in importer
and no plugin of that name is registered", and the build printed the raw CUDA line. Both now
say the plugin is there and needs a GPU (on a GPU machine it may parse); the raw line stays in
the build log, out of the summary. Real TensorRT-RTX parser and CPU builds; on a machine with
a usable GPU these tests do not apply (the plugin may load there) and are skipped."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import REPO
from workbench.engines.engine import BuildConfig, BuildFailed, build_engine
from workbench.support.checker import check
from workbench.surgery.propose import advise
from workbench.worker.loaders import no_gpu_reason

pytestmark = pytest.mark.skipif(not no_gpu_reason(), reason="a usable GPU: the plugin may load")
CFG = BuildConfig(target="sm89", builder_optimization_level=0)


@pytest.fixture()
def roi_path(tmp_path):
    """image [batch, 3, h, w] -> Conv -> RoiAlign(rois [R, 4], batch_indices [R])."""
    w = nh.from_array(np.full((2, 3, 1, 1), 0.5, np.float32), "w")
    nodes = [h.make_node("Conv", ["image", "w"], ["feat"], name="/conv"),
             h.make_node("RoiAlign", ["feat", "rois", "batch_indices"], ["pooled"],
                         name="/roi", output_height=2, output_width=2, sampling_ratio=2)]
    g = h.make_graph(nodes, "roi", [
        h.make_tensor_value_info("image", T.FLOAT, ["batch", 3, 8, 8]),
        h.make_tensor_value_info("rois", T.FLOAT, ["R", 4]),
        h.make_tensor_value_info("batch_indices", T.INT64, ["R"])],
        [h.make_tensor_value_info("pooled", T.FLOAT, ["R", 2, 2, 2])], initializer=[w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 16)])
    m.ir_version = 8
    p = tmp_path / "roi.onnx"
    onnx.save(m, str(p))
    return p


def test_check_says_the_plugin_is_there_and_needs_a_gpu(roi_path):
    rep = advise(check(str(roi_path), backend="tensorrt-rtx"))
    [u] = rep.unsupported
    assert (u["node"], u["op"], u["code"]) == ("/roi", "RoiAlign", "plugin-needs-gpu")
    assert u["reason"].startswith("TensorRT-RTX 1.7's importer for RoiAlign uses its ROIAlign "
                                  "plugin, which is there but cannot be created on this "
                                  f"machine: no usable GPU (CUDA: {no_gpu_reason()})")
    assert u["reason"].endswith("on a machine with an NVIDIA GPU the parser may take it")
    assert "no built-in importer" not in u["reason"]
    from tests.next_step_cases import advice_text

    said = advice_text(u)
    assert said.startswith(f"`workbench fix {roi_path} --split -o {str(roi_path)[:-5]}_split`")
    assert f"`workbench check {roi_path}` check it where the engine will run" in said
    assert u["hint"].endswith("the parser may take the node") and "(" not in u["hint"][-5:]
    assert "replace_with_plugin" not in said  # the plugin exists: no other to map onto
    static = check(str(roi_path), backend="static", rules="tensorrt-rtx").unsupported[0]
    assert static["code"] == "plugin-needs-gpu"
    assert "ROIAlign plugin, which is created only where a GPU is usable" in static["reason"]


def test_the_build_error_says_the_plugin_needs_a_gpu(roi_path, tmp_path):
    with pytest.raises(BuildFailed) as e:
        build_engine(roi_path, CFG, output=tmp_path / "r.engine", split_tail=False)
    assert e.value.node == "/roi"
    assert "uses its ROIAlign plugin, which is there but cannot be created on this machine: " \
        "no usable GPU" in e.value.message
    assert "plugin != nullptr" not in e.value.message
    [f] = [f for f in e.value.findings if f.code == "plugin-needs-gpu"]
    assert f.nodes == ["/roi"] and "the parser may take" in f.hint
    assert any(s.verb == "check" for s in f.next_steps) or f"`workbench check {roi_path}`" in f.hint


def test_the_cli_split_build_keeps_the_raw_cuda_line_out_of_its_output(roi_path, tmp_path):
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "build", str(roi_path), "-o",
                        str(tmp_path / "s.engine"), "--target", "sm89"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "Cuda Error" not in out and "CUDA driver version is insufficient" not in out
    assert "split build: tensorrt-rtx's parser refused 1 node(s): RoiAlign at /roi (its plugin " \
        "cannot be created here: no usable GPU; on a machine with an NVIDIA GPU the parser " \
        "may take it, and no split is needed)" in r.stderr
    assert "chain vs original on onnxruntime: equivalent" in r.stderr


def test_the_raw_cuda_lines_are_what_the_cli_leaves_out():
    """(TensorRT-RTX logs them once per process, at the first try to create the plugin: the
    CLI test above runs in a fresh one.) Only the no-GPU lines: a real CUDA error stays."""
    from workbench.cli.cmd_build import _no_gpu_noise

    assert _no_gpu_noise("/_src/plugin/roiAlignPlugin/roiAlignPlugin.cpp (161) - Cuda Error in "
                         "ROIAlignV3: 35 (CUDA driver version is insufficient for CUDA runtime "
                         "version)")
    assert _no_gpu_noise("CUDA driver version is insufficient for CUDA runtime version")
    assert not _no_gpu_noise("myPlugin.cpp (12) - Cuda Error in allocate: 2 (out of memory)")
    assert not _no_gpu_noise("ModelImporter.cpp:151: ERROR: onnxOpImporters.cpp:7024 In "
                             "function importRoiAlign")
