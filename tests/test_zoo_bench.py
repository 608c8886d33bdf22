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
    assert row["fp16"]["ok_selection"]  # no selection: the same elementwise verdict
    assert row["fp16"]["selection"]["selection_nodes"] == 0
    assert row["build"]["split"] is False
    s = bench.summary([row])
    assert s["first_try_build"] == 1.0 and s["exit3"] == 0
    assert s["first_try_build_engine_only"] == 1.0 and s["first_try_build_split"] == 0.0
    json.dumps(row)  # the row is what --jsonl writes


@pytest.mark.slow
def test_zoo_detector_builds_split_and_is_accurate_selection_aware_only(tmp_path):
    """ssdlite: the parser refuses its NonZero tail (first-try build = engine + ONNX tail); its
    post-NMS boxes differ elementwise (near-tied random-weight scores swap) while the tensors
    feeding the selection are within 1% and every swapped row has a near-tied partner."""
    bench = _bench()
    row = bench.run_model("ssdlite320_mobilenet_v3_large", tmp_path, build_timeout=240)
    b, f = row["build"], row["fp16"]
    assert b["ok"] and b["split"] and b["refused"][0] == "NonZero at /NonZero", b
    assert b["engine_nodes"] > 0 and b["onnxruntime_nodes"] > 0
    assert f["valid"] and not f["accurate"] and f["rel_error"] > bench.BUDGET
    assert f["ok_selection"], f["selection"]
    sel = f["selection"]
    assert sel["frontier_tensors"] > 0 and sel["frontier_rel"] <= bench.BUDGET
    (g,) = sel["groups"]
    assert g["consistent"] and g["unmatched_ref"] > 0 and not g["unpaired"]
    s = bench.summary([row])
    assert s["first_try_build_split"] == 1.0 and s["fp16_accurate"] == 0.0
    assert s["fp16_accurate_selection_aware"] == 1.0
    assert "split" in bench.table([row])


def test_rel_error_is_normalised_by_the_reference_scale():
    import numpy as np

    bench = _bench()
    ref = [np.array([100.0, -50.0], np.float32), np.array([1, 2], np.int64)]
    assert bench.rel_error(ref, [np.array([100.5, -50.0], np.float32), ref[1]]) == \
        pytest.approx(0.005)
    assert bench.rel_error(ref, [np.array([np.inf, 0], np.float32), ref[1]]) == float("inf")
    assert bench.rel_error([ref[1]], [ref[1]]) is None
