"""A decoder with a KV cache served from two optimization profiles (prefill: the prompt with an
empty cache; decode: one token with a growing cache): the advice (`serving_profiles`, checked on
onnxruntime), the `profiles` verb with no flags, a real TensorRT-RTX build of both profiles,
and the worker's choice of the profile that holds a call's shapes."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper

from conftest import SAMPLES
from workbench.precision.profiles import (default_profile, parse_profiles, run_at_profiles,
                                         serving_finding, serving_profiles, validate_profiles)
from workbench.precision.profiles import serving_flag as serving_flag_of


def _decoder(path=None):
    """input_ids [batch, seq] embedded to [batch, 2, seq, 4], appended to the cache
    past_key_values.0.key [batch, 2, past_len, 4]; the present [batch, 2, total, 4] is scaled by
    attention_mask [batch, total] (total = past + seq: a mask of another length cannot run)."""
    emb = helper.make_tensor("emb", TensorProto.FLOAT, [10, 8],
                             np.linspace(-1, 1, 80, dtype=np.float32).tolist())
    shape = helper.make_tensor("shp", TensorProto.INT64, [4], [0, 0, 2, 4])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 3])
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"], name="/embed/Gather"),
             helper.make_node("Reshape", ["e", "shp"], ["r"], name="/embed/Reshape"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="/embed/T"),
             helper.make_node("Concat", ["past_key_values.0.key", "t"], ["kv"], axis=2,
                              name="/attn/Concat"),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT,
                              name="/attn/Cast"),
             helper.make_node("Unsqueeze", ["mf", "axes"], ["m4"], name="/attn/Unsqueeze"),
             helper.make_node("Mul", ["kv", "m4"], ["present.0.key"], name="/attn/Mul")]
    g = helper.make_graph(nodes, "decoder", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
        helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                      ["batch", 2, "past_len", 4])],
        [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT,
                                       ["batch", 2, "total", 4])], [emb, shape, axes])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if path is not None:
        onnx.save(m, str(path))
    return m


def _axis(prof, name, axis):
    return tuple(int(prof[name][i][axis]) for i in range(3))


def test_a_decoder_gets_prefill_and_decode_profiles_that_run():
    m = _decoder()
    single, _ = default_profile(m)
    prefill, decode = serving_profiles(m, single)
    tok = _axis(single, "input_ids", 1)
    assert tok[2] > 1
    # prefill: the prompt's token range, an empty cache, a mask as long as the prompt
    assert _axis(prefill, "input_ids", 1) == tok
    assert _axis(prefill, "past_key_values.0.key", 2) == (0, 0, 0)
    assert _axis(prefill, "attention_mask", 1) == tok
    # decode: one token, the cache from 1 to the default's max, a mask one longer
    cache = _axis(single, "past_key_values.0.key", 2)
    assert _axis(decode, "input_ids", 1) == (1, 1, 1)
    assert _axis(decode, "past_key_values.0.key", 2) == (1, max(1, cache[1]), cache[2])
    assert _axis(decode, "attention_mask", 1) == tuple(
        v + 1 for v in _axis(decode, "past_key_values.0.key", 2))
    for p in (prefill, decode):  # batch and fixed axes as the single profile has them
        assert _axis(p, "input_ids", 0) == _axis(single, "input_ids", 0)
        assert _axis(p, "past_key_values.0.key", 1) == (2, 2, 2)
    errors, runs = run_at_profiles(m, [prefill, decode])
    assert runs == 6 and not errors, [f.message for f in errors]
    f = serving_finding(m, single, "the default profile")
    assert f is not None and f.code == "serving-profiles"
    flag = f.extra["flag"]
    assert flag.count("--profile ") == 2 and flag.count("--profile +") == 1
    args = [a for a in flag.replace("--profile ", "\0").split("\0") if a.strip()]
    again = validate_profiles(m, parse_profiles([a.strip() for a in args]))
    assert [p.to_dict() for p in again] == [prefill.to_dict(), decode.to_dict()]


def test_decode_step_data_take_the_prompt_range_from_the_default():
    """A proposal from decode-step data fixes the tokens at 1: prefill takes the default's token
    range rather than a one-token prompt."""
    m = _decoder()
    single, _ = default_profile(m)
    steps = single.__class__({k: tuple(tuple(x) for x in v) for k, v in single.items()})
    for name, axis in (("input_ids", 1),):
        trio = [list(x) for x in steps[name]]
        for i in range(3):
            trio[i][axis] = 1
        steps[name] = tuple(tuple(t) for t in trio)
    prefill, decode = serving_profiles(m, steps)
    assert _axis(prefill, "input_ids", 1) == _axis(single, "input_ids", 1)
    assert _axis(decode, "input_ids", 1) == (1, 1, 1)


def test_an_encoder_or_an_image_model_gets_no_serving_profiles():
    from workbench.core.model import open_model

    for path in (SAMPLES / "bert_tiny.onnx", SAMPLES / "resnet_tiny.onnx"):
        m = open_model(path)
        single, _ = default_profile(m)
        assert serving_profiles(m, single) is None
        assert serving_finding(m, single, "the default profile") is None


def test_profiles_verb_with_no_flags_runs_the_default_and_advises_two(tmp_path):
    """`workbench profiles MODEL` was 'nothing to do'; it now runs the profile a build takes by
    default, and for a decoder gives the two-profile flag, which validates as two profiles."""
    path = tmp_path / "decoder.onnx"
    _decoder(path)
    r = subprocess.run(["workbench", "profiles", str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "default (the model ran on onnxruntime at its min, opt and max): input_ids:" in r.stdout
    assert "INFO serving-profiles: a decoder with a KV cache" in r.stdout
    flag = r.stdout.split("-> build with ", 1)[1].splitlines()[0]
    args = flag.replace("--profile ", "\0").split("\0")
    r2 = subprocess.run(["workbench", "profiles", str(path)] +
                        [x for a in args if a.strip() for x in ("--profile", a.strip())],
                        capture_output=True, text=True, timeout=300)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert "profile #1 valid (the model ran on onnxruntime" in r2.stdout
    assert "profile #2 valid (the model ran on onnxruntime" in r2.stdout
    r3 = subprocess.run(["workbench", "inspect", str(path)], capture_output=True, text=True,
                        timeout=300)
    assert f"$ workbench profiles {path}  # a decoder with a KV cache" in r3.stdout
    enc = subprocess.run(["workbench", "profiles", str(SAMPLES / "bert_tiny.onnx")],
                         capture_output=True, text=True, timeout=300)
    assert enc.returncode == 0 and "default (the model ran" in enc.stdout
    assert "serving-profiles" not in enc.stdout


def test_both_profiles_build_with_tensorrt_rtx(tmp_path):
    from workbench.engines.engine import BuildConfig, build_engine
    from workbench.worker.client import WorkerClient

    path = tmp_path / "decoder.onnx"
    m = _decoder(path)
    pair = serving_profiles(m, default_profile(m)[0])
    c = WorkerClient()
    try:
        res = build_engine(path, BuildConfig(profiles=[p.to_dict() for p in pair], target="sm89",
                                             builder_optimization_level=0),
                           client=c, timeout=600)
        plain = build_engine(path, BuildConfig(target="sm89", builder_optimization_level=0),
                             client=c, timeout=600)
    finally:
        c.close()
    from pathlib import Path

    assert Path(res.engine_path).stat().st_size == res.size_bytes > 0
    assert res.config["profiles"] == [p.to_dict() for p in pair]
    assert res.export["trtexec"].count("--minShapes=") == 2
    # with no profile given, the build takes the same two by default and says so
    assert plain.config["profiles"] == [p.to_dict() for p in pair]
    notice = next(f for f in plain.findings if f.code == "default-profile")
    assert "built with two profiles, prefill" in notice.message
    assert serving_flag_of(pair) in notice.hint


def test_the_worker_picks_the_profile_that_holds_the_shapes():
    from workbench.worker.ops_profile import fitting_profile, outside_why

    ranges = [{"ids": ([1, 1], [16, 128]), "past": ([1, 2, 0, 4], [16, 2, 0, 4])},
              {"ids": ([1, 1], [16, 1]), "past": ([1, 2, 1, 4], [16, 2, 127, 4])}]
    assert fitting_profile(ranges, {"ids": [1, 9], "past": [1, 2, 0, 4]}) == 0
    assert fitting_profile(ranges, {"ids": [4, 1], "past": [4, 2, 9, 4]}) == 1
    assert fitting_profile(ranges, {"ids": [1, 1], "past": [1, 2, 0, 4]}) == 0  # the first
    far = {"ids": [1, 1], "past": [1, 2, 200, 4]}
    assert fitting_profile(ranges, far) is None
    name, why = outside_why(ranges, far)
    assert name == "past"
    assert why == ("profile 0: 'past' axis 2 is 200, its range 0..0; "
                   "profile 1: 'past' axis 2 is 200, its range 1..127")
    assert outside_why(ranges[:1], {"ids": [1, 300], "past": [1, 2, 0, 4]}) == (
        "ids", "'ids' axis 1 is 300, its range 1..128")
    assert outside_why(ranges[:1], {"ids": [1, 2, 3], "past": [1, 2, 0, 4]})[1] == \
        "'ids' has rank 3, the profile 2"


def test_int8_calibration_of_a_two_profile_build_takes_the_profile_that_holds_the_data(tmp_path):
    """Calibration checked its data against the first profile only: decode-step data for a
    prefill + decode build was 'outside the profile range 0..0'. It must fit one of them; data
    that fits none names the first profile's reason and says there are several."""
    from workbench.core.errors import WorkbenchError
    from workbench.precision.calibration import load_calibration

    m = _decoder()
    prefill, decode = serving_profiles(m, default_profile(m)[0])
    rng = np.random.default_rng(0)
    steps = tmp_path / "steps.npz"
    np.savez(steps, input_ids=rng.integers(0, 10, (4, 1)),
             attention_mask=np.ones((4, 9), np.int64),
             **{"past_key_values.0.key": rng.standard_normal((4, 2, 8, 4)).astype(np.float32)})
    with pytest.raises(WorkbenchError) as e:
        load_calibration(steps, m, profile=prefill)
    assert "outside the profile range 0..0" in str(e.value)
    batches = load_calibration(steps, m, profile=[prefill, decode])
    assert len(batches) == 1 and batches[0]["past_key_values.0.key"].shape == (4, 2, 8, 4)
    far = tmp_path / "far.npz"
    big = int(decode["past_key_values.0.key"][2][2]) + 4
    np.savez(far, input_ids=rng.integers(0, 10, (1, 1)),
             attention_mask=np.ones((1, big + 1), np.int64),
             **{"past_key_values.0.key": np.zeros((1, 2, big, 4), np.float32)})
    with pytest.raises(WorkbenchError) as e:
        load_calibration(far, m, profile=[prefill, decode])
    assert "outside the profile range 0..0 of the first of the engine's 2 profiles" in str(e.value)
    assert "fits none of the 2 profiles" in str(e.value)
