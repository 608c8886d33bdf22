"""Engine cards, the portability guard, Triton export, metrics and GPU pinning on a real GPU
with full TensorRT in the worker (the 8.6 rig: WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python).
Skipped with a reason where no such TensorRT with CUDA is usable (CI has none)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workbench.engines.card import card_path, read_card
from workbench.engines.engine import BuildConfig, build_engine
from workbench.worker.client import WorkerError
from gpu_rig import open_gpu_worker

REPO = Path(__file__).resolve().parents[2]
RESNET = REPO / "sample_models" / "resnet_tiny.onnx"
TACTICS = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]  # cuBLAS/cuDNN are stubs on the rig
PROFILE = [{"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]]}]


@pytest.fixture(scope="module")
def gpu_worker():
    w, cuda, info = open_gpu_worker()
    yield w, cuda, info
    w.close()


@pytest.fixture(scope="module")
def engine(gpu_worker, tmp_path_factory):
    w, _, _ = gpu_worker
    d = tmp_path_factory.mktemp("fleet")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_HOME", str(d / "home"))
        build_engine(RESNET, BuildConfig(backend="tensorrt", profiles=PROFILE,
                                         tactic_sources=TACTICS, builder_optimization_level=1),
                     client=w, output=d / "resnet.engine", timeout=900)
    return d / "resnet.engine"


def _sm(cc: str) -> str:
    return "sm" + cc.replace(".", "")


def _capture(w, path, out):
    from workbench.measure.capture import capture

    return capture(path, iterations=20, warmup=5, layer_iterations=5, batch_sizes=[1, 8],
                   out_dir=str(out), client=w)


@pytest.fixture(scope="module")
def captured(gpu_worker, engine, tmp_path_factory):
    w, _, _ = gpu_worker
    return _capture(w, engine, tmp_path_factory.mktemp("capture"))


def test_card_records_this_gpu_and_a_matching_engine_runs(gpu_worker, engine, captured):
    w, cuda, info = gpu_worker
    card = read_card(engine)
    print("card", json.dumps({k: card[k] for k in ("backend", "tensorrt_version",
                                                   "compute_capability", "built_on",
                                                   "hardware_compatibility")}))
    assert card["backend"] == "tensorrt" and card["tensorrt_version"] == info["version"]
    assert card["targets"] == [] and card["compute_capability"] == cuda["compute_capability"]
    assert card["built_on"]["compute_capability"] == cuda["compute_capability"]
    assert card["built_on"].get("name")  # e.g. "NVIDIA H200"
    assert str(card["built_on"].get("uuid", "GPU-")).startswith(("GPU-", "MIG-"))
    assert card["hardware_compatibility"] in (None, "NONE")
    assert [t["name"] for t in card["io"]["inputs"]] == ["input"]
    assert captured.latency["p50_ms"] > 0  # the guard let it through: it ran


def test_capture_metrics_parse(engine, captured, tmp_path):
    parser = pytest.importorskip("prometheus_client.parser")
    from workbench.fleet.metrics import Metrics

    card = read_card(engine)
    m = Metrics()
    m.record_capture(captured, {"model": "resnet_tiny", "precision": "fp32",
                                "gpu": (card["built_on"] or {}).get("uuid", "")})
    m.write(tmp_path / "run.prom")
    fams = {f.name: f for f in
            parser.text_string_to_metric_families((tmp_path / "run.prom").read_text())}
    p50 = [s.value for s in fams["workbench_latency_p50_ms"].samples if s.labels["variant"] == ""]
    assert p50 == [pytest.approx(captured.latency["p50_ms"])]
    assert {s.labels["variant"] for s in fams["workbench_throughput_items_per_s"].samples} == \
        {"batch1", "batch8"}


def _tampered(engine, tmp_path, **changes):
    dst = tmp_path / "moved.engine"
    shutil.copyfile(engine, dst)
    card = json.loads(Path(card_path(str(engine))).read_text())
    card.update(changes)
    Path(card_path(str(dst))).write_text(json.dumps(card))
    return dst


def test_engine_for_another_architecture_is_refused_before_deserialization(
        gpu_worker, engine, tmp_path):
    w, cuda, info = gpu_worker
    here = cuda["compute_capability"]
    other = "8.6" if here != "8.6" else "8.9"
    moved = _tampered(engine, tmp_path, compute_capability=other)
    with pytest.raises(WorkerError) as e:
        _capture(w, moved, tmp_path)
    assert e.value.code == "incompatible-engine"
    assert f"engine built for tensorrt {info['version']} for {_sm(other)}" in e.value.message
    assert f"this is a {_sm(here)} GPU: rebuild it here" in e.value.message
    # with hardware compatibility AMPERE_PLUS the same claim is let through (and it runs)
    ok = _tampered(engine, tmp_path, compute_capability=other,
                   hardware_compatibility="AMPERE_PLUS")
    assert _capture(w, ok, tmp_path).latency["p50_ms"] > 0


def test_engine_for_another_tensorrt_is_refused(gpu_worker, engine, tmp_path):
    w, _, info = gpu_worker
    moved = _tampered(engine, tmp_path, tensorrt_version="7.2.3.4")
    with pytest.raises(WorkerError) as e:
        _capture(w, moved, tmp_path)
    assert e.value.code == "incompatible-engine"
    assert f"this is tensorrt {info['version']}: rebuild it with this TensorRT" in \
        e.value.message


def test_triton_export_of_a_tensorrt_engine(gpu_worker, engine, tmp_path):
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    from google.protobuf import text_format

    from workbench.engines.triton import export_triton

    export_triton([engine], tmp_path / "repo", gpus=[0])
    cfg = pb2.ModelConfig()
    text_format.Parse((tmp_path / "repo" / "resnet" / "config.pbtxt").read_text(), cfg)
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 32
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("input", [3, 32, 32])]
    assert [list(t.dims) for t in cfg.output] == [[10]]


def test_worker_pinned_to_one_gpu_by_uuid(gpu_worker):
    from workbench.fleet.gpus import list_gpus, pinned_client

    gpus = list_gpus()
    if not gpus:
        pytest.skip("neither NVML nor nvidia-smi lists a GPU here")
    print("gpus", [g.to_dict() for g in gpus])
    target = gpus[-1].migs[0] if gpus[-1].migs else gpus[-1]
    client = pinned_client(target.uuid)
    try:
        info = client.call("cuda_info", timeout=120)
        assert info["device_count"] == 1  # only the pinned device is visible to the worker
    finally:
        client.close()


def test_timing_capture_cli_writes_metrics(gpu_worker, engine, tmp_path, capsys):
    parser = pytest.importorskip("prometheus_client.parser")
    from workbench.cli import main

    rc = main(["timing-capture", str(engine), "--iterations", "20", "--warmup", "5",
               "--layer-iterations", "5", "--out", str(tmp_path / "cap"),
               "--metrics", str(tmp_path / "cap.prom"), "--json"])
    assert rc == 0
    fams = {f.name: f for f in
            parser.text_string_to_metric_families((tmp_path / "cap.prom").read_text())}
    sample = fams["workbench_latency_p50_ms"].samples[0]
    assert sample.labels["model"] == "resnet" and sample.value > 0


def test_ampere_plus_build_is_recorded_and_runs(gpu_worker, tmp_path):
    w, _, _ = gpu_worker
    out = tmp_path / "amp.engine"
    build_engine(RESNET, BuildConfig(backend="tensorrt", profiles=PROFILE,
                                     tactic_sources=TACTICS, builder_optimization_level=1,
                                     hardware_compatibility="ampere_plus"),
                 client=w, output=out, timeout=900)
    card = read_card(out)
    assert card["hardware_compatibility"] == "AMPERE_PLUS"
    assert _capture(w, out, tmp_path).latency["p50_ms"] > 0
