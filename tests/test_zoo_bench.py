"""benchmarks/zoo.py's steps on two small zoo models (a CNN and a decoder transformer): inspect,
check, fix --auto, a valid and accurate FP16 transform, and a first-try FP16 TensorRT-RTX build
with no hand-written profile."""
from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO


def _bench():
    spec = importlib.util.spec_from_file_location("zoo_bench", REPO / "benchmarks" / "zoo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.parametrize("name,flag", [
    ("squeezenet1_1", "--profile input:1x3x224x224:1x3x224x224:16x3x224x224"),
    ("llama_tiny", "--profile input_ids:1x1:1x128:16x512,attention_mask:1x1:1x128:16x512"),
])
def test_zoo_steps_first_try(name, flag, tmp_path):
    bench = _bench()
    row = bench.run_model(name, tmp_path, build_timeout=240)
    for step in bench.STEPS:
        assert row[step]["rc"] != 3, (step, row[step])
    assert row["inspect"]["ok"] and row["check"]["ok"] and row["check"]["supported"]
    assert row["fix"]["ok"]
    assert row["fp16"]["valid"] and row["fp16"]["accurate"], row["fp16"]
    assert 0 <= row["fp16"]["rel_error"] <= bench.BUDGET
    assert row["build"]["ok"], row["build"]
    assert row["build"]["profile"] == flag  # the default profile, printed with its flag
    s = bench.summary([row])
    assert s["first_try_build"] == 1.0 and s["exit3"] == 0
    json.dumps(row)  # the row is what --jsonl writes


def test_rel_error_is_normalised_by_the_reference_scale():
    import numpy as np

    bench = _bench()
    ref = [np.array([100.0, -50.0], np.float32), np.array([1, 2], np.int64)]
    assert bench.rel_error(ref, [np.array([100.5, -50.0], np.float32), ref[1]]) == \
        pytest.approx(0.005)
    assert bench.rel_error(ref, [np.array([np.inf, 0], np.float32), ref[1]]) == float("inf")
    assert bench.rel_error([ref[1]], [ref[1]]) is None
