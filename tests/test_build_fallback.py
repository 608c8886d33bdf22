"""Building a quantized target with a float fallback (`build --precision int8 --fallback
fp16`): on the builder-flag route (TensorRT <= 10) the FP32 model with the INT8 and FP16
builder flags, as `trtexec --int8 --fp16`; on the strongly typed route the chained ONNX
(INT8 Q/DQ + FP16 Casts), built here by real TensorRT-RTX on the CPU through the worker."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from conftest import SAMPLES
from test_build_request import _legacy_job  # (the builder-flag job the request stage reads)
from workbench.core.errors import WorkbenchError
from workbench.engines.engine import BuildConfig, build_engine
from workbench.engines.export import config_from_trtexec, export_for, polygraphy_command, \
    python_script, trtexec_command
from workbench.engines.spec import resolve_route

RESNET = SAMPLES / "resnet_tiny.onnx"
CALIB = str(SAMPLES / "calib" / "resnet_tiny.npz")
PROFILE = {"input": [[1, 3, 32, 32], [4, 3, 32, 32], [8, 3, 32, 32]]}


def _config(**kw):
    return BuildConfig(precision="int8", fallback="fp16", calibration=CALIB,
                       profiles=[PROFILE], **kw)


def test_legacy_request_sets_the_int8_and_fp16_flags_on_the_fp32_model():
    from workbench.engines.stages.prepare import prepare_onnx
    from workbench.engines.stages.request import worker_request

    bn = next(n.name for n in onnx.load(str(RESNET)).graph.node
              if n.op_type == "BatchNormalization")
    job = _legacy_job(RESNET, _config(exclude_nodes=[bn]))
    prepared = prepare_onnx(job)
    assert Path(prepared.path) == RESNET  # the weakly typed builder gets the FP32 model
    req, found = worker_request(job, prepared)
    assert req.legacy_flags and req.builder_flag == "INT8" and req.calibrate
    assert req.extra_flags == ("FP16",)
    assert req.layer_precisions == {bn: "float32"}  # excluded: held in FP32 as before
    assert [f.code for f in found] == ["fallback-flag"]
    assert "INT8 and FP16 builder flags" in found[0].message
    # without the fallback: the INT8 flag alone
    plain, _ = worker_request(_legacy_job(RESNET, BuildConfig(
        precision="int8", calibration=CALIB, profiles=[PROFILE])), prepared)
    assert plain.builder_flag == "INT8" and not plain.extra_flags


def test_equivalent_lines_carry_both_precision_flags():
    cfg = _config()
    line = trtexec_command(cfg, "m.onnx", "m.engine", route="legacy-flags", calib_cache="c.cache")
    assert "--int8 --fp16 --calib=c.cache" in line and "--stronglyTyped" not in line
    back, onnx_path, _ = config_from_trtexec(line)
    assert (back.precision, back.fallback, back.route) == ("int8", "fp16", "legacy-flags")
    poly = polygraphy_command(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert " --int8 --fp16" in poly
    script = python_script(cfg, "m.onnx", "m.engine", route="legacy-flags")
    assert "LEGACY_FLAG = 'INT8'" in script and "FALLBACK_FLAG = 'FP16'" in script
    compile(script, "build.py", "exec")
    # strongly typed: the precision is in the ONNX, no builder flag
    typed = trtexec_command(cfg, "m.onnx", "m.engine", route="strongly-typed")
    assert "--stronglyTyped" in typed and "--fp16" not in typed and "--int8" not in typed
    assert "FALLBACK_FLAG = None" in python_script(cfg, "m.onnx", "m.engine",
                                                   route="strongly-typed")
    notes = export_for(cfg, onnx_path="m.onnx", engine_path="m.engine",
                       route="strongly-typed")["notes"]
    assert any("workbench precision MODEL --to int8 --fallback fp16 --calib" in n
               for n in notes)
    legacy = export_for(cfg, onnx_path="m.onnx", engine_path="m.engine",
                        route="legacy-flags")["notes"]
    assert any("trtexec --int8 --fp16" in n for n in legacy)


def test_a_tensorrt_without_the_fallback_flag_refuses_naming_fallback():
    caps = {"int8_flag": True, "fp16_flag": False, "strongly_typed_flag": False}
    with pytest.raises(WorkbenchError) as e:
        resolve_route(_config(), caps)
    assert e.value.field == "fallback" and "FP16" in e.value.message
    assert resolve_route(_config(), dict(caps, fp16_flag=True)) == "legacy-flags"
    assert resolve_route(_config(), dict(caps, strongly_typed_flag=True)) == "strongly-typed"


def test_strongly_typed_build_gets_the_chained_onnx_and_tensorrt_rtx_builds_it():
    """TensorRT-RTX (strongly typed only) parses and builds the INT8 Q/DQ + FP16 Cast ONNX
    ahead of time for sm89 on this CPU: its layers compute INT8 (Q/DQ), FP16 (the BN, Relu,
    Add layers between them) and FP32."""
    res = build_engine(RESNET, _config(target="sm89", builder_optimization_level=0))
    assert res.route == "strongly-typed" and res.backend == "tensorrt-rtx"
    built = onnx.load(res.onnx_path, load_external_data=False)
    ops = [n.op_type for n in built.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops and "Cast" in ops
    assert any(f.code == "fallback-precisions" for f in res.findings)
    out_types = {(layer["type"], o["dtype"]) for layer in res.layers for o in layer["outputs"]}
    assert ("QUANTIZE", "INT8") in out_types
    assert ("SCALE", "HALF") in out_types and ("ACTIVATION", "HALF") in out_types
    assert ("CONVOLUTION", "FLOAT") in out_types  # (the quantized conv's output, as parsed)
    assert res.config["fallback"] == "fp16"


def test_a_float_flag_beside_int8_is_named_as_a_fallback():
    """`--precision int8 --flag FP16` (the flags alone) builds as `--int8 --fp16` here but
    nowhere else: the request says so and names --fallback fp16."""
    from workbench.engines.stages.prepare import PreparedOnnx
    from workbench.engines.stages.request import worker_request

    prepared = PreparedOnnx(path=RESNET, findings=[], speculative=True)
    job = _legacy_job(RESNET, BuildConfig(precision="int8", calibration=CALIB,
                                          profiles=[PROFILE], extra_flags=["FP16"]))
    req, found = worker_request(job, prepared)
    assert req.builder_flag == "INT8" and req.extra_flags == ("FP16",)
    assert [f.code for f in found] == ["flag-is-a-fallback"]
    assert "--fallback fp16" in found[0].hint
    _, said = worker_request(_legacy_job(RESNET, _config()), prepared)
    assert "flag-is-a-fallback" not in [f.code for f in said]
