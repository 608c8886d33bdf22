"""workbench.support.checker against the REAL TensorRT-RTX parser and builder (no fakes).

The real parser is the judge: the static rule tables must agree with it on Polygraphy's
fixtures, on one single-op model for every op the onnx-tensorrt matrix marks unsupported, and on
attribute-restriction cases. All single-op models are parsed in ONE worker request.
"""
from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

import single_op_models as S
from conftest import POLY, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.support.checker import SupportReport, check, check_files, static_check
from workbench.support.rules import BACKENDS, MATRIX_UNSUPPORTED, backend_table
from workbench.worker.client import WorkerClient

# The known real-parser results (shared/fixtures/README.md): model -> [(node, op)]
KNOWN = {
    "capability.onnx": [("Fake1", "FAKE!"), ("Fake2", "FAKE!"), ("Fake3", "FAKER!")],
    "custom_op_node.onnx": [("NegPos#0", "NegPos")],
    "fake_op_model.onnx": [("Fake#0", "Fake")],
    "qdq_conv.onnx": [("onnx_graphsurgeon_node_1", "QuantizeLinear")],
    "loop.onnx": [("cond___while_Less", "Less")],
    "bad_graph_with_dup_value_info.onnx": [(None, None)],
}
FIXTURES = sorted(p.name for p in POLY.glob("*.onnx"))


@pytest.fixture(scope="module")
def worker():
    w = WorkerClient()
    yield w
    w.close()


@pytest.fixture(scope="module")
def fixture_reports(worker):
    reports = check_files([POLY / f for f in FIXTURES], "tensorrt-rtx", client=worker)
    return dict(zip(FIXTURES, reports))


def _named(entries):
    return {u["node"] for u in entries if u.get("node")}


def test_all_fixtures_present():
    assert len(FIXTURES) >= 18 and set(KNOWN) <= set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_parser_reproduces_known_fixture_results(fixture_reports, name):
    rep = fixture_reports[name]
    assert rep.backend == "tensorrt-rtx" and rep.backend_version and rep.mode == "parser"
    got = [(u["node"], u["op"]) for u in rep.unsupported]
    assert got == KNOWN.get(name, []), rep.unsupported
    assert rep.supported is (name not in KNOWN)
    assert all(u["source"] == "parser" and u["reason"] and u["hint"] for u in rep.unsupported)


def test_fixture_reasons_are_specific(fixture_reports):
    cap = fixture_reports["capability.onnx"].unsupported
    assert {u["code"] for u in cap} == {"plugin-missing"}
    assert "--plugin" in cap[0]["hint"]
    qdq = fixture_reports["qdq_conv.onnx"].unsupported[0]
    assert "zero point" in qdq["reason"].lower() and "symmetric" in qdq["hint"]
    # the cause in the model's terms leads; TensorRT's own words follow, kept whole
    assert qdq["reason"].startswith("QuantizeLinear has a non-zero zero point ([84, 24, 196])")
    assert "(TensorRT's parser: " in qdq["reason"] and "shiftIsAllZeros" in qdq["reason"]
    dup = fixture_reports["bad_graph_with_dup_value_info.onnx"].unsupported[0]
    assert "duplicate tensor name: inp" in dup["reason"]
    loop = fixture_reports["loop.onnx"].unsupported[0]
    assert "not registered" in loop["reason"] and "trip count" in loop["hint"]
    # the parser stopped at the QuantizeLinear; the static rules still point at the DQ node
    warned = [f for f in fixture_reports["qdq_conv.onnx"].findings if f.severity == "warning"]
    assert any(f.nodes == ["onnx_graphsurgeon_node_3"] for f in warned)


def test_partition_maps_to_node_names(fixture_reports):
    part = fixture_reports["capability.onnx"].partition
    assert part["api"] == "supports_model_v2" and part["supported"] is False
    assert [s["nodes"] for s in part["subgraphs"]] == [["Add1"], ["Add2"]]
    ok = fixture_reports["residual_block.onnx"].partition
    assert ok["supported"] is True and len(ok["subgraphs"][0]["nodes"]) == 15


@pytest.mark.parametrize("name", FIXTURES)
def test_static_rules_agree_with_parser_on_fixtures(fixture_reports, name):
    parser = fixture_reports[name]
    entries, _ = static_check(POLY / name, "tensorrt-rtx")
    assert (not entries) == parser.supported, entries
    assert _named(parser.unsupported) <= _named(entries)


# --- single-op models of every op the matrix marks unsupported ------------------------------
@pytest.fixture(scope="module")
def single_op_results(worker, tmp_path_factory):
    d = tmp_path_factory.mktemp("single_ops")
    paths = []
    for case in sorted(S.UNSUPPORTED_CASES):
        p = d / f"{case}.onnx"
        onnx.save(S.build(case), str(p))
        paths.append(p)
    reports = check_files(paths, "tensorrt-rtx", client=worker)
    return {p.stem: (p, r) for p, r in zip(paths, reports)}


def test_cases_cover_every_matrix_unsupported_op():
    assert set(S.UNSUPPORTED_CASES) == set(MATRIX_UNSUPPORTED)


@pytest.mark.parametrize("case", sorted(S.UNSUPPORTED_CASES))
def test_static_agrees_with_parser_on_single_op(single_op_results, case):
    path, rep = single_op_results[case]
    onnx.checker.check_model(onnx.load(str(path)))  # a well-formed model, so the op is judged
    table = backend_table("tensorrt-rtx")
    parser_rejects = any(u["node"] in S.target_nodes(case) for u in rep.unsupported)
    # the judge: the rtx table lists the op as unsupported exactly when the parser rejects it
    assert (case in table["unsupported_ops"]) == parser_rejects, rep.unsupported
    entries, _ = static_check(path, "tensorrt-rtx")
    assert _named(rep.unsupported) <= _named(entries)
    assert (not entries) == rep.supported


# --- attribute restrictions, parse- and build-time ------------------------------------------
ATTR_CASES = {
    # name: (builder, node, rejected by rtx?, stage, rejected by the published matrix?)
    "resize_cubic": (lambda: S.resize("cubic"), "Resize", False, None, True),
    "resize_linear": (lambda: S.resize("linear"), "Resize", False, None, False),
    "resize_antialias": (lambda: S.resize("linear", antialias=1), "Resize", True, "parse", True),
    "topk_5000": (lambda: S.topk(5000), "TopK", True, "build", True),
    "topk_3840": (lambda: S.topk(3840), "TopK", False, None, True),
    "topk_100": (lambda: S.topk(100), "TopK", False, None, False),
    "scatternd_add": (lambda: S.scatternd("add"), "ScatterND", True, "parse", True),
    "scatternd_none": (lambda: S.scatternd("none"), "ScatterND", False, None, False),
    "maxpool_indices": (S.maxpool_indices, "MaxPool", True, "parse", True),
    "maxpool_plain": (S.maxpool_plain, "MaxPool", False, None, False),
    "q_zero_point_3": (lambda: S.quantize(3), "QuantizeLinear", True, "parse", True),
    "q_zero_point_0": (lambda: S.quantize(0), "QuantizeLinear", False, None, False),
    "dq_zero_point_3": (lambda: S.quantize(3, "DequantizeLinear"), "DequantizeLinear", True,
                        "parse", True),
    "cumsum_runtime_axis": (S.cumsum_runtime_axis, "CumSum", True, "build", True),
    "cumsum_const_axis": (S.cumsum_const_axis, "CumSum", False, None, False),
    "custom_domain": (S.custom_domain_op, "my_custom", True, "parse", True),
    "nonzero": (S.nonzero, "NonZero", True, "parse", False),
    # where TensorRT-RTX departs from the matrix (support_rules.DISAGREEMENTS)
    "deform_conv": (S.deform_conv, "DeformConv", True, "parse", False),
    "roi_align": (S.roi_align, "RoiAlign", True, "parse", False),
    "topk_unsorted": (lambda: S.topk(5, sorted=0), "TopK", False, None, True),
    "lstm_batch_first": (S.lstm_batch_first, "LSTM", False, None, True),
    "onehot_runtime_depth": (S.onehot_runtime_depth, "OneHot", True, "build", True),
    "maxpool_1d": (S.maxpool_1d, "MaxPool", False, None, True),
    "avgpool_1d": (S.avgpool_1d, "AveragePool", False, None, True),
    "lppool_1d": (S.lppool_1d, "LpPool", True, "parse", False),
    "grid_sample_5d": (S.grid_sample_5d, "GridSample", False, None, True),
    "swish_opset24": (S.swish, "Swish", False, None, False),
    "bitcast_opset26": (S.bitcast, "BitCast", True, "parse", False),
    "cumprod_opset26": (S.cumprod, "CumProd", True, "parse", False),
    "swiglu_opset28": (S.swiglu, "SwiGLU", True, "parse", False),
}


@pytest.fixture(scope="module")
def attr_results(worker, tmp_path_factory):
    d = tmp_path_factory.mktemp("attr_cases")
    out = {}
    for name, (make, *_rest) in ATTR_CASES.items():
        p = d / f"{name}.onnx"
        onnx.save(make(), str(p))
        out[name] = p
    parsed = dict(zip(out, check_files(list(out.values()), "tensorrt-rtx", client=worker)))
    built = {name: check(out[name], backend="tensorrt-rtx", build=True, client=worker)
             for name, spec in ATTR_CASES.items() if parsed[name].supported}
    return out, parsed, built


@pytest.mark.parametrize("name", sorted(ATTR_CASES))
def test_attribute_rules_agree_with_parser_and_builder(attr_results, name):
    paths, parsed, built = attr_results
    _, node, rejected, stage, matrix_rejects = ATTR_CASES[name]
    real = built.get(name, parsed[name])
    assert (node in _named(real.unsupported)) is rejected, real.unsupported
    if rejected:
        failing = [u for u in real.unsupported if u["node"] == node][0]
        assert failing["source"] == ("build" if stage == "build" else "parser")
        assert failing["op"] and failing["reason"] and failing["hint"]
    rtx, _ = static_check(paths[name], "tensorrt-rtx")
    assert (node in _named(rtx)) is rejected, rtx
    if rejected:
        assert [e["stage"] for e in rtx if e["node"] == node][0] == stage
    matrix, _ = static_check(paths[name], "tensorrt")
    assert (node in _named(matrix)) is matrix_rejects, matrix


def test_build_failure_names_the_layer_and_node(attr_results):
    _, parsed, built = attr_results
    assert parsed["topk_5000"].supported  # parses fine...
    rep = built["topk_5000"]               # ...and fails to build
    assert rep.mode == "parser+build" and rep.build["built"] is False
    u = rep.unsupported[0]
    assert (u["node"], u["op"], u["layer"], u["source"]) == ("TopK", "TopK", "TopK", "build")
    assert "3840" in u["reason"] and "split" in u["hint"].lower()
    cs = built["cumsum_runtime_axis"].unsupported[0]
    assert (cs["node"], cs["op"]) == ("CumSum", "CumSum") and "constant" in cs["reason"]
    assert any("shape input 'axis'" in n for n in built["cumsum_runtime_axis"].notes)
    ok = built["cumsum_const_axis"]
    assert ok.supported and ok.build["built"] and ok.build["engine_bytes"] > 0
    assert ok.build["target"] == "sm89"


def test_parse_only_warns_about_build_time_limits(attr_results):
    _, parsed, _ = attr_results
    warn = [f for f in parsed["topk_5000"].findings if f.code == "topk-k-limit"]
    assert warn and warn[0].severity == "warning" and "--build" in warn[0].hint


# --- modes, report shape, errors -----------------------------------------------------------
def test_static_report_and_to_dict():
    rep = check(POLY / "capability.onnx", backend="static")
    assert isinstance(rep, SupportReport) and rep.backend == "static" and rep.mode == "static"
    assert rep.rules == "tensorrt" and not rep.supported
    d = rep.to_dict()
    assert d["backend"] == {"name": "static", "version": None, "rules": "tensorrt"}
    assert [(u["node"], u["op"], u["source"]) for u in d["unsupported"]] == [
        ("Fake1", "FAKE!", "static"), ("Fake2", "FAKE!", "static"), ("Fake3", "FAKER!", "static")]
    assert all(f["severity"] == "error" and f["hint"] for f in d["findings"][:3])


def test_rule_tables_are_per_backend():
    assert set(BACKENDS) == {"tensorrt", "tensorrt-rtx"}
    rtx, trt = backend_table("tensorrt-rtx"), backend_table("tensorrt")
    assert "NonZero" in rtx["plugin_ops"] and "NonZero" not in trt["plugin_ops"]
    assert "cubic" in [r for r in rtx["rules"] if r["id"] == "resize-mode"][0]["allowed"]
    with pytest.raises(WorkbenchError):
        backend_table("tensorrt-9000")


def test_static_findings_name_the_backend_and_the_matrix_release():
    """Each table's findings name the backend it speaks for ('TensorRT (10.15 matrix)' was
    shown while tensorrt-rtx was active); the note says what the rules were compiled from."""
    from workbench.support.rules import MATRIX_VERSION

    proto = S.nonzero()
    trt = check(proto, backend="static")  # the published matrix: NonZero is supported
    assert trt.supported and trt.rules == "tensorrt"
    assert trt.notes == [f"static rules for tensorrt: TensorRT rules from the published "
                         f"onnx-tensorrt operator matrix of TensorRT {MATRIX_VERSION} "
                         f"(onnx-tensorrt docs/operators.md (TensorRT {MATRIX_VERSION}, opset 9-24))"]
    rtx = check(proto, backend="static", rules="tensorrt-rtx")
    assert rtx.rules == "tensorrt-rtx"
    assert [u["reason"] for u in rtx.unsupported] == [
        "NonZero is implemented by a plugin that TensorRT-RTX 1.7 does not ship"]
    assert rtx.notes[0].startswith(f"static rules for tensorrt-rtx: TensorRT-RTX 1.7 rules: the "
                                   f"TensorRT {MATRIX_VERSION} operator matrix with the differences")
    for rules, by in (("tensorrt", f"TensorRT (per its {MATRIX_VERSION} operator matrix)"),
                      ("tensorrt-rtx", "TensorRT-RTX 1.7")):
        entries, _ = static_check(SAMPLES / "needs_fixing.onnx", rules)
        reasons = {u["op"]: u["reason"] for u in entries}
        assert reasons["CenterCropPad"] == f"CenterCropPad is not supported by {by}", reasons


def test_in_memory_model_and_plugins_named_only(worker, tmp_path):
    proto = S.nonzero()
    rep = check(proto, backend="tensorrt-rtx", client=worker)
    assert [(u["node"], u["code"]) for u in rep.unsupported] == [("NonZero", "plugin-missing")]
    with pytest.raises(WorkbenchError, match="plugin library not found"):
        check(proto, backend="tensorrt-rtx", client=worker, plugins=[tmp_path / "nope.so"])
    with pytest.raises(WorkbenchError, match="needs a TensorRT backend"):
        check(proto, backend="static", build=True)
    with pytest.raises(WorkbenchError, match="unknown backend"):
        check(proto, backend="trt")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A real interpreter without TensorRT (a venv without site packages)."""
    d = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True)
    return str(d / "bin" / "python")


def test_auto_falls_back_to_static_with_a_note(bare_python):
    w = WorkerClient(python=bare_python)
    try:
        rep = check(POLY / "qdq_conv.onnx", backend="auto", client=w)
        with pytest.raises(WorkbenchError, match="WORKBENCH_TRT_PYTHON"):
            check(POLY / "conv.onnx", backend="tensorrt-rtx", client=w)
    finally:
        w.close()
    assert rep.backend == "static" and rep.findings[0].code == "static-fallback"
    assert "no TensorRT module" in rep.notes[0]
    assert _named(rep.unsupported) == {"onnx_graphsurgeon_node_1", "onnx_graphsurgeon_node_3"}


def _local_function_model() -> onnx.ModelProto:
    from onnx import helper

    fn = helper.make_function(
        "local", "MyBlock", ["a"], ["b"],
        [helper.make_node("Relu", ["a"], ["r"], name="inner_relu"),
         helper.make_node("Det", ["r"], ["b"], name="inner_det")], [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("MyBlock", ["x"], ["y"], name="block1",
                                            domain="local")], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("local", 1)], functions=[fn])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_local_function_stack_from_parser_and_static(worker, tmp_path):
    p = tmp_path / "fn.onnx"
    onnx.save(_local_function_model(), str(p))
    real = check(p, backend="tensorrt-rtx", client=worker)
    [u] = real.unsupported
    assert (u["node"], u["op"], u["local_function_stack"]) == ("inner_det", "Det",
                                                               ["block1 (MyBlock)"])
    entries, _ = static_check(p, "tensorrt-rtx")  # a local function is not a custom op
    assert [(e["node"], e["local_function_stack"]) for e in entries] == [
        ("inner_det", ["block1 (MyBlock)"])]


def test_external_data_model_is_read_by_path_and_built(worker, tmp_path):
    import numpy as np
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).random((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data",
              size_threshold=0)
    assert (tmp_path / "m.data").stat().st_size == 64 * 64 * 4
    rep = check(tmp_path / "m.onnx", backend="tensorrt-rtx", build=True, client=worker)
    assert rep.supported and rep.build["built"] and rep.build["engine_bytes"] > 64 * 64 * 4
    assert any("dynamic input 'x'" in n for n in rep.notes)  # the profile it chose is said
    assert rep.partition["subgraphs"] == [{"nodes": ["mm"], "supported": True}]


def test_partition_lists_nodes_outside_supported_subgraphs(fixture_reports):
    assert fixture_reports["capability.onnx"].partition["outside"] == ["Fake1", "Fake2", "Fake3"]
    assert fixture_reports["conv.onnx"].partition["outside"] == []


@pytest.mark.parametrize("make, name", [(lambda: S.build("Det"), "det.onnx"),
                                        (None, "bad_graph_with_dup_value_info.onnx")])
def test_suggested_fix_command_really_fixes_the_model(worker, tmp_path, make, name):
    """The next step a report gives is a real command: run it, then the parser accepts."""
    import re
    import shlex

    from workbench.cli import main
    from workbench.surgery.propose import advise  # recipe steps are surgery's (as in `check`)

    src = tmp_path / name
    src.write_bytes(make().SerializeToString() if make else (POLY / name).read_bytes())
    from workbench.core.nextstep import command

    rep = advise(check(src, backend="tensorrt-rtx", client=worker))
    steps = rep.unsupported[0].get("next_steps") or []
    cmds = [command(s) for s in steps if s["verb"] == "fix"] or \
        re.findall(r"`(workbench fix [^`]+)`", rep.unsupported[0]["hint"])
    cmd = cmds[0]
    out = tmp_path / "fixed.onnx"
    argv = shlex.split(cmd)[1:]
    if "-o" in argv:  # (the step's own output, beside the model: written here instead)
        argv[argv.index("-o") + 1] = str(out)
    else:
        argv += ["-o", str(out)]
    assert main(argv) == 0
    assert check(out, backend="tensorrt-rtx", client=worker).supported


def test_missing_external_data(tmp_path):
    import numpy as np
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])],
                          [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.data",
              size_threshold=0)
    (tmp_path / "m.data").unlink()
    with pytest.raises(WorkbenchError, match="m.data.*--backend static"):
        check(tmp_path / "m.onnx", backend="tensorrt-rtx")
    rep = check(tmp_path / "m.onnx", backend="static")  # structure needs no weights
    assert rep.supported and any(f.code == "external-data-missing" for f in rep.findings)


def test_unsupported_op_inside_an_if_branch(worker, tmp_path):
    from onnx import TensorProto as T
    from onnx import helper

    def branch(name, op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out], name=name)], name, [],
                                 [helper.make_tensor_value_info(out, T.FLOAT, [3, 3])])

    node = helper.make_node("If", ["c"], ["y"], name="the_if",
                            then_branch=branch("then_relu", "Relu", "t"),
                            else_branch=branch("else_unique", "Unique", "e"))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", T.BOOL, []),
                                        helper.make_tensor_value_info("x", T.FLOAT, [3, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    p = tmp_path / "if.onnx"
    onnx.save(m, str(p))
    real = check(p, backend="tensorrt-rtx", client=worker)
    static, _ = static_check(p, "tensorrt-rtx")
    want = [("else_unique", "Unique", "the_if/else_branch")]
    assert [(u["node"], u["op"], u["subgraph"]) for u in real.unsupported] == want
    assert [(u["node"], u["op"], u["subgraph"]) for u in static] == want


@pytest.mark.slow
def test_rtx_rules_never_false_alarm_on_onnx_node_suite(worker, tmp_path):
    """ONNX's ~1900 operator test models through the real parser (one request): the measured
    rtx table raises no parse-stage false alarm, every build-stage rule it fires is confirmed
    by a real build, and it catches more real rejections than the plain matrix table."""
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location(
        "support_agreement", REPO / "benchmarks" / "support_agreement.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    paths = bench.make_cases(tmp_path)
    assert len(paths) > 1500
    reports = check_files(paths, "tensorrt-rtx", client=worker, timeout=1800)
    rtx = bench.score(paths, "tensorrt-rtx", reports, worker)
    matrix = bench.score(paths, "tensorrt", reports, worker)
    assert rtx["false_alarms"] == 0, rtx["false_alarm_examples"]
    assert rtx["build_rules_refuted"] == 0 and rtx["build_rules_confirmed"] > 0
    assert rtx["parser_rejected"] > 500 and rtx["recall"] > matrix["recall"]
