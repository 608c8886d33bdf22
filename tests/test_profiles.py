"""Shape profiles: parsing, validation errors naming profile/input/axis, and the advisor."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import SAMPLES
from workbench.precision.calibration import load_calibration
from workbench.core.errors import WorkbenchError
from workbench.precision.profiles import (Profile, advise, check_samples, parse_profile_arg,
                                parse_profiles, shape_tensor_inputs, validate_profiles)

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
BERT_CAL = SAMPLES / "calib" / "bert_tiny.npz"


def _err(fn, *args) -> str:
    with pytest.raises(WorkbenchError) as e:
        fn(*args)
    return str(e.value)


def test_parse_forms():
    p = parse_profile_arg("input_ids:1x16:4x64:8x128")
    assert p == {"input_ids": ((1, 16), (4, 64), (8, 128))}
    assert parse_profile_arg("x:2x3") == {"x": ((2, 3), (2, 3), (2, 3))}
    two = parse_profile_arg("a:1x8:2x8:4x8, b:1:2:3")
    assert two["b"] == ((1,), (2,), (3,))
    tf = parse_profile_arg("input:0:1x3:2x3:4x3")  # TF-style name with a colon
    assert list(tf) == ["input:0"]
    assert p.arg_strings() == ["input_ids:1x16:4x64:8x128"]
    assert p.trtexec()["maxShapes"] == "input_ids:8x128"
    assert Profile.from_dict(p.to_dict()) == p
    profs = parse_profiles(["input:1x3x32x32:4x3x32x32:8x3x32x32",
                            "+input:9x3x32x32:16x3x32x32:32x3x32x32"])
    assert len(profs) == 2 and profs[1]["input"][0] == (9, 3, 32, 32)
    for bad in ("input_ids", "input_ids:1x16:4x64", "input_ids:1x16:abc:8x128", ":1:2:3"):
        msg = _err(parse_profile_arg, bad)
        assert "MIN:OPT:MAX" in msg
    assert "twice" in _err(parse_profile_arg, "a:1:1:1,a:2:2:2")


def test_valid_profiles_pass():
    ok = validate_profiles(BERT, [parse_profile_arg(
        "input_ids:1x16:4x64:8x128,attention_mask:1x16:4x64:8x128")])
    assert ok[0]["attention_mask"][2] == (8, 128)
    several = validate_profiles(RESNET, parse_profiles(
        ["input:1x3x32x32:2x3x32x32:4x3x32x32", "+input:8x3x32x32:16x3x32x32:32x3x32x32"]))
    assert len(several) == 2
    assert validate_profiles(RESNET, {"input": [[1, 3, 32, 32]] * 3})[0]["input"][0] == (1, 3, 32, 32)


@pytest.mark.parametrize("arg,needles", [
    ("input:4x3x32x32:2x3x32x32:8x3x32x32", ["profile #1", "'input' axis 0", "4 <= 2 <= 8"]),
    ("input:1x3x32x32:2x3x64x32:8x3x32x32", ["'input' axis 2", "32 <= 64 <= 32"]),
    ("input:1x3x16x16:2x3x16x16:8x3x16x16", ["'input' axis 2 is fixed to 32", "16..16..16"]),
    ("input:1x3x32:2x3x32:8x3x32", ["rank 4", "rank 3"]),
    ("image:1x3x32x32:2x3x32x32:8x3x32x32", ["unknown input 'image'", "input"]),
])
def test_invalid_resnet_profiles(arg, needles):
    msg = _err(validate_profiles, RESNET, [parse_profile_arg(arg)])
    for n in needles:
        assert n in msg, (n, msg)


def test_bert_shared_dims_and_coverage():
    msg = _err(validate_profiles, BERT, [parse_profile_arg(
        "input_ids:1x16:4x64:8x128,attention_mask:1x16:4x32:8x128")])
    assert "dimension 'seq'" in msg and "attention_mask" in msg and "input_ids" in msg
    msg = _err(validate_profiles, BERT, [parse_profile_arg("input_ids:1x16:4x64:8x128")])
    assert "'attention_mask'" in msg and "no shape" in msg
    msg = _err(validate_profiles, BERT, [])
    assert "no profile" in msg
    good = "input_ids:1x16:4x64:8x128,attention_mask:1x16:4x64:8x128"
    msg = _err(validate_profiles, BERT, [parse_profile_arg(good),
                                         parse_profile_arg("input_ids:1x1:1x1:1x1")])
    assert msg.startswith("field 'attention_mask': profile #2")


def _shape_tensor_model():
    """x [N, 6] reshaped by an int64 shape-tensor input `shape` [2] (a TensorRT shape tensor)."""
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_tensor_inputs_take_values():
    m = _shape_tensor_model()
    assert shape_tensor_inputs(m) == ["shape"]
    ok = validate_profiles(m, [parse_profile_arg("x:1x6:2x6:4x6,shape:1x6:2x6:4x6")])
    assert ok[0]["shape"] == ((1, 6), (2, 6), (4, 6))
    msg = _err(validate_profiles, m, [parse_profile_arg("x:1x6:2x6:4x6,shape:1x6:4x3:8x3")])
    assert "'shape' value 1" in msg and "6 <= 3 <= 3" in msg
    msg = _err(validate_profiles, m, [parse_profile_arg("x:1x6:2x6:4x6,shape:1x6x1:2x6x1:4x6x1")])
    assert "shape-tensor input 'shape'" in msg and "VALUES" in msg
    msg = _err(validate_profiles, m, [parse_profile_arg("x:1x6:2x6:4x6")])
    assert "'shape'" in msg


def test_advisor_on_bert_calibration_uses_real_lengths_and_shares_dims():
    samples = load_calibration(BERT_CAL, BERT)
    profs, findings = advise(BERT, samples)
    p = profs[0]
    assert p["input_ids"] == p["attention_mask"]
    (mn, op, mx) = p["input_ids"]
    mask = samples[0]["attention_mask"]
    lengths = mask.sum(1)
    assert mn == (1, int(lengths.min())) and mx == (16, 32)
    assert op[1] % 8 == 0 and op[1] >= np.percentile(lengths, 75)
    # one stacked file of 64 samples: its length is no serving batch size (it was made the
    # batch's opt and max); the batch axis gets build's default range, and says so
    assert op[0] == 1 and mask.shape[0] == 64
    assert any(f.code == "batch-from-default" and "64 stacked samples" in f.message
               for f in findings)
    validate_profiles(BERT, profs)  # the proposal is itself valid
    pad = next(f for f in findings if f.code == "padded-lengths")
    assert pad.extra["max"] == int(lengths.max())
    assert any(f.code == "profile-proposal" for f in findings)


def test_advisor_distribution_rounding_and_wide_range_warning():
    rng = np.random.default_rng(0)
    samples = []
    for L in list(rng.integers(20, 40, 30)) + [1, 200]:
        samples.append({"input_ids": np.ones((1, L), np.int64) * 5,
                        "attention_mask": np.ones((1, L), np.int64)})
    profs, findings = advise(BERT, samples)
    (mn, op, mx) = profs[0]["input_ids"]
    assert (mn[1], mx[1]) == (1, 200) and op[1] % 8 == 0 and 24 <= op[1] <= 40
    assert any(f.code == "wide-profile" and "seq" in f.message for f in findings)


def test_advisor_checks_user_profiles_against_data():
    samples = load_calibration(BERT_CAL, BERT)
    user = [parse_profile_arg("input_ids:1x4:2x8:64x16,attention_mask:1x4:2x8:64x16")]
    _, findings = advise(BERT, samples, profiles=user)
    out = [f for f in findings if f.code == "sample-outside-profile"]
    assert out and "1..16" not in out[0].message and "4..16" in out[0].message
    wide = parse_profile_arg("input:1x3x32x32:64x3x32x32:128x3x32x32")
    f2 = check_samples([wide], [{"input": np.zeros((2, 3, 32, 32), np.float32)}] * 5)
    far = next(f for f in f2 if f.code == "opt-far-from-data")
    assert "opt=64 but the calibration batches all have it at 2" in far.message
    mixed = [{"input": np.zeros((b, 3, 32, 32), np.float32)} for b in (2, 4, 4, 8, 16)]
    far = next(f for f in check_samples([wide], mixed) if f.code == "opt-far-from-data")
    assert "80% of the calibration batches have it in " in far.message


def test_advisor_static_model_needs_no_profile():
    m = _shape_tensor_model()
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    static = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    profs, findings = advise(static, [{"x": np.zeros((1, 4), np.float32)}])
    assert profs == [] and findings[0].code == "static-model"
    assert m is not None


def test_profiles_cli(capsys):
    import json

    from workbench.cli import main

    rc = main(["profiles", str(BERT), "--calib", str(BERT_CAL), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["proposed"][0]["input_ids"] == doc["proposed"][0]["attention_mask"]
    assert any(f["code"] == "padded-lengths" for f in doc["findings"])
    rc = main(["profiles", str(BERT), "--profile", "input_ids:1x4:2x8:8x16",
               "--profile", "attention_mask:1x4:2x8:8x16", "--calib", str(BERT_CAL), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and any(f["code"] == "sample-outside-profile" for f in doc["findings"])
    assert doc["trtexec"][0]["minShapes"] == "input_ids:1x4,attention_mask:1x4"
    rc = main(["profiles", str(BERT), "--profile", "input_ids:1x4:2x8:8x16"])
    err = capsys.readouterr().err
    assert rc == 2 and "attention_mask" in err and "Traceback" not in err
    rc = main(["profiles", str(RESNET), "--profile", "input:1x3x32x32:8x3x32x32:256x3x32x32"])
    out = capsys.readouterr().out
    assert rc == 0 and "profile #1 valid" in out and "wide-profile" in out


def test_a_shape_tensor_input_without_values_is_said_in_good_grammar():
    """One input 'needs', several 'need' (it read "input 'shape' need a profile")."""
    from workbench.precision.profiles import default_profile

    one = _err(default_profile, _shape_tensor_model())
    assert "shape-tensor input 'shape' needs a profile of VALUES" in one
    m = _shape_tensor_model()
    m.graph.node[0].output[0] = "r"
    m.graph.node.append(helper.make_node("Reshape", ["r", "shape2"], ["y"], name="reshape2"))
    m.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    two = _err(default_profile, m)
    assert "shape-tensor inputs 'shape', 'shape2' need a profile of VALUES" in two


def test_a_file_of_more_samples_than_the_profiles_batch_calibrates_in_batches():
    """A .npz of 32 samples against a batch-16 profile failed with 'axis 0 is 32, outside the
    profile range 1..16' while the few-samples advice asked for hundreds: the file's first
    axis is the sample, so it is split into batches the profile takes."""
    prof = parse_profile_arg("input:1x3x32x32:8x3x32x32:16x3x32x32")
    cal = SAMPLES / "calib" / "resnet_tiny.npz"
    batches = load_calibration(cal, SAMPLES / "resnet_tiny.onnx", profile=prof)
    assert [b["input"].shape[0] for b in batches] == [16, 16]
    whole = np.load(cal)["input"]
    assert np.array_equal(np.concatenate([b["input"] for b in batches]), whole)
    assert len(load_calibration(cal, SAMPLES / "resnet_tiny.onnx")) == 1  # no profile: as is


def test_padded_lengths_advice_names_a_range_only_when_it_differs():
    """'use t opt=12, max=12' beside a proposal of opt 12, max 12 told the user to change
    nothing; the hint then only says to feed unpadded batches."""
    mask = np.zeros((4, 12), np.int64)
    for i, n in enumerate((9, 9, 10, 12)):
        mask[i, :n] = 1
    samples = [{"input_ids": np.ones((4, 12), np.int64), "attention_mask": mask}]
    profs, findings = advise(BERT, samples)
    pad = next(f for f in findings if f.code == "padded-lengths")
    mn, op, mx = profs[0]["input_ids"]
    said = f"opt={op[1]}, max={mx[1]}"
    assert said not in pad.hint and "already spans the real lengths" in pad.hint


# --------------------------------------------------------------------------- stacked data,
# KV caches, fixed axes, hints that parse
def _audio_model():
    """wav [batch, 1, samples] -> Relu: a dynamic batch and a dynamic audio length."""
    g = helper.make_graph([helper.make_node("Relu", ["wav"], ["y"], name="r")], "g",
                          [helper.make_tensor_value_info("wav", TensorProto.FLOAT,
                                                         ["batch", 1, "samples"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         ["batch", 1, "samples"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _kv_model():
    """A decoder step: input_ids [batch, seq] embedded to [batch, 2, seq, 4] and concatenated
    after the cache past_key_values.0.key [batch, 2, past_len, 4] (axis 2) -> present."""
    emb = helper.make_tensor("emb", TensorProto.FLOAT, [10, 8],
                             np.arange(80, dtype=np.float32).tolist())
    shape = helper.make_tensor("shp", TensorProto.INT64, [4], [0, 0, 2, 4])
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"], name="gather"),
             helper.make_node("Reshape", ["e", "shp"], ["r"], name="reshape"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="tr"),
             helper.make_node("Concat", ["past_key_values.0.key", "t"], ["present.0.key"],
                              axis=2, name="concat")]
    g = helper.make_graph(nodes, "kv", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                      ["batch", 2, "past_len", 4])],
        [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT,
                                       ["batch", 2, "total_len", 4])], [emb, shape])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _errors(findings):
    return [f for f in findings if f.code == "sample-outside-profile"]


def test_a_stacked_file_is_judged_as_calibration_splits_it(tmp_path):
    """A .npz of 32 stacked samples against batch 1..4 (build splits it into batches of 4)
    was 'ERROR sample-outside-profile: axis 0 outside 1..4 (seen 32..32)'; the advisor's own
    proposal (batch 1..16) failed so too."""
    from workbench.precision.calibration import load_calibration as load

    m = _audio_model()
    path = tmp_path / "audio.npz"
    np.savez(path, wav=np.zeros((32, 1, 16000), np.float32))
    samples = load(path, m)
    assert len(samples) == 1 and samples[0]["wav"].shape[0] == 32
    cases = {"wav:1x1x4000:1x1x16000:4x1x64000": 0,  # split into 8 batches of 4
             "wav:1x1x16000:1x1x16000:16x1x16000": 0,  # the advisor's proposal
             "wav:1x1x4000:1x1x8000:4x1x8000": 1,  # samples 16000 beyond max 8000
             "wav:64x1x16000:64x1x16000:128x1x16000": 1}  # 32 samples, fewer than min 64
    for arg, n_err in cases.items():
        prof = parse_profile_arg(arg)
        found = check_samples([prof], samples)
        assert len(_errors(found)) == n_err, (arg, [str(f) for f in found])
        assert not [f for f in found if f.code == "opt-far-from-data" and "axis 0" in f.message]
        try:  # the verdict is the one calibration reaches on the same file and profile
            load(path, m, profile=prof)
            calibrates = True
        except WorkbenchError:
            calibrates = False
        assert calibrates == (n_err == 0), arg
    real = _errors(check_samples([parse_profile_arg(
        "wav:1x1x4000:1x1x8000:4x1x8000")], samples))[0].message
    assert "input 'wav' axis 2 outside 4000..8000 (seen 16000..16000)" in real
    few = _errors(check_samples([parse_profile_arg(
        "wav:64x1x16000:64x1x16000:128x1x16000")], samples))[0].message
    assert "32 stacked sample(s) of input 'wav'" in few and "batch min 64" in few
    # through the advisor and the CLI: the user's profile with the stacked file passes
    _, findings = advise(m, samples, profiles=[parse_profile_arg(
        "wav:1x1x4000:1x1x16000:4x1x64000")])
    assert not _errors(findings)


def test_a_folder_of_batches_is_judged_as_calibration_splits_it(tmp_path):
    """Files of one batch each: a file of more samples than the profile's batch max is split
    into batches of it by calibration, as one stacked file is, so it is not outside (it was
    'axis 0 outside 1..4 (seen 8..8)' while the build calibrated); a file of fewer samples
    than the batch min is outside, and the verdict is calibration's on the same folder."""
    from workbench.precision.calibration import load_calibration as load

    m = _audio_model()
    folder = tmp_path / "calib"
    folder.mkdir()
    for k in range(3):
        np.savez(folder / f"b{k}.npz", wav=np.zeros((8, 1, 16000), np.float32))
    samples = load(folder, m)
    assert len(samples) == 3
    for arg, n_err in {"wav:1x1x16000:2x1x16000:4x1x16000": 0,  # each file split in two
                       "wav:1x1x16000:8x1x16000:8x1x16000": 0,
                       "wav:16x1x16000:16x1x16000:32x1x16000": 1}.items():  # 8 < min 16
        prof = parse_profile_arg(arg)
        found = _errors(check_samples([prof], samples))
        assert len(found) == n_err, (arg, [str(f) for f in found])
        try:
            load(folder, m, profile=prof)
            calibrates = True
        except WorkbenchError:
            calibrates = False
        assert calibrates == (n_err == 0), arg
    low = _errors(check_samples([parse_profile_arg("wav:16x1x16000:16x1x16000:32x1x16000")],
                                samples))[0].message
    assert "3 sample(s) have input 'wav' axis 0 outside 16..32 (seen 8..8)" in low


def test_a_kv_cache_min_of_zero_is_valid_and_runs_empty():
    """`axis 2 min 0 must be >= 1` refused a KV cache's empty first step; TensorRT-RTX 1.7
    builds min 0 and opt 0 (checked on kv_decoder_op17.onnx with --target sm89)."""
    from workbench.runtime.equivalence import make_inputs_at
    from workbench.precision.profiles import run_at_profiles

    m = _kv_model()
    for opt in (0, 3):
        arg = (f"input_ids:1x1:1x1:4x1,past_key_values.0.key:1x2x0x4:1x2x{opt}x4:4x2x16x4")
        [prof] = validate_profiles(m, [parse_profile_arg(arg)])
        assert prof["past_key_values.0.key"][0] == (1, 2, 0, 4)
        cannot, runs = run_at_profiles(m, [prof])
        assert cannot == [] and runs == (2 if opt == 0 else 3)
    feed = make_inputs_at(m, {"input_ids": (1, 1), "past_key_values.0.key": (1, 2, 0, 4)})
    assert feed["past_key_values.0.key"].shape == (1, 2, 0, 4)  # empty, not a stand-in size
    neg = Profile.from_dict({"input_ids": [[1, 1]] * 3,
                             "past_key_values.0.key": [[1, 2, -1, 4], [1, 2, 1, 4],
                                                       [1, 2, 4, 4]]})
    assert "axis 2 min -1 must be >= 0" in _err(validate_profiles, m, [neg])


def test_the_build_worker_takes_a_profile_min_of_zero():
    from workbench.worker.loaders import OpError
    from workbench.worker.loaders.profiles import _set_one

    class P:
        def set_shape(self, name, mn, opt, mx):
            self.got = (name, mn, opt, mx)

    class Inp:
        shape = (-1, 2, -1, 4)

    p = P()
    _set_one(p, 0, "past", [[1, 2, 0, 4], [1, 2, 0, 4], [4, 2, 16, 4]], {"past": Inp()})
    assert p.got == ("past", (1, 2, 0, 4), (1, 2, 0, 4), (4, 2, 16, 4))
    with pytest.raises(OpError) as e:
        _set_one(p, 0, "past", [[1, 2, -1, 4], [1, 2, 0, 4], [4, 2, 16, 4]], {"past": Inp()})
    assert "0 <= min <= opt <= max on dim 2" in str(e.value)


def test_a_kv_cache_axis_defaults_from_an_empty_cache_not_the_trace_value():
    """The proposal pinned past_len at 7 (the export's trace value: every calibration sample
    has it) and the default guessed an image size; decode starts from an empty cache."""
    from workbench.precision.profiles import default_profile, is_cache_axis

    m = _kv_model()
    samples = [{"input_ids": np.zeros((32, 1), np.int64),
                "past_key_values.0.key": np.zeros((32, 2, 7, 4), np.float32)}]
    [prof], findings = advise(m, samples)
    mn, op, mx = prof["past_key_values.0.key"]
    assert (mn[2], op[2], mx[2]) == (0, 64, 128)
    validate_profiles(m, [prof])
    assert not [f for f in findings if f.code == "fixed-axis" and "past" in f.message]
    dflt, rules = default_profile(m)
    assert [r[2] for r in dflt["past_key_values.0.key"]] == [0, 64, 128]
    assert "past/cache length" in rules["past_len"]
    # several lengths in the data: their range, still from an empty cache
    folder = [{"input_ids": np.zeros((2, 1), np.int64),
               "past_key_values.0.key": np.zeros((2, 2, n, 4), np.float32)} for n in (5, 9, 30)]
    [prof], _ = advise(m, folder)
    assert [r[2] for r in prof["past_key_values.0.key"]] == [0, 16, 30]
    from workbench.core.inputs import model_inputs

    specs = {s.name: s for s in model_inputs(m)}
    assert is_cache_axis(specs["past_key_values.0.key"], 2)
    assert not is_cache_axis(specs["past_key_values.0.key"], 0)
    assert not is_cache_axis(specs["input_ids"], 1)


def test_a_pinned_dynamic_axis_is_warned_with_a_flag_that_widens_it():
    """Audio 'samples' fixed at 16000 and image H/W fixed at 96x128 with no word said."""
    from workbench.precision.profiles import default_profile, fixed_axis_findings

    m = _audio_model()
    [prof], findings = advise(m, [{"wav": np.zeros((32, 1, 16000), np.float32)}])
    fixed = [f for f in findings if f.code == "fixed-axis"]
    assert len(fixed) == 1 and fixed[0].severity == "warning"
    msg = fixed[0].message
    assert "input 'wav' axis 2 (samples)" in msg and "fixes it at 16000" in msg
    flag = fixed[0].hint.split("e.g. ", 1)[1]
    [wide] = validate_profiles(m, parse_profiles([flag.split(" ", 1)[1]]))
    assert wide["wav"] == ((1, 1, 8000), (1, 1, 16000), (16, 1, 32000))
    dflt, _ = default_profile(m)
    said = fixed_axis_findings(m, dflt, "the default profile")
    assert [f.extra["axis"] for f in said] == [2] and said[0].extra["value"] == 16000
    # the batch axis is not 'fixed' (it is a range); several sizes in a folder drive a range
    folder = [{"wav": np.zeros((2, 1, n), np.float32)} for n in (8000, 16000, 48000)]
    [prof], findings = advise(m, folder)
    assert [r[2] for r in prof["wav"]] == [8000, 16000, 48000]
    assert not [f for f in findings if f.code == "fixed-axis"]


def _flags(findings):
    import re

    out = []
    for f in findings:
        for text in (f.message, f.hint or ""):
            out += re.findall(r"--profile (\S+)", text)
    return out


def test_every_profile_the_advisor_suggests_parses_and_validates():
    """`--profile NAME:1:2:2` was suggested for an image input of rank 4 ('its min shape [1]
    has rank 1'); each flag in a message or hint is now full rank and valid."""
    seg = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["image"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])]),
        opset_imports=[helper.make_opsetid("", 17)])
    multires = [{"image": np.zeros((2, 3, h, w), np.float32)}
                for h, w in ((96, 128), (128, 128), (64, 96))]
    stacked = [{"image": np.zeros((16, 3, 96, 128), np.float32)}]
    kv = [{"input_ids": np.zeros((32, 1), np.int64),
           "past_key_values.0.key": np.zeros((32, 2, 7, 4), np.float32)}]
    bert = load_calibration(BERT_CAL, BERT)
    seen = 0
    for model, samples in ((seg, multires), (seg, stacked), (_kv_model(), kv),
                           (_audio_model(), [{"wav": np.zeros((4, 1, 16000), np.float32)}]),
                           (BERT, bert)):
        _, findings = advise(model, samples)
        flags = _flags(findings)
        assert flags, [str(f) for f in findings]
        for flag in flags:
            assert "NAME" not in flag and "MIN" not in flag
            validate_profiles(model, parse_profiles(flag.split(" --profile ")))
            seen += 1
    assert seen >= 6


def _kv_positions_model(rows: int = 64):
    """A decoder step with a position table (`pos.weight`, `rows` positions): the new tokens
    sit at positions past_len .. past_len + seq - 1, so past + seq must stay within it."""
    rng = np.random.default_rng(0)
    i64 = lambda n, v: helper.make_tensor(n, TensorProto.INT64, [], [v])  # noqa: E731
    inits = [helper.make_tensor("emb", TensorProto.FLOAT, [10, 8],
                                rng.standard_normal(80).astype(np.float32).tolist()),
             helper.make_tensor("pos.weight", TensorProto.FLOAT, [rows, 8],
                                rng.standard_normal(rows * 8).astype(np.float32).tolist()),
             helper.make_tensor("shp", TensorProto.INT64, [4], [0, 0, 2, 4]),
             i64("two", 2), i64("one", 1)]
    nodes = [helper.make_node("Shape", ["past_key_values.0.key"], ["ps"], name="ps"),
             helper.make_node("Gather", ["ps", "two"], ["past_len"], axis=0, name="pl"),
             helper.make_node("Shape", ["input_ids"], ["is"], name="is"),
             helper.make_node("Gather", ["is", "one"], ["seq"], axis=0, name="sl"),
             helper.make_node("Add", ["past_len", "seq"], ["lim"], name="lim"),
             helper.make_node("Range", ["past_len", "lim", "one"], ["positions"], name="range"),
             helper.make_node("Gather", ["pos.weight", "positions"], ["pe"], name="/pos/Gather"),
             helper.make_node("Gather", ["emb", "input_ids"], ["e"], name="gather"),
             helper.make_node("Add", ["e", "pe"], ["x"], name="add"),
             helper.make_node("Reshape", ["x", "shp"], ["r"], name="reshape"),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="tr"),
             helper.make_node("Concat", ["past_key_values.0.key", "t"], ["present.0.key"],
                              axis=2, name="concat")]
    g = helper.make_graph(nodes, "kvpos", [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT,
                                      ["batch", 2, "past_len", 4])],
        [helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_kv_cache_and_its_tokens_share_the_position_table_in_the_default_profile():
    """The default gave the tokens 1..128..256 and the cache 0..128..256 beside a table of 256
    positions: at max the model read position 511 ('idx=256 must be within [-256,255]'), so
    the profile `inspect` printed could not run. Each gets half the table at most."""
    from workbench.precision.profiles import default_profile, run_at_profiles

    m = _kv_positions_model(64)
    prof, rules = default_profile(m)
    tok, cache = prof["input_ids"][2][1], prof["past_key_values.0.key"][2][2]
    assert tok + cache <= 64 and (tok, cache) == (32, 32)
    assert prof["past_key_values.0.key"][0][2] == 0  # from an empty cache
    assert "position table less the cache's max" in rules["seq"]
    errors, runs = run_at_profiles(m, [prof])
    assert runs > 0 and not errors, [f.message for f in errors]


# --------------------------------------------------------------------------- mask polarity
def _padded_attention(mask_name: str, mask_type: int, one_is_pad: bool):
    """src int64 [batch, src_len] and a mask [batch, src_len] -> softmax over the positions of
    the summed embeddings, -1e9 where the mask marks padding (True/1 = pad when
    `one_is_pad`, as PyTorch's key_padding_mask; else 1 = token): the positions with weight
    are the real tokens, so onnxruntime says the real lengths."""
    from onnx import numpy_helper

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((32, 4))
                                    .astype(np.float32), "table")
    big = numpy_helper.from_array(np.array(-1e9, np.float32), "big")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [helper.make_node("Gather", ["table", "src"], ["emb"]),
             helper.make_node("ReduceSum", ["emb", "ax"], ["score"], keepdims=0)]
    cond = mask_name
    if mask_type != TensorProto.BOOL:
        nodes.append(helper.make_node("Cast", [mask_name], ["cond"], to=TensorProto.BOOL))
        cond = "cond"
    nodes += [helper.make_node("Where", [cond] + (["big", "zero"] if one_is_pad else
                                                  ["zero", "big"]), ["bias"]),
              helper.make_node("Add", ["score", "bias"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["weights"], axis=1)]
    g = helper.make_graph(
        nodes, "pad",
        [helper.make_tensor_value_info("src", TensorProto.INT64, ["batch", "src_len"]),
         helper.make_tensor_value_info(mask_name, mask_type, ["batch", "src_len"])],
        [helper.make_tensor_value_info("weights", TensorProto.FLOAT, ["batch", "src_len"])],
        [table, big, zero, numpy_helper.from_array(np.array([2], np.int64), "ax")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _right_padded(lengths, width, one_is_pad, dtype):
    pad = np.arange(width)[None, :] >= np.array(lengths)[:, None]
    return (pad if one_is_pad else ~pad).astype(dtype)


def _ort_real_lengths(model, feed):
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return (s.run(None, feed)[0] > 1e-6).sum(axis=1)


@pytest.mark.parametrize("mask_name,mask_type,one_is_pad,how", [
    ("src_pad_mask", TensorProto.BOOL, True, "True/1 = pad, from its name"),
    ("src_key_padding_mask", TensorProto.BOOL, True, "True/1 = pad, from its name"),
    ("src_mask", TensorProto.INT64, True, "True/1 = pad, from the data"),
    ("src_mask", TensorProto.INT64, False, "True/1 = token, from the data"),
    ("attention_mask", TensorProto.INT64, False, "True/1 = token, from its name")])
def test_real_lengths_follow_the_mask_polarity(mask_name, mask_type, one_is_pad, how):
    """src_pad_mask (True = PAD) read as 1 = token gave real lengths 2..4 for rows of 12 and 16
    tokens and proposed src_len opt=4, max=4: an engine too short for the data."""
    model = _padded_attention(mask_name, mask_type, one_is_pad)
    lengths = [12, 16, 12, 16, 12, 16, 14, 16]
    dtype = bool if mask_type == TensorProto.BOOL else np.int64
    feed = {"src": np.random.default_rng(1).integers(0, 32, (8, 16)).astype(np.int64),
            mask_name: _right_padded(lengths, 16, one_is_pad, dtype)}
    real = _ort_real_lengths(model, feed)
    assert real.tolist() == lengths  # what the model itself attends to
    [prof], findings = advise(model, [feed])
    pad = next(f for f in findings if f.code == "padded-lengths")
    assert pad.extra["max"] == real.max() and pad.extra["p50"] == np.median(real)
    assert pad.extra["pad_is_one"] is one_is_pad and how in pad.message
    mn, op, mx = prof["src"]
    assert mn[1] == real.min() and op[1] >= np.percentile(real, 75) and mx[1] >= real.max()
    assert "opt=4" not in pad.hint and "max=4" not in pad.hint


def test_a_mask_whose_data_says_nothing_is_read_as_tokens_and_said_so():
    from workbench.precision.profiles import mask_polarity

    assert mask_polarity("m", [np.array([[1, 0, 1, 0]])]) == (
        False, "assumed: neither its name nor its data says")
    assert mask_polarity("m", [np.zeros((2, 4))])[0] is True  # rows of no token: 1 = pad


def test_random_calibration_marks_every_position_a_token():
    from workbench.precision.calibration import random_calibration

    model = _padded_attention("src_pad_mask", TensorProto.BOOL, True)
    batches, warn = random_calibration(model, 1)
    assert warn.code == "random-calibration" and not batches[0]["src_pad_mask"].any()
    real = _ort_real_lengths(model, batches[0])
    assert (real == batches[0]["src"].shape[1]).all()
