"""The build's typed request: one frozen BuildRequest that the client's request stage fills and
the worker's `build` op receives (over the protocol as JSON). Real TensorRT-RTX on the CPU,
ahead of time for sm89, through the workbench worker."""
from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES
from workbench.engines.engine import BuildConfig, build_engine
from workbench.worker.build_request import BuildRequest
from workbench.worker.client import WorkerClient, WorkerError

REPO = Path(__file__).resolve().parents[1]
RESNET = SAMPLES / "resnet_tiny.onnx"
PROFILE = {"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}


@pytest.fixture(scope="module")
def worker():
    w = WorkerClient()
    yield w
    w.close()


class _Recording:
    """The real worker; every `build` request's args are kept."""

    def __init__(self, real):
        self.real, self.python, self.sent = real, real.python, []

    def call(self, op, args=None, **kw):
        if op == "build":
            self.sent.append(json.loads(json.dumps(args)))  # as the protocol carries it
        return self.real.call(op, args, **kw)


def test_a_request_round_trips_through_the_protocol_and_stays_frozen():
    req = BuildRequest(onnx_path="/m/a.onnx", engine_path="/e/a.partial", route="legacy-flags",
                       profiles=(PROFILE,), extra_flags=("INT8",), builder_flag="FP16",
                       input_io_formats=(["fp16", ["chw"]],), tf32=False)
    wire = json.loads(json.dumps(req.to_args()))
    assert wire["profiles"] == [PROFILE] and wire["extra_flags"] == ["INT8"]
    assert wire["input_io_formats"] == [["fp16", ["chw"]]] and wire["tf32"] is False
    back = BuildRequest.from_args(wire)
    assert back == req and back.legacy_flags and not back.strongly_typed
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.route = "strongly-typed"  # type: ignore[misc]
    with pytest.raises(TypeError, match="layer_precision_typo"):
        BuildRequest.from_args(dict(wire, layer_precision_typo={}))
    with pytest.raises(TypeError, match="engine_path"):
        BuildRequest.from_args({"onnx_path": "/m/a.onnx"})


def test_the_request_module_is_stdlib_only():
    """Both ends import it (the worker's interpreter may be the GPU rig's Python 3.9)."""
    path = REPO / "workbench" / "worker" / "build_request.py"
    tree = ast.parse(path.read_text(), feature_version=(3, 9))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_build_sends_one_request_the_worker_op_takes(worker, tmp_path):
    """build_engine's request stage fills every field the op reads: the model by absolute
    path, a partial engine under the cache (gone once published), the backend "auto" resolved
    to the worker's, the route, profiles and target; the op's answer is the engine."""
    rec = _Recording(worker)
    cfg = BuildConfig(profiles=[PROFILE], target="sm89", builder_optimization_level=0,
                      backend="auto")
    res = build_engine(RESNET, cfg, client=rec)
    assert len(rec.sent) == 1 and not res.cache_hit
    req = BuildRequest.from_args(rec.sent[0])
    assert Path(req.onnx_path).is_absolute() and Path(req.onnx_path) == RESNET.resolve()
    engine = Path(res.engine_path)
    assert Path(req.engine_path).parent == engine.parent
    assert req.engine_path.endswith(".partial") and not Path(req.engine_path).exists()
    assert req.backend == res.backend == "tensorrt-rtx" and req.route == res.route
    assert req.profiles == (PROFILE,) and req.target == "sm89"
    assert req.optimization_level == 0 and req.report_layers
    assert req.tf32 is cfg.validate().effective_tf32 is not None  # (FP32 asks TF32 off)
    assert Path(req.timing_cache).name.startswith("tensorrt-rtx-")
    assert engine.is_file() and engine.stat().st_size == res.size_bytes > 0
    # the worker's answer to the request's timing cache (TensorRT-RTX keeps none)
    assert any(n.startswith("timing cache not used") for n in res.notes), res.notes
    # the same request again is a cache hit: nothing is sent
    again = build_engine(RESNET, cfg, client=rec)
    assert again.cache_hit and len(rec.sent) == 1


def test_the_worker_op_refuses_an_unknown_request_field(worker, tmp_path):
    with pytest.raises(WorkerError) as e:
        worker.call("build", {"onnx_path": str(RESNET), "engine_path": str(tmp_path / "x"),
                              "backend": "tensorrt-rtx", "target": "sm89",
                              "profile": PROFILE}, timeout=120)
    assert "unknown field(s) profile" in e.value.message
    assert not (tmp_path / "x").exists()


def _legacy_job(model: Path, cfg: BuildConfig):
    """A resolved job on the builder-flag route (TensorRT <= 10, which this machine has not:
    the request stage is what is exercised, with the model's real workspace)."""
    from workbench.engines.stages.resolve import BuildJob
    from workbench.core.model import as_model

    ref = as_model(model, opened=False)
    ws = ref.workspace()
    return BuildJob(ref=ref, config=cfg.validate(), client=None, on_event=None, names={},
                    model_name=model.name, defaulted=[], backend="tensorrt",
                    version="10.3.0", route="legacy-flags", calib_hash="c0ffee" * 8,
                    key="k" * 64, key_doc={}, ws=ws, engine=ws.engines_dir / "k.engine",
                    meta_path=ws.engines_dir / "k.json", t0=0.0)


def test_the_legacy_route_request_carries_the_tables_flag_and_calibrator(tmp_path):
    """On the builder-flag route the request names the table's builder flag, asks for its
    calibrator and carries the validated batches (one .npz, keys 'b<i>:<input>') with a
    calibration cache named for the backend, version and method."""
    import numpy as np

    from workbench.engines.stages.prepare import PreparedOnnx
    from workbench.engines.stages.request import worker_request

    calib = SAMPLES / "calib" / "resnet_tiny.npz"
    cfg = BuildConfig(precision="int8", calibration=str(calib), profiles=[PROFILE])
    job = _legacy_job(RESNET, cfg)
    req, found = worker_request(job, PreparedOnnx(path=RESNET, findings=[], speculative=True))
    entry = job.config.entry
    assert req.legacy_flags and req.builder_flag == entry.builder_flag is not None
    assert req.calibrate is True and req.calibrate_method == job.config.calibrate_method
    assert req.backend == "tensorrt" and req.extra_flags == () and found == []
    with np.load(req.calib_npz, allow_pickle=False) as data:
        keys = sorted(data.files)
        assert keys and all(k.startswith("b") and k.endswith(":input") for k in keys)
        assert data["b0:input"].shape[1:] == (3, 32, 32)
    assert Path(req.calib_cache).name == \
        f"c0ffeec0ffeec0ff-tensorrt-10.3.0-{job.config.calibrate_method}.cache"
    # what the worker receives is this request, field for field
    assert BuildRequest.from_args(json.loads(json.dumps(req.to_args()))) == req


def test_a_quantized_model_on_the_legacy_route_gets_the_flag_its_qdq_nodes_need():
    """Q/DQ nodes in the ONNX need the INT8 builder flag on TensorRT <= 10, whatever the
    precision asked: added to the request's flags, with a finding that says why."""
    from workbench.engines.stages.prepare import PreparedOnnx
    from workbench.engines.stages.request import worker_request

    qdq = REPO / "tests" / "data" / "fixtures" / "polygraphy-models" / "qdq_conv.onnx"
    cfg = BuildConfig(precision="fp16", extra_flags=["SPARSE_WEIGHTS"])
    job = _legacy_job(qdq, cfg)
    req, found = worker_request(job, PreparedOnnx(path=qdq, findings=[], speculative=True))
    assert req.builder_flag == job.config.entry.builder_flag and not req.calibrate
    assert req.extra_flags == ("SPARSE_WEIGHTS", "INT8")
    assert [f.code for f in found] == ["explicit-quantization"]
    assert "INT8 builder flag" in found[0].message
