"""`workbench timing` verb and the live-capture client on a machine without a GPU."""
from __future__ import annotations

import json
import re

import pytest

from conftest import A100, H200
from workbench.cli import main
from workbench.core.errors import WorkbenchError
from workbench.measure.capture import capture, capture_onnx

L16, P16 = H200 / "resnet50_fp16.layers.json", H200 / "resnet50_fp16.profile.json"
L32, P32 = H200 / "resnet50_fp32.layers.json", H200 / "resnet50_fp32.profile.json"


def _json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_cli_json_summary_with_onnx_mapping_and_comparison(capsys, tmp_path):
    report = tmp_path / "r.html"
    s = _json(capsys, ["timing", str(L16), "--profile", str(P16), "--onnx",
                       str(H200 / "resnet50.structure.onnx"), "--vs", str(L32), "--vs-profile",
                       str(P32), "--json", "--top", "3", "--html", str(report)])
    assert round(s["total_ms"], 2) == 0.88 and s["statistic"] == "median"
    assert s["onnx_mapping"]["mapped_pct"] >= 95 and s["onnx_mapping"]["verified_with_onnx"]
    assert [r["type"] for r in s["by_type"]][0] == "CaskConvolution"
    assert {r["precision"] for r in s["by_precision"]} == {"FP16", "FP32"}
    assert len(s["top_layers"]) == 3
    c = s["comparison"]
    assert c["names"] == ["resnet50_fp32", "resnet50_fp16"]
    assert round(c["resnet50_fp32_total_ms"], 2) == 2.93
    assert c["speedup"] == pytest.approx(c["resnet50_fp32_total_ms"] / c["resnet50_fp16_total_ms"])
    conv = next(r for r in c["by_type"] if r["type"] == "CaskConvolution")
    assert conv["speedup"] > 4
    assert s["html"] == str(report) and report.stat().st_size > 3_000_000  # plotly.js inlined
    text = report.read_text()
    assert re.findall(r"<script[^>]*\bsrc=", text) == []  # everything inline, nothing fetched
    assert "resnet50_fp16 vs baseline resnet50_fp32" in text


def test_cli_text_output_and_trtexec_times(capsys):
    rc = main(["timing", str(A100 / "resnet-fp16.engine.graph.json"), "--profile",
               str(A100 / "resnet-fp16.engine.profile.json"), "--times",
               str(A100 / "resnet-fp16.engine.timing.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "36 layers, total 1.0168 ms (median)" in out
    assert "latency P50 0.8622" in out and "top layers:" in out


@pytest.mark.parametrize("argv,needle", [
    (["--vs-profile", str(P32)], "--vs-profile needs --vs"),
    (["--times", str(P16)], "no end-to-end latencies"),
    (["--profile", str(L16)], "engine layer information, not a profile"),
    (["--top", "0"], "--top must be >= 1"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, needle):
    rc = main(["timing", str(L16)] + argv)
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_cli_truncated_file_names_file_and_field(capsys, tmp_path):
    p = tmp_path / "t.layers.json"
    p.write_text(L16.read_text()[:40_000])
    rc = main(["timing", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and str(p) in err and "field 'Layers[" in err and "truncated" in err


def test_capture_without_gpu_says_it_needs_one(tmp_path):
    """This machine (and CI) has no GPU: the live path must say so clearly."""
    eng = tmp_path / "m.engine"
    eng.write_bytes(b"not really an engine")
    with pytest.raises(WorkbenchError) as ei:
        capture(eng, iterations=2, warmup=0, layer_iterations=1, out_dir=str(tmp_path / "o"))
    msg = str(ei.value)
    assert "needs an NVIDIA GPU" in msg and "workbench timing LAYERS.json" in msg
    assert ei.value.code == "no-gpu"
    with pytest.raises(WorkbenchError, match="needs an NVIDIA GPU"):
        capture_onnx(H200 / "resnet50.structure.onnx", out_dir=str(tmp_path / "o2"))
    with pytest.raises(WorkbenchError, match="engine file not found"):
        capture(tmp_path / "missing.engine")
    with pytest.raises(WorkbenchError, match="iterations"):
        capture(eng, iterations=0)


def test_timing_capture_verb_without_gpu_and_its_argument_checks(capsys, tmp_path):
    from workbench.cli.cmd_timing_capture import parse_profile_shapes, parse_shapes

    assert parse_shapes("input:8x3x224x224,mask:8x128") == {"input": [8, 3, 224, 224], "mask": [8, 128]}
    assert parse_profile_shapes("input:1x3:8x3:32x3") == {"input": [[1, 3], [8, 3], [32, 3]]}
    eng = tmp_path / "m.engine"
    eng.write_bytes(b"x")
    rc = main(["timing-capture", str(eng), "--iterations", "2", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "needs an NVIDIA GPU" in err and err.count("\n") == 1
    for argv, needle in ((["--shapes", "input:8xAx3"], "bad shape"),
                         (["--fp16"], "only apply when building from ONNX"),
                         (["--batch-sizes", "1,b"], "bad batch sizes")):
        rc = main(["timing-capture", str(eng)] + argv)
        err = capsys.readouterr().err
        assert rc == 2 and needle in err, (argv, err)


def test_profile_alone_gives_a_names_only_table(capsys):
    """trtexec users often only have --exportProfile: the layers come from its names."""
    s = _json(capsys, ["timing", str(A100 / "resnet-fp16.engine.profile.json"), "--json"])
    raw = json.loads((A100 / "resnet-fp16.engine.profile.json").read_text())
    assert s["schema"] == "from-profile" and s["layers"] == len(raw) - 1
    assert s["total_ms"] == pytest.approx(sum(r["medianMs"] for r in raw[1:]))
    assert any(w["code"] == "layer-info-from-profile" for w in s["warnings"])
    types = {r["type"] for r in s["by_type"]}
    assert "Reformat" in types  # guessed from 'Reformatting CopyNode ...' names
