"""workbench.formats: one reader per TensorRT / trtexec / trt-perf-analysis schema, detection,
and the analyze-data.json round trip (written by the workbench, checked against NVIDIA's schema;
theirs opened in the timing table and the TimingPanel)."""
from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from conftest import H200, REPO
from workbench import formats
from workbench.core.errors import WorkbenchError
from workbench.formats import analyze_data
from workbench.formats.layerinfo import EngineLayers
from workbench.formats.profiledata import Profile
from workbench.timing import LayerTable, lint
from workbench.timing.analysis import to_analyze_data, write_analyze_data

DATA = REPO / "tests" / "data" / "formats"
A100 = REPO / "tests" / "data" / "fixtures" / "trex-a100-resnet"
THEIRS = DATA / "trt_perf_analysis.analyze-data.json"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(analyze_data.SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


def _errors(validator, doc):
    return [f"{e.json_path}: {e.message[:200]}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("path, reader, n, schema", [
    (H200 / "resnet50_fp16.layers.json", "tensorrt-layers-bindings", 154, "bindings"),  # 8.6 H200
    (A100 / "resnet-fp16.engine.graph.json", "tensorrt-layers-bindings", None, "bindings"),  # 8.x A100
    (DATA / "trt10_bindings.layers.json", "tensorrt-layers-bindings", 2, "bindings"),
    (DATA / "trt11_io_tensors.layers.json", "tensorrt-layers-io-tensors", 3, "io-tensors"),
    (DATA / "names_only.layers.json", "tensorrt-layers-names-only", 3, "names-only"),
])
def test_layer_info_readers_detect_and_read_each_version(path, reader, n, schema):
    data = formats.read_json(path, "layers")
    assert formats.detect(data, str(path)).name == reader
    el = formats.read(path)
    assert isinstance(el, EngineLayers) and el.schema == schema
    if n is not None:
        assert len(el) == n
    assert all(layer.name for layer in el.layers)


def test_trt10_reader_reads_combined_format_field_and_metadata():
    el = formats.read(DATA / "trt10_bindings.layers.json")
    gemm, fused = el.layers
    assert el.bindings == ["input", "output"]
    assert (gemm.type, gemm.precision, gemm.inputs[0].shape) == ("gemm", "FP32", [128, 128])
    assert fused.onnx_from_metadata == ["add1", "relu1"]
    assert (fused.in_precision, fused.out_precision) == ("FP32", "FP16")
    assert fused.fused_ops == ["Add", "Relu"] and gemm.fused_ops == []


def test_trt11_reader_reads_split_fields_io_tensors_and_kgen_ops():
    el = formats.read(DATA / "trt11_io_tensors.layers.json")
    mm, ln, mha = el.layers
    assert el.bindings == ["x", "out"]
    assert mm.precision == "FP16" and mm.inputs[0].format == "Row major linear FP16 Half"
    assert ln.outputs[0].precision == "FP32" and ln.inputs[0].shape == [2, 16, 64]
    assert ln.fused_ops == ["Mul", "Add", "Mean", "Sub", "Mul", "Sqrt", "Div"]
    assert mha.fused_ops == ["Gemm", "MHA", "V2"]
    assert ln.onnx_from_metadata == ["/ln/Mul", "/ln/Add", "/ln/ReduceMean"]


@pytest.mark.parametrize("path, reader, kind, rows, iterations", [
    (H200 / "resnet50_fp16.profile.json", "iprofiler", "iprofiler", 154, None),
    (A100 / "resnet-fp16.engine.profile.json", "trtexec-profile", "trtexec-profile", None, 1),
    (DATA / "trt10_trtexec.profile.json", "trtexec-profile", "trtexec-profile", 2, 50),
    (DATA / "trt11_iprofiler.profile.json", "iprofiler", "iprofiler", 3, 200),
    (DATA / "trtexec.times.json", "trtexec-times", "trtexec-times", 0, 2),
    (A100 / "resnet-fp16.engine.timing.json", "trtexec-times", "trtexec-times", 0, None),
    (REPO / "tests" / "data" / "timing" / "resnet_tiny_fp16.profile.json", "workbench-profile",
     "workbench", None, None),
])
def test_profile_readers_detect_and_read_each_form(path, reader, kind, rows, iterations):
    data = formats.read_json(path, "profile")
    assert formats.detect(data, str(path), "profile").name == reader
    p = formats.read(path, "profile")
    assert isinstance(p, Profile) and p.kind == kind
    if rows is not None:
        assert len(p.layers) == rows
    if iterations is not None:
        assert p.iterations == iterations
    if kind == "trtexec-times":
        assert p.latency_ms is not None and len(p.latency_ms) > 1
    else:
        assert p.has_layers and (p.layers["mean_ms"] >= 0).all() and p.layers["mean_ms"].sum() > 0


def test_trtexec_profile_medians_become_the_table_time():
    t = LayerTable.build(DATA / "trt10_bindings.layers.json", DATA / "trt10_trtexec.profile.json")
    assert t.stat == "median"
    assert t.df["time_ms"].tolist() == pytest.approx([0.0118, 0.0039])


def test_unknown_file_names_the_file_and_the_expected_schemas(tmp_path):
    p = tmp_path / "mystery.json"
    p.write_text(json.dumps({"nodes": [1, 2], "edges": []}))
    with pytest.raises(WorkbenchError) as e:
        formats.read(p)
    msg = str(e.value)
    assert "mystery.json" in msg and "keys nodes, edges" in msg
    for name in ("tensorrt-layers-io-tensors", "trtexec-profile", "trt-perf-analysis"):
        assert name in msg
    with pytest.raises(WorkbenchError, match="expected one of: tensorrt-layers"):
        formats.read(DATA / "trt10_trtexec.profile.json", "layers")


def test_workbench_analyze_data_validates_against_nvidias_schema(validator, tmp_path):
    t = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json",
                         onnx=H200 / "resnet50.structure.onnx")
    out = write_analyze_data(tmp_path / "analyze-data.json", t, label="fp16", model_name="resnet50")
    doc = json.loads(out.read_text())
    assert _errors(validator, doc) == []
    r = doc["results"][0]
    assert r["validation"]["analysis_mode"] == "layer_profile"
    assert r["layer_count"] == len(t) == r["profile_count"]
    assert r["timing"]["average_inference_ms"] == pytest.approx(float(t.df["time_mean_ms"].sum()))
    assert r["timing"]["total_percentage"] == pytest.approx(100.0)
    # each timing finding is one scored issue carrying its hint as the next check
    found = lint(t)
    assert len(r["issues"]) == len(found) >= 1
    assert {i["next_check"] for i in r["issues"]} == {f.hint for f in found}
    assert [i["score"] for i in r["issues"]] == sorted((i["score"] for i in r["issues"]), reverse=True)
    assert sum(x["count"] for x in r["type_breakdown"]) == int((~t.df["is_constant"]).sum())


@pytest.mark.parametrize("layers, profile", [
    (DATA / "trt11_io_tensors.layers.json", DATA / "trt11_iprofiler.profile.json"),
    (DATA / "trt10_bindings.layers.json", None),  # layer-only result
    (DATA / "names_only.layers.json", None),
])
def test_analyze_data_of_every_version_validates(validator, layers, profile):
    doc = to_analyze_data(LayerTable.build(layers, profile))
    assert _errors(validator, doc) == []
    mode = doc["results"][0]["validation"]["analysis_mode"]
    assert mode == ("layer_profile" if profile else "layer_only")


def test_their_analyze_data_validates_and_reads(validator):
    assert _errors(validator, json.loads(THEIRS.read_text())) == []
    doc = formats.read(THEIRS)
    assert isinstance(doc, analyze_data.AnalyzeData)
    assert [r["label"] for r in doc.results] == ["trt-fp16", "trt-int8"]
    el = doc.layers("trt-fp16")
    assert [x.type for x in el.layers] == ["gemm", "kgen", "kgen"]
    assert el.layers[1].fused_ops == ["Gemm", "MHA", "V2"]
    assert doc.profile(0).layers["median_ms"].tolist() == [0.059, 0.074, 0.015]
    issues = doc.issues(0)
    assert [i.severity for i in issues] == ["warning", "info"]
    assert issues[0].hint.startswith("Check that the fused MHA kernel")
    with pytest.raises(WorkbenchError, match="failed validation.*profile.json not found"):
        doc.layers("trt-int8")


def test_workbench_analyze_data_round_trips_into_a_layer_table(tmp_path):
    t = LayerTable.build(DATA / "trt11_io_tensors.layers.json", DATA / "trt11_iprofiler.profile.json")
    out = write_analyze_data(tmp_path / "a.json", t)
    back = LayerTable.build(out)
    assert back.df["name"].tolist() == t.df["name"].tolist()
    assert back.df["precision"].tolist() == t.df["precision"].tolist()
    assert back.df["time_ms"].tolist() == pytest.approx(t.df["time_ms"].tolist())


def test_bad_analyze_data_is_a_clear_error(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"schema_version": "0.9", "results": []}))
    with pytest.raises(WorkbenchError, match="schema_version '0.9' is not '1.0'") as e:
        formats.read(p)
    assert "old.json" in str(e.value)
    with pytest.raises(WorkbenchError, match="results"):
        analyze_data.write(tmp_path / "x.json", {"schema_version": "1.0", "results": []})
    assert not (tmp_path / "x.json").exists()


def test_cli_timing_writes_analyze_data_and_refuses_to_overwrite_an_input(validator, tmp_path):
    out = tmp_path / "ad.json"
    cmd = [sys.executable, "-m", "workbench.cli", "timing", str(DATA / "trt11_io_tensors.layers.json"),
           "--profile", str(DATA / "trt11_iprofiler.profile.json"), "--analyze-data", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "analyze-data (trt-perf-analysis schema 1.0)" in r.stdout
    assert _errors(validator, json.loads(out.read_text())) == []
    copy = tmp_path / "layers.json"
    copy.write_text((DATA / "trt11_io_tensors.layers.json").read_text())
    before = copy.read_text()
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "timing", str(copy),
                        "--analyze-data", str(copy)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "would be overwritten" in r.stderr + r.stdout
    assert copy.read_text() == before


def test_timing_panel_opens_their_analyze_data():
    from widgets.timing import TimingPanel

    panel = TimingPanel(str(THEIRS))
    assert panel.table.layers.schema == "analyze-data"
    assert list(panel.table.df["name"]) == ["/encoder/qkv/MatMul", "_gemm_mha_v2_myl0_3",
                                            "__myl_AddMulMeanSubMulSqrtDiv_myl0_4"]
    assert panel.table.df["time_ms"].tolist() == pytest.approx([0.059, 0.074, 0.015])
    titles = [f.message for f in panel.findings if f.source == "trt-perf-analysis"]
    assert titles[0].startswith("Attention dominates latency")
    assert len(titles) == 2
    bars = panel.bars.data
    assert sum(len(tr.y) for tr in bars) == 3


def test_polygraphy_run_results_reader_lists_outputs_without_decoding(tmp_path):
    import numpy as np
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult

    from workbench.compare import save_run_results

    theirs = tmp_path / "polygraphy.json"
    rr = RunResults()
    rr.append(("onnxrt-runner", [IterationResult({"y": np.zeros((2, 3), np.float16),
                                                  "ids": np.arange(4)}, runner_name="onnxrt-runner")]))
    rr.save(str(theirs))
    ours = save_run_results(tmp_path / "ours.json", {"trt": [{"z": np.ones((5,), np.float32)}] * 2})
    a, b = formats.read(theirs), formats.read(ours)
    assert a.runners == {"onnxrt-runner": [{"y": ("float16", (2, 3)), "ids": ("int64", (4,))}]}
    assert b.runner_names == ["trt"] and b.runners["trt"] == [{"z": ("float32", (5,))}] * 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"lst": [["r", [{"outputs": {"y": {"array": "bm90IG5weQ=="}}}]]],
                               "polygraphy_class": "RunResults"}))
    with pytest.raises(WorkbenchError, match="no readable .npy header") as e:
        formats.read(bad)
    assert "bad.json" in str(e.value) and "lst[0][0].outputs.y" in str(e.value)


def test_cli_timing_reads_their_analyze_data_and_lists_their_issues(validator, tmp_path):
    out = tmp_path / "again.json"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "timing", str(THEIRS),
                        "--analyze-data", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "3 layers, total 0.1480 ms (median)" in r.stdout
    assert "WARNING trt-perf-analysis: Attention dominates latency" in r.stdout
    again = json.loads(out.read_text())
    assert _errors(validator, again) == []
    assert [x["name"] for x in again["results"][0]["profile"]] == \
        [x["name"] for x in json.loads(THEIRS.read_text())["results"][0]["profile"]]


def test_cli_timing_vs_writes_both_engines_as_results(validator, tmp_path):
    out = tmp_path / "both.json"
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "timing",
                        str(H200 / "resnet50_fp16.layers.json"), "--profile",
                        str(H200 / "resnet50_fp16.profile.json"),
                        "--vs", str(H200 / "resnet50_fp32.layers.json"), "--vs-profile",
                        str(H200 / "resnet50_fp32.profile.json"), "--analyze-data", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert _errors(validator, doc) == []
    assert [x["label"] for x in doc["results"]] == ["resnet50_fp16", "resnet50_fp32"]
    assert doc["validation"]["backend_count"] == doc["validation"]["passed_count"] == 2


def test_issue_score_counts_all_the_time_a_finding_covers():
    t = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json")
    issues = {i["title"]: i for i in to_analyze_data(t)["results"][0]["issues"]}
    reformat = issues["Reformat/copy layers take a large share of time"]
    share = float(t.df[t.df["is_reformat"]]["time_ms"].sum()) / t.total_ms * 100
    assert share > 20  # the recorded FP16 engine converts at every boundary
    assert reformat["score"] == pytest.approx(50 + share / 2, abs=0.1)


def _mutations(doc):
    """The fixture with one field at a time removed or given a wrong type."""
    def paths(x, pre=()):
        if isinstance(x, dict):
            for k, v in x.items():
                yield pre + (k,)
                yield from paths(v, pre + (k,))
        elif isinstance(x, list):
            for i, v in enumerate(x[:2]):
                yield pre + (i,)
                yield from paths(v, pre + (i,))
    for path in paths(doc):
        for bad in (None, "x", 7, [], {}, -1.5, True, "__drop__"):
            d = json.loads(json.dumps(doc))
            parent = d
            for k in path[:-1]:
                parent = parent[k]
            if bad == "__drop__":
                if isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    parent.pop(path[-1])
            else:
                parent[path[-1]] = bad
            yield path, d


@pytest.mark.parametrize("fixture", [THEIRS, DATA / "trt11_io_tensors.layers.json",
                                     DATA / "trt10_trtexec.profile.json"])
def test_every_one_field_corruption_is_a_clear_error_or_a_table(fixture, tmp_path):
    """Open each corrupted variant as the timing views do: it builds a table or raises a
    WorkbenchError naming the file, never another exception."""
    doc = json.loads(fixture.read_text())
    n = 0
    for path, d in _mutations(doc):
        p = tmp_path / "case.json"
        p.write_text(json.dumps(d))
        try:
            obj = formats.read(p)
            if isinstance(obj, analyze_data.AnalyzeData):
                LayerTable.build(p)
            elif isinstance(obj, EngineLayers):
                LayerTable.build(obj)
        except WorkbenchError as e:
            assert "case.json" in str(e), (path, str(e))
        n += 1
    assert n > 50


def test_record_tags_follow_layer_type_not_implicit_gemm_tactics():
    t = LayerTable.build(H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json")
    recs = {r["name"]: r for r in to_analyze_data(t)["results"][0]["records"]}
    conv = recs["/layer1/layer1.0/conv1/Conv + /layer1/layer1.0/relu/Relu"]
    assert "implicit_gemm" in conv["tactic"] and conv["tags"] == ["convolution"]
    assert all("reformat" in r["tags"] for r in recs.values() if r["name"].startswith("Reformatting"))
    kgen = {r["name"]: r["tags"] for r in to_analyze_data(LayerTable.build(
        DATA / "trt11_io_tensors.layers.json", DATA / "trt11_iprofiler.profile.json"))["results"][0]["records"]}
    assert kgen["_gemm_mha_v2_myl3_8"] == ["kgen", "matmul/gemm", "attention"]
    assert kgen["/attn/MatMul"] == ["matmul/gemm"]
