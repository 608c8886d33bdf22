"""Live timing capture on a real GPU (TensorRT in the worker's interpreter, e.g. the 8.6 rig:
WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python). Skipped with a reason where no GPU is usable
(CI has none). Set WORKBENCH_GPU_OUT=DIR to keep the captured JSON files."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench.measure.capture import capture, capture_onnx
from workbench.timing import compare, summarize
from gpu_rig import open_gpu_worker

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_models"
TACTICS = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]  # cuBLAS/cuDNN are stubs on the rig


@pytest.fixture(scope="module")
def gpu_worker():
    w, info, _trt = open_gpu_worker()
    yield w, info
    w.close()


def _keep(res, name: str) -> None:
    out = os.environ.get("WORKBENCH_GPU_OUT")
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    if res.layers_json:
        shutil.copy(res.layers_json, Path(out) / f"{name}.layers.json")
    shutil.copy(res.profile_json, Path(out) / f"{name}.profile.json")


def _check_latency(res) -> None:
    lat = res.latency
    assert lat["n"] >= 20
    assert 0 < lat["min_ms"] <= lat["p50_ms"] <= lat["p90_ms"] <= lat["p99_ms"] <= lat["max_ms"]
    graph = res.raw.get("latency_graph")  # the same execution replayed from a CUDA graph
    assert graph and 0 < graph["min_ms"] <= graph["p50_ms"] <= graph["max_ms"], graph


@pytest.fixture(scope="module")
def resnet_pair(gpu_worker, tmp_path_factory):
    w, _ = gpu_worker
    prof = {"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]]}
    out = {}
    for prec in ("fp32", "fp16"):
        d = tmp_path_factory.mktemp(f"resnet_tiny_{prec}")
        out[prec] = capture_onnx(SAMPLES / "resnet_tiny.onnx", fp16=(prec == "fp16"),
                                 profiles=prof, tactic_sources=TACTICS, batch_sizes=[1, 8, 32],
                                 iterations=100, warmup=20, layer_iterations=50, out_dir=str(d),
                                 client=w, timeout=900)
        _keep(out[prec], f"resnet_tiny_{prec}")
    return out


def test_resnet_tiny_layers_latency_throughput(resnet_pair):
    for prec, res in resnet_pair.items():
        t = res.table
        assert t is not None and t.has_times and len(t) >= 5
        assert t.df["time_ms"].notna().all()
        _check_latency(res)
        cov = t.coverage()
        # tiny model: reformats are a large share; they are attributed to the layer they serve
        assert cov["mapped_pct"] >= 80 and cov["attributed_pct"] >= 95, (prec, cov)
        thr = {r["batch"]: r["items_per_s"] for r in res.throughput}
        assert set(thr) == {1, 8, 32} and thr[32] > thr[1]
        precs = {r["precision"] for r in summarize(t)["by_precision"]}
        if prec == "fp32":  # FP32 build; (8.6 builds FP16 by flag, which only *allows* FP16)
            assert precs == {"FP32"}, precs  # for this 32x32 model on the H200 (seen 2026-11-30)
        print(prec, "layers", len(t), "sum median ms", round(t.total_ms, 4), "latency",
              {k: round(v, 4) for k, v in res.latency.items() if k.endswith("_ms")},
              "throughput", thr, "mapped %", round(cov["mapped_pct"], 1))


def test_capture_builds_exactly_like_workbench_build(gpu_worker):
    """timing-capture of an ONNX goes through build_engine: the same route (builder flags on
    8.6, strongly typed where the backend has it), the same cache key and the same per-layer
    network dtypes as `workbench build --precision fp16` with the same settings."""
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.measure.capture import build_for_capture

    w, _ = gpu_worker
    prof = {"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]]}
    cap = build_for_capture(SAMPLES / "resnet_tiny.onnx", fp16=True, profiles=prof,
                            tactic_sources=TACTICS, backend="tensorrt", client=w, timeout=900)
    ref = build_engine(SAMPLES / "resnet_tiny.onnx",
                       BuildConfig(precision="fp16", profiles=[prof], tactic_sources=TACTICS,
                                   workspace_bytes=2048 << 20, backend="tensorrt"),
                       client=w, timeout=900, use_cache=False)
    assert cap.route == ref.route and cap.key == ref.key
    dtypes = lambda r: {la["name"]: [o["dtype"] for o in la["outputs"]] for la in r.layers}  # noqa: E731
    assert dtypes(cap) == dtypes(ref)
    print("capture route", cap.route, "dtypes", cap.dtype_counts())


def test_profile_engine_on_built_engine(resnet_pair, gpu_worker, tmp_path):
    w, _ = gpu_worker
    eng = resnet_pair["fp16"].raw["engine_path"]
    res = capture(eng, onnx=SAMPLES / "resnet_tiny.onnx", shapes={"input": [4, 3, 32, 32]},
                  iterations=50, warmup=10, layer_iterations=20, out_dir=str(tmp_path), client=w)
    assert res.raw["shapes"] == {"input": [4, 3, 32, 32]}
    assert res.table.df["time_ms"].notna().all()
    _check_latency(res)
    c = compare(resnet_pair["fp32"].table, resnet_pair["fp16"].table, ("fp32", "fp16"))
    assert c["onnx_nodes_compared"] > 10
    print("fp32 vs fp16 speedup", c["speedup"])


def test_bert_tiny_int64_inputs_cast_to_engine_int32(gpu_worker, tmp_path):
    w, _ = gpu_worker
    calib = np.load(SAMPLES / "calib" / "bert_tiny.npz", allow_pickle=False)
    feeds = {k: calib[k][:2] for k in ("input_ids", "attention_mask")}
    assert all(v.dtype == np.int64 for v in feeds.values())
    npz = tmp_path / "feeds.npz"
    np.savez(npz, **feeds)
    b, s = feeds["input_ids"].shape
    prof = {k: [[1, 8], [b, s], [4, max(s, 64)]] for k in feeds}
    res = capture_onnx(SAMPLES / "bert_tiny.onnx", fp16=True, profiles=prof, inputs=str(npz),
                       iterations=50, warmup=10, layer_iterations=20, out_dir=str(tmp_path),
                       client=w, timeout=900)
    _keep(res, "bert_tiny_fp16")
    assert res.raw["shapes"]["input_ids"] == [b, s]
    t = res.table
    assert t.has_times and t.coverage()["attributed_pct"] >= 80
    _check_latency(res)
    print("bert_tiny fp16 layers", len(t), "types", sorted(set(t.df["type"])), "latency p50",
          res.latency["p50_ms"], "mapped %", t.coverage()["mapped_pct"])


@pytest.mark.slow
def test_resnet50_fp16_matches_fixture_scale(gpu_worker, tmp_path):
    """torchvision ResNet-50 (random weights) FP16 at batch 8: the per-layer median sum should
    be of the order the H200 fixture recorded (0.88 ms)."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    w, _ = gpu_worker
    model = tv.models.resnet50().eval()
    onnx_path = tmp_path / "resnet50.onnx"
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), str(onnx_path), input_names=["input"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    res = capture_onnx(onnx_path, fp16=True, tactic_sources=TACTICS,
                       profiles={"input": [[1, 3, 224, 224], [8, 3, 224, 224], [32, 3, 224, 224]]},
                       batch_sizes=[1, 8, 32], iterations=100, warmup=20, layer_iterations=50,
                       out_dir=str(tmp_path), client=w, timeout=900)
    _keep(res, "resnet50_fp16_live")
    t = res.table
    cov = t.coverage()
    assert cov["mapped_pct"] >= 95
    assert 0.3 < t.total_ms < 3.0, t.total_ms
    _check_latency(res)
    print("resnet50 fp16 b8: sum median", round(t.total_ms, 4), "latency",
          {k: round(v, 4) for k, v in res.latency.items() if k.endswith("_ms")},
          "throughput", res.throughput, "mapped %", round(cov["mapped_pct"], 1),
          "build s", round(res.raw["build_s"], 1))


def test_timing_capture_cli_builds_and_times_onnx(gpu_worker, tmp_path, capsys):
    import json

    from workbench.cli import main

    rc = main(["timing-capture", str(SAMPLES / "resnet_tiny.onnx"), "--fp16", "--profile-shapes",
               "input:1x3x32x32:8x3x32x32:32x3x32x32", "--batch-sizes", "profile", "--iterations", "30",
               "--layer-iterations", "10", "--out", str(tmp_path), "--json",
               "--html", str(tmp_path / "r.html")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    s = json.loads(out.out)
    assert s["capture"]["shapes"] == {"input": [8, 3, 32, 32]}
    assert [r["batch"] for r in s["capture"]["throughput"]] == [1, 8, 32]
    assert s["total_ms"] > 0 and s["latency"]["p50_ms"] <= s["latency"]["p99_ms"]
    assert (tmp_path / "r.html").stat().st_size > 3_000_000
