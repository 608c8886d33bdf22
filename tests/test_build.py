"""Engine builds with the real TensorRT-RTX (CPU, ahead of time for sm89): precision really in
the network, engine cache, cancel/timeout atomicity, profile errors, parse failures, CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SAMPLES
from workbench.engines.engine import (BuildCancelled, BuildConfig, BuildFailed, BuildTimeout,
                             build_engine, inspect_engine)
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
PROFILES = {
    "resnet_tiny": [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}],
    "bert_tiny": [{"input_ids": [[1, 8], [4, 32], [64, 32]],
                   "attention_mask": [[1, 8], [4, 32], [64, 32]]}],
}


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def cfg(model: str = "resnet_tiny", **kw) -> BuildConfig:
    base = dict(profiles=PROFILES[model], target="sm89", builder_optimization_level=0)
    base.update(kw)
    return BuildConfig(**base)


def engines_dir_files(home: Path) -> list:
    return sorted(p.name for p in home.glob("models/*/engines/*"))


# --------------------------------------------------------------------------- config
def test_config_json_round_trip_and_stable_hash():
    c = cfg(precision="fp16", exclude_nodes=["/stem/conv/Conv"], workspace_bytes=1 << 28)
    again = BuildConfig.from_json(c.to_json())
    assert again == c
    assert again.config_hash == c.config_hash and len(c.config_hash) == 16
    assert cfg(precision="fp32").config_hash != c.config_hash
    # key order in the input does not matter
    d = c.to_dict()
    assert BuildConfig.from_dict(dict(reversed(list(d.items())))).config_hash == c.config_hash


@pytest.mark.parametrize("kw,field", [
    ({"precision": "fp12"}, "precision"),
    ({"target": "ampere"}, "target"),
    ({"route": "fast"}, "route"),
    ({"profiles": [{"input": [[8, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}]},
     "profiles[0].input"),
    ({"profiles": [{"input": [[1, 3, 32, 32], [4, 3, 32, 32]]}]}, "profiles[0].input"),
    ({"builder_optimization_level": 9}, "builder_optimization_level"),
])
def test_bad_config_names_the_field(kw, field):
    with pytest.raises(WorkbenchError) as e:
        cfg(**kw)
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_unknown_config_key_is_rejected():
    with pytest.raises(WorkbenchError, match="unknown build config field"):
        BuildConfig.from_dict({"precision": "fp16", "max_workspace_size": 1})


# --------------------------------------------------------------------------- real builds
def _layers_of_type(res, typ):
    return [la for la in res.layers if la["type"] == typ]


@pytest.mark.parametrize("model", ["resnet_tiny", "bert_tiny"])
def test_fp32_fp16_int8_engines_carry_the_precision(model, client, tmp_path):
    path = SAMPLES / f"{model}.onnx"
    calib = SAMPLES / "calib" / f"{model}.npz"
    out = {}
    for prec in ("fp32", "fp16", "int8"):
        extra = {}
        if prec == "int8":
            # bert_tiny's additive mask (finfo.min) defeats onnxruntime's entropy histogram
            extra = {"calibration": str(calib),
                     "calibrate_method": "minmax" if model == "bert_tiny" else "entropy"}
        res = build_engine(path, cfg(model, precision=prec, **extra), client=client,
                           output=tmp_path / f"{model}-{prec}.engine")
        assert Path(res.engine_path).is_file() and res.size_bytes > 10_000
        assert Path(res.output_path).read_bytes() == Path(res.engine_path).read_bytes()
        assert res.backend == "tensorrt-rtx" and res.route == "strongly-typed"
        assert res.targets == ["sm89"] and not res.cache_hit
        out[prec] = res
        print(model, prec, res.dtype_counts(), f"{res.build_seconds:.2f}s")
    f32, f16, i8 = (out[p].dtype_counts() for p in ("fp32", "fp16", "int8"))
    assert "HALF" not in f32 and "INT8" not in f32
    assert f16.get("HALF", 0) > f16.get("FLOAT", 0) and "INT8" not in f16
    assert i8.get("INT8", 0) > 0
    # where it matters: conv / matmul layers compute in FP16, Q layers emit INT8
    heavy = "CONVOLUTION" if model == "resnet_tiny" else "MATRIX_MULTIPLY"
    assert all(o["dtype"] == "HALF" for la in _layers_of_type(out["fp16"], heavy)
               for o in la["outputs"])
    assert all(o["dtype"] == "FLOAT" for la in _layers_of_type(out["fp32"], heavy)
               for o in la["outputs"])
    quant = _layers_of_type(out["int8"], "QUANTIZE")
    assert len(quant) >= len(_layers_of_type(out["int8"], heavy)) > 0
    assert all(o["dtype"] == "INT8" for la in quant for o in la["outputs"])
    # the precision transform is a model version in the workspace, the original untouched
    assert Path(out["fp16"].onnx_path).parent.name == "versions"
    assert out["fp32"].onnx_path == str(path)


def test_second_identical_build_is_a_cache_hit_under_half_a_second(client):
    first = build_engine(RESNET, cfg(precision="fp16"), client=client)
    assert not first.cache_hit
    t0 = time.perf_counter()
    second = build_engine(RESNET, cfg(precision="fp16"), client=client)
    elapsed = time.perf_counter() - t0
    print(f"cache hit in {elapsed * 1000:.1f} ms (first build {first.seconds:.2f} s)")
    assert second.cache_hit and elapsed < 0.5
    assert second.engine_path == first.engine_path and second.key == first.key
    assert [f.code for f in second.findings] == [f.code for f in first.findings]
    # anything that changes the engine changes the key
    other = build_engine(RESNET, cfg(precision="fp16", builder_optimization_level=1),
                         client=client)
    assert not other.cache_hit and other.key != first.key


def test_model_hash_is_memoised_by_path_size_mtime(client, tmp_path):
    import workbench.engines.cache as b

    m = tmp_path / "m.onnx"
    m.write_bytes(RESNET.read_bytes())
    r1 = build_engine(m, cfg(), client=client)
    key = b._stat_key(m)
    assert key in b._hash_memo
    os.utime(m, ns=(key[2] + 10**9, key[2] + 10**9))  # touched: re-hashed, same content
    r2 = build_engine(m, cfg(), client=client)
    assert r2.cache_hit and r2.key == r1.key and b._stat_key(m) in b._hash_memo


def test_cancelled_build_leaves_no_partial_engine(client, monkeypatch, _isolated_home):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.05")  # slow the real build down
    cancel = threading.Event()
    fractions = []

    def on_event(ev):
        if ev.get("event") == "progress" and ev.get("phase") == "building":
            fractions.append(ev.get("fraction") or 0.0)
            if len(fractions) >= 3:
                cancel.set()

    t0 = time.monotonic()
    with pytest.raises(BuildCancelled):
        build_engine(BERT, cfg("bert_tiny"), client=client, cancel=cancel, on_event=on_event)
    assert time.monotonic() - t0 < 30
    assert len(fractions) >= 3
    assert client.alive  # cooperative: IProgressMonitor.step_complete returned False
    assert engines_dir_files(_isolated_home) == []
    from workbench.core.workspace import read_jsonl

    hist = read_jsonl(next(_isolated_home.glob("models/*/history.jsonl")))
    assert hist[-1]["action"] == "build" and hist[-1]["ok"] is False
    assert hist[-1]["code"] == "cancelled"
    # the worker is still usable and the next build completes into the cache
    monkeypatch.delenv("WORKBENCH_BUILD_STEP_DELAY")
    res = build_engine(BERT, cfg("bert_tiny"), client=client)
    assert not res.cache_hit and Path(res.engine_path).is_file()
    assert [p for p in engines_dir_files(_isolated_home) if "partial" in p] == []


def test_timed_out_build_leaves_no_partial_engine(monkeypatch, _isolated_home):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.2")
    c = WorkerClient()
    try:
        t0 = time.monotonic()
        with pytest.raises(BuildTimeout) as e:
            build_engine(RESNET, cfg(), client=c, timeout=2.0)
        took = time.monotonic() - t0
        assert took < 10, took
        assert "time limit" in str(e.value)
        assert engines_dir_files(_isolated_home) == []
        assert not c.alive  # the worker was killed, not left building
    finally:
        c.close()


def _history(home: Path) -> list:
    from workbench.core.workspace import read_jsonl

    return [r for h in home.glob("models/*/history.jsonl") for r in read_jsonl(h)
            if r.get("action") == "build"]


def _start_slow_build(model, config, started: threading.Event, box: dict, **kw):
    """A real build on its own worker in a thread; `started` is set once TensorRT builds."""
    c = WorkerClient()

    def on_event(ev):
        if ev.get("event") == "progress" and ev.get("phase") == "building":
            started.set()

    def run():
        try:
            box["result"] = build_engine(model, config, client=c, on_event=on_event, **kw)
        except BaseException as e:  # (asserted by the test)
            box["error"] = e
        finally:
            c.close()
            started.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_second_build_of_the_same_engine_waits_and_reads_the_first(client, monkeypatch,
                                                                      _isolated_home):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.02")  # the first build takes seconds
    started, box = threading.Event(), {}
    first = _start_slow_build(RESNET, cfg(), started, box)
    assert started.wait(120) and "error" not in box
    events = []
    second = build_engine(RESNET, cfg(), client=client, on_event=events.append)
    first.join(120)
    assert "error" not in box, box.get("error")
    assert not box["result"].cache_hit and second.cache_hit
    assert second.key == box["result"].key and second.engine_path == box["result"].engine_path
    notices = [e["message"] for e in events if e.get("event") == "notice"]
    assert any("another build of this engine" in m for m in notices), notices
    assert [e.get("phase") for e in events if e.get("event") == "progress"][0] == "hashing"
    assert "building" not in {e.get("phase") for e in events}  # it never built itself
    hist = _history(_isolated_home)
    assert sorted(r["cache_hit"] for r in hist if "cache_hit" in r) == [False, True]
    # the cache lists engines and cards only (the build lock lives elsewhere)
    assert all(n.endswith((".engine", ".json")) for n in engines_dir_files(_isolated_home))


def test_waiting_for_a_twin_build_obeys_cancel_and_the_time_limit(client, monkeypatch,
                                                                  _isolated_home):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.05")
    started, box = threading.Event(), {}
    stop_first = threading.Event()
    first = _start_slow_build(BERT, cfg("bert_tiny"), started, box, cancel=stop_first)
    try:
        assert started.wait(120) and "error" not in box
        t0 = time.monotonic()
        with pytest.raises(BuildTimeout) as e:
            build_engine(BERT, cfg("bert_tiny"), client=client, timeout=1.5)
        assert time.monotonic() - t0 < 10
        assert "another build of the same engine" in str(e.value)
        cancel = threading.Event()

        def on_event(ev):
            if ev.get("event") == "notice" and "another build" in ev.get("message", ""):
                cancel.set()

        with pytest.raises(BuildCancelled) as e:
            build_engine(BERT, cfg("bert_tiny"), client=client, cancel=cancel,
                         on_event=on_event)
        assert "waited for another build" in str(e.value)
        assert first.is_alive()  # neither stopped the build it waited for
    finally:
        stop_first.set()
        first.join(60)
    assert isinstance(box.get("error"), BuildCancelled)
    # the first one's cancel freed the key: the next build runs at once and builds
    monkeypatch.delenv("WORKBENCH_BUILD_STEP_DELAY")
    res = build_engine(BERT, cfg("bert_tiny"), client=client, timeout=120)
    assert not res.cache_hit and Path(res.engine_path).is_file()


def test_progress_reaches_one_and_grows(client, monkeypatch):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.01")
    events = []
    build_engine(RESNET, cfg(), client=client, on_event=events.append)
    fr = [e["fraction"] for e in events if e.get("event") == "progress"
          and e.get("phase") == "building" and e.get("fraction") is not None]
    assert len(fr) >= 5
    assert fr == sorted(fr)  # the bar never moves backwards
    assert fr[-1] > 0.5 and max(fr) <= 1.0
    assert events[-1]["phase"] == "done" and events[-1]["fraction"] == 1.0


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("profiles,needle", [
    ([{"image": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}], "unknown input 'image'"),
    ([{"input": [[1, 3, 32], [4, 3, 32], [8, 3, 32]]}], "rank"),
    ([{"input": [[1, 3, 64, 64], [4, 3, 64, 64], [8, 3, 64, 64]]}], "fixed to 32"),
    ([], "dynamic dims"),  # only with strict_profiles: otherwise a default profile
])
def test_invalid_profile_is_a_clear_error(client, profiles, needle, _isolated_home):
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, cfg(profiles=profiles), client=client, strict_profiles=True)
    assert not isinstance(e.value, BuildFailed)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and "resnet_tiny.onnx" in msg
    assert e.value.field and e.value.field.startswith("profiles")
    assert engines_dir_files(_isolated_home) == []


def test_profile_check_beside_a_running_build_stops_it(client, monkeypatch, _isolated_home):
    """FP32 from the user's file: TensorRT starts at once and the profile check (which needs
    the graph) runs beside it. A check failing mid-build stops the build; its message is what
    the user gets, and nothing is cached."""
    from workbench.engines.stages import profiles as build_profiles

    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.05")  # a full build: ~5 s
    real = build_profiles.validate_profiles
    seen = []

    def slow_failing_check(ref, config):
        real(ref, config)  # the real check passes...
        time.sleep(0.5)  # ...and then, with TensorRT well into the build, a failure
        raise WorkbenchError("injected profile problem", field="profiles.input")

    monkeypatch.setattr(build_profiles, "validate_profiles", slow_failing_check)
    t0 = time.monotonic()
    with pytest.raises(WorkbenchError) as e:
        build_engine(BERT, cfg("bert_tiny"), client=client,
                     on_event=lambda ev: seen.append(ev.get("phase")))
    assert "injected profile problem" in str(e.value)
    assert not isinstance(e.value, (BuildFailed, BuildCancelled))
    assert "building" in seen  # TensorRT had started
    assert time.monotonic() - t0 < 3.5
    assert engines_dir_files(_isolated_home) == []
    assert client.call("ping")  # stopped cooperatively: the worker lives on


def test_worker_checks_profiles_against_the_parsed_network(client, tmp_path):
    """Second line of defence (e.g. a shape the ONNX leaves symbolic but TensorRT fixes)."""
    from workbench.worker.client import WorkerError

    with pytest.raises(WorkerError) as e:
        client.call("build", {"onnx_path": str(RESNET), "engine_path": str(tmp_path / "x"),
                              "backend": "tensorrt-rtx", "target": "sm89",
                              "profiles": [{"input": [[1, 3, 32, 32], [4, 3, 32, 32],
                                                      [2, 3, 32, 32]]}]}, timeout=60)
    assert e.value.code == "bad-profile" and "min <= opt <= max" in e.value.message
    assert not (tmp_path / "x").exists()


def test_bert_profile_missing_one_input_names_it(client):
    p = [{"input_ids": [[1, 8], [4, 32], [64, 32]]}]
    with pytest.raises(WorkbenchError, match="attention_mask"):
        build_engine(BERT, cfg("bert_tiny", profiles=p), client=client)


def test_bert_inputs_sharing_a_dim_must_agree(client):
    p = [{"input_ids": [[1, 8], [4, 32], [64, 32]], "attention_mask": [[1, 8], [4, 16],
                                                                       [64, 32]]}]
    with pytest.raises(WorkbenchError) as e:
        build_engine(BERT, cfg("bert_tiny", profiles=p), client=client)
    assert "attention_mask" in str(e.value) or "input_ids" in str(e.value)


def test_parse_failure_names_the_node(client):
    with pytest.raises(BuildFailed) as e:
        build_engine(SAMPLES / "needs_fixing.onnx",
                     cfg(profiles=[{"input": [[1, 4, 12, 12]] * 3}]), client=client)
    assert e.value.code == "parse-failed"
    assert e.value.node in ("/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu")
    assert e.value.node in str(e.value)
    # every refused node is a finding, the plugin one told apart
    by_node = {f.nodes[0]: f for f in e.value.findings if f.source == "parser"}
    assert set(by_node) == {"/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu"}
    assert by_node["/act/FastGelu"].code == "missing-plugin"
    assert by_node["/crop/CenterCropPad"].code == "parse-error"


def test_legacy_route_is_refused_where_the_flags_do_not_exist(client):
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, cfg(precision="fp16", route="legacy-flags"), client=client)
    assert "BuilderFlag.FP16" in str(e.value) and e.value.field == "route"


def test_int8_without_calibration_is_refused(client):
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, cfg(precision="int8"), client=client)
    assert e.value.field == "calibration"


def test_unknown_target_is_a_clear_error(client):
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, cfg(target="sm42"), client=client)
    assert "sm42" in str(e.value) and "sm89" in str(e.value)


# --------------------------------------------------------------------------- inspect
def test_inspect_engine_falls_back_to_network_dtypes(client):
    res = build_engine(RESNET, cfg(precision="fp16"), client=client)
    info = inspect_engine(res, client=client)
    # no GPU here: the sm89 engine cannot be deserialized, the reason says why
    assert info["source"] == "network" and info["reason"]
    convs = [la for la in info["layers"] if la["type"] == "CONVOLUTION"]
    assert convs and all(o["dtype"] == "HALF" for la in convs for o in la["outputs"])


# --------------------------------------------------------------------------- CLI
def _cli(*args, env=None):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_cli_build_json_and_exit_codes(tmp_path):
    out = tmp_path / "r.engine"
    common = ["--profile", "input:1x3x32x32:4x3x32x32:32x3x32x32", "--target", "sm89",
              "--opt-level", "0"]
    r = _cli("build", RESNET, "-o", out, "--precision", "fp16", *common, "--json",
             "--export-script", tmp_path / "build.py")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and d["engine_path"] == str(out) and out.stat().st_size == d["size_bytes"]
    assert d["backend"] == "tensorrt-rtx" and d["backend_version"]
    assert d["dtypes"]["HALF"] > 0 and d["cache_hit"] is False
    assert d["memory"]["activation_bytes"] > 0 and d["memory"]["weights_bytes"] > 0
    assert d["export"]["trtexec"].startswith("tensorrt_rtx --onnx=")
    assert "--minShapes=input:1x3x32x32" in d["export"]["trtexec"]
    assert "polygraphy convert" in d["export"]["polygraphy"]
    compile((tmp_path / "build.py").read_text(), "build.py", "exec")
    # same build again: cache hit
    r2 = _cli("build", RESNET, "-o", out, "--precision", "fp16", *common, "--json")
    assert json.loads(r2.stdout)["cache_hit"] is True
    # progress goes to stderr without --json
    r3 = _cli("build", RESNET, "-o", out, *common, "--no-cache")
    assert r3.returncode == 0 and "building" in r3.stderr and "engine:" in r3.stdout
    # bad input: exit 2, one line
    r4 = _cli("build", RESNET, "-o", out, "--profile", "input:8x3x32x32:4x3x32x32:1x3x32x32",
              "--target", "sm89")
    assert r4.returncode == 2 and "min <= opt <= max" in r4.stderr, r4.stderr
    assert len(r4.stderr.strip().splitlines()) == 1
    r5 = _cli("build", RESNET, "-o", out, "--profile", "input:1x3x32", "--target", "sm89")
    assert r5.returncode == 2 and "rank" in r5.stderr, r5.stderr
    r5b = _cli("build", RESNET, "-o", out, "--profile", "input:1x3x32x32:4", "--target", "sm89")
    assert r5b.returncode == 2 and "INPUT:MIN:OPT:MAX" in r5b.stderr, r5b.stderr
    # TensorRT refuses: exit 1 with the node named
    r6 = _cli("build", SAMPLES / "needs_fixing.onnx", "-o", tmp_path / "n.engine",
              "--profile", "input:1x4x12x12:1x4x12x12:1x4x12x12", "--target", "sm89", "--json")
    assert r6.returncode == 1, r6.stderr
    d6 = json.loads(r6.stdout)
    assert not d6["ok"] and d6["node"] and d6["code"] == "parse-failed"
    assert not (tmp_path / "n.engine").exists()


def test_cli_timeout_exits_1_and_leaves_nothing(tmp_path, _isolated_home):
    env = dict(os.environ, WORKBENCH_BUILD_STEP_DELAY="0.2")
    r = _cli("build", RESNET, "-o", tmp_path / "t.engine", "--profile",
             "input:1x3x32x32:4x3x32x32:32x3x32x32", "--target", "sm89", "--timeout", "2",
             env=env)
    assert r.returncode == 1 and "time limit" in r.stderr
    assert not (tmp_path / "t.engine").exists()
    assert engines_dir_files(_isolated_home) == []


def test_tactic_sources_are_probed_and_checked(client):
    res = build_engine(RESNET, cfg(tactic_sources=["JIT_CONVOLUTIONS"]), client=client)
    assert Path(res.engine_path).is_file()
    assert "--tacticSources=+JIT_CONVOLUTIONS" in res.export["trtexec"]
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, cfg(tactic_sources=["CUBLAS_LT_MAGIC"]), client=client)
    assert "CUBLAS_LT_MAGIC" in str(e.value) and "JIT_CONVOLUTIONS" in str(e.value)


def test_cache_key_covers_external_data(client, tmp_path):
    import numpy as np
    import onnx
    proto = onnx.load(str(RESNET))
    m = tmp_path / "ext.onnx"
    onnx.save_model(proto, str(m), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="ext.onnx.data", size_threshold=0)
    assert (tmp_path / "ext.onnx.data").is_file()
    r1 = build_engine(m, cfg(), client=client)
    assert build_engine(m, cfg(), client=client).cache_hit
    # same graph file, different weights in the data file: a different engine
    graph_bytes = m.read_bytes()
    data = bytearray((tmp_path / "ext.onnx.data").read_bytes())
    data[:4] = np.float32(0.125).tobytes()  # one weight changed, same size
    (tmp_path / "ext.onnx.data").write_bytes(bytes(data))
    assert m.read_bytes() == graph_bytes
    r2 = build_engine(m, cfg(), client=client)
    assert not r2.cache_hit and r2.key != r1.key


def test_fp16_findings_from_calibration_data_are_not_replayed_from_a_build_without_it(client):
    """FP16 checks activations on the calibration data: a cached build made without data (its
    card says "not checked") is not what a build with data gets, nor one with other data."""
    calib = str(SAMPLES / "calib" / "resnet_tiny.npz")
    plain = build_engine(RESNET, cfg(precision="fp16", builder_optimization_level=2),
                         client=client)
    assert "no-overflow-check" in [f.code for f in plain.findings]
    checked = build_engine(RESNET, cfg(precision="fp16", builder_optimization_level=2,
                                       calibration=calib), client=client)
    assert not checked.cache_hit and checked.key != plain.key
    assert "no-overflow-check" not in [f.code for f in checked.findings]
    again = build_engine(RESNET, cfg(precision="fp16", builder_optimization_level=2,
                                     calibration=calib, calibrate_method="minmax"),
                         client=client)  # (how INT8 scales are computed: not FP16's concern)
    assert again.cache_hit and again.key == checked.key
    assert [f.code for f in again.findings] == [f.code for f in checked.findings]


def test_a_cache_hit_from_another_workbench_version_says_its_findings_are_that_versions(
        client):
    first = build_engine(RESNET, cfg(builder_optimization_level=2), client=client)
    meta_path = Path(first.engine_path).with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    assert "cached-by-other-version" not in [f.code for f in first.findings]
    meta["workbench_version"] = "0.0.1"
    meta_path.write_text(json.dumps(meta))
    hit = build_engine(RESNET, cfg(builder_optimization_level=2), client=client)
    assert hit.cache_hit
    note = [f for f in hit.findings if f.code == "cached-by-other-version"]
    assert len(note) == 1 and "workbench 0.0.1" in note[0].message
    assert "--no-cache" in note[0].hint


@pytest.mark.parametrize("prec,dtype", [("bf16", "BF16"), ("fp8", "FP8")])
def test_bf16_and_fp8_builds_carry_their_dtype(client, prec, dtype):
    res = build_engine(RESNET, cfg(precision=prec, calibration=str(
        SAMPLES / "calib" / "resnet_tiny.npz")), client=client)
    counts = res.dtype_counts()
    print(prec, counts)
    assert counts.get(dtype, 0) > 0 and Path(res.engine_path).is_file()


def test_cli_config_file_with_flag_overrides(tmp_path):
    c = cfg(precision="fp16", workspace_bytes=64 << 20)
    (tmp_path / "build.json").write_text(c.to_json())
    r = _cli("build", RESNET, "-o", tmp_path / "a.engine", "--config", tmp_path / "build.json",
             "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["config_hash"] == c.config_hash and d["dtypes"].get("HALF", 0) > 0
    assert "--memPoolSize=workspace:64M" in d["export"]["trtexec"]
    r2 = _cli("build", RESNET, "-o", tmp_path / "b.engine", "--config", tmp_path / "build.json",
              "--precision", "bf16", "--json")
    d2 = json.loads(r2.stdout)
    assert d2["config"]["precision"] == "bf16" and d2["config"]["workspace_bytes"] == 64 << 20
    (tmp_path / "bad.json").write_text('{"precision": "fp16", "max_workspace_size": 1}')
    r3 = _cli("build", RESNET, "-o", tmp_path / "c.engine", "--config", tmp_path / "bad.json")
    assert r3.returncode == 2 and "max_workspace_size" in r3.stderr


# --------------------------------------------------------------------------- exports run
def _rtx_shim(tmp_path) -> Path:
    """`tensorrt_rtx` (the users' module name) for the PyPI bindings installed here."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "tensorrt_rtx.py").write_text(
        "import sys, tensorrt_rtx_bindings as _b\nsys.modules[__name__] = _b\n")
    return shim


def test_exported_polygraphy_command_builds_the_same_engine(client, tmp_path):
    c = cfg(target=None, builder_optimization_level=1, workspace_bytes=256 << 20)
    res = build_engine(RESNET, c, client=client)
    out = tmp_path / "poly.engine"
    line = res.export["polygraphy"].replace(res.engine_path, str(out))
    assert line.startswith("POLYGRAPHY_USE_TENSORRT_RTX=1 polygraphy convert")
    env = dict(os.environ, PYTHONPATH=str(_rtx_shim(tmp_path)))
    r = subprocess.run(line, shell=True, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Finished engine building" in r.stdout + r.stderr
    assert abs(out.stat().st_size - res.size_bytes) <= 0.05 * res.size_bytes


def test_exported_script_builds_with_the_modern_api(client, tmp_path):
    res = build_engine(RESNET, cfg(precision="fp16"), client=client)
    script = tmp_path / "build_and_run.py"
    out = tmp_path / "script.engine"
    script.write_text(res.export["script"].replace(res.engine_path, str(out)))
    env = dict(os.environ, PYTHONPATH=str(_rtx_shim(tmp_path)))
    r = subprocess.run([sys.executable, str(script), "--build-only"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.is_file() and f"engine: {out}" in r.stdout
    assert abs(out.stat().st_size - res.size_bytes) <= 0.05 * res.size_bytes
    # running needs a GPU: here it says so and exits non-zero instead of crashing
    r2 = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                        timeout=300)
    assert r2.returncode != 0 and "cannot run the engine" in r2.stderr


def test_wider_profile_costs_activation_memory(client):
    small = build_engine(RESNET, cfg(profiles=[{"input": [[1, 3, 32, 32], [4, 3, 32, 32],
                                                          [8, 3, 32, 32]]}]), client=client)
    wide = build_engine(RESNET, cfg(profiles=[{"input": [[1, 3, 32, 32], [4, 3, 32, 32],
                                                         [128, 3, 32, 32]]}]), client=client)
    a, b = small.memory["activation_bytes"], wide.memory["activation_bytes"]
    print(f"activation memory: max batch 8 -> {a} B, max batch 128 -> {b} B")
    assert b > 2 * a  # measured 2.3x (18 MB -> 42 MB) with TensorRT-RTX 1.7


def test_build_overhead_benchmark_runs_and_reports(tmp_path):
    """The benchmark itself stays runnable (its figures are read from its own output, not
    asserted here): one pair per sample, last line one JSON object."""
    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(repo / "benchmarks" / "build_overhead.py"),
                        "--repeats", "1", "--samples-only", "--opt-level", "0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["benchmark"] == "build_overhead" and d["target_overhead_pct"] == 10.0
    assert set(d["models"]) == {"resnet_tiny", "bert_tiny"}
    for row in d["models"].values():
        assert row["baseline"] > 0 and row["cli"] > 0 and row["api"] > 0
        assert row["cli_ratio"] == pytest.approx(1 + row["cli_overhead_s"] / row["baseline"],
                                                 abs=0.01)
    assert isinstance(d["cli_within_target"], bool)


def test_the_equivalent_commands_read_an_onnx_beside_the_engine_not_the_workspace(client,
                                                                                   tmp_path):
    """An FP16 build gives TensorRT the workbench's conversion, a file of the workspace. With an
    engine output the conversion is copied beside it (OUT.engine.onnx, the same bytes) and the
    trtexec/polygraphy lines and the script read that copy, on a build and on a cache hit; an
    FP32 build's lines read the user's own model and nothing is written beside the engine."""
    import onnx

    from workbench.core.workspace import workbench_home

    home = str(workbench_home())
    for attempt in range(2):  # a build, then the cache hit
        out = tmp_path / f"run{attempt}" / "net.engine"
        out.parent.mkdir()
        res = build_engine(RESNET, cfg(precision="fp16"), client=client, output=out)
        assert res.cache_hit or not attempt  # (the first may hit an earlier test's engine)
        copy = out.with_name("net.engine.onnx")
        assert copy.read_bytes() == Path(res.onnx_path).read_bytes()
        assert any(n.op_type == "Cast" for n in onnx.load(str(copy)).graph.node) or \
            any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
                for i in onnx.load(str(copy)).graph.initializer)
        for line in (res.export["trtexec"], res.export["polygraphy"], res.export["script"]):
            assert str(copy) in line and home not in line, line
        assert str(copy) in res.export["notes"][0]
        assert not out.with_name("net.fp16.onnx").exists()  # a name users give their own files
    out32 = tmp_path / "fp32" / "net.engine"
    out32.parent.mkdir()
    res = build_engine(RESNET, cfg(), client=client, output=out32)
    assert str(RESNET) in res.export["trtexec"]
    assert sorted(p.name for p in out32.parent.iterdir()) == ["net.engine", "net.engine.card.json"]


def test_a_dynamic_axis_the_graph_fixes_fails_in_the_users_terms(client, tmp_path):
    """A traced export declares `seq` dynamic but froze it into a Reshape: TensorRT's "kOPT
    values for profile 0 violate shape constraints ... reshape would change volume" becomes
    which profile shapes do not fit, where, and what to do (build at the export size, or
    re-export); the same model builds at the size the graph fixes."""
    import re

    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    shape = numpy_helper.from_array(np.array([1, 12, 8], np.int64), "frozen")
    g = h.make_graph([h.make_node("Reshape", ["x", "frozen"], ["r"], name="/enc/Reshape"),
                      h.make_node("Relu", ["r"], ["y"], name="/enc/Relu")], "traced",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, "seq", 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 12, 8])], [shape])
    path = tmp_path / "traced.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(path))
    bad = BuildConfig(profiles=[{"x": [(1, 1, 8), (1, 64, 8), (1, 128, 8)]}], target="sm89",
                      builder_optimization_level=0)
    with pytest.raises(BuildFailed) as ei:
        build_engine(str(path), bad, client=client, use_cache=False)
    e = ei.value
    assert re.search(r"the model does not run at the profile's (min|opt|max) shapes "
                     r"\(x:1x\d+x8\): layer \S*Reshape\S* cannot take them", e.message), e.message
    assert "a size fixed in the graph" in e.message and "declared dynamic" in e.message
    assert "violate shape constraints" in e.message  # TensorRT's own words kept after
    assert f"workbench profiles {path} --calib DATA" in e.hint and "dynamic_axes" in e.hint
    ok = BuildConfig(profiles=[{"x": [(1, 12, 8)] * 3}], target="sm89",
                     builder_optimization_level=0)
    assert build_engine(str(path), ok, client=client, use_cache=False).size_bytes > 0
