"""benchmarks/planner.py's CPU path on the sample with a planted FP16 overflow: every method's
figures in the last line's JSON, the planner within budget on the held-back samples where
all-FP16 is not, the INT8 engine calibrated on the search split only."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from conftest import REPO

METHODS = {"fp16", "int8", "autocast", "first_k", "planner"}
FIGURES = {"target", "fp32_nodes", "held_loss", "meets_budget", "latency_ms", "latency",
           "evaluations"}


def test_benchmark_cpu_path_on_a_tiny_model(tmp_path):
    r = subprocess.run([sys.executable, "benchmarks/planner.py", "--models", "tiny",
                        "--samples", "16", "--max-builds", "12", "--targets", "fp16,int8",
                        "--work", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["benchmark"] == "planner" and d["device"] == "cpu"
    t = d["models"]["tiny"]
    assert set(t["methods"]) == METHODS
    for name, m in t["methods"].items():
        assert FIGURES <= set(m), name
        assert m["latency"] == "none" and m["latency_ms"] is None  # no recorded profiles
        assert m["meets_budget"] == (m["held_loss"] <= t["budget"])
    assert t["samples"] == {"search": 12, "held_back": 4}
    m = t["methods"]
    # the planted overflow: all-FP16 fails on the held-back samples, the planner does not
    assert not m["fp16"]["meets_budget"] and m["fp16"]["held_loss"] == 1.0
    assert m["planner"]["meets_budget"] and m["planner"]["held_loss"] == 0.0
    # no latency known: the plan's own answer (its 6 planted nodes kept in FP32), not a guess
    assert m["planner"]["target"] == "fp16" and m["planner"]["fp32_nodes"] == 6
    plans = m["planner"]["plans"]
    assert set(plans) == {"fp16", "int8"} and plans["fp16"]["kept_regions"] == 2
    assert m["planner"]["evaluations"] == plans["fp16"]["evaluations"] + \
        plans["int8"]["evaluations"] + 1 <= 2 * 12 + 1  # + all-FP16 on the search set
    # all-FP16 fails the search set: not a candidate; all-INT8 is the INT8 plan's own answer
    assert set(m["planner"]["candidates"]) == {"fp16, 6 FP32 nodes", "int8, 0 FP32 nodes"}
    assert m["autocast"]["rules"].startswith("AutoCast's default rules reimplemented")
    assert 0 < m["first_k"]["k"] <= m["first_k"]["steps"] == m["first_k"]["regions"] == 4
    # INT8 calibrated on the search split only: the calibration file holds those 12 samples
    with np.load(tmp_path / "tiny" / "tiny.search.npz") as z:
        assert z["input"].shape == (12, 64)
    with np.load(tmp_path / "tiny" / "tiny.npz") as z:
        held = z["input"][[3, 7, 11, 15]]
    with np.load(tmp_path / "tiny" / "tiny.search.npz") as z:
        assert not any((z["input"] == h).all(axis=1).any() for h in held)


def test_benchmark_plans_int8_with_the_fp16_fallback(tmp_path):
    """`--targets int8+fp16`: one plan INT8 where quantized, FP16 elsewhere, the planted
    overflow regions in FP32 (FP16 overflows there); the uniform all-INT8 baseline stays INT8
    alone (no fallback)."""
    r = subprocess.run([sys.executable, "benchmarks/planner.py", "--models", "tiny",
                        "--samples", "16", "--max-builds", "12", "--targets", "int8+fp16",
                        "--work", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])["models"]["tiny"]["methods"]
    plan = m["planner"]["plans"]["int8+fp16"]
    assert plan["fallback"] == "fp16" and plan["passed"] and plan["kept_regions"] == 2
    assert plan["nodes"] == {"int8": 2, "fp16": 1, "fp32": 6}
    assert m["planner"]["targets"] == ["int8+fp16"]
    cand = m["planner"]["candidates"]["int8+fp16, 6 FP32 nodes"]
    assert cand["target"] == "int8" and cand["fallback"] == "fp16" and cand["meets_budget"]
    assert m["int8"]["fallback"] is None and m["int8"]["target"] == "int8"


def test_the_json_says_which_flags_each_engine_had():
    """An engine's `build` entry: on the builder-flag route the target's flag, the fallback's
    and the extra ones; strongly typed, none (the precision is in the ONNX)."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("bench_planner", REPO / "benchmarks" /
                                                  "planner.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_planner"] = bench  # (its dataclasses look their module up)
    spec.loader.exec_module(bench)
    legacy = SimpleNamespace(route="legacy-flags", config={
        "precision": "int8", "fallback": "fp16", "extra_flags": []})
    assert bench.build_flags(legacy) == "legacy-flags: BuilderFlag.INT8 BuilderFlag.FP16"
    alone = SimpleNamespace(route="legacy-flags", config={"precision": "int8"})
    assert bench.build_flags(alone) == "legacy-flags: BuilderFlag.INT8"
    typed = SimpleNamespace(route="strongly-typed", config={"precision": "int8",
                                                            "fallback": "fp16"})
    assert "no precision flag" in bench.build_flags(typed)
    assert bench.parse_target("int8+fp16") == ("int8", "fp16")
    assert bench.parse_target("fp16") == ("fp16", None)
