"""The panels' controls for the options Python and the CLI already had: the float fallback of
a quantized target (`--fallback`) in the Precision and Build panels, and `--max-aux-streams`
in the Build panel. Headless (panels constructed, `.value` set), a real onnxruntime-checked
conversion through the Precision panel and a real TensorRT-RTX build (CPU, ahead of time for
sm89) through the Build panel."""
from __future__ import annotations

import html

import onnx
import pytest

from conftest import SAMPLES
from workbench.core.qdq import QDQ_OPS
from workbench.engines.engine import BuildConfig
from workbench.engines.export import polygraphy_command, python_script, trtexec_command
from workbench.precision import table
from workbench.precision.spec import recorded_spec
from workbench.timing.colours import precision_colour
from workbench.worker.client import WorkerClient

RESNET = SAMPLES / "resnet_tiny.onnx"
CALIB = str(SAMPLES / "calib" / "resnet_tiny.npz")
PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}]
FP16 = onnx.TensorProto.FLOAT16


@pytest.fixture(scope="module")
def client():
    c = WorkerClient()
    yield c
    c.close()


@pytest.fixture
def fx16():
    """A made-up float target: a fallback choice the panels must offer without naming it."""
    p = table.register(table.Precision("fx16", "float", "a dummy 16-bit float for the test",
                                       transform="workbench.precision.transform:fp16_casts",
                                       max_abs=table.FP16_MAX))
    yield p
    table.unregister("fx16")


def _values(dd):
    return [v for _, v in dd.options]


def _shown(dd):
    return not dd.disabled and dd.layout.display != "none"


# ------------------------------------------------------------------------ Precision panel
def test_precision_panel_offers_a_fallback_for_quantized_targets_only(tmp_path):
    from widgets.precision import PrecisionPanel

    p = PrecisionPanel(RESNET, output=str(tmp_path / "r.fp16.onnx"))
    assert p.target.value == "fp16"
    assert not _shown(p.fallback) and _values(p.fallback) == [""]
    assert p.precision_spec().fallback is None
    p.target.value = "int8"
    assert _shown(p.fallback) and p.fallback.value == ""  # none until chosen
    assert _values(p.fallback) == ["", "fp16", "bf16"]  # the table's float targets
    assert p.precision_spec().fallback is None and p.output.value.endswith("r.int8.onnx")
    p.fallback.value = "fp16"
    spec = p.precision_spec()
    assert (spec.target, spec.fallback) == ("int8", "fp16")
    assert spec.convert_kwargs()["fallback"] == "fp16"
    # the default name says the fallback: the INT8-only conversion is not overwritten
    assert p.output.value.endswith("r.int8-fp16.onnx")
    p.target.value = "fp8"  # another quantized target keeps the choice
    assert _shown(p.fallback) and p.precision_spec().fallback == "fp16"
    assert p.output.value.endswith("r.fp8-fp16.onnx")
    p.target.value = "fp16"  # a float target has none: hidden, disabled, cleared
    assert not _shown(p.fallback) and p.fallback.value == ""
    assert p.precision_spec().fallback is None and p.output.value.endswith("r.fp16.onnx")
    p.target.value = "int8"
    assert p.precision_spec().fallback is None  # (not brought back silently)


def test_a_registered_float_target_is_offered_as_a_fallback_by_both_panels(fx16):
    from widgets.build import BuildPanel
    from widgets.precision import PrecisionPanel

    p = PrecisionPanel(RESNET)
    assert "fx16" not in _values(p.fallback)  # (FP16 target: no fallback at all)
    p.target.value = "int8"
    assert "fx16" in _values(p.fallback) and "fx16" in p.target.options
    p.fallback.value = "fx16"
    assert p.precision_spec().fallback == "fx16"
    b = BuildPanel(RESNET, BuildConfig(precision="int8", fallback="fx16"))
    assert _shown(b.fallback) and b.fallback.value == "fx16"
    assert b.current_config().fallback == "fx16"


def test_conversion_through_the_panel_with_a_fallback(tmp_path):
    """INT8 Q/DQ + FP16 Casts written, the node counts per precision in the status, the graph
    view coloured in the three precisions, and the Build panel made from the panel keeps it."""
    from widgets.build import BuildPanel
    from widgets.graphview import GraphView
    from widgets.precision import PrecisionPanel

    gv = GraphView(RESNET)
    out = tmp_path / "r.onnx"
    p = PrecisionPanel(RESNET, calibration=CALIB, graph_view=gv, output=str(out))
    p.target.value = "int8"
    p.fallback.value = "fp16"
    res = p.convert()
    assert res is not None and p.output_path == out and out.is_file()
    r = res.report
    assert r["fallback"] == "fp16"
    counts = r["precisions"]
    assert counts["int8"] > 0 and counts["fp16"] > 0 and set(counts) == {"int8", "fp16", "fp32"}
    written = onnx.load(str(out))
    ops = [n.op_type for n in written.graph.node]
    assert set(QDQ_OPS) <= set(ops)
    assert any(n.op_type == "Cast" and any(a.name == "to" and a.i == FP16 for a in n.attribute)
               for n in written.graph.node)
    assert recorded_spec(written).fallback == "fp16"
    status = html.unescape(p.status.value)
    assert "&#10007;" not in p.status.value, status
    assert (f"nodes: {counts['int8']} INT8, {counts['fp16']} FP16 (fallback), "
            f"{counts['fp32']} FP32") in status
    assert "fallback-precisions" in p.report_html.value
    # the graph view: one colour per precision, the legend counting each
    nodes = r["nodes_by_precision"]
    assert dict(gv.legend) == {f"{q.upper()} ({len(v)})": precision_colour(q)
                               for q, v in nodes.items()}
    gv.expand_all()
    shown = dict(zip(gv.data.ids, gv.colors))  # (every node drawn: colours align with them)
    for q, names in nodes.items():
        assert names and {shown[n] for n in names} == {precision_colour(q)}, q
    assert len({precision_colour(q) for q in nodes}) == 3
    # the Build panel made from this one builds what it holds
    bp = BuildPanel.from_precision_panel(p, target="sm89")
    assert _shown(bp.fallback) and bp.fallback.value == "fp16"
    cfg = bp.current_config()
    assert (cfg.precision, cfg.fallback, cfg.calibration) == ("int8", "fp16", CALIB)


# ---------------------------------------------------------------------------- Build panel
def test_build_panel_fallback_and_aux_streams_reach_the_config_and_the_lines():
    from widgets.build import BuildPanel

    b = BuildPanel(RESNET, BuildConfig(profiles=PROFILE, target="sm89"))
    assert b.precision.value == "fp32" and not _shown(b.fallback)
    assert b.max_aux_streams.value == "" and "--max-aux-streams" in b.max_aux_streams.tooltip
    assert "--fallback" in b.fallback.tooltip
    plain = b.current_config()
    assert plain.fallback is None and plain.max_aux_streams is None
    assert "maxAuxStreams" not in trtexec_command(plain, "m.onnx", "m.engine")
    b.precision.value = "int8"
    assert _shown(b.fallback) and _values(b.fallback) == ["", "fp16", "bf16"]
    b.calib_path.value = CALIB
    b.fallback.value = "fp16"
    b.max_aux_streams.value = "2"
    cfg = b.current_config()
    assert (cfg.precision, cfg.fallback, cfg.max_aux_streams) == ("int8", "fp16", 2)
    line = trtexec_command(cfg, "m.onnx", "m.engine", route="legacy-flags", calib_cache="c")
    assert " --int8 --fp16 " in line and "--maxAuxStreams=2" in line
    poly = polygraphy_command(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert " --int8 --fp16" in poly and "--max-aux-streams 2" in poly
    script = python_script(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "FALLBACK_FLAG = 'FP16'" in script and "MAX_AUX_STREAMS = 2" in script
    b.max_aux_streams.value = "0"  # 0 is a value (one stream), not "unset"
    assert b.current_config().max_aux_streams == 0
    b.precision.value = "fp16"  # no fallback for a float precision: hidden and dropped
    assert not _shown(b.fallback) and b.current_config().fallback is None
    # a config that has them fills the controls
    c = BuildPanel(RESNET, cfg)
    assert c.fallback.value == "fp16" and c.max_aux_streams.value == "2"
    assert c.current_config() == cfg


@pytest.mark.parametrize("bad", ["two", "-1", "1.5"])
def test_a_bad_aux_stream_count_is_refused_in_the_panel_naming_the_field(bad):
    from widgets.build import BuildPanel

    b = BuildPanel(RESNET, BuildConfig(profiles=PROFILE, target="sm89"))
    b.max_aux_streams.value = bad
    assert b.start() is False and b.state == "failed"
    assert "max_aux_streams" in b.status.value and bad in html.unescape(b.status.value)


def test_a_real_build_through_the_panel_with_the_fallback_and_aux_streams(client):
    """TensorRT-RTX (strongly typed) builds the INT8 Q/DQ + FP16 Cast ONNX the panel's
    fallback asks for, with two auxiliary streams; the lines and script the panel shows carry
    the option, the notes the `workbench precision --fallback` line."""
    from widgets.build import BuildPanel

    b = BuildPanel(RESNET, BuildConfig(profiles=PROFILE, target="sm89",
                                       builder_optimization_level=0), client=client)
    b.precision.value = "int8"
    b.calib_path.value = CALIB
    b.fallback.value = "fp16"
    b.max_aux_streams.value = "2"
    assert b.start()
    res = b.wait(300)
    assert b.state == "done", b.status.value
    assert res.config["fallback"] == "fp16" and res.config["max_aux_streams"] == 2
    out_types = {(la["type"], o["dtype"]) for la in res.layers for o in la["outputs"]}
    assert ("QUANTIZE", "INT8") in out_types and ("ACTIVATION", "HALF") in out_types
    assert "--maxAuxStreams=2" in b.trtexec.value
    assert "--max-aux-streams 2" in b.polygraphy.value
    assert "MAX_AUX_STREAMS = 2" in b.script.value
    compile(b.script.value, "build.py", "exec")
    assert "--to int8 --fallback fp16 --calib" in html.unescape(b.export_notes.value)
