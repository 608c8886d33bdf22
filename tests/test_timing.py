"""workbench.timing on the real fixtures: readers, ONNX mapping, summaries, comparison, errors."""
from __future__ import annotations

import copy
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import A100, H200, REPO
from workbench.core.errors import WorkbenchError
from workbench.timing import (LayerTable, compare, lint, load_layers, load_profile,
                              load_run_metadata, node_comparison, parse_layers, parse_precision,
                              parse_profile, summarize)
from workbench.timing.mapping import name_tokens

DATA = REPO / "tests" / "data" / "timing"
R50 = H200 / "resnet50.structure.onnx"


def _raw(path: Path):
    return json.loads(path.read_text(), strict=False)


@pytest.fixture(scope="module")
def h200():
    out = {}
    for p in ("fp32", "fp16"):
        out[p] = LayerTable.build(H200 / f"resnet50_{p}.layers.json",
                                  H200 / f"resnet50_{p}.profile.json", onnx=R50)
    return out


# -- every fixture loads -------------------------------------------------------------------------
@pytest.mark.parametrize("path", sorted(p.name for p in H200.glob("*.json"))
                         + sorted(p.name for p in A100.glob("*.json")))
def test_every_fixture_json_loads(path):
    p = (H200 if (H200 / path).exists() else A100) / path
    raw = _raw(p)
    if path.endswith((".layers.json", ".graph.json")):
        el = load_layers(p)
        assert len(el) == len(raw["Layers"]) and el.bindings == raw["Bindings"]
        assert all(layer.name for layer in el.layers)
    elif path.endswith((".profile.json", ".timing.json")):
        prof = load_profile(p)
        if path.endswith(".timing.json"):
            assert prof.kind == "trtexec-times" and len(prof.latency_ms) == len(raw)
        else:
            n = len(raw) - (1 if prof.kind == "trtexec-profile" else 0)
            assert len(prof.layers) == n and n > 0
    else:
        meta = load_run_metadata(p)
        assert meta.get("build_options") or meta.get("performance_summary")


@pytest.mark.parametrize("stem", ["resnet-fp32", "resnet-fp16", "resnet-qat"])
def test_a100_layer_table_joins_every_profile_record(stem):
    t = LayerTable.build(A100 / f"{stem}.engine.graph.json", A100 / f"{stem}.engine.profile.json")
    raw = _raw(A100 / f"{stem}.engine.profile.json")
    assert raw[0] == {"count": raw[0]["count"]}
    expected = sum(r["medianMs"] for r in raw[1:])
    assert t.total_ms == pytest.approx(expected)
    assert t.df["time_ms"].notna().all() and not any(w.code == "profile-layer-unknown"
                                                      for w in t.warnings)
    assert t.df["pct"].sum() == pytest.approx(100.0)


def test_bert_fixture_loads_with_foreign_node_expanded_to_onnx_range():
    t = LayerTable.build(H200 / "bert_small_fp16.layers.json", H200 / "bert_small_fp16.profile.json",
                         onnx=H200 / "bert_small.structure.onnx")
    row = t.row("{ForeignNode[/m/Cast.../m/pooler/activation/Tanh]}")
    names = [n.name for n in onnx.load(str(H200 / "bert_small.structure.onnx"),
                                       load_external_data=False).graph.node]
    i, j = names.index("/m/Cast"), names.index("/m/pooler/activation/Tanh")
    assert row["mapping"] == "foreign-range"
    assert row["onnx_nodes"] == names[i:j + 1] and row["n_onnx"] == j - i + 1
    assert row["precision"] == "FP16"  # INT32 ids in, FP16 out: the index inputs do not count
    # the output reformats are attributed to the Myelin layer
    ref = t.df[t.df["name"].str.startswith("Reformatting CopyNode")]
    assert set(ref["mapping"]) == {"reformat-for"} and (ref["n_onnx"] == 0).all()
    # without the ONNX only the end points are known
    t2 = LayerTable.build(H200 / "bert_small_fp16.layers.json")
    r2 = t2.row("{ForeignNode[/m/Cast.../m/pooler/activation/Tanh]}")
    assert r2["onnx_nodes"] == ["/m/Cast", "/m/pooler/activation/Tanh"]
    assert r2["mapping"] == "foreign-endpoints"


# -- acceptance: mapping coverage and FP32 vs FP16 figures ---------------------------------------
def test_h200_fp16_maps_at_least_95pct_of_non_constant_time(h200):
    t = h200["fp16"]
    raw = _raw(H200 / "resnet50_fp16.layers.json")
    meta = {x["Name"]: x.get("Metadata", "") for x in raw["Layers"]}
    types = {x["Name"]: x["LayerType"] for x in raw["Layers"]}
    prof = {r["name"]: r["medianMs"] for r in _raw(H200 / "resnet50_fp16.profile.json")}
    nodes = {n.name for n in onnx.load(str(R50), load_external_data=False).graph.node}
    # independent computation: Metadata names or a layer named like an ONNX node
    total = sum(v for k, v in prof.items() if types[k] != "Constant")
    mapped = sum(v for k, v in prof.items() if types[k] != "Constant"
                 and ("[ONNX Layer:" in meta[k] or k in nodes))
    cov = t.coverage()
    assert cov["mapped_pct"] == pytest.approx(mapped / total * 100)
    assert cov["mapped_pct"] >= 95
    assert cov["attributed_pct"] == pytest.approx(100.0)  # the 2 I/O reformats are attributed
    assert cov["onnx_nodes_covered"] == len(nodes) - 1  # only /Flatten is folded away
    assert "/Flatten" not in {n for ns in t.df["onnx_nodes"] for n in ns}


def test_h200_fp32_vs_fp16_totals_and_per_type_speedups(h200):
    totals, by_type = {}, {}
    for p in ("fp32", "fp16"):
        types = {x["Name"]: x["LayerType"] for x in _raw(H200 / f"resnet50_{p}.layers.json")["Layers"]}
        per = defaultdict(float)
        for r in _raw(H200 / f"resnet50_{p}.profile.json"):
            per[types[r["name"]]] += r["medianMs"]
        totals[p], by_type[p] = sum(per.values()), per
    assert round(totals["fp16"], 2) == 0.88 and round(totals["fp32"], 2) == 2.93
    c = compare(h200["fp32"], h200["fp16"], ("fp32", "fp16"))
    assert c["fp32_total_ms"] == pytest.approx(totals["fp32"])
    assert c["fp16_total_ms"] == pytest.approx(totals["fp16"])
    assert c["speedup"] == pytest.approx(totals["fp32"] / totals["fp16"])
    got = {r["type"]: r["speedup"] for r in c["by_type"]}
    for ty in ("CaskConvolution", "CaskGemmConvolution", "CaskPooling", "Reformat", "MyelinReformat"):
        assert got[ty] == pytest.approx(by_type["fp32"][ty] / by_type["fp16"][ty]), ty
    assert got["CaskConvolution"] > 4 and 0.9 < got["Reformat"] < 1.1
    assert got["NoOp"] is None  # 0 ms in both
    # per ONNX node: the shared times add up to the engines' totals (nothing lost or doubled)
    nodes = node_comparison(h200["fp32"], h200["fp16"], ("fp32", "fp16"))
    assert nodes["fp32_ms"].sum() == pytest.approx(totals["fp32"])
    assert nodes["fp16_ms"].sum() == pytest.approx(totals["fp16"])
    assert c["onnx_nodes_compared"] == 168
    assert c["same_layers"] >= 50


def test_summary_by_precision_reformat_fusion_and_top(h200):
    s = summarize(h200["fp16"], top=5)
    prec = {r["precision"]: r for r in s["by_precision"]}
    assert set(prec) == {"FP16", "FP32"}
    # the only FP32 layer: the input reformat FP32 -> FP16 in front of conv1
    fp32 = h200["fp16"].df[h200["fp16"].df["precision"] == "FP32"]
    assert fp32["name"].tolist() == ["Reformatting CopyNode for Input Tensor 0 to /conv1/Conv + /relu/Relu"]
    assert prec["FP32"]["time_ms"] == pytest.approx(float(fp32["time_ms"].iloc[0]))
    raw = _raw(H200 / "resnet50_fp16.layers.json")["Layers"]
    prof = {r["name"]: r["medianMs"] for r in _raw(H200 / "resnet50_fp16.profile.json")}
    ref_ms = sum(prof[x["Name"]] for x in raw if "Reformat" in x["LayerType"])
    assert s["reformat"]["time_ms"] == pytest.approx(ref_ms)
    assert s["fusion"]["histogram"] == {"1": 55, "2": 33, "3": 16}
    assert s["fusion"]["onnx_nodes_in_layers"] == 169  # /fc/Gemm is in two layers
    top = s["top_layers"]
    assert len(top) == 5 and top[0]["name"] == max(prof, key=prof.get)
    assert top[0]["onnx_nodes"] == ["/conv1/Conv", "/relu/Relu"]
    assert [t["time_ms"] for t in top] == sorted([t["time_ms"] for t in top], reverse=True)


def test_trtexec_times_match_trtexec_own_summary():
    for stem in ("resnet-fp16", "resnet-fp32", "resnet-qat"):
        prof = load_profile(A100 / f"{stem}.engine.timing.json")
        st = prof.latency_stats()
        summary = load_run_metadata(A100 / f"{stem}.engine.profile.metadata.json")
        lat = summary["performance_summary"]["Latency"]  # [min, max, mean, median, p99]
        assert st["p50_ms"] == pytest.approx(lat[3], abs=1e-6)
        assert st["mean_ms"] == pytest.approx(lat[2], rel=2e-3)  # trtexec: mean of a window
        assert st["p50_ms"] <= st["p90_ms"] <= st["p99_ms"]


def test_a100_fused_names_precision_and_qat():
    t = LayerTable.build(A100 / "resnet-qat.engine.graph.json", A100 / "resnet-qat.engine.profile.json")
    r = t.row("conv1.weight + QuantizeLinear_7 + Conv_9")
    assert r["mapping"] == "fused-name-unverified"
    assert r["onnx_nodes"] == ["conv1.weight", "QuantizeLinear_7", "Conv_9"]
    assert r["precision"] == "INT8" and r["out_precision"] == "FP32"
    by = {x["precision"]: x["time_ms"] for x in summarize(t)["by_precision"]}
    assert set(by) == {"INT8", "FP16", "FP32"} and by["INT8"] > by["FP16"]
    t16 = LayerTable.build(A100 / "resnet-fp16.engine.graph.json")
    assert not t16.has_times and summarize(t16)["total_ms"] is None
    assert t16.row("Conv_0 + Relu_1")["precision"] == "FP16"


def test_live_capture_files_from_the_gpu_rig():
    """Files our own profile_engine op wrote on the H200 (tests/data/timing/README.md)."""
    prof = load_profile(DATA / "resnet_tiny_fp16.profile.json")
    raw = _raw(DATA / "resnet_tiny_fp16.profile.json")
    assert prof.kind == "workbench" and prof.iterations == 50
    lat = np.asarray(raw["latency_ms"])
    st = prof.latency_stats()
    assert st["p99_ms"] == pytest.approx(np.percentile(lat, 99))
    assert st["p50_ms"] == pytest.approx(raw["latency"]["p50_ms"], rel=1e-4)
    assert [r["batch"] for r in prof.throughput] == [1, 8, 32]
    t = LayerTable.build(DATA / "resnet_tiny_fp16.layers.json", prof,
                         onnx=REPO / "sample_models" / "resnet_tiny.onnx")
    assert t.df["time_ms"].notna().all()
    assert t.coverage()["attributed_pct"] == pytest.approx(100.0)
    s = summarize(t)
    assert s["latency"]["p50_ms"] == pytest.approx(st["p50_ms"])
    bert = LayerTable.build(DATA / "bert_tiny_fp16.layers.json", DATA / "bert_tiny_fp16.profile.json",
                            onnx=REPO / "sample_models" / "bert_tiny.onnx")
    myelin = bert.df[bert.df["type"] == "Myelin"].iloc[0]
    assert myelin["mapping"] == "foreign-range" and myelin["n_onnx"] > 50
    assert {"INT32"} == {t.precision for t in bert.layers.layers[0].inputs}


# -- format drift ---------------------------------------------------------------------------------
def test_precision_parsing_of_format_strings():
    cases = {"Row major linear FP32": "FP32", "Channel major FP16 format where channel % 8 == 0": "FP16",
             "Four wide channel vectorized row major Int8 format": "INT8", "Half": "FP16",
             "Float": "FP32", "Row major linear Int32": "INT32", "Row major linear BFloat16 format": "BF16",
             "Row major linear FP8 format": "FP8", "N/A due to dynamic shapes": "", "": "",
             "Row major linear BOOL": "BOOL", "Thirty-two wide channel vectorized row major Int8 format.": "INT8"}
    for desc, want in cases.items():
        assert parse_precision(desc) == want, desc


def test_trt11_io_tensors_split_format_fields_unknown_types_and_missing_fields():
    data = {"Layers": [
        {"Name": "/a/Conv", "LayerType": "SomethingNew2030", "Metadata": "[ONNX Layer: /a/Conv]",
         "Inputs": [{"Name": "x", "Dimensions": [1, 8], "Format": "Row major linear", "Datatype": "Half"}],
         "Outputs": [{"Name": "y", "Dimensions": [1, 8], "Format": "Row major linear", "Datatype": "BFloat16"}]},
        {"LayerType": "kgen"},                       # no Name, no tensors
        {"Name": "mystery"},                         # no LayerType
        {"Name": "/b/Relu", "Inputs": {"Name": "y"}},  # a single tensor object, no formats
    ], "I/O Tensors": [{"Name": "x", "Mode": "Input"}, {"Name": "z"}]}
    el = parse_layers(data, source="t11.json")
    assert el.schema == "io-tensors" and el.bindings == ["x", "z"]
    a, b, c, d = el.layers
    assert a.type == "SomethingNew2030" and a.precision == "FP16" and a.out_precision == "BF16"
    assert a.onnx_from_metadata == ["/a/Conv"]
    assert b.name == "(unnamed layer 1)" and b.type == "kgen" and b.precision == ""
    assert c.type == "Unknown" and d.inputs[0].name == "y"
    assert any(w.code == "layer-info-field" for w in el.warnings)
    t = LayerTable.build(el)
    assert len(t) == 4 and not t.has_times


def test_layer_names_only_and_raw_separators_in_metadata(tmp_path):
    names = ["Reformatting CopyNode for Input Tensor 0 to conv1", "conv1", "{ForeignNode[a...b]}"]
    el = parse_layers({"Layers": names, "Bindings": ["in", "out"]})
    assert el.names_only and [x.type for x in el.layers] == ["Reformat", "Unknown", "Myelin"]
    assert any(w.code == "layer-info-names-only" for w in el.warnings)
    # raw control characters, exactly as TensorRT 8.6 writes them (json strict=False)
    p = tmp_path / "raw.json"
    p.write_text('{"Layers": [{"Name": "c + r", "LayerType": "CaskConvolution", "Metadata": '
                 '"[ONNX Layer: /c/Conv]\x1e[ONNX Layer: /r/Relu]\x1f[ONNX Layer: /r/Relu]"}],'
                 ' "Bindings": []}')
    assert load_layers(p).layers[0].onnx_from_metadata == ["/c/Conv", "/r/Relu"]


def test_multi_profile_engines_keep_one_profile_and_duplicate_names_join_in_order():
    layers = {"Layers": [{"Name": "conv"}, {"Name": "conv"}, {"Name": "conv [profile 1]"},
                         {"Name": "conv [profile 1]"}], "Bindings": ["x", "x [profile 1]"]}
    prof = [{"name": "conv", "averageMs": 1.0, "medianMs": 1.0, "count": 5},
            {"name": "conv", "averageMs": 2.0, "medianMs": 2.5, "count": 5}]
    t = LayerTable.build(parse_layers(layers), parse_profile(prof))
    assert t.df["time_ms"].tolist() == [1.0, 2.5] and t.layers.bindings == ["x"]
    t1 = LayerTable.build(parse_layers(layers, profile_id=1))
    assert t1.df["name"].tolist() == ["conv [profile 1]"] * 2
    with pytest.raises(WorkbenchError, match="profile 3"):
        parse_layers(layers, profile_id=3)


def test_profile_without_median_falls_back_to_mean_and_unknown_records_warn():
    layers = parse_layers({"Layers": [{"Name": "a"}, {"Name": "b"}]})
    prof = parse_profile([{"count": 10}, {"name": "a", "timeMs": 10.0, "averageMs": 1.0,
                                         "percentage": 50.0},
                          {"name": "zzz", "timeMs": 10.0, "averageMs": 1.0, "percentage": 50.0}])
    t = LayerTable.build(layers, prof)
    assert t.stat == "mean" and t.df["time_ms"].tolist()[0] == 1.0
    assert np.isnan(t.df["time_ms"].tolist()[1])
    codes = {w.code for w in t.warnings}
    assert {"profile-layer-unknown", "profile-layer-missing", "profile-no-median"} <= codes


def test_fused_name_tokens():
    assert name_tokens("PWN(PWN(/a/Sigmoid), /a/Mul) + Add_3") == ["/a/Sigmoid", "/a/Mul", "Add_3"]
    assert name_tokens("Conv_0 + Relu_1") == ["Conv_0", "Relu_1"]
    assert name_tokens("PWN(x, PWN(y, z))") == ["x", "y", "z"]


# -- lints ----------------------------------------------------------------------------------------
def test_lints_reformat_heavy_and_fp32_left_in_fp16_engine(h200):
    codes = {f.code for f in lint(h200["fp16"])}
    assert "reformat-heavy" in codes and "fp32-in-reduced-precision" not in codes
    assert "fp32-in-reduced-precision" not in {f.code for f in lint(h200["fp32"])}
    raw = _raw(H200 / "resnet50_fp16.layers.json")
    mod = copy.deepcopy(raw)
    victim = "/layer4/layer4.0/conv2/Conv + /layer4/layer4.0/relu_1/Relu"
    for layer in mod["Layers"]:
        if layer["Name"] == victim:
            for tns in layer["Inputs"] + layer["Outputs"]:
                tns["Format/Datatype"] = "Row major linear FP32"
    t = LayerTable.build(parse_layers(mod, "mod.json"), load_profile(H200 / "resnet50_fp16.profile.json"),
                         onnx=R50)
    f = [x for x in lint(t) if x.code == "fp32-in-reduced-precision"]
    assert len(f) == 1 and f[0].nodes == ["/layer4/layer4.0/conv2/Conv", "/layer4/layer4.0/relu_1/Relu"]
    assert f[0].extra["layers"] == [victim]


# -- malformed input ------------------------------------------------------------------------------
def _cut(src: Path, dst: Path, frac: float) -> Path:
    text = src.read_text()
    dst.write_text(text[: int(len(text) * frac)])
    return dst


def test_truncated_layer_json_names_file_and_field(tmp_path):
    p = _cut(H200 / "resnet50_fp16.layers.json", tmp_path / "cut.layers.json", 0.5)
    with pytest.raises(WorkbenchError) as ei:
        load_layers(p)
    e = ei.value
    assert e.file == str(p) and e.field and e.field.startswith("Layers[")
    assert "truncated" in str(e) and "\n" not in str(e)


def test_truncated_profile_json_names_file_and_field(tmp_path):
    p = _cut(A100 / "resnet-fp16.engine.profile.json", tmp_path / "cut.profile.json", 0.6)
    with pytest.raises(WorkbenchError) as ei:
        load_profile(p)
    assert ei.value.file == str(p) and ei.value.field.startswith("[")


@pytest.mark.parametrize("doc,field", [
    ({"Layers": 5}, "Layers"),
    ({"Bindings": []}, "Layers"),
    ({"Layers": [7]}, "Layers[0]"),
    ({"Layers": [{"Name": "a", "Inputs": 3}]}, "Layers[0].Inputs"),
    ({"Layers": [{"Name": "a", "Outputs": [{"Name": "y"}, 4]}]}, "Layers[0].Outputs[1]"),
    ([{"count": 3}, {"name": "a", "averageMs": 1}], "Layers"),  # a profile passed as layers
])
def test_malformed_layer_info_names_field(tmp_path, doc, field):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(WorkbenchError) as ei:
        load_layers(p)
    assert ei.value.file == str(p) and ei.value.field == field


@pytest.mark.parametrize("doc,field", [
    ([{"count": 3}, {"averageMs": 1.0}], "[1].name"),
    ([{"name": "a", "averageMs": "fast"}], "[0].averageMs"),
    ([{"name": "a", "averageMs": -1.0}], "[0].averageMs"),
    ([{"name": "a"}], "[0].averageMs"),
    ([{"name": "a", "averageMs": 1.0}, 5], "[1]"),
    ([], "[0]"),
    ({"Layers": []}, "name"),
    ([{"latencyMs": 1.0}, {"computeMs": 2.0}], "[1].latencyMs"),
])
def test_malformed_profile_names_field(tmp_path, doc, field):
    p = tmp_path / "bad.profile.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(WorkbenchError) as ei:
        load_profile(p)
    assert ei.value.file == str(p) and ei.value.field == field


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(WorkbenchError, match="file not found"):
        load_layers(tmp_path / "nope.json")
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(WorkbenchError, match="empty"):
        load_profile(tmp_path / "empty.json")


def test_layer_info_without_execution_context_says_why_precision_is_unknown():
    el = load_layers(DATA / "resnet_tiny_nocontext.layers.json")
    assert len(el) > 5 and {x.precision for x in el.layers} == {""}
    assert any(-1 in t.shape for x in el.layers for t in x.inputs)
    assert [w.code for w in el.warnings] == ["layer-info-no-context"]
    t = LayerTable.build(el, onnx=REPO / "sample_models" / "resnet_tiny.onnx")
    assert t.coverage()["layers_mapped"] >= len(el) - 3  # Metadata still maps the layers
    assert {r["precision"] for r in summarize(t)["by_precision"]} == {"unknown"}


def test_qat_lints_fp32_island_and_unaligned_convolutions():
    t = LayerTable.build(A100 / "resnet-qat.engine.graph.json", A100 / "resnet-qat.engine.profile.json")
    f = {x.code: x for x in lint(t)}
    assert f["fp32-in-reduced-precision"].extra["layers"] == ["MaxPool_12"]  # conv1 writes FP32
    conv = f["conv-channels-unaligned"]
    assert conv.extra["layers"][0] == "conv1.weight + QuantizeLinear_7 + Conv_9"  # 3 RGB channels
    assert len(conv.extra["layers"]) == 2 and "Gemm_257" in conv.nodes  # 1000 classes % 16 != 0
    assert not any(n.startswith("(Unnamed Layer") for n in conv.nodes)


def test_treemap_by_scope_conserves_engine_time(h200):
    from workbench.render.timing_figures import treemap_data

    t = h200["fp16"]
    d = treemap_data(t).set_index("id")
    assert d.loc["all", "value"] == pytest.approx(t.total_ms)
    kids = d[d["parent"] == "all"]
    assert kids["value"].sum() == pytest.approx(t.total_ms)
    l1 = t.node_times()
    assert d.loc["/layer1", "value"] == pytest.approx(l1[l1["node"].str.startswith("/layer1/")]["time_ms"].sum())
    assert d.loc["/(top level)/Identity", "value"] == pytest.approx(
        l1[l1["op"] == "Identity"]["time_ms"].sum())
