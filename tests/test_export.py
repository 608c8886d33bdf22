"""Export: trtexec line round-trips the config, polygraphy line, standalone script compiles,
tutorial-era calls explained; build-log messages become findings with node names."""
from __future__ import annotations

import html
import re
import shlex

import onnx
import pytest

from conftest import SAMPLES
from workbench.engines.engine import BuildConfig
from workbench.core.trtlog import NameIndex, findings_from_log
from workbench.engines.export import (MIGRATION, config_from_trtexec, export_for, migration_markdown,
                              polygraphy_command, python_script, trtexec_command)

# what trtexec can express (precision of a strongly typed build lives in the ONNX itself)
TRTEXEC_FIELDS = ("profiles", "workspace_bytes", "builder_optimization_level", "timing_cache",
                  "plugins", "extra_flags", "route", "tactic_sources")


def _strongly_typed() -> BuildConfig:
    return BuildConfig(
        profiles=[{"input_ids": [[1, 8], [4, 32], [64, 128]],
                   "attention_mask": [[1, 8], [4, 32], [64, 128]]},
                  {"input_ids": [[1, 1], [1, 1], [1, 1]],
                   "attention_mask": [[1, 1], [1, 1], [1, 1]]}],
        workspace_bytes=512 << 20, builder_optimization_level=2,
        timing_cache="/tmp/my cache/t.cache", plugins=["/opt/plugins/libmy.so"],
        extra_flags=["REFIT"], route="strongly-typed", backend="tensorrt",
        tactic_sources=["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"])


def test_trtexec_line_round_trips_a_strongly_typed_config():
    c = _strongly_typed()
    line = trtexec_command(c, "/m/bert.onnx", "/m/bert.engine", route="strongly-typed")
    assert line.startswith("trtexec --onnx=/m/bert.onnx --saveEngine=/m/bert.engine")
    for flag in ("--stronglyTyped", "--memPoolSize=workspace:512M",
                 "--builderOptimizationLevel=2", "--profilingVerbosity=detailed",
                 "--exportLayerInfo=/m/bert.engine.layers.json", "--refit",
                 "--staticPlugins=/opt/plugins/libmy.so",
                 "--tacticSources=+EDGE_MASK_CONVOLUTIONS,+JIT_CONVOLUTIONS",
                 "--minShapes=input_ids:1x8,attention_mask:1x8",
                 "--maxShapes=input_ids:64x128,attention_mask:64x128"):
        assert flag in line, flag
    assert "--timingCacheFile='/tmp/my cache/t.cache'" in line  # quoted for the shell
    back, onnx_path, engine = config_from_trtexec(line)
    assert (onnx_path, engine) == ("/m/bert.onnx", "/m/bert.engine")
    for f in TRTEXEC_FIELDS:
        assert getattr(back, f) == getattr(c, f), f
    assert back.backend == "tensorrt"


def test_trtexec_line_round_trips_a_legacy_int8_config():
    c = BuildConfig(precision="int8", route="legacy-flags", exclude_nodes=["/head/Gemm"],
                    profiles=[{"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]]}],
                    workspace_bytes=3 << 30)
    line = trtexec_command(c, "r.onnx", "r.engine", route="legacy-flags",
                           calib_cache="r.calib")
    for flag in ("--int8", "--calib=r.calib", "--precisionConstraints=obey",
                 "--layerPrecisions=/head/Gemm:fp32", "--memPoolSize=workspace:3G"):
        assert flag in line
    assert "--stronglyTyped" not in line
    back, _, _ = config_from_trtexec(line)
    for f in TRTEXEC_FIELDS + ("precision", "exclude_nodes"):
        assert getattr(back, f) == getattr(c, f), f


def test_trtexec_parse_accepts_units_and_tensorrt_rtx():
    back, _, _ = config_from_trtexec("tensorrt_rtx --onnx=a.onnx --saveEngine=a.plan "
                                     "--memPoolSize=workspace:1024 --builderOptimizationLevel=0")
    assert back.backend == "tensorrt-rtx" and back.workspace_bytes == 1 << 30


def test_polygraphy_line_carries_the_same_settings():
    line = polygraphy_command(_strongly_typed(), "m.onnx", "m.engine", route="strongly-typed")
    argv = shlex.split(line)
    assert argv[:6] == ["polygraphy", "convert", "m.onnx", "--convert-to", "trt", "-o"]
    assert "--strongly-typed" in argv and "--builder-optimization-level" in argv
    i = argv.index("--trt-max-shapes")
    assert argv[i + 1] == "input_ids:[64,128]"
    rtx = polygraphy_command(BuildConfig(), "m.onnx", "m.engine", backend="tensorrt-rtx")
    assert rtx.startswith("POLYGRAPHY_USE_TENSORRT_RTX=1 polygraphy convert")


@pytest.mark.parametrize("route,prec", [("strongly-typed", "fp16"), ("legacy-flags", "int8"),
                                        ("legacy-flags", "fp16")])
def test_standalone_script_compiles_and_uses_the_modern_api(route, prec):
    c = BuildConfig(precision=prec, route=route, target="sm89,sm120",
                    profiles=[{"input": [[1, 3, 32, 32], [8, 3, 32, 32], [32, 3, 32, 32]]}],
                    workspace_bytes=1 << 30, builder_optimization_level=1)
    src = python_script(c, "/m/r.onnx", "/m/r.engine", route=route, calib_cache="/m/r.calib")
    code = compile(src, "build_and_run.py", "exec")
    names = set(code.co_names) | {n for const in code.co_consts if hasattr(const, "co_names")
                                  for n in const.co_names}
    for call in ("set_memory_pool_limit", "build_serialized_network", "set_input_shape",
                 "set_tensor_address", "execute_async_v3"):
        assert call in src, call
    for old in ("max_workspace_size", "build_engine(", "set_binding_shape", "execute_v2",
                "execute_async_v2", "pycuda"):
        assert old not in src, old
    assert "ONNX = '/m/r.onnx'" in src and "TARGETS = ['sm89', 'sm120']" in src
    assert ("LEGACY_PRECISION = %r" % (prec if route == "legacy-flags" else None)) in src
    assert "build" in names or "run" in names


def test_migration_table_explains_tutorial_calls():
    text = migration_markdown()
    for old, new in (("max_workspace_size", "set_memory_pool_limit"),
                     ("build_engine", "build_serialized_network"),
                     ("set_binding_shape", "set_input_shape"),
                     ("execute_async_v2", "execute_async_v3"),
                     ("IInt8EntropyCalibrator2", "Q/DQ"),
                     ("BuilderFlag.FP16", "STRONGLY_TYPED")):
        row = next(r for r in MIGRATION if old in r[0])
        assert new in row[1], (old, row)
        assert old in text
    assert text.count("\n") == len(MIGRATION) + 1


def test_export_for_bundles_everything_and_notes_rtx_target():
    e = export_for(BuildConfig(target="sm89"), onnx_path="a.onnx", engine_path="a.engine",
                   backend="tensorrt-rtx", route="strongly-typed")
    assert set(e) == {"onnx", "trtexec", "polygraphy", "script", "notes"}
    assert e["onnx"] == "a.onnx"  # the ONNX the lines read
    assert any("sm89" in n for n in e["notes"])
    compile(e["script"], "s.py", "exec")


# --------------------------------------------------------------------------- build log
def test_build_log_messages_become_findings_with_nodes():
    g = onnx.load(str(SAMPLES / "bert_tiny.onnx"), load_external_data=False).graph
    names = NameIndex.from_graph(g)
    some_node = next(n.name for n in g.node if n.op_type == "MatMul")
    init = next(i.name for i in g.initializer)
    consumers = [n.name for n in g.node if init in n.input]
    log = [  # as TensorRT 8.6/10.x print them
        {"level": "warning", "message": "Detected FP32 infinity values and converted them to "
         f"corresponding FP16 infinity. [ONNX Layer: {some_node}]"},
        {"level": "warning", "message": f"Weights [name={init}] had the following issues when "
         "converted to FP16:"},
        {"level": "warning", "message": " - Values out of FP16 range detected. Converting to "
         "closest FP16 value."},
        {"level": "warning", "message": "onnx2trt_utils.cpp:374: Your ONNX model has been "
         "generated with INT64 weights, while TensorRT does not natively support INT64. "
         "Attempting to cast down to INT32."},
        {"level": "warning", "message": "onnx2trt_utils.cpp:374: Your ONNX model has been "
         "generated with INT64 weights, while TensorRT does not natively support INT64. "
         "Attempting to cast down to INT32."},
        {"level": "warning", "message": "Missing scale and zero-point for tensor "
         f"{g.node[3].output[0]}, expect fall back to non-int8 implementation for any layer "
         "consuming or producing given tensor"},
        {"level": "error", "message": "getPluginCreator could not find plugin: FastGelu "
         "version: 1"},
        {"level": "warning", "message": "Something new that TensorRT says."},
        {"level": "info", "message": "Total Activation Memory: 1024"},
    ]
    fs = findings_from_log(log, names)
    by = {}
    for f in fs:
        by.setdefault(f.code, f)
    assert by["fp16-overflow"].nodes[0] == some_node
    weights = [f for f in fs if init in f.tensors]
    assert weights and weights[0].code == "fp16-overflow"
    assert set(consumers) <= set(weights[0].nodes)
    assert by["int64-cast"].extra["count"] == 2
    assert by["precision-fallback"].nodes == [g.node[3].name]
    assert by["missing-plugin"].severity == "error"
    assert by["build-warning"].message == "Something new that TensorRT says."
    assert all(f.source == "build-log" and f.hint for f in fs if f.code != "build-warning")
    assert not any("Activation Memory" in f.message for f in fs)


def test_migration_html_wraps_to_the_output_area():
    """The notebook's table (05_build): a Markdown table grew to its longest unbreakable call
    (~1100 px, cut at JupyterLab's ~900-px output area); this one takes the area's width with
    fixed columns and wrapping cells (the real-browser check: tests/browser/test_readable_outputs.py)."""
    from workbench.engines.export import MIGRATION_COLUMNS, migration_html

    h = migration_html()
    assert h.startswith("<div class='wb-migration' style='max-width:100%;overflow-x:auto'>")
    assert "table-layout:fixed;width:100%" in h and "nowrap" not in h
    assert sum(w for _, w in MIGRATION_COLUMNS) == 100
    assert h.count("<tr>") == len(MIGRATION) + 1
    assert h.count("overflow-wrap:anywhere") >= 3 * len(MIGRATION)
    text = html.unescape(re.sub(r"<[^>]+>", "", h))
    for old, new, why in MIGRATION:
        assert old in text and new in text and why in text
    assert "builder.<wbr>build_<wbr>serialized_<wbr>network(<wbr>network" in h  # breaks at . _ (


def test_notes_say_which_tools_the_lines_need_that_this_machine_lacks(tmp_path, monkeypatch):
    """The pip wheels carry no tensorrt_rtx/trtexec executable and no `tensorrt_rtx` module
    for Polygraphy: the notes say so (probed on PATH / sys.path), and say nothing once they are
    there; a TensorRT-RTX build without --target says what the default targets are."""
    import stat

    cfg = BuildConfig(precision="fp32")
    kw = dict(onnx_path="m.onnx", engine_path="m.engine", backend="tensorrt-rtx")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    notes = " ".join(export_for(cfg, **kw)["notes"])
    assert "`tensorrt_rtx` is not on PATH" in notes and "TensorRT-RTX SDK archive" in notes
    # (polygraphy is a test dependency here: importable, its command not on this PATH)
    assert "the `polygraphy` Python package is installed but its command is not on PATH" \
        in notes and "--export-script" in notes
    assert "no --target: TensorRT-RTX's default" in notes and "sm75" in notes
    # the tools present: no such note
    for exe in ("tensorrt_rtx", "polygraphy"):
        p = empty / exe
        p.write_text("#!/bin/sh\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    pkg = tmp_path / "site" / "tensorrt_rtx"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    notes = " ".join(export_for(cfg, **kw)["notes"])
    assert "on this machine" not in notes, notes
    targeted = " ".join(export_for(BuildConfig(precision="fp32", target="sm89"), **kw)["notes"])
    assert "target compute capability sm89" in targeted and "no --target" not in targeted


def test_the_standalone_script_answers_help_without_building(tmp_path):
    """`python3 build_and_run.py --help` started a build; it now prints what the script does
    and its one flag, and an unknown argument is refused before any work."""
    import subprocess
    import sys

    c = BuildConfig(precision="fp16", target="sm89")
    script = tmp_path / "build_and_run.py"
    script.write_text(python_script(c, str(tmp_path / "none.onnx"), str(tmp_path / "e.engine")))
    r = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "usage: python3" in r.stdout and "--build-only" in r.stdout
    assert "Build none.onnx into a TensorRT engine" in r.stdout
    bad = subprocess.run([sys.executable, str(script), "--bogus"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 1 and "unknown argument(s): --bogus (try --help)" in bad.stderr
    assert not (tmp_path / "e.engine").exists()  # neither built anything (none.onnx is absent)


def test_an_fp32_engine_is_built_without_tf32_and_every_line_says_so():
    """TensorRT (and trtexec) turn TF32 on for FP32 layers on Ampere and later: an "FP32"
    ResNet-18 engine was off by 8e-3 on the H200 and failed FP32 tolerance. FP32 engines now
    build without TF32 unless asked (as Polygraphy builds), and the trtexec, Polygraphy and
    script exports build the same engine; other precisions keep TensorRT's default."""
    from workbench.engines.cache import cache_key
    from workbench.core.errors import WorkbenchError

    fp32, fp16 = BuildConfig(precision="fp32"), BuildConfig(precision="fp16")
    assert fp32.effective_tf32 is False and fp16.effective_tf32 is None
    assert BuildConfig(precision="fp32", tf32=True).effective_tf32 is True
    assert BuildConfig(precision="fp16", tf32=False).effective_tf32 is False
    with pytest.raises(WorkbenchError) as e:
        BuildConfig(tf32="yes")
    assert e.value.field == "tf32"
    line = trtexec_command(fp32, "m.onnx", "m.engine")
    assert "--noTF32" in line and "--noTF32" not in trtexec_command(fp16, "m.onnx", "m.engine")
    back, _, _ = config_from_trtexec(line)
    assert back.tf32 is None and back.effective_tf32 is False  # the default, not a setting
    on, _, _ = config_from_trtexec("trtexec --onnx=m.onnx --saveEngine=m.engine")
    assert on.effective_tf32 is True  # what trtexec does without --noTF32
    assert "--tf32" not in polygraphy_command(fp32, "m.onnx", "m.engine")
    assert "--tf32" in polygraphy_command(fp16, "m.onnx", "m.engine")
    script = python_script(fp32, "m.onnx", "m.engine")
    assert "TF32 = False" in script and "clear_flag" in script
    compile(script, "build.py", "exec")
    # the cache tells the two apart; configs without a TF32 choice keep their old keys
    k32 = cache_key("h", fp32, "strongly-typed", "tensorrt", "10", None)[1]
    k16 = cache_key("h", fp16, "strongly-typed", "tensorrt", "10", None)[1]
    assert k32["tf32"] is False and "tf32" not in k16


def test_the_worker_clears_tf32_on_a_real_builder_config():
    """The builder config the worker makes (TensorRT-RTX, real bindings) has TF32 cleared for
    tf32=False and set for True."""
    trt = pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.worker import loaders as L

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    net = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
    for tf32 in (False, True):
        cfg = L.create_config(trt, builder, net, logger, tf32=tf32)
        assert cfg.config.get_flag(trt.BuilderFlag.TF32) is tf32


def test_tensorrt_86_weight_conversion_summary_names_the_weights_and_reads_right():
    """TensorRT 8.6 on the H200 (DistilBERT FP16): three preamble warnings became three
    'build-warning' lines, the clamp to the closest finite FP16 value was called 'converted to
    FP16 infinity' with '- 1 weights are affected' left in, and no node was named although the
    hint said 'keep the named nodes'. The verbose 'List of affected weights' names them."""
    from workbench.core.trtlog import _join_weight_reports

    g = onnx.load(str(SAMPLES / "resnet_tiny.onnx"), load_external_data=False).graph
    convs = [n.name for n in g.node if n.op_type == "Conv"][:2]
    relu = next(n.name for n in g.node if n.op_type == "Relu")
    log = [  # the order and words of the rig's build log; the list is a verbose message
        {"level": "warning", "message": "TensorRT encountered issues when converting weights "
         "between types and that could affect accuracy."},
        {"level": "warning", "message": "If this is not the desired behavior, please modify "
         "the weights or retrain with regularization to adjust the magnitude of the weights."},
        {"level": "warning", "message": "Check verbose logs for the list of affected weights."},
        {"level": "warning", "message": "- 2 weights are affected by this issue: Detected "
         "finite FP32 values which would overflow in FP16 and converted them to the closest "
         "finite FP16 value."},
        {"level": "verbose", "message": f"  List of affected weights: {convs[0]} + {relu}"
         f".weight, {convs[1]}.bias"},
        {"level": "warning", "message": "- 22 weights are affected by this issue: Detected "
         "subnormal FP16 values."},
    ]
    fs = findings_from_log(log, NameIndex.from_graph(g))
    assert [f.code for f in fs] == ["fp16-overflow", "fp16-subnormal"]
    over = fs[0]
    assert over.message.startswith("FP32 weights beyond the FP16 range were clamped to the "
                                   "largest finite FP16 value (+-65504): 2 weights are affected")
    assert "infinity" not in over.message and "List of affected" not in over.message
    assert over.nodes[:3] == [convs[0], relu, convs[1]]
    assert "named no" not in over.hint
    assert len(_join_weight_reports(log)) == 2
    # without the verbose list (another TensorRT): nothing named, and the hint says so
    (unnamed, _) = findings_from_log([m for m in log if m["level"] != "verbose"],
                                     NameIndex.from_graph(g))
    assert not unnamed.nodes and "TensorRT's log named no weights or nodes" in unnamed.hint


def test_an_unnamed_int64_clamp_is_named_from_the_graph():
    """TensorRT 8.6's 'One or more weights outside the range of INT32 was clamped' names
    nothing; the finding now names the constants and their readers, and a Slice 'to the end'
    (INT64 max, as exporters write it) is information: the clamp keeps its meaning."""
    from onnx import TensorProto as T, helper as h, numpy_helper as nh
    import numpy as np

    def model(ends_value, op="Slice"):
        ends = nh.from_array(np.array([ends_value], np.int64), "ends")
        starts = nh.from_array(np.array([1], np.int64), "starts")
        if op == "Slice":
            node = h.make_node("Slice", ["x", "starts", "ends"], ["y"], name="/cut/Slice")
            x = h.make_tensor_value_info("x", T.FLOAT, [8])
        else:  # a number: an offset added to int64 positions
            node = h.make_node("Add", ["x", "ends"], ["y"], name="/cut/Slice")
            x = h.make_tensor_value_info("x", T.INT64, [8])
        return h.make_graph([node], "g", [x], [h.make_tensor_value_info("y", T.FLOAT, None)],
                            [starts, ends])

    log = [{"level": "warning", "message": "onnx2trt_utils.cpp:400: One or more weights "
            "outside the range of INT32 was clamped"}]
    (f,) = findings_from_log(log, NameIndex.from_graph(model(2**63 - 1)))
    assert f.code == "int64-clamp" and f.severity == "info"
    assert f.nodes == ["/cut/Slice"] and f.tensors == ["ends"]
    assert "'ends' = 9223372036854775807 read by Slice '/cut/Slice' (input 2)" in f.message
    assert f.hint.startswith("nothing to do")
    # a huge value where it means a number (added to positions): a warning, named
    (f,) = findings_from_log(log, NameIndex.from_graph(model(2**40, op="Add")))
    assert f.severity == "warning" and f.nodes == ["/cut/Slice"]
    assert "'ends' = 1099511627776" in f.message and "check these constants" in f.hint


def test_the_workers_logger_keeps_the_verbose_list_of_affected_weights_only():
    trt = pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.worker.loaders import make_logger

    log = make_logger(trt, keep="info")
    sev = trt.ILogger.Severity
    log.log(sev.VERBOSE, "  List of affected weights: /a/Conv.weight")
    log.log(sev.VERBOSE, "Tactic 0x00 time 0.1")
    log.log(sev.WARNING, "- 1 weights are affected by this issue: Detected subnormal FP16 values.")
    assert [m["level"] for m in log.messages] == ["verbose", "warning"]
    assert log.messages[0]["message"].strip().startswith("List of affected weights")


def test_the_standalone_script_names_absolute_paths(tmp_path, monkeypatch):
    """`workbench build out/m.onnx --export-script out/build.py` wrote 'out/m.onnx' into the
    script: `cd out && python build.py` could not find it."""
    monkeypatch.chdir(tmp_path)
    script = python_script(BuildConfig(precision="fp16"), "out/m.onnx", "out/m.engine")
    assert f"ONNX = {str(tmp_path / 'out' / 'm.onnx')!r}" in script
    assert f"ENGINE = {str(tmp_path / 'out' / 'm.engine')!r}" in script


def test_a_cuda_probe_error_beside_a_parse_error_is_left_out_of_the_errors():
    """On a machine without a GPU, TensorRT-RTX adds 'CUDA driver version is insufficient' to a
    parse error; the refusal's message quoted it as if it were the cause."""
    trt = pytest.importorskip("tensorrt_rtx_bindings")
    from workbench.worker.loaders import make_logger

    cuda = ("[checkMacros.cpp::catchCudaError::250] Error Code 1: Cuda Runtime (cudaError 35: "
            "CUDA driver version is insufficient for CUDA runtime version)")
    log = make_logger(trt, keep="info")
    sev = trt.ILogger.Severity
    log.log(sev.ERROR, cuda)
    assert log.errors() == [cuda]  # alone, it is what failed
    log.log(sev.ERROR, "/c1/Conv: IConvolutionLayer input and kernel must be of same type")
    assert log.errors() == ["/c1/Conv: IConvolutionLayer input and kernel must be of same type"]


def test_tensorrts_layernorm_caution_is_no_overflow_claim():
    """'Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow' was
    reported as 'FP32 values outside the FP16 range were converted to FP16 infinity'."""
    msg = ("Running layernorm after self-attention with FP16 Reduce or Pow may cause overflow. "
           "Forcing Reduce or Pow Layers in FP32 precision, or exporting the model to use "
           "INormalizationLayer (available with ONNX opset >= 17) can help preserving accuracy.")
    (f,) = findings_from_log([{"level": "warning", "message": msg}], NameIndex())
    assert f.code == "fp16-layernorm-risk" and f.severity == "info"
    assert "infinity" not in f.message and "--exclude-op Pow" in f.hint


def test_an_unreadable_timing_cache_is_no_build_error():
    """A successful FP16 build on the H200 listed 'ERROR build-error: Myelin error from unknown
    graph' and 'ERROR build-error: The timing cache will not be used!'."""
    log = [{"level": "error", "message": "1: [myelinCache.h::deserializeFromBuffer::52] Error "
            "Code 1: Myelin (Myelin error from unknown graph)"},
           {"level": "error", "message": "4: The timing cache will not be used!"}]
    fs = findings_from_log(log, NameIndex())
    assert [(f.code, f.severity) for f in fs] == [("timing-cache-unused", "warning")]
    assert fs[0].extra["count"] == 2 and "the engine is fine" in fs[0].message
