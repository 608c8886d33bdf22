"""A decoder engine with prefill and decode profiles on a real GPU (TensorRT 8.6 on the rig:
WORKBENCH_TRT_PYTHON=/tmp/rig/bin/trt-python): one engine, a prompt and a step fed in one
request, each run on the profile that holds its shapes, outputs equal to onnxruntime's; a step
outside both profiles names the input, the axis and each profile's range. Skipped with a
reason where no GPU/TensorRT is usable (CI has none)."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_rig import trt_worker  # noqa: F401 (the fixture)
from test_serving_profiles import _decoder

TACTICS = ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]  # cuBLAS/cuDNN are stubs on the rig


@pytest.fixture(scope="module")
def decoder_engine(trt_worker, tmp_path_factory):
    """(model path, model, the two serving profiles, the engine built with both)."""
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.precision.profiles import default_profile, serving_profiles

    path = tmp_path_factory.mktemp("decoder") / "decoder.onnx"
    model = _decoder(path)
    pair = serving_profiles(model, default_profile(model)[0])
    res = build_engine(path, BuildConfig(backend="tensorrt", tactic_sources=TACTICS,
                                         builder_optimization_level=1,
                                         profiles=[p.to_dict() for p in pair]),
                       client=trt_worker, timeout=600)
    return path, model, pair, res


def _feed(batch, seq, past, rng):
    return {"input_ids": rng.integers(0, 10, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, past + seq), np.int64),
            "past_key_values.0.key": rng.standard_normal((batch, 2, past, 4)).astype(np.float32)}


def test_prefill_and_decode_run_on_their_own_profiles(trt_worker, decoder_engine):
    from workbench.runtime.runners import OnnxRuntimeRunner
    from workbench.runtime.trtrunner import TensorRTRunner
    from workbench.worker.client import WorkerError

    path, model, pair, res = decoder_engine
    rng = np.random.default_rng(0)
    feeds = [_feed(2, 7, 0, rng), _feed(2, 1, 7, rng), _feed(1, 1, 30, rng), _feed(3, 12, 0, rng)]
    ref = OnnxRuntimeRunner(model).infer_all(feeds)
    runner = TensorRTRunner(res.engine_path, model=model, client=trt_worker)
    got = runner.infer_all(feeds)
    print("[serving] profiles used:", runner.last.get("profiles_used"))
    assert runner.last["profiles_used"] == [0, 1, 1, 0]
    assert runner.last["n_profiles"] == 2
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g["present.0.key"], r["present.0.key"], rtol=1e-5, atol=1e-6)
    cache_max = int(pair[1]["past_key_values.0.key"][2][2])
    with pytest.raises(WorkerError) as e:
        runner.infer_all([_feed(1, 1, cache_max + 5, rng)])
    msg = str(e.value)
    print("[serving] outside:", msg)
    assert "input 'past_key_values.0.key'" in msg and "outside every optimization profile" in msg
    # each profile's reason is its first input out of range (profile 1: the mask, past + 1)
    assert "profile 0: 'past_key_values.0.key' axis 2 is " f"{cache_max + 5}, its range 0..0" \
        in msg
    assert f"profile 1: 'attention_mask' axis 1 is {cache_max + 6}, its range " \
        f"2..{cache_max + 1}" in msg
    # a fixed profile index keeps to it: a step on the prefill profile is refused, named so
    with pytest.raises(WorkerError) as e:
        TensorRTRunner(res.engine_path, model=model, client=trt_worker,
                       profile_index=0).infer_all([feeds[1]])
    assert "outside optimization profile 0 of the engine" in str(e.value)


def test_timing_a_decode_step_runs_on_the_decode_profile(trt_worker, decoder_engine,
                                                         tmp_path):
    """`timing-capture --shapes` of a step: it ran on profile 0 (prefill), whose empty cache
    refuses the step; it now times the profile that holds the shapes."""
    import json

    from workbench.measure.capture import capture

    _, _, _, res = decoder_engine
    step = {"input_ids": [1, 1], "attention_mask": [1, 33], "past_key_values.0.key": [1, 2, 32, 4]}
    cap = capture(res.engine_path, shapes=step, iterations=20, warmup=5, layer_iterations=5,
                  out_dir=str(tmp_path / "t"), client=trt_worker)
    record = json.loads((tmp_path / "t" / "profile.json").read_text())
    print("[serving] timed a step on profile", record["profile_index"], cap.latency)
    assert record["profile_index"] == 1 and record["shapes"]["past_key_values.0.key"] == [1, 2, 32, 4]
