"""A 3-variant matrix of a ResNet-50-sized CNN on a real GPU (TensorRT in the worker's
interpreter, e.g. the 8.6 rig: WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python): FP32, FP16 and
INT8 (builder flags + calibrator on TensorRT <= 10), each a Ray task asking for one GPU,
built and timed there (latency P50/P99, throughput), accuracy measured on the engine itself
against onnxruntime FP32. Skipped with a reason where no GPU / TensorRT / Ray is usable (CI
has none; the test's own interpreter needs `ray`). Set WORKBENCH_GPU_OUT=DIR to keep the results table and the Pareto page."""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.matrix_models import images, resnet50_like
from gpu_rig import open_gpu_worker

ray = pytest.importorskip("ray")
TACTICS = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]  # cuBLAS/cuDNN are stubs on the rig
PROFILE = {"input": [[1, 3, 224, 224], [8, 3, 224, 224], [16, 3, 224, 224]]}


@pytest.fixture(scope="module")
def gpu_rig():
    w, info, _trt = open_gpu_worker()
    w.close()
    return info


@pytest.fixture(scope="module")
def resnet50(tmp_path_factory):
    d = tmp_path_factory.mktemp("r50")
    model = resnet50_like(d / "resnet50_like.onnx")
    np.savez(d / "calib.npz", input=images(16, seed=1))
    np.savez(d / "inputs.npz", input=images(8, seed=2))
    return model, d / "calib.npz", d / "inputs.npz"


@pytest.mark.timeout(2400)  # three ResNet-50 builds (INT8 calibrates) one after another
def test_resnet50_matrix_on_the_gpu_with_latency_and_engine_accuracy(gpu_rig, resnet50,
                                                                      tmp_path):
    from workbench.matrix.plan import plan_matrix
    from workbench.matrix.run import run_matrix, start_ray

    model, calib, inputs = resnet50
    variants = plan_matrix([model], ["fp32", "fp16", "int8"], [None],
                           profiles={"b1-16": [PROFILE]}, opt_levels=[1],
                           calibration=str(calib), backend="tensorrt",
                           build={"tactic_sources": TACTICS})
    assert len(variants) == 3
    if ray.is_initialized():
        ray.shutdown()
    start_ray(workers=2, gpus=1)
    try:
        res = run_matrix(variants, tmp_path / "m", gpu=True, inputs=str(inputs), samples=8,
                         timeout=1800)
    finally:
        ray.shutdown()
    out = os.environ.get("WORKBENCH_GPU_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for f in ("results.json", "results.csv", "pareto.html"):
            shutil.copy(tmp_path / "m" / f, Path(out) / f"matrix_{f}")
    by = {r["precision"]: r for r in res.results}
    for prec, r in by.items():
        print(f"[matrix] {prec}: {r['status']} size {r.get('size_bytes', 0) / 1e6:.1f} MB, build "
              f"{r.get('build_seconds')} s, P50 {r.get('latency_p50_ms')} ms, P99 "
              f"{r.get('latency_p99_ms')} ms, {r.get('throughput_qps')} qps, error_rel "
              f"{r.get('error_rel')} ({r.get('accuracy_source')}), gpus {r.get('gpus')}")
    for prec, r in by.items():
        assert r["status"] == "ok", (prec, r.get("error"))
        assert r["backend"] == "tensorrt" and len(r["gpus"]) == 1  # Ray gave it one GPU
        assert r["size_bytes"] > 10e6 and Path(r["engine_path"]).is_file()
        # timed on the GPU the task was given
        assert 0 < r["latency_p50_ms"] <= r["latency_p99_ms"], r["notes"]
        assert r["throughput_qps"] > 0
        # the engine itself was compared with onnxruntime FP32 (workbench.runtime.runners'
        # TensorRTRunner, through workbench.matrix.accuracy.engine_runner)
        assert r["accuracy_source"] == "engine", r["notes"]
        assert r["accuracy"]["samples"] == 8
        assert isinstance(r["error_rel"], float) and math.isfinite(r["error_rel"])
    assert by["fp32"]["error_rel"] < 1e-2  # TF32 may be on for FP32 builds
    assert by["fp16"]["error_rel"] < 5e-2
    assert by["fp16"]["size_bytes"] < by["fp32"]["size_bytes"]
    assert by["fp16"]["latency_p50_ms"] < by["fp32"]["latency_p50_ms"]
    page = (tmp_path / "m" / "pareto.html").read_text()
    assert "latency measured on the GPU" in page
    assert res.pareto_note == "latency measured on the GPU"
