"""I/O types and formats as build options: trtexec's grammar, the ONNX Casts a strongly typed
build takes its I/O types from, real TensorRT-RTX builds (CPU, ahead of time for sm89) whose
network I/O carries the requested types and formats, the CLI, and the host-side conversion
between numpy's linear layout and vectorized ones (HWC8, CHW16...)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import SAMPLES
from workbench.engines import io_formats
from workbench.engines.engine import BuildConfig, build_engine
from workbench.engines.export import config_from_trtexec, trtexec_command
from workbench.core.errors import WorkbenchError
from workbench.worker.client import WorkerClient
from workbench.worker.iolayout import engine_shape, from_engine, to_engine

RESNET = SAMPLES / "resnet_tiny.onnx"
BERT = SAMPLES / "bert_tiny.onnx"
PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}]


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def test_trtexec_grammar_parses_and_names_the_field_when_wrong():
    assert io_formats.parse("FP16:HWC8") == [("fp16", ["hwc8"])]
    assert io_formats.parse("fp32:chw,fp16:chw16+hwc8") == [("fp32", ["chw"]),
                                                            ("fp16", ["chw16", "hwc8"])]
    for bad, needle in (("fp16", "TYPE:FORMAT"), ("fp64:chw", "unknown I/O type"),
                        ("fp16:nhwc", "unknown I/O format")):
        with pytest.raises(WorkbenchError) as e:
            BuildConfig(input_io_formats=bad)
        assert needle in e.value.message and e.value.field == "input_io_formats"
    # unset: left out of the JSON, so configs written before keep their hash
    assert "input_io_formats" not in BuildConfig().to_dict()
    assert BuildConfig(input_io_formats="fp16:hwc8").config_hash != BuildConfig().config_hash


def test_trtexec_line_carries_the_io_formats_and_parses_back():
    cfg = BuildConfig(precision="fp16", input_io_formats="fp16:hwc8",
                      output_io_formats="fp16:chw", profiles=PROFILE)
    line = trtexec_command(cfg, "m.onnx", "m.engine")
    assert "--inputIOFormats=fp16:hwc8" in line and "--outputIOFormats=fp16:chw" in line
    back, _, _ = config_from_trtexec(line)
    assert (back.input_io_formats, back.output_io_formats) == ("fp16:hwc8", "fp16:chw")


def test_cast_io_gives_fp16_io_with_the_same_names_and_values():
    proto = onnx.load(str(RESNET))
    ref = ort.InferenceSession(proto.SerializeToString())
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = ref.run(None, {"input": x})[0]
    out, changed = io_formats.cast_io(proto, "fp16:hwc8", "fp16:chw")
    assert len(changed) == 2 and all("fp32 -> fp16" in c for c in changed)
    onnx.checker.check_model(out)
    sess = ort.InferenceSession(out.SerializeToString())
    assert [i.name for i in sess.get_inputs()] == ["input"]
    assert sess.get_inputs()[0].type == sess.get_outputs()[0].type == "tensor(float16)"
    got = sess.run(None, {"input": x.astype(np.float16)})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_integer_inputs_keep_their_type():
    proto = onnx.load(str(BERT))
    out, changed = io_formats.cast_io(proto, "fp16:chw", None)
    assert changed == []  # token ids and the mask are integers


def _io(res):
    card = json.loads(Path(res.engine_path + ".card.json").read_text()) \
        if os.path.isfile(res.engine_path + ".card.json") else None
    return card["io"] if card else None


def test_rtx_build_has_the_requested_io_types_and_formats(client, tmp_path):
    cfg = BuildConfig(precision="fp16", input_io_formats="fp16:hwc8",
                      output_io_formats="fp16:chw", profiles=PROFILE, target="sm89",
                      builder_optimization_level=0)
    res = build_engine(RESNET, cfg, client=client, output=tmp_path / "r.engine")
    io = _io(res)
    assert io["inputs"][0]["dtype"] == "HALF" and io["inputs"][0]["formats"] == ["HWC8"]
    assert io["outputs"][0]["dtype"] == "HALF" and io["outputs"][0]["formats"] == ["LINEAR"]
    assert any(f.code == "io-types" for f in res.findings)
    assert "--inputIOFormats=fp16:hwc8" in res.export["trtexec"]
    plain = build_engine(RESNET, cfg.replace(input_io_formats=None, output_io_formats=None),
                         client=client, output=tmp_path / "p.engine")
    assert _io(plain)["inputs"][0]["dtype"] == "FLOAT"
    assert "formats" not in _io(plain)["inputs"][0]


def test_cli_build_with_io_formats(tmp_path):
    out = tmp_path / "cli.engine"
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "build", str(RESNET),
                        "-o", str(out), "--precision", "fp16", "--target", "sm89",
                        "--profile", "input:1x3x32x32:4x3x32x32:8x3x32x32",
                        "--input-io-formats", "fp16:hwc8", "--output-io-formats", "fp16:chw",
                        "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    card = json.loads(Path(str(out) + ".card.json").read_text())
    assert card["io"]["inputs"][0]["dtype"] == "HALF"
    assert card["io"]["inputs"][0]["formats"] == ["HWC8"]


@pytest.mark.parametrize("layout,shape", [(("HWC8", 1, 8), (2, 5, 8, 8)),
                                          (("CHW16", 1, 16), (2, 1, 5, 8, 16)),
                                          (("CHW4", 1, 4), (2, 1, 5, 8, 4)),
                                          (("HWC", 1, 1), (2, 5, 8, 3))])
def test_vectorized_layout_round_trip(layout, shape):
    a = np.random.default_rng(1).standard_normal((2, 3, 5, 8)).astype(np.float16)
    b = to_engine(a, layout)
    assert b.shape == engine_shape(a.shape, layout) == shape
    np.testing.assert_array_equal(from_engine(b, a.shape, layout), a)
    if layout[0] == "HWC8":  # channels last, channels 3..7 zero padding
        np.testing.assert_array_equal(b[..., :3], a.transpose(0, 2, 3, 1))
        assert not b[..., 3:].any()


def test_panel_applies_the_reformat_finding_next_step(client, tmp_path):
    """The reformat finding's proposal (read from a real TensorRT 8.6 capture) applied in the
    Build panel builds an engine whose network I/O has the proposed types and formats."""
    from widgets import BuildPanel
    from workbench.timing.summary import lint
    from workbench.timing.table import LayerTable

    from tests.conftest import H200  # the H200 captures kept in the repository

    t = LayerTable.build(str(H200 / "resnet50_fp16.layers.json"),
                         str(H200 / "resnet50_fp16.profile.json"))
    step = next(f.extra["next_step"] for f in lint(t) if "next_step" in f.extra)
    panel = BuildPanel(RESNET, BuildConfig(precision="fp16", profiles=PROFILE, target="sm89",
                                           builder_optimization_level=0),
                       client=client, output=tmp_path / "panel.engine")
    panel.apply_next_step(step)
    assert panel.input_io.value == "fp16:hwc8" and panel.output_io.value == "fp16:chw"
    panel.build_btn.click()
    res = panel.wait(300)
    assert panel.state == "done", panel.status.value
    io = _io(res)
    assert io["inputs"][0]["dtype"] == "HALF" and io["inputs"][0]["formats"] == ["HWC8"]
    assert io["outputs"][0]["dtype"] == "HALF"
    assert "--inputIOFormats=fp16:hwc8" in panel.trtexec.value


def test_exported_script_builds_the_same_io_formats(client, tmp_path):
    cfg = BuildConfig(precision="fp16", input_io_formats="fp16:hwc8",
                      output_io_formats="fp16:chw", profiles=PROFILE, target="sm89",
                      builder_optimization_level=0)
    res = build_engine(RESNET, cfg, client=client, output=tmp_path / "s.engine")
    script = tmp_path / "build.py"
    script.write_text(res.export["script"].replace(
        f"ENGINE = {str(tmp_path / 's.engine')!r}", f"ENGINE = {str(tmp_path / 'script.engine')!r}"))
    assert "IO_FORMATS = {'inputs': [['fp16', ['hwc8']]]" in script.read_text()
    r = subprocess.run([sys.executable, str(script), "--build-only"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "script.engine").stat().st_size > 10_000


def test_backend_info_lists_the_builder_knobs_and_io_formats_this_tensorrt_has(client):
    info = client.call("backend_info", {"backend": "auto"}, timeout=120)
    knobs = info["builder_knobs"]
    assert "builder_optimization_level" in knobs["config"]
    assert {"LINEAR", "HWC8", "CHW16"} <= set(knobs["TensorFormat"])
    assert isinstance(knobs["TacticSource"], list)
