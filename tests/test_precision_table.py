"""The precision table and PrecisionSpec: adding a target touches the table and its transform
only (a dummy target registered by a fixture shows up in the CLI choices of three verbs, both
panels, route resolution, the exports and convert), and the spec's conversions."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import onnx
import pytest

from conftest import SAMPLES
from workbench.engines.export import export_for, polygraphy_command, python_script, trtexec_command
from workbench.engines.spec import BuildConfig, resolve_route
from workbench.cli import build_parser
from workbench.core.errors import Finding, WorkbenchError
from workbench.precision import table
from workbench.precision.spec import PrecisionSpec
from workbench.precision.transform import convert

RESNET = SAMPLES / "resnet_tiny.onnx"
CALLS = []


def _fx16_transform(proto, job):
    """The dummy target's transform: a copy with a marker, so the test sees it ran."""
    CALLS.append((job.target, list(job.exclude_nodes)))
    out = copy.deepcopy(proto)
    out.doc_string = "fx16 was here"
    return out, [Finding("info", "fx16-done", "dummy transform ran", source="precision")], \
        {"fx16": True}


@pytest.fixture
def fx16():
    """A made-up float target with its own builder flag, trtexec/polygraphy flags, transform."""
    p = table.register(table.Precision(
        "fx16", "float", "a dummy 16-bit float for the test", transform=_fx16_transform,
        builder_flag="FX16", trtexec="--fx16", polygraphy="--fx16",
        max_abs=table.FP16_MAX, aliases=("fixed16",), atol=3e-2, rtol=4e-2))
    CALLS.clear()
    yield p
    table.unregister("fx16")


def _choices(parser, verb, dest):
    sub = next(a for a in parser._actions if a.dest == "verb")
    action = next(a for a in sub.choices[verb]._actions if a.dest == dest)
    return list(action.choices)


def test_builtin_targets_and_their_renderings():
    assert table.names() == ("fp32", "fp16", "bf16", "int8", "fp8")
    assert table.lowered() == ("fp16", "bf16", "int8", "fp8")
    assert [n for n in table.names() if table.get(n).needs_calibration] == ["int8", "fp8"]
    assert table.get("half").name == "fp16" and table.get("FP8_E4M3").name == "fp8"
    assert table.get("int8").capability == "int8_flag" and table.get("fp32").capability is None
    with pytest.raises(WorkbenchError) as e:
        table.get("fp12", field="--to")
    assert e.value.field == "--to" and "fp32, fp16, bf16, int8, fp8" in e.value.hint


def test_a_registered_target_reaches_every_cli_choice(fx16):
    parser = build_parser()
    assert "fx16" in _choices(parser, "precision", "target")
    assert "fx16" in _choices(parser, "build", "precision")
    assert "fx16" in _choices(parser, "compare", "to")
    args = parser.parse_args(["build", "m.onnx", "-o", "m.engine", "--precision", "fx16",
                              "--exclude", "/a/Conv"])
    from workbench.cli.cmd_build import _config

    cfg = _config(args)
    assert cfg.precision == "fx16" and cfg.spec.exclude_nodes == ["/a/Conv"]


@pytest.mark.parametrize("argv", [["precision", str(RESNET), "--to", "fx16", "-o", "x.onnx"],
                                  ["compare", str(RESNET), "--to", "fx16"]])
def test_an_unregistered_target_is_refused_by_the_cli(argv, capsys):
    from workbench.cli import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "invalid choice: 'fx16'" in capsys.readouterr().err


def test_a_registered_target_reaches_both_panels(fx16):
    from widgets.build import BuildPanel
    from widgets.precision import PrecisionPanel

    pp = PrecisionPanel(RESNET)
    assert "fx16" in pp.target.options
    pp.target.value = "fx16"
    bp = BuildPanel.from_precision_panel(pp, target="sm89")
    assert "fx16" in bp.precision.options and bp.precision.value == "fx16"
    assert bp.current_config().precision == "fx16"


def test_a_registered_target_reaches_routes_and_exports(fx16):
    cfg = BuildConfig(precision="fx16", exclude_nodes=["/head/Gemm"])
    assert resolve_route(cfg, {"fx16_flag": True}) == "legacy-flags"
    assert resolve_route(cfg, {"strongly_typed_flag": True}) == "strongly-typed"
    with pytest.raises(WorkbenchError, match="BuilderFlag.FX16"):
        resolve_route(cfg, {"fp16_flag": True})
    line = trtexec_command(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "--fx16" in line.split() and "--layerPrecisions=/head/Gemm:fp32" in line
    from workbench.engines.export import config_from_trtexec

    back, _, _ = config_from_trtexec(line)
    assert back.precision == "fx16" and back.route == "legacy-flags"
    assert "--fx16" in polygraphy_command(cfg, "m.onnx", "m.engine",
                                          route="legacy-flags").split()
    src = python_script(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "LEGACY_PRECISION = 'fx16'" in src and "LEGACY_FLAG = 'FX16'" in src
    assert "CALIBRATOR = False" in src
    compile(src, "s.py", "exec")
    strong = export_for(cfg, onnx_path="m.onnx", engine_path="m.engine", route="strongly-typed")
    assert "--fx16" not in strong["trtexec"] and "--stronglyTyped" in strong["trtexec"]


def test_a_registered_target_converts_through_its_transform(fx16):
    res = convert(RESNET, "fixed16", exclude_nodes=[])
    assert res.target == "fx16" and CALLS == [("fx16", [])]
    assert res.proto.doc_string == "fx16 was here" and res.report["fx16"] is True
    codes = [f.code for f in res.findings]
    assert "fx16-done" in codes and "no-overflow-check" in codes  # float checks ran too
    onnx.checker.check_model(res.proto)


def test_precision_spec_conversions_each_way():
    parser = build_parser("precision")
    args = parser.parse_args(["precision", "m.onnx", "--to", "int8", "--exclude", "/a",
                              "--exclude-op", "Softmax", "--calib", "c.npz", "--calib-method",
                              "minmax", "--no-per-channel", "--no-keep-io", "-o", "o.onnx"])
    spec = PrecisionSpec.from_args(args)
    assert spec == PrecisionSpec("int8", ["/a"], ["Softmax"], keep_io_types=False,
                                 calibration="c.npz", calibrate_method="minmax",
                                 per_channel=False)
    assert PrecisionSpec.from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json())["target"] == "int8"
    assert spec.convert_kwargs()["per_channel"] is False
    with pytest.raises(WorkbenchError, match="unknown precision spec field 'precision'"):
        PrecisionSpec.from_dict({"precision": "fp16"})


def test_build_config_holds_the_spec_and_keeps_its_flat_json():
    spec = PrecisionSpec("fp16", exclude_nodes=["/a"], calibration="c.npz")
    cfg = BuildConfig.from_spec(spec, target="sm89")
    assert cfg.spec == spec and cfg.precision == "fp16" and cfg.exclude_nodes == ["/a"]
    d = json.loads(cfg.to_json())
    assert d["precision"] == "fp16" and d["allow_random_calibration"] is False
    assert "spec" not in d and "target" in d and d["target"] == "sm89"
    again = BuildConfig.from_json(cfg.to_json())
    assert again == cfg and again.spec == spec
    cfg.exclude_nodes = ["/b"]  # the flat names write through to the spec
    assert cfg.spec.exclude_nodes == ["/b"]
    assert cfg.replace(precision="int8").spec.target == "int8" and spec.target == "fp16"
    with pytest.raises(WorkbenchError) as e:
        BuildConfig(precision="fp12")
    assert e.value.field == "precision"


def test_build_panel_reads_only_the_precision_panels_public_spec():
    """BuildPanel.from_precision_panel needs model, precision_spec() and
    validated_profiles(), nothing else: a stand-in without any widget works."""
    from widgets.build import BuildPanel

    class Holder:
        model = str(RESNET)

        def precision_spec(self):
            return PrecisionSpec("bf16", exclude_ops=["Softmax"])

        def validated_profiles(self):
            return [{"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}]

    bp = BuildPanel.from_precision_panel(Holder(), target="sm89")
    cfg = bp.current_config()
    assert cfg.spec == PrecisionSpec("bf16", exclude_ops=["Softmax"])
    assert cfg.profiles[0]["input"][2] == [8, 3, 32, 32] and cfg.target == "sm89"


def test_cli_build_parser_stays_light():
    """argparse for `build` reads the table: still no dataclasses/numpy/onnx (the CLI's start-up
    time: `workbench --help` and every verb pay for what the parser imports)."""
    code = ("import sys\nfrom workbench.cli import build_parser\nbuild_parser('build')\n"
            "print(sorted(m for m in ('dataclasses', 'numpy', 'onnx') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_a_registered_target_brings_its_comparison_tolerances(fx16):
    """compare / precision measurement read the default tolerances from the same row."""
    from workbench.compare import tolerances as compare_tolerances

    assert table.tolerances("fx16") == (3e-2, 4e-2) == table.tolerances("fixed16")
    assert compare_tolerances("fx16", rtol=1e-1) == (3e-2, 1e-1)
    assert table.tolerances("fp32") == (1e-3, 1e-3) and table.tolerances("int8") == (1e-2, 1e-2)


def test_fp32_on_a_tensorrt_without_strongly_typed_networks_is_a_weakly_typed_build():
    """TensorRT 8.6 has no strongly typed networks: an FP32 build said 'route: strongly-typed'
    and its trtexec line carried --stronglyTyped, which trtexec 8.6 does not know."""
    cfg = BuildConfig(precision="fp32")
    assert resolve_route(cfg, {"fp16_flag": True}) == "legacy-flags"
    assert resolve_route(cfg, {"strongly_typed_flag": True}) == "strongly-typed"
    line = trtexec_command(cfg, "m.onnx", "m.engine", route=resolve_route(cfg, {}))
    assert "--stronglyTyped" not in line and "--fp16" not in line and "--noTF32" in line


def test_a_quantized_model_gets_the_int8_flag_on_the_builder_flag_route():
    """An INT8 Q/DQ model built on TensorRT 8.6: 'Int8 precision has been set for a layer ...
    but int8 is not configured in the builder' (the node was blamed as 'or', a word of that
    sentence). Its own Q/DQ nodes ask for the INT8 flag; a float model asks for none."""
    from workbench.engines.engine import explicit_quantization_flags
    from workbench.precision import convert
    from workbench.worker.loaders import blame

    q = convert(SAMPLES / "resnet_tiny.onnx", "int8",
                calibration=str(SAMPLES / "calib" / "resnet_tiny.npz")).proto
    assert explicit_quantization_flags(q.graph) == ["INT8"]
    assert explicit_quantization_flags(onnx.load(str(SAMPLES / "resnet_tiny.onnx")).graph) == []
    msg = ("Error Code 4: Internal Error (Int8 precision has been set for a layer or layer "
           "output, but int8 is not configured in the builder)")
    layers = {"or": {"nodes": ["or"], "type": "constant"},
              "/stem/conv/Conv": {"nodes": ["/stem/conv/Conv"], "type": "convolution"}}
    assert blame(msg, layers) == (None, [])
    assert blame("(/stem/conv/Conv: bad weights)", layers)[0] == "/stem/conv/Conv"


@pytest.fixture
def int4():
    """A made-up quantized target: INT4 Q/DQ (ONNX INT4 zero points, opset 21), no builder
    flag; everything else is the table's default for a quantized row."""
    p = table.register(table.Precision(
        "int4", "quantized", "a dummy INT4 Q/DQ target for the test",
        transform="workbench.precision.transform:qdq", needs_calibration=True,
        flag_route=False, onnx_dtype=onnx.TensorProto.INT4, min_opset=21))
    yield p
    table.unregister("int4")


def test_a_registered_quantized_target_reaches_the_cli_and_panels(int4):
    from widgets.build import BuildPanel
    from widgets.precision import PrecisionPanel

    parser = build_parser()
    for verb, dest in (("precision", "target"), ("build", "precision"), ("compare", "to")):
        assert "int4" in _choices(parser, verb, dest)
    assert table.is_quantized("int4") and not table.is_low_float("int4")
    assert [n for n in table.names() if table.get(n).needs_calibration] == ["int8", "fp8", "int4"]
    pp = PrecisionPanel(RESNET)
    assert "int4" in pp.target.options
    bp = BuildPanel(RESNET)
    assert "int4" in bp.precision.options
    cfg = BuildConfig(precision="int4")
    assert resolve_route(cfg, {"strongly_typed_flag": True}) == "strongly-typed"


def test_a_registered_quantized_target_quantizes_to_its_qdq_type(int4):
    """The quantize path reads the row: opset raised to the row's, onnxruntime's QuantType from
    its Q/DQ element type; the result holds INT4 zero points only and runs in onnxruntime."""
    import numpy as np
    import onnxruntime as ort

    from workbench.core.qdq import qdq_precision

    res = convert(RESNET, "int4", calibration=str(SAMPLES / "calib" / "resnet_tiny.npz"))
    assert res.target == "int4"
    q = res.proto
    opset = next(o.version for o in q.opset_import if o.domain in ("", "ai.onnx"))
    assert opset >= 21
    zero_points = {q.graph.initializer[i].data_type for i, t in enumerate(q.graph.initializer)
                   if t.name.endswith("_zero_point")}
    assert zero_points == {onnx.TensorProto.INT4}
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) >= 4
    assert qdq_precision(q) == "int8"  # an integer Q/DQ graph: judged like INT8
    onnx.checker.check_model(q)
    feed = dict(np.load(SAMPLES / "calib" / "resnet_tiny.npz"))
    sess = ort.InferenceSession(q.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    out = sess.run(None, {name: feed[name][:1]})[0]
    assert np.isfinite(out).all()
    assert res.report.get("quantized_nodes")
