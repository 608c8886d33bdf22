"""Default profiles: `build` without --profile on dynamic inputs builds (real TensorRT-RTX, sm89
ahead of time) with a printed default and the flag that sets it; --strict-profiles refuses,
naming every dynamic input at once. Python API, CLI and BuildPanel alike."""
from __future__ import annotations

import json
import subprocess

import pytest

from conftest import SAMPLES
from workbench.engines.engine import BuildConfig, BuildFailed, build_engine
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient

RESNET = SAMPLES / "resnet_tiny.onnx"  # input [batch, 3, 32, 32]
BERT = SAMPLES / "bert_tiny.onnx"  # input_ids, attention_mask [batch, seq]; 64 positions
RESNET_DEFAULT = {"input": [[1, 3, 32, 32], [1, 3, 32, 32], [16, 3, 32, 32]]}
RESNET_FLAG = "--profile input:1x3x32x32:1x3x32x32:16x3x32x32"


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def cfg(**kw) -> BuildConfig:
    return BuildConfig(target="sm89", builder_optimization_level=0, **kw)


def _default_finding(findings):
    found = [f for f in findings if f.code == "default-profile"]
    assert len(found) == 1, [f.code for f in findings]
    return found[0]


def test_build_without_profile_uses_and_reports_a_default(client):
    events = []
    res = build_engine(RESNET, cfg(precision="fp16"), client=client, on_event=events.append)
    assert res.config["profiles"] == [RESNET_DEFAULT]
    f = _default_finding(res.findings)
    assert f.extra["flag"] == RESNET_FLAG and RESNET_FLAG in f.hint
    assert "'input'" in f.message and "1..1..16" in f.message and "\n" not in f.message
    # the engine really has that range: the exported commands carry it
    assert "input:16x3x32x32" in res.export["trtexec"]
    assert "input:1x3x32x32" in res.export["trtexec"]
    # the notice comes first, before TensorRT starts
    kinds = [e.get("event") if e.get("event") != "progress" else e.get("phase") for e in events]
    assert "notice" in kinds and kinds.index("notice") < kinds.index("building")
    again = build_engine(RESNET, cfg(precision="fp16"), client=client)
    assert again.cache_hit and _default_finding(again.findings).extra["flag"] == RESNET_FLAG


def test_bert_defaults_share_dims_and_read_the_position_table(client):
    res = build_engine(BERT, cfg(), client=client)
    want = [[1, 1], [1, 64], [16, 64]]  # sequence max = the model's 64 positions (opt capped)
    assert res.config["profiles"] == [{"input_ids": want, "attention_mask": want}]
    f = _default_finding(res.findings)
    assert f.extra["rules"]["seq"].startswith("1..64..64") and "position table" in \
        f.extra["rules"]["seq"]


def test_an_explicit_profile_gets_no_default(client):
    p = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}]
    res = build_engine(RESNET, cfg(profiles=p), client=client)
    assert not [f for f in res.findings if f.code == "default-profile"]
    assert res.config["profiles"] == p


def test_strict_profiles_names_every_dynamic_input_at_once(client, _isolated_home):
    with pytest.raises(WorkbenchError) as e:
        build_engine(BERT, cfg(), client=client, strict_profiles=True)
    assert not isinstance(e.value, BuildFailed)
    msg = str(e.value)
    assert "'input_ids' [batch, seq], 'attention_mask' [batch, seq]" in msg
    assert "no profile was given" in msg and "--strict-profiles" in msg and "\n" not in msg
    assert "bert_tiny.onnx" in msg and e.value.field == "profiles.input_ids"
    # the hint is the exact flag that covers both
    assert "--profile input_ids:1x1:1x64:16x64,attention_mask:1x1:1x64:16x64" in e.value.hint
    assert list(_isolated_home.glob("models/*/engines/*.engine")) == []


def test_a_partial_profile_names_all_missing_inputs_with_their_shapes():
    from workbench.precision.profiles import validate_profiles

    with pytest.raises(WorkbenchError) as e:
        validate_profiles(BERT, [{"input_ids": [[1, 8], [4, 32], [8, 32]]}])
    # the missing input shares 'batch' and 'seq' with the given one: the hint follows it
    assert "'attention_mask'" in str(e.value) and e.value.hint == \
        "add attention_mask:1x8:4x32:8x32"


def _cli(*args):
    return subprocess.run(["workbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def test_cli_prints_the_default_and_the_flag_then_builds_with_it(tmp_path):
    common = ["--target", "sm89", "--opt-level", "0"]
    r = _cli("build", RESNET, "-o", tmp_path / "a.engine", *common)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and RESNET_FLAG in notes[0]
    # the printed flag gives the same profile, explicitly (and no notice)
    r2 = _cli("build", RESNET, "-o", tmp_path / "b.engine", *common, *RESNET_FLAG.split(),
              "--json")
    assert r2.returncode == 0, r2.stderr
    d = json.loads(r2.stdout)
    assert d["config"]["profiles"] == [RESNET_DEFAULT]
    assert not [f for f in d["findings"] if f["code"] == "default-profile"]
    r3 = _cli("build", BERT, "-o", tmp_path / "c.engine", *common, "--strict-profiles")
    assert r3.returncode == 2 and not (tmp_path / "c.engine").exists()
    lines = r3.stderr.strip().splitlines()
    assert len(lines) == 1 and "input_ids" in lines[0] and "attention_mask" in lines[0]


def test_build_panel_defaults_and_strict(client):
    from widgets import BuildPanel

    panel = BuildPanel(RESNET, cfg(), client=client)
    panel.start()
    res = panel.wait(120)
    assert panel.state == "done", panel.status.value
    assert _default_finding(res.findings).extra["flag"] == RESNET_FLAG
    assert "default-profile" in panel.findings_html.value
    assert RESNET_FLAG in panel.log_view.value  # the notice, as it came
    strict = BuildPanel(BERT, cfg(), client=client, strict_profiles=True)
    strict.start()
    strict.wait(60)
    assert strict.state == "failed"
    assert "input_ids" in strict.status.value and "attention_mask" in strict.status.value


# --------------------------------------------------------------------------- the rules (no build)
@pytest.mark.parametrize("name,want", [
    ("wav2vec2", {"input_values": [[1, 16000], [1, 16000], [16, 16000]]}),
    ("gpt2", {n: [[1, 1], [1, 128], [16, 1024]] for n in ("input_ids", "attention_mask")}),
    ("llama_tiny", {n: [[1, 1], [1, 128], [16, 512]] for n in ("input_ids", "attention_mask")}),
    ("r3d_18", {"input": [[1, 3, 8, 112, 112], [1, 3, 8, 112, 112], [16, 3, 8, 112, 112]]}),
    ("whisper_tiny_encoder", {"input_features": [[1, 80, 3000], [1, 80, 3000],
                                                 [16, 80, 3000]]}),
])
def test_default_profiles_of_real_exports(name, want):
    """Real torch 2.11 exports from the zoo: their dims, the model's own position table."""
    from zoo_models import structure_path

    from workbench.precision.profiles import default_profile, validate_profiles

    prof, rules = default_profile(str(structure_path(name)))
    assert prof.to_dict() == want
    validate_profiles(str(structure_path(name)), [prof])  # valid for the model as it is
    assert set(rules) >= {"batch"}


def _model(inputs, metadata=None, nodes=None):
    import onnx
    from onnx import TensorProto, helper

    vis = [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None)
            for i in range(len(inputs))]
    nodes = nodes or [helper.make_node("Identity", [n], [f"y{i}"])
                      for i, (n, _, _) in enumerate(inputs)]
    m = helper.make_model(helper.make_graph(nodes, "g", vis, outs),
                          opset_imports=[helper.make_opsetid("", 17)])
    for k, v in (metadata or {}).items():
        onnx.helper.set_model_props(m, {k: v})
    return m


def test_image_dims_mirror_the_fixed_one_and_metadata_wins():
    from onnx import TensorProto

    from workbench.precision.profiles import default_profile

    m = _model([("img", TensorProto.FLOAT, ["n", 3, 300, "w"])])
    prof, _ = default_profile(m)
    assert prof["img"] == ((1, 3, 300, 300), (1, 3, 300, 300), (16, 3, 300, 300))
    m = _model([("img", TensorProto.FLOAT, ["n", 3, "h", "w"])],
               metadata={"workbench.profile": "img:1x3x64x64:2x3x128x128:4x3x256x256"})
    prof, rules = default_profile(m)
    assert prof["img"] == ((1, 3, 64, 64), (2, 3, 128, 128), (4, 3, 256, 256))
    assert rules["h"] == "model metadata"


def test_shape_tensor_inputs_cannot_be_guessed():
    from onnx import TensorProto, helper

    from workbench.precision.profiles import default_profile

    m = _model([("x", TensorProto.FLOAT, ["n", 6]), ("shape", TensorProto.INT64, [2])],
               nodes=[helper.make_node("Reshape", ["x", "shape"], ["y0"]),
                      helper.make_node("Identity", ["shape"], ["y1"])])
    with pytest.raises(WorkbenchError) as e:
        default_profile(m)
    assert "'shape'" in str(e.value) and "VALUES" in str(e.value)
    assert e.value.hint == "add --profile shape:MIN:OPT:MAX"


def test_calibration_data_feeds_the_advisor_for_the_default(client):
    """With representative batches at hand, the default comes from the profile advisor (real
    lengths under the padding), not from the rules."""
    res = build_engine(BERT, cfg(calibration=str(SAMPLES / "calib" / "bert_tiny.npz")),
                       client=client)
    f = _default_finding(res.findings)
    assert set(f.extra["rules"].values()) == {"the profile advisor on the calibration data"}
    (mn, op, mx), = [res.config["profiles"][0]["input_ids"]]
    # one stacked file of 64 sequences padded to 32: 64 is a sample count, not a batch served
    assert mn[0] == 1 and op[0] == 1 and mx == [16, 32]
    assert mn[1] > 1 and op[1] <= 32  # real lengths 6..32 under the padding
    assert res.config["profiles"][0]["attention_mask"] == [mn, op, mx]


def test_calibration_saved_in_small_batches_does_not_cap_the_engine_batch(client, tmp_path):
    """Calibration data saved 4 at a time (a folder of batches): the advisor's profile keeps
    its opt (4) but the batch max is the default's 16 (the data's batch is how it was saved,
    not how the engine is fed), and says so; one stacked file, of 4 samples or 32, says
    nothing of the batch served: 1..1..16 (it made 32 the engine's batch max)."""
    import numpy as np

    data = np.load(SAMPLES / "calib" / "resnet_tiny.npz", allow_pickle=False)["input"]
    folder = tmp_path / "batches"
    folder.mkdir()
    for k in range(3):
        np.savez(folder / f"b{k}.npz", input=data[4 * k:4 * k + 4])
    res = build_engine(SAMPLES / "resnet_tiny.onnx", cfg(calibration=str(folder)), client=client)
    f = _default_finding(res.findings)
    assert f.extra["profile"]["input"] == [[1, 3, 32, 32], [4, 3, 32, 32], [16, 3, 32, 32]]
    for n in (4, 32):
        one = tmp_path / f"c{n}.npz"
        np.savez(one, input=data[:n])
        g = _default_finding(build_engine(SAMPLES / "resnet_tiny.onnx",
                                          cfg(calibration=str(one)), client=client).findings)
        assert g.extra["profile"]["input"] == [[1, 3, 32, 32], [1, 3, 32, 32], [16, 3, 32, 32]]



def test_float_sequence_and_waveform_axes_get_ranges_of_their_kind():
    """A float [batch, seq, hidden] input (a decoder fed embeddings) had its 'seq' fixed at
    128 as an 'unknown axis'; a [batch, 1, len] waveform got 128 samples."""
    from onnx import TensorProto as T, helper as h

    from workbench.precision.profiles import default_profile

    def model(name, dims):
        g = h.make_graph([h.make_node("Relu", [name], ["y"])], "g",
                         [h.make_tensor_value_info(name, T.FLOAT, dims)],
                         [h.make_tensor_value_info("y", T.FLOAT, dims)])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])

    prof, rules = default_profile(model("x", ["batch", "seq", 64]))
    assert prof["x"] == ((1, 1, 64), (1, 128, 64), (16, 512, 64))
    assert "sequence axis" in rules["seq"]
    prof, rules = default_profile(model("wave", ["batch", 1, "len"]))
    assert prof["wave"] == ((1, 1, 16000), (1, 1, 16000), (16, 1, 16000))
    prof, _ = default_profile(model("feat", ["batch", "n", 64]))  # nothing says what it is
    assert prof["feat"][0][1] == prof["feat"][2][1] == 128
