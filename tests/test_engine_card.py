"""Engine cards and the portability guard, with real TensorRT-RTX engines (CPU, ahead of time):
every engine the workbench writes has a card; an engine whose card says another TensorRT or GPU
is refused before deserialization with one line; a matching one reaches TensorRT."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import SAMPLES
from workbench.engines.card import card_path, check_engine, read_card
from workbench.engines.engine import BuildConfig, build_engine
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient, WorkerError

tensorrt_rtx = pytest.importorskip("tensorrt_rtx_bindings")

RESNET = SAMPLES / "resnet_tiny.onnx"
PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [16, 3, 32, 32]]}]


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


@pytest.fixture()
def built(client, tmp_path):
    cfg = BuildConfig(profiles=PROFILE, target="sm89", builder_optimization_level=0,
                      precision="fp16")
    res = build_engine(RESNET, cfg, client=client, output=tmp_path / "resnet.engine")
    return res, tmp_path / "resnet.engine"


def _network_io(path):
    """The model's I/O as TensorRT-RTX's own parser sees it (what the engine's I/O is)."""
    t = tensorrt_rtx
    logger = t.Logger(t.Logger.ERROR)
    builder = t.Builder(logger)
    flags = 1 << int(t.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    net = builder.create_network(flags)
    parser = t.OnnxParser(net, logger)
    assert parser.parse_from_file(str(path))
    return [(net.get_input(i).name, [int(d) for d in net.get_input(i).shape])
            for i in range(net.num_inputs)] + \
           [(net.get_output(i).name, [int(d) for d in net.get_output(i).shape])
            for i in range(net.num_outputs)]


def test_every_written_engine_has_a_card_with_what_it_is(built):
    from workbench.core.model import open_model

    res, out = built
    card = read_card(out)
    assert card is not None and card["engine"] == "resnet.engine"
    assert card["backend"] == "tensorrt-rtx"
    assert card["tensorrt_version"] == tensorrt_rtx.__version__
    assert card["targets"] == ["sm89"] and card["compute_capability"] is None
    assert card["hardware_compatibility"] is None  # (TensorRT-RTX has none: its targets say)
    assert card["version_compatible"] is False
    assert card["profiles"] == PROFILE
    assert card["precision"]["precision"] == "fp16"
    assert card["onnx_sha256"] == open_model(RESNET).content_hash
    assert card["size_bytes"] == out.stat().st_size
    io = [(t["name"], t["shape"]) for t in card["io"]["inputs"] + card["io"]["outputs"]]
    assert io == _network_io(RESNET)
    assert [t["dtype"] for t in card["io"]["inputs"]] == ["FLOAT"]  # keep_io_types
    cached = read_card(res.engine_path)  # the cache's engine has the same card
    assert cached is not None and cached["cache_key"] == card["cache_key"] == res.key


def test_a_cache_hit_copies_the_card_to_the_new_output(client, built, tmp_path):
    res, _ = built
    cfg = BuildConfig(profiles=PROFILE, target="sm89", builder_optimization_level=0,
                      precision="fp16")
    again = build_engine(RESNET, cfg, client=client, output=tmp_path / "copy.plan")
    assert again.cache_hit
    card = json.loads((tmp_path / "copy.plan.card.json").read_text())
    assert card["engine"] == "copy.plan" and card["cache_key"] == res.key


def test_a_cache_entry_without_a_card_gets_one_on_its_next_hit(client, built):
    res, _ = built
    cached = card_path(res.engine_path)
    import os
    os.unlink(cached)  # as a cache written before engines had cards
    cfg = BuildConfig(profiles=PROFILE, target="sm89", builder_optimization_level=0,
                      precision="fp16")
    assert build_engine(RESNET, cfg, client=client).cache_hit
    assert read_card(res.engine_path)["cache_key"] == res.key


def _tampered(out, tmp_path, **changes):
    dst = tmp_path / "elsewhere.engine"
    shutil.copyfile(out, dst)
    card = json.loads(open(card_path(str(out))).read())
    card.update(changes)
    open(card_path(str(dst)), "w").write(json.dumps(card))
    return dst


def _inspect(client, path, onnx=None):
    return client.call("inspect_engine", {"engine_path": str(path), "backend": "auto",
                                          "onnx_path": str(onnx) if onnx else None},
                       timeout=120)


def test_engine_for_another_tensorrt_version_is_refused_before_deserialization(
        client, built, tmp_path):
    _, out = built
    other = _tampered(out, tmp_path, tensorrt_version="1.5.0.7")
    with pytest.raises(WorkerError) as e:
        _inspect(client, other)
    msg = e.value.message
    assert e.value.code == "incompatible-engine"
    assert msg == (f"{other}: engine built for tensorrt-rtx 1.5.0.7 for sm89; this is "
                   f"tensorrt-rtx {tensorrt_rtx.__version__}: rebuild it with this TensorRT, "
                   "or build with --flag VERSION_COMPATIBLE (TensorRT >= 8.6) to run on later "
                   "releases")
    # profiling refuses it too, before it even asks for a GPU (this machine has none)
    with pytest.raises(WorkerError) as e:
        client.call("profile_engine", {"engine_path": str(other)}, timeout=120)
    assert e.value.code == "incompatible-engine" and "1.5.0.7" in e.value.message
    # with the ONNX, inspection still shows the network, and says why not the engine
    info = _inspect(client, other, onnx=RESNET)
    assert info["source"] == "network" and "engine built for tensorrt-rtx 1.5.0.7" in \
        info["reason"]


def test_engine_for_another_compute_capability_is_refused_with_what_to_do(built, tmp_path):
    _, out = built
    other = _tampered(out, tmp_path, targets=["sm120"])
    with pytest.raises(WorkbenchError) as e:
        check_engine(other, "tensorrt-rtx", tensorrt_rtx.__version__, "8.9")
    line = str(e.value)
    assert "\n" not in line
    assert line == (f"{other}: engine built for tensorrt-rtx {tensorrt_rtx.__version__} for "
                    "sm120; this is a sm89 GPU: rebuild it here (`workbench build MODEL "
                    "--target sm89` for TensorRT-RTX), or build with --hardware-compat "
                    "ampere_plus (TensorRT >= 8.6) to run on every Ampere-or-later GPU")
    # the real card passes for an sm89 GPU and is refused on an H200 (sm90)
    assert check_engine(out, "tensorrt-rtx", tensorrt_rtx.__version__, "8.9")["targets"] == \
        ["sm89"]
    with pytest.raises(WorkbenchError, match="this is a sm90 GPU"):
        check_engine(out, "tensorrt-rtx", tensorrt_rtx.__version__, "9.0")
    # hardware compatibility: any Ampere-or-later GPU, not Turing
    amp = _tampered(out, tmp_path, targets=[], hardware_compatibility="AMPERE_PLUS")
    assert check_engine(amp, "tensorrt-rtx", tensorrt_rtx.__version__, "9.0") is not None
    with pytest.raises(WorkbenchError, match="Ampere-or-later GPU .* this is a sm75 GPU"):
        check_engine(amp, "tensorrt-rtx", tensorrt_rtx.__version__, "7.5")
    # another backend: names the one to load it with
    with pytest.raises(WorkbenchError, match="load it with --backend tensorrt-rtx"):
        check_engine(out, "tensorrt", "10.3.0", None)


def test_matching_engine_passes_the_guard_and_reaches_tensorrt(client, built):
    _, out = built
    with pytest.raises(WorkerError) as e:
        _inspect(client, out)  # no GPU here: TensorRT itself cannot deserialize it
    assert e.value.code == "cannot-deserialize" and "engine built for" not in e.value.message
    info = _inspect(client, out, onnx=RESNET)
    assert info["source"] == "network" and "engine built for" not in info["reason"]
    assert "cuda" in info["reason"].lower()  # TensorRT's own reason: the guard let it through


def test_a_broken_card_is_refused_and_a_missing_one_is_not_guessed(client, built, tmp_path):
    _, out = built
    broken = tmp_path / "broken.engine"
    shutil.copyfile(out, broken)
    open(card_path(str(broken)), "w").write("{not json")
    with pytest.raises(WorkerError) as e:
        _inspect(client, broken)
    assert e.value.code == "incompatible-engine" and "engine card unreadable" in e.value.message
    bare = tmp_path / "bare.engine"
    shutil.copyfile(out, bare)
    assert check_engine(bare, "tensorrt", "8.6.0", "9.0") is None
    with pytest.raises(WorkerError) as e:
        _inspect(client, bare)
    assert e.value.code == "cannot-deserialize"


def test_hardware_compatibility_is_a_build_setting(client, tmp_path):
    from workbench.engines.export import config_from_trtexec, python_script, trtexec_command

    c = BuildConfig(hardware_compatibility="ampere+")
    assert c.hardware_compatibility == "ampere_plus"
    assert "hardware_compatibility" not in BuildConfig().to_dict()  # unset: old hashes hold
    assert c.config_hash != BuildConfig().config_hash
    line = trtexec_command(c, "m.onnx", "m.engine")
    assert "--hardwareCompatibilityLevel=ampere+" in line
    assert config_from_trtexec(line)[0].hardware_compatibility == "ampere_plus"
    script = python_script(c, "m.onnx", "m.engine")
    assert "HARDWARE_COMPAT = 'AMPERE_PLUS'" in script
    compile(script, "build.py", "exec")
    with pytest.raises(WorkbenchError, match="unknown hardware compatibility 'volta'"):
        BuildConfig(hardware_compatibility="volta")
    # TensorRT-RTX has none: the worker refuses it, naming what to use instead
    with pytest.raises(WorkbenchError) as e:
        build_engine(RESNET, BuildConfig(profiles=PROFILE, target="sm89",
                                         hardware_compatibility="ampere_plus"), client=client)
    assert "TensorRT-RTX has no hardware-compatibility level" in str(e.value)
    assert "--target" in str(e.value)


def _compare_args(**kw):
    import argparse

    base = dict(build_config=None, precision=None, backend="auto", target=None,
                opt_level=None, profile=[], json=False)
    base.update(kw)
    return argparse.Namespace(**base)


def test_compare_builds_its_marked_engines_as_the_engine_file_was_built(built, tmp_path,
                                                                        capsys):
    """`compare MODEL ENGINE --build-config cfg.json` (cfg naming only tactic sources, as the
    GPU rig needs) built and judged FP32 engines beside an FP16 one: every BuildConfig field
    of the file, unset ones included, overrode --precision. The card's precision and profile
    now come first, the file's set fields next, the flags last."""
    from workbench.cli.cmd_compare import _engine_config

    _, engine = built
    cfg_file = tmp_path / "cfg.json"
    cfg_file.write_text(json.dumps({"tactic_sources": ["JIT_CONVOLUTIONS"],
                                    "builder_optimization_level": 1}))
    cfg = _engine_config(_compare_args(build_config=str(cfg_file)), str(engine))
    assert cfg.precision == "fp16" and cfg.profiles == PROFILE
    assert cfg.tactic_sources == ["JIT_CONVOLUTIONS"] and cfg.builder_optimization_level == 1
    assert cfg.backend == "tensorrt-rtx"
    # without an engine file (--engine-from-build): the flag, else fp16, never the file's default
    assert _engine_config(_compare_args(build_config=str(cfg_file))).precision == "fp16"
    assert _engine_config(_compare_args(build_config=str(cfg_file), precision="bf16")
                          ).precision == "bf16"
    # a flag that differs from the card is obeyed, and said
    cfg = _engine_config(_compare_args(precision="fp32"), str(engine))
    assert cfg.precision == "fp32"
    assert "was built as fp16 (its card)" in capsys.readouterr().err
    cfg_file.write_text(json.dumps({"precision": "fp32"}))  # a file that sets it: obeyed
    assert _engine_config(_compare_args(build_config=str(cfg_file)), str(engine)
                          ).precision == "fp32"
