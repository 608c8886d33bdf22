"""The panels' controls for the options Python and the CLI already had: the float fallback of
a quantized target (`--fallback`) in the Precision panel. Headless (panels constructed,
`.value` set) and a real onnxruntime-checked conversion through the panel."""
from __future__ import annotations

import html

import onnx
import pytest

from conftest import SAMPLES
from workbench.core.qdq import QDQ_OPS
from workbench.precision import table
from workbench.precision.spec import recorded_spec
from workbench.timing.colours import precision_colour

RESNET = SAMPLES / "resnet_tiny.onnx"
CALIB = str(SAMPLES / "calib" / "resnet_tiny.npz")
PROFILE = [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}]
FP16 = onnx.TensorProto.FLOAT16


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


def test_a_registered_float_target_is_offered_as_a_fallback(fx16):
    from widgets.precision import PrecisionPanel

    p = PrecisionPanel(RESNET)
    assert "fx16" not in _values(p.fallback)  # (FP16 target: no fallback at all)
    p.target.value = "int8"
    assert "fx16" in _values(p.fallback) and "fx16" in p.target.options
    p.fallback.value = "fx16"
    assert p.precision_spec().fallback == "fx16"


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
    cfg = bp.current_config()
    assert (cfg.precision, cfg.fallback, cfg.calibration) == ("int8", "fp16", CALIB)
