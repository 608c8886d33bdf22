"""The variant matrix with a real local Ray instance and real TensorRT-RTX builds (CPU, ahead
of time): plan, per-variant results, resume after SIGKILL, engine-cache hits, table and Pareto
page; plus the Pareto data and the plan's rules on known values."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.matrix import plan as plan_mod
from workbench.matrix.plan import Variant, parse_data_args, plan_matrix
from workbench.matrix.store import ResultsStore
from workbench.matrix.table import pareto_axes, pareto_front, results_frame

ray = pytest.importorskip("ray")
pytest.importorskip("tensorrt_rtx_bindings")

RESNET, BERT = SAMPLES / "resnet_tiny.onnx", SAMPLES / "bert_tiny.onnx"
# one profile set for both samples (each keeps its own inputs)
PROFILE_ARGS = ["input:1x3x32x32:8x3x32x32:16x3x32x32", "input_ids:1x8:8x32:16x32",
                "attention_mask:1x8:8x32:16x32"]
PROFILE = {"input": [[1, 3, 32, 32], [8, 3, 32, 32], [16, 3, 32, 32]],
           "input_ids": [[1, 8], [8, 32], [16, 32]],
           "attention_mask": [[1, 8], [8, 32], [16, 32]]}


@pytest.fixture(scope="module")
def ray_cluster():
    """A real local Ray instance started the way `workbench matrix` starts one (2 CPUs);
    CLI runs join it with --ray ADDRESS (a cluster join, without paying Ray's start again)."""
    from workbench.matrix.run import start_ray

    if ray.is_initialized():
        ray.shutdown()
    assert start_ray(workers=2) is True
    assert ray.cluster_resources().get("CPU") == 2
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def small_calib(tmp_path_factory):
    """The samples' own calibration data, first 16 samples (INT8 calibration time scales
    with them; CI time matters)."""
    d = tmp_path_factory.mktemp("calib")
    out = {}
    for name in ("resnet_tiny", "bert_tiny"):
        with np.load(SAMPLES / "calib" / f"{name}.npz") as z:
            np.savez(d / f"{name}.npz", **{k: z[k][:16] for k in z.files})
        out[name] = str(d / f"{name}.npz")
    return out


# ----------------------------------------------------------------------------- the plan
def test_plan_ids_are_stable_distinct_and_profiles_follow_each_model(small_calib):
    vs = plan_matrix([RESNET, BERT], ["fp32", "fp16", "int8"], ["sm89", "sm120"],
                     profiles={"p0": [PROFILE]}, calibration=small_calib)
    assert len(vs) == 12 and len({v.id for v in vs}) == 12
    again = plan_matrix([RESNET, BERT], ["fp32", "fp16", "int8"], ["sm89", "sm120"],
                        profiles={"p0": [PROFILE]}, calibration=small_calib)
    assert [v.id for v in vs] == [v.id for v in again]
    r = vs[0]
    assert r.id.startswith("resnet_tiny-fp32-sm89-p0-odef-")
    assert r.profiles == [{"input": PROFILE["input"]}]
    b = next(v for v in vs if v.model_name == "bert_tiny")
    assert sorted(b.profiles[0]) == ["attention_mask", "input_ids"]
    cfg = next(v for v in vs if v.precision == "int8" and v.model_name == "bert_tiny").config()
    assert cfg.calibration == small_calib["bert_tiny"] and cfg.target == "sm89"
    assert vs[0].config().calibration is None  # FP32 does not calibrate: same cache key
    assert Variant.from_dict(r.to_dict()).id == r.id


def test_plan_refuses_int8_without_data_and_bad_targets():
    with pytest.raises(WorkbenchError, match="INT8 needs calibration data for resnet_tiny"):
        plan_matrix([RESNET], ["int8"], ["sm89"])
    with pytest.raises(WorkbenchError, match="target 'sm8x'"):
        plan_matrix([RESNET], ["fp32"], ["sm8x"])
    with pytest.raises(WorkbenchError, match="model not found"):
        plan_matrix([SAMPLES / "nope.onnx"], ["fp32"])


def test_data_arguments(small_calib):
    assert parse_data_args([], "--calib") is None
    one = parse_data_args([small_calib["bert_tiny"]], "--calib")
    assert plan_mod.data_for(RESNET, one) == str(Path(small_calib["bert_tiny"]).resolve())
    named = parse_data_args([f"bert_tiny={small_calib['bert_tiny']}"], "--calib")
    assert plan_mod.data_for(RESNET, named) is None
    assert plan_mod.data_for(BERT, named).endswith("bert_tiny.npz")
    with pytest.raises(WorkbenchError, match="one PATH for every model"):
        parse_data_args(["a.npz", "b.npz"], "--calib")
    with pytest.raises(WorkbenchError, match="data not found"):
        parse_data_args(["x=/nonexistent.npz"], "--calib")


# ----------------------------------------------------------------------------- pareto data
def _rows():
    base = dict(status="ok", target="sm89")
    return [dict(base, id="a", model="m", precision="fp32", size_bytes=4e6, error_rel=0.0),
            dict(base, id="b", model="m", precision="fp16", size_bytes=2e6, error_rel=1e-3),
            dict(base, id="c", model="m", precision="int8", size_bytes=3e6, error_rel=5e-2),
            dict(base, id="d", model="m", precision="int8", size_bytes=1e6, error_rel=9e-2),
            dict(base, id="e", model="n", precision="fp32", size_bytes=9e6, error_rel=0.5),
            dict(id="f", model="m", precision="fp8", status="failed", error="refused")]


def test_without_latency_the_view_is_accuracy_only_never_engine_size():
    """Engine size is no latency (an INT8 engine can be larger than its FP32 one): with no
    measured or predicted latency the view is accuracy only, says why, and draws no front."""
    df = results_frame(_rows())
    axes = pareto_axes(df)
    assert axes["x"] == "id" and axes["kind"] == "accuracy-only"
    assert "accuracy only" in axes["note"] and "engine size is not latency" in axes["note"]
    front = pareto_front(df, axes["x"])
    assert list(front["id"]) == ["a", "b", "c", "d", "e"] and not front["pareto"].any()


def test_pareto_front_on_predicted_latency():
    rows = _rows()
    for r, lat in zip(rows, (2.9, 0.9, 0.7, 0.8, 1.0)):
        r["latency_predicted_ms"] = lat
    df = results_frame(rows)
    axes = pareto_axes(df)
    assert axes["x"] == "latency_predicted_ms" and axes["kind"] == "predicted"
    assert "predicted" in axes["x_title"] and "not measured" in axes["note"]
    on = dict(zip(pareto_front(df)["id"], pareto_front(df)["pareto"]))
    # d (0.8 ms, 9e-2) is beaten by c (0.7 ms, 5e-2); e is alone in its model; f failed
    assert on == {"a": True, "b": True, "c": True, "d": False, "e": True}


def test_matrix_predicts_uniform_engines_latency_from_recorded_profiles():
    """The recorded H200 ResNet-50 FP32/FP16 engines (TensorRT 8.6) give each variant its
    recorded total, said as predicted; a precision with no recording gets none."""
    from conftest import H200
    from workbench.matrix.run import add_predicted_latency

    rows = [{"id": p, "status": "ok", "model": "resnet50", "precision": p,
             "model_path": "/x/resnet50.onnx"} for p in ("fp32", "fp16", "int8")]
    add_predicted_latency(rows, H200)
    by = {r["id"]: r for r in rows}
    assert by["fp32"]["latency_predicted_ms"] == pytest.approx(2.934, abs=1e-3)
    assert by["fp16"]["latency_predicted_ms"] == pytest.approx(0.879, abs=1e-3)
    assert "latency_predicted_ms" not in by["int8"]
    assert "predicted" in by["fp16"]["latency_prediction"]
    assert pareto_axes(results_frame(rows))["kind"] == "predicted"


def test_pareto_uses_latency_when_timed():
    rows = _rows()[:4]
    for r, lat in zip(rows, (2.0, 1.0, 0.5, 0.6)):
        r["latency_p50_ms"] = lat
    df = results_frame(rows)
    assert pareto_axes(df)["x"] == "latency_p50_ms"
    on = dict(zip(pareto_front(df)["id"], pareto_front(df)["pareto"]))
    assert on == {"a": True, "b": True, "c": True, "d": False}


def test_pareto_page_draws_every_model_and_front(tmp_path):
    from workbench.render.matrix_figures import pareto_figure, write_pareto_html

    rows = _rows()
    for r, lat in zip(rows, (4.0, 2.0, 3.0, 1.0, 5.0)):
        r["latency_predicted_ms"] = lat
    df = results_frame(rows)
    axes = pareto_axes(df)
    pts = pareto_front(df)
    fig = pareto_figure(pts, axes)
    markers = [t for t in fig.data if t.mode == "markers+text"]
    assert [t.name for t in markers] == ["m", "n"]
    m = markers[0]
    assert list(m.x) == pytest.approx([4.0, 2.0, 3.0, 1.0])
    # marker area proportional to the engine size: diameter 8 + 32*sqrt(size/max)
    assert list(m.marker.size) == pytest.approx([8 + 32 * (s / 9) ** 0.5 for s in (4, 2, 3, 1)])
    lines = [t for t in fig.data if t.mode == "lines"]
    assert sorted(lines[0].x) == pytest.approx([1.0, 2.0, 4.0])  # m's front: d, b, a
    page = write_pareto_html(pts, axes, tmp_path / "p.html", table=df).read_text()
    assert "predicted" in page and "plotly" in page and ">refused<" in page


def test_store_resumes_only_complete_results(tmp_path):
    st = ResultsStore(tmp_path / "out")
    eng = st.engine_path("v1")
    eng.write_bytes(b"x")
    st.save({"id": "v1", "status": "ok", "engine_path": str(eng)})
    st.save({"id": "v2", "status": "failed", "error": "boom"})
    st.save({"id": "v3", "status": "ok", "engine_path": str(st.engine_path("v3"))})
    (st.variants_dir / "v4.json").write_text('{"id": "v4", "sta')  # torn (not ours)
    assert st.finished("v1")["status"] == "ok"
    assert st.finished("v2") is None  # failed: runs again
    assert st.finished("v3") is None  # its engine is gone
    assert st.finished("v4") is None
    assert [r["id"] for r in st.results()] == ["v1", "v2", "v3"]


# ----------------------------------------------------------------------------- real runs
def test_python_api_runs_variants_as_ray_tasks(ray_cluster, tmp_path):
    from workbench.matrix.run import run_matrix

    vs = plan_matrix([RESNET], ["fp32", "fp16"], ["sm89"], profiles={"p0": [PROFILE]},
                     opt_levels=[0])
    seen = []
    res = run_matrix(vs, tmp_path / "m", inputs=str(SAMPLES / "calib" / "resnet_tiny.npz"),
                     samples=4, on_result=seen.append)
    assert [r["id"] for r in res.results] == [v.id for v in vs]
    assert sorted(r["id"] for r in seen) == sorted(v.id for v in vs)
    assert res.summary == {"variants": 2, "ok": 2, "failed": 0, "built": 2, "cache_hits": 0,
                           "resumed": 0}
    fp32, fp16 = res.results
    assert fp32["pid"] != os.getpid()  # ran in a Ray worker process, not here
    for r in res.results:
        assert Path(r["engine_path"]).is_file()
        assert Path(r["engine_path"]).stat().st_size == r["size_bytes"]
        assert r["targets"] == ["sm89"] and r["backend"] == "tensorrt-rtx"
        assert r["accuracy_source"] == "onnx-cpu" and r["accuracy"]["samples"] == 4
        assert r["latency_p50_ms"] is None if "latency_p50_ms" in r else True
    assert fp32["error_rel"] == 0.0  # TensorRT got the model itself
    assert 0 < fp16["error_rel"] < 1e-2 and fp16["accuracy_passed"] is True
    assert fp16["dtypes"].get("HALF", 0) > 0
    df = res.frame()
    assert list(df["precision"]) == ["fp32", "fp16"] and df["size_mb"].gt(0).all()
    on_disk = json.loads((tmp_path / "m" / "results.json").read_text())
    assert [r["id"] for r in on_disk] == [v.id for v in vs]
    csv = pd.read_csv(tmp_path / "m" / "results.csv")
    assert list(csv["id"]) == [v.id for v in vs]
    assert "accuracy only" in res.pareto_note


def test_a_failing_variant_is_reported_and_the_rest_build(ray_cluster, tmp_path):
    from workbench.matrix.run import run_matrix

    vs = plan_matrix([RESNET, SAMPLES / "needs_fixing.onnx"], ["fp32"], ["sm89"],
                     profiles={"p0": [PROFILE, ]})
    res = run_matrix(vs, tmp_path / "m", samples=0)
    ok, bad = res.results
    assert ok["status"] == "ok"
    assert bad["status"] == "failed" and bad["code"] in ("parse-failed", "bad-input")
    assert "CenterCropPad" in bad["error"] or "profile" in bad["error"]


def _cli(args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "workbench.cli", "matrix", *args],
                            cwd=REPO, env=env or os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _cached_keys(home: Path) -> set:
    """Keys of the engines in every workspace's engine cache (their metadata files)."""
    return {json.loads(p.read_text())["key"] for p in home.glob("models/*/engines/*.json")
            if not p.name.endswith(".card.json")}


def _built_keys(home: Path):
    """(cache key, cache_hit) of every build in every workspace history under `home`."""
    out = []
    for h in home.glob("models/*/history.jsonl"):
        for line in h.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("action") == "build" and "cache_hit" in rec:
                out.append((rec["key"], rec["cache_hit"]))
    return out


@pytest.mark.slow
def test_cli_matrix_two_samples_resume_after_sigkill_then_all_cache_hits(
        ray_cluster, small_calib, tmp_path, _isolated_home):
    out = tmp_path / "matrix"
    args = [str(RESNET), str(BERT), "--precision", "fp32,fp16,int8", "--target", "sm89,sm120",
            *sum((["--profile", p] for p in PROFILE_ARGS), []),
            "--calib", f"resnet_tiny={small_calib['resnet_tiny']}",
            "--calib", f"bert_tiny={small_calib['bert_tiny']}", "--samples", "4",
            "--opt-level", "0", "--ray", ray_cluster, "-o", str(out), "--json"]
    # 1. killed mid-matrix: SIGKILL to the whole process group once some variants are saved
    p = _cli(args, start_new_session=True)
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and p.poll() is None:
        if len(list((out / "variants").glob("*.json"))) >= 2:
            break
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()[1][-2000:]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(30)
    before = {f.stem: f.read_bytes() for f in (out / "variants").glob("*.json")}
    assert 2 <= len(before) < 12
    assert not (out / "results.json").exists()
    # what the killed run built: the engines it published (a kill between publishing an
    # engine and appending its history record loses the record, never the engine)
    cached_before = _cached_keys(_isolated_home)
    fresh_before = Counter(k for k, hit in _built_keys(_isolated_home) if not hit)
    assert set(fresh_before) <= cached_before
    # 2. the same command again: finished variants are not run again, the rest are built
    p = _cli(args)
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr[-3000:]
    doc = json.loads(stdout)
    assert doc["summary"]["variants"] == 12 and doc["summary"]["ok"] == 12
    resumed = {r["id"] for r in doc["variants"] if r["resumed"]}
    assert resumed == set(before)
    for vid, data in before.items():  # untouched on disk
        assert (out / "variants" / f"{vid}.json").read_bytes() == data
    keys = _built_keys(_isolated_home)
    fresh = [k for k, hit in keys if not hit]
    assert len(fresh) == len(set(fresh))  # no engine built twice
    # every engine built exactly once: the second run built what the first had not published
    built_now = set(Counter(fresh) - fresh_before)
    assert not built_now & cached_before
    assert len(built_now | cached_before) == 12 == len(_cached_keys(_isolated_home))
    by = {(r["model"], r["precision"], r["target"]): r for r in doc["variants"]}
    assert set(by) == {(m, p_, t) for m in ("resnet_tiny", "bert_tiny")
                       for p_ in ("fp32", "fp16", "int8") for t in ("sm89", "sm120")}
    for (m, prec, t), r in by.items():
        assert r["status"] == "ok" and r["targets"] == [t]
        assert Path(r["engine_path"]).is_file() and r["size_bytes"] > 0
        assert isinstance(r["error_rel"], float) and r["accuracy_source"] == "onnx-cpu"
    assert by[("resnet_tiny", "int8", "sm89")]["dtypes"].get("INT8", 0) > 0
    assert by[("bert_tiny", "fp32", "sm89")]["error_rel"] == 0.0
    assert by[("bert_tiny", "fp16", "sm89")]["error_rel"] > 0
    assert (out / "results.csv").is_file() and (out / "pareto.html").is_file()
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 12 and set(csv["status"]) == {"ok"}
    page = (out / "pareto.html").read_text()
    assert "resnet_tiny" in page and "bert_tiny" in page and "accuracy only" in page
    # 3. a second matrix on the same engine cache: every variant a cache hit, nothing built
    again = [str(tmp_path / "again") if a == str(out) else a for a in args]
    again[again.index("--samples") + 1] = "0"  # (accuracy was checked above)
    p = _cli(again)
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr[-3000:]
    doc2 = json.loads(stdout)
    assert doc2["summary"]["cache_hits"] == 12 and doc2["summary"]["built"] == 0
    assert all(r["cache_hit"] for r in doc2["variants"])
    assert [k for k, hit in _built_keys(_isolated_home) if not hit] == fresh  # nothing built


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    p = _cli([str(RESNET), "-o", str(tmp_path / "o"), "--precision", "fp32,int8"])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2
    assert err.strip().splitlines()[-1].startswith("workbench matrix: error: ")
    assert "INT8 needs calibration data for resnet_tiny.onnx" in err
    p = _cli([str(RESNET), "-o", str(tmp_path / "missing" / "o")])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "does not exist" in err and "--mkdir" in err
    (tmp_path / "file").write_text("x")
    p = _cli([str(RESNET), "-o", str(tmp_path / "file")])
    _, err = p.communicate(timeout=120)
    assert p.returncode == 2 and "names a file, not a folder" in err


# ----------------------------------------------------------------------------- accuracy
@pytest.fixture(scope="module")
def resnet_fp16(tmp_path_factory):
    from workbench.core.model import save_model
    from workbench.precision.transform import convert

    out = tmp_path_factory.mktemp("fp16") / "resnet_fp16.onnx"
    return str(save_model(convert(str(RESNET), "fp16").proto, out))


def test_accuracy_on_cpu_runs_the_fp16_graph_in_fp16(resnet_fp16):
    from workbench.matrix.accuracy import feeds_for, measure

    notes = []
    feeds = feeds_for(str(RESNET), str(SAMPLES / "calib" / "resnet_tiny.npz"), 4, notes)
    assert sum(len(f["input"]) for f in feeds) == 4 and notes == []
    acc = measure(str(RESNET), resnet_fp16, "fp16", feeds, notes=notes)
    assert acc["source"] == "onnx-cpu" and acc["samples"] == 4
    assert 1e-6 < acc["error_rel"] < 1e-2 and acc["passed"] is True
    assert (acc["atol"], acc["rtol"]) == (1e-2, 1e-2) and acc["worst_output"] == "logits"
    same = measure(str(RESNET), str(RESNET), "fp32", feeds)
    assert same["error_rel"] == 0.0 and same["cosine"] == 1.0


def test_accuracy_of_a_large_fp16_model_the_emulation_cannot_take(resnet_fp16, monkeypatch):
    """FP16 accuracy on CPU uses the shared runner choice (storage emulated on onnxruntime); a
    big model only the slow numpy evaluator could run drops to onnxruntime, and says so."""
    from workbench.runtime import runners
    from workbench.matrix import accuracy

    notes = []
    feeds = accuracy.feeds_for(str(RESNET), None, 2, notes)
    assert any("random inputs" in n for n in notes)  # no data: said so
    acc = accuracy.measure(str(RESNET), resnet_fp16, "fp16", feeds, notes=notes)
    assert acc["source"] == "onnx-cpu" and not any("onnxruntime, which" in n for n in notes)
    monkeypatch.setattr(accuracy, "REFERENCE_MAX_BYTES", 0)
    monkeypatch.setattr(runners, "can_emulate", lambda model: False)
    acc = accuracy.measure(str(RESNET), resnet_fp16, "fp16", feeds, notes=notes)
    assert acc["source"] == "onnx-cpu" and any("onnxruntime, which computes" in n for n in notes)


def test_engine_accuracy_goes_through_the_runners_tensorrt_runner(monkeypatch):
    """workbench.runtime.trtrunner.TensorRTRunner(engine, backend=...) is what measures an engine;
    here a runner that is onnxruntime on a model that differs from the reference by a known
    factor stands in for the GPU."""
    from workbench.runtime import runners, trtrunner
    from workbench.matrix import accuracy

    made = {}

    class Scaled(runners.OnnxRuntimeRunner):
        def __init__(self, engine_path, backend="auto"):
            made.update(engine=engine_path, backend=backend)
            super().__init__(str(RESNET))

        def infer(self, feed):
            return {k: v * 1.01 for k, v in super().infer(feed).items()}

    monkeypatch.setattr(trtrunner, "TensorRTRunner", Scaled)
    feeds = accuracy.feeds_for(str(RESNET), str(SAMPLES / "calib" / "resnet_tiny.npz"), 2)
    acc = accuracy.measure(str(RESNET), str(RESNET), "fp16", feeds, engine="/x.engine",
                           backend="tensorrt")
    assert made == {"engine": "/x.engine", "backend": "tensorrt"}
    assert acc["source"] == "engine"
    assert acc["error_rel"] == pytest.approx(0.01, rel=1e-3)  # |1.01 r - r| / max|r|
