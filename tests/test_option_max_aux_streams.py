"""The max_aux_streams build option (IBuilderConfig.max_aux_streams): one option object
reaches every verb's command line, the spec and its JSON, the trtexec and Polygraphy lines (and
back), the standalone script, and a real TensorRT-RTX build on the CPU, whose builder config
holds the value asked for."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import SAMPLES
from workbench.engines.engine import BuildConfig, build_engine
from workbench.engines.export import (config_from_trtexec, polygraphy_command, python_script,
                                    trtexec_command)
from workbench.engines.options import Render, worker_args
from workbench.cli import build_parser
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient

RESNET = SAMPLES / "resnet_tiny.onnx"
PROFILE = [{"input": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]}]


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def test_the_flag_reaches_every_verb_that_builds_and_fills_the_spec():
    from workbench.cli.cmd_build import _config

    for verb in ("build", "matrix", "timing-capture"):
        flags = {s for a in build_parser(verb).verb_parsers[verb]._actions
                 for s in a.option_strings}
        assert "--max-aux-streams" in flags, verb
    args = build_parser("build").parse_args(["build", "m.onnx", "-o", "m.engine",
                                             "--max-aux-streams", "0"])
    assert _config(args).max_aux_streams == 0


def test_the_spec_keeps_it_in_the_json_only_when_set_and_refuses_bad_values():
    plain, zero = BuildConfig(), BuildConfig(max_aux_streams=0)
    assert "max_aux_streams" not in plain.to_dict()  # older configs keep their hash
    assert zero.to_dict()["max_aux_streams"] == 0 and zero.config_hash != plain.config_hash
    assert BuildConfig.from_json(zero.to_json()) == zero
    for bad in (-1, "two", True):
        with pytest.raises(WorkbenchError) as e:
            BuildConfig(max_aux_streams=bad)
        assert e.value.field == "max_aux_streams"


def test_trtexec_polygraphy_and_the_script_carry_it():
    cfg = BuildConfig(precision="fp16", max_aux_streams=2)
    line = trtexec_command(cfg, "m.onnx", "m.engine")
    assert "--maxAuxStreams=2" in line
    assert config_from_trtexec(line)[0].max_aux_streams == 2
    assert "--max-aux-streams 2" in polygraphy_command(cfg, "m.onnx", "m.engine")
    script = python_script(cfg, "m.onnx", "m.engine")
    assert "MAX_AUX_STREAMS = 2" in script
    assert "config.max_aux_streams = MAX_AUX_STREAMS" in script
    compile(script, "build.py", "exec")
    unset = BuildConfig(precision="fp16")
    assert "maxAuxStreams" not in trtexec_command(unset, "m.onnx", "m.engine")
    assert "MAX_AUX_STREAMS = None" in python_script(unset, "m.onnx", "m.engine")


def test_a_real_tensorrt_rtx_build_holds_it(client, tmp_path):
    """The worker request the option renders sets the real builder config (read back), the
    workbench's build and the exported script both build with it on the CPU (ahead of time
    for sm89), and the engine cache tells it from a build without it."""
    cfg = BuildConfig(max_aux_streams=2, target="sm89", builder_optimization_level=0,
                      profiles=PROFILE, backend="tensorrt-rtx")
    out = client.call("build", {"onnx_path": str(RESNET), "engine_path": str(tmp_path / "w"),
                                "backend": "tensorrt-rtx", "target": "sm89",
                                "optimization_level": 0, "profiles": PROFILE,
                                "config_attributes": worker_args(cfg, Render())[
                                    "config_attributes"]}, timeout=300)
    assert out["config_attributes"] == {"max_aux_streams": 2}
    assert (tmp_path / "w").stat().st_size > 10_000
    res = build_engine(RESNET, cfg, client=client, output=tmp_path / "a.engine")
    other = build_engine(RESNET, cfg.replace(max_aux_streams=None), client=client,
                         output=tmp_path / "b.engine")
    assert res.config_hash != other.config_hash
    assert res.size_bytes > 10_000
    script = tmp_path / "build.py"
    script.write_text(res.export["script"].replace(
        repr(str(tmp_path / "a.engine")), repr(str(tmp_path / "script.engine"))))
    r = subprocess.run([sys.executable, str(script), "--build-only"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "script.engine").stat().st_size > 10_000
