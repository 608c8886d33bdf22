"""BuildPanel widget state without a browser: a real TensorRT-RTX build in the panel's thread,
progress moving, cancel, errors shown in the panel."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import SAMPLES
from workbench.engines.engine import BuildConfig
from workbench.worker.client import WorkerClient

PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}]


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


def _panel(client, **kw):
    from widgets import BuildPanel

    cfg = BuildConfig(profiles=PROFILE, target="sm89", builder_optimization_level=0, **kw)
    return BuildPanel(SAMPLES / "resnet_tiny.onnx", cfg, client=client)


def test_build_shows_progress_card_findings_and_exports(client, monkeypatch):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.02")
    panel = _panel(client)
    panel.precision.value = "fp16"
    seen = []
    panel.progress.observe(lambda ch: seen.append(ch["new"]), names="value")
    panel.build_btn.click()
    assert panel.running and panel.build_btn.disabled and not panel.cancel_btn.disabled
    res = panel.wait(120)
    assert panel.state == "done", panel.status.value
    assert res is not None and Path(res.engine_path).is_file()
    assert res.dtype_counts().get("HALF", 0) > 0  # the dropdown's precision was used
    moving = [v for v in seen if 0.0 < v < 1.0]
    assert len(moving) >= 3 and panel.progress.value == 1.0
    assert panel.progress.bar_style == "success"
    assert "engine" in panel.engine_card.value and "tensorrt-rtx" in panel.engine_card.value
    assert "HALF" in panel.engine_card.value and "activation" in panel.engine_card.value
    assert panel.trtexec.value.startswith("tensorrt_rtx --onnx=")
    assert "polygraphy convert" in panel.polygraphy.value
    compile(panel.script.value, "script.py", "exec")
    assert "<table" in panel.findings_html.value or "no findings" in panel.findings_html.value
    assert not panel.build_btn.disabled and panel.cancel_btn.disabled
    # again: a cache hit, shown as such
    panel.start()
    panel.wait(60)
    assert panel.result.cache_hit and "from the cache" in panel.phase.value


def test_cancel_button_stops_the_build_and_caches_nothing(client, monkeypatch, _isolated_home):
    monkeypatch.setenv("WORKBENCH_BUILD_STEP_DELAY", "0.1")
    panel = _panel(client)
    assert panel.start()
    deadline = time.monotonic() + 60
    while panel.progress.value <= 0.0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 0.0 < panel.progress.value < 1.0
    assert not panel.start()  # one build at a time
    panel.cancel_btn.click()
    panel.wait(60)
    assert panel.state == "cancelled", panel.status.value
    assert "cancelled" in panel.status.value and panel.result is None
    assert list(_isolated_home.glob("models/*/engines/*")) == []


def test_bad_profile_is_shown_in_the_panel(client):
    from widgets import BuildPanel

    cfg = BuildConfig(profiles=[{"image": [[1, 3, 32, 32]] * 3}], target="sm89")
    panel = BuildPanel(SAMPLES / "resnet_tiny.onnx", cfg, client=client)
    panel.start()
    panel.wait(60)
    assert panel.state == "failed"
    assert "unknown input" in panel.status.value and "image" in panel.status.value


def test_invalid_target_in_the_text_box_is_refused_before_building(client):
    panel = _panel(client)
    panel.target.value = "ampere"
    assert panel.start() is False
    assert panel.state == "failed" and "ampere" in panel.status.value


def test_build_panel_from_the_precision_panel(client):
    from widgets import BuildPanel, PrecisionPanel

    pp = PrecisionPanel(SAMPLES / "resnet_tiny.onnx")
    pp.target.value = "int8"
    pp.calib_path.value = str(SAMPLES / "calib" / "resnet_tiny.npz")
    head = next(n.name for n in pp.model.graph.node if n.op_type == "Gemm")
    pp.set_exclusions([head])
    pp.profile_text.value = "input:1x3x32x32:4x3x32x32:32x3x32x32"
    bp = BuildPanel.from_precision_panel(pp, target="sm89", builder_optimization_level=0)
    bp.client = client
    cfg = bp.current_config()
    assert cfg.precision == "int8" and cfg.exclude_nodes == [head]
    assert cfg.profiles == [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [32, 3, 32, 32]]}]
    bp.start()
    bp.wait(120)
    assert bp.state == "done", bp.status.value
    assert bp.result.dtype_counts().get("INT8", 0) > 0
    # the excluded Gemm gets no Q/DQ: fewer quantize layers than the same build without it
    from workbench.engines.engine import build_engine

    plain = build_engine(SAMPLES / "resnet_tiny.onnx", cfg.replace(exclude_nodes=[]),
                         client=client)

    def quant(r):
        return sum(1 for la in r.layers if la["type"] == "QUANTIZE")

    assert 0 < quant(bp.result) < quant(plain)


def test_the_panel_takes_a_profile_and_calibration_data(client):
    """The Build panel had no profile or calibration field: a failed build said to use
    '--profile with min = opt = max', a CLI flag. Its fields hold the config's profile (the
    --profile syntax) and calibration source, and a real INT8 build uses what is typed."""
    from widgets import BuildPanel

    panel = _panel(client)
    assert panel.profile_text.value == "input:1x3x32x32:4x3x32x32:32x3x32x32"
    panel.profile_text.value = "input:1x3x32x32:2x3x32x32:8x3x32x32"
    panel.precision.value = "int8"
    panel.calib_path.value = str(SAMPLES / "calib" / "resnet_tiny.npz")
    cfg = panel.current_config()
    assert cfg.profiles == [{"input": [[1, 3, 32, 32], [2, 3, 32, 32], [8, 3, 32, 32]]}]
    assert cfg.calibration == str(SAMPLES / "calib" / "resnet_tiny.npz")
    panel.start()
    res = panel.wait(300)
    assert panel.state == "done", panel.status.value
    assert res.config["profiles"] == cfg.profiles and res.config["precision"] == "int8"
    panel.profile_text.value = "input:1x3"  # a bad line: said, not built
    assert panel.start() is False and "input" in panel.status.value
    empty = BuildPanel(SAMPLES / "resnet_tiny.onnx", client=client)
    assert empty.profile_text.value == "" and empty.current_config().profiles == []


def test_the_engine_file_field_writes_the_engine_where_asked(client, tmp_path):
    """BuildPanel had no output path: the engine lived only in the workspace cache."""
    from widgets.build import BuildPanel

    out = tmp_path / "r.fp32.engine"
    panel = BuildPanel(SAMPLES / "resnet_tiny.onnx",
                       BuildConfig(profiles=PROFILE, target="sm89", builder_optimization_level=0),
                       client=client, output=str(out))
    assert panel.output.value == str(out)
    panel.start()
    res = panel.wait(600)
    assert res is not None and out.is_file() and out.stat().st_size == res.size_bytes
    assert str(out) in panel.engine_card.value and "cached as" in panel.engine_card.value
    panel.precision.value = "fp16"  # the name follows the precision
    assert panel.output.value == str(tmp_path / "r.fp16.engine")
    plain = BuildPanel(SAMPLES / "resnet_tiny.onnx", client=client)
    assert plain.output.value == "" and "resnet_tiny.fp32.engine" in plain.output.placeholder
