"""Build options as objects: every option's flags reach the verbs that build (build, matrix,
timing-capture: the matrix's axes and timing-capture's GPU excepted), the precision flags are
one block shared by `precision` and `build`, the spec validates through the options with
errors that name the field, and tactic sources / I/O formats reach a matrix's variants and
timing-capture's build config."""
from __future__ import annotations

import pytest

from conftest import SAMPLES
from workbench.engines import options
from workbench.engines.spec import BuildConfig
from workbench.cli import build_parser, main
from workbench.core.errors import WorkbenchError
from workbench.precision.options import BUILD_PRECISION_FIELDS, PRECISION_OPTIONS

RESNET = SAMPLES / "resnet_tiny.onnx"


def _flags(verb: str) -> set:
    p = build_parser(verb).verb_parsers[verb]
    return {s for a in p._actions for s in a.option_strings}


def _option_flags(exclude=()) -> set:
    return {f for o in options.OPTIONS if not set(o.fields) & set(exclude) for f in o.flags}


def test_every_build_option_reaches_the_verbs_that_build():
    build, matrix, capture = _flags("build"), _flags("matrix"), _flags("timing-capture")
    assert _option_flags() <= build
    assert "--no-tf32" in build  # (the TF32 option's BooleanOptionalAction)
    # the matrix's --target / --opt-level are axes (lists), its own flags; the rest are options
    assert _option_flags(exclude=("target", "builder_optimization_level")) <= matrix
    assert {"--tactic-sources", "--input-io-formats", "--output-io-formats"} <= matrix
    assert _option_flags(exclude=("target",)) <= capture and "--target" not in capture
    precision = _flags("precision")
    for o in PRECISION_OPTIONS:  # one block: every one in `precision`, the shared in `build`
        assert set(o.flags) <= precision
        assert (set(o.flags) <= build) == (o.field in BUILD_PRECISION_FIELDS), o.flags
    assert {"--exclude", "--exclude-op", "--calib", "--calib-method"} <= build


def test_each_option_owns_distinct_fields_and_flags():
    fields = [n for o in options.OPTIONS for n in o.fields]
    flags = [f for o in options.OPTIONS for f in o.flags]
    assert len(fields) == len(set(fields)) and len(flags) == len(set(flags))
    assert set(fields) <= set(BuildConfig().to_dict()) | set(options.optional_fields())


def test_the_build_cli_fills_the_spec_through_the_options():
    from workbench.cli.cmd_build import _config

    args = build_parser("build").parse_args(
        ["build", "m.onnx", "-o", "m.engine", "--workspace", "1G", "--opt-level", "2",
         "--tactic-sources", "edge_mask_convolutions, jit_convolutions", "--no-tf32",
         "--input-io-formats", "FP16:HWC8", "--hardware-compat", "ampere_plus",
         "--flag", "refit", "--target", "SM89"])
    cfg = _config(args)
    assert cfg.workspace_bytes == 1 << 30 and cfg.builder_optimization_level == 2
    assert cfg.tactic_sources == ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
    assert cfg.tf32 is False and cfg.input_io_formats == "fp16:hwc8"
    assert cfg.hardware_compatibility == "ampere_plus" and cfg.extra_flags == ["REFIT"]
    assert cfg.target == "sm89"
    # flags left out set nothing: a fresh config's values
    plain = _config(build_parser("build").parse_args(["build", "m.onnx", "-o", "m.engine"]))
    assert plain.to_dict() == BuildConfig(backend="auto").to_dict()


@pytest.mark.parametrize("field,value,needle", [
    ("workspace_bytes", 0, "positive"), ("builder_optimization_level", 9, "0..5"),
    ("target", "ampere", "compute capability"), ("hardware_compatibility", "hopper", "unknown"),
    ("tf32", "yes", "true, false or null"), ("output_io_formats", "fp16:nhwc", "I/O format")])
def test_the_spec_validates_through_the_options_naming_the_field(field, value, needle):
    with pytest.raises(WorkbenchError) as e:
        BuildConfig(**{field: value})
    assert e.value.field == field and needle in e.value.message


def test_the_precision_flags_fill_one_precision_spec():
    from workbench.precision.spec import PrecisionSpec

    args = build_parser("precision").parse_args(
        ["precision", "m.onnx", "--to", "int8", "-o", "o.onnx", "--exclude", "/a",
         "--exclude-op", "Softmax", "--calib", "d.npz", "--calib-method", "minmax",
         "--allow-random", "--no-keep-io", "--no-per-channel"])
    assert PrecisionSpec.from_args(args) == PrecisionSpec(
        "int8", exclude_nodes=["/a"], exclude_ops=["Softmax"], calibration="d.npz",
        calibrate_method="minmax", allow_random=True, keep_io_types=False, per_channel=False)
    plain = build_parser("precision").parse_args(["precision", "m.onnx", "--to", "fp16",
                                                  "-o", "o.onnx"])
    assert PrecisionSpec.from_args(plain) == PrecisionSpec("fp16")


def test_a_bad_workspace_flag_names_the_flag_and_what_to_write(capsys, tmp_path):
    rc = main(["build", str(RESNET), "-o", str(tmp_path / "m.engine"), "--workspace", "lots"])
    err = capsys.readouterr().err
    assert rc == 2 and "bad --workspace 'lots'" in err and "512M" in err
    assert not (tmp_path / "m.engine").exists()


def test_tactic_sources_and_io_formats_reach_every_matrix_variant():
    from workbench.cli.cmd_matrix import plan

    args = build_parser("matrix").parse_args(
        ["matrix", str(RESNET), "-o", "out", "--precision", "fp32,fp16", "--opt-level", "0,3",
         "--tactic-sources", "JIT_CONVOLUTIONS", "--input-io-formats", "fp16:chw",
         "--workspace", "256M"])
    variants = plan(args)
    assert len(variants) == 4
    for v in variants:
        cfg = v.config()
        assert cfg.tactic_sources == ["JIT_CONVOLUTIONS"]
        assert cfg.input_io_formats == "fp16:chw" and cfg.workspace_bytes == 256 << 20
    assert {v.config().builder_optimization_level for v in variants} == {0, 3}


def test_timing_capture_builds_with_the_options_and_refuses_them_for_an_engine(tmp_path, capsys):
    from workbench.cli.cmd_timing_capture import NOT_HERE
    from workbench.measure.capture import capture_build_config

    args = build_parser("timing-capture").parse_args(
        ["timing-capture", str(RESNET), "--tactic-sources", "JIT_CONVOLUTIONS",
         "--output-io-formats", "fp16:chw", "--tf32"])
    build = options.overrides(args, [o for o in options.OPTIONS
                                     if not set(o.fields) & set(NOT_HERE)])
    assert build == {"tactic_sources": ["JIT_CONVOLUTIONS"], "output_io_formats": "fp16:chw",
                     "tf32": True}
    cfg = capture_build_config(RESNET, fp16=True, build=build)
    assert cfg.tactic_sources == ["JIT_CONVOLUTIONS"] and cfg.output_io_formats == "fp16:chw"
    assert cfg.workspace_bytes == 2048 << 20 and cfg.precision == "fp16"  # its own defaults
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"\0" * 64)
    rc = main(["timing-capture", str(engine), "--tactic-sources", "JIT_CONVOLUTIONS"])
    err = capsys.readouterr().err
    assert rc == 2 and "--tactic-sources only apply when building from ONNX" in err


def test_the_worker_refuses_a_builder_config_attribute_this_tensorrt_lacks(tmp_path):
    """A ConfigAttribute option names an IBuilderConfig attribute; the real worker (TensorRT-RTX
    here) probes it and refuses the build naming the field, before building anything."""
    from workbench.worker.client import WorkerClient, WorkerError

    client = WorkerClient()
    try:
        with pytest.raises(WorkerError) as e:
            client.call("build", {"onnx_path": str(RESNET), "engine_path": str(tmp_path / "x"),
                                  "backend": "tensorrt-rtx", "target": "sm89",
                                  "profiles": [{"input": [[1, 3, 32, 32]] * 3}],
                                  "config_attributes": {"no_such_knob": 1}}, timeout=120)
    finally:
        client.close()
    assert e.value.code == "bad-args" and "no_such_knob" in e.value.message
    assert not (tmp_path / "x").exists()
