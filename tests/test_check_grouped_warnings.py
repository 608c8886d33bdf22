"""`workbench check` text output: warnings that say the same thing of different nodes are one
line with a count and the first nodes; --json keeps every finding."""
from __future__ import annotations

import json

import onnx

from test_surgery_symmetric_const import qdq_model
from workbench.cli import main
from workbench.cli.cmd_check import _human, group_findings


def _w(node, value, code="qdq-zero-point"):
    return {"severity": "warning", "code": code, "nodes": [node],
            "message": f"DequantizeLinear has a non-zero zero point ({value})",
            "hint": f"`workbench fix m.onnx --recipe symmetric_qdq:node={node}`"}


def test_group_findings_by_code_and_message_without_the_node():
    fs = [_w(f"n{i}", -128 + i) for i in range(6)] + [_w("other", 3, code="other-code"),
                                                       {"severity": "warning", "code": "x",
                                                        "message": "graph", "nodes": []}]
    groups = group_findings(fs)
    assert [len(g) for g in groups] == [6, 1, 1]
    assert [f["nodes"][0] for f in groups[0]] == [f"n{i}" for i in range(6)]


def test_human_text_prints_one_line_per_group():
    d = {"model": "m.onnx", "backend": {"name": "tensorrt-rtx", "version": "1"},
         "mode": "parser", "supported": False,
         "unsupported": [{"node": "a", "op": "DequantizeLinear", "source": "parser",
                          "reason": "r", "hint": "h"}],
         "findings": [_w(f"n{i}", i) for i in range(91)]}
    text = _human(d)
    lines = [ln for ln in text.splitlines() if ln.strip().startswith("warning")]
    assert len(lines) == 1
    assert "warning x91 [n0, n1, n2 and 88 more]" in lines[0]
    assert "symmetric_qdq:node=n0" in lines[0] and "n3," not in lines[0]
    assert "--json" in text


def test_check_cli_groups_text_and_json_keeps_all(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    onnx.save(qdq_model(), str(p))
    main(["check", str(p), "--backend", "tensorrt-rtx", "--json"])
    d = json.loads(capsys.readouterr().out)
    main(["check", str(p), "--backend", "tensorrt-rtx"])
    out = capsys.readouterr().out
    warned = [f["nodes"][0] for f in d["findings"] if f["severity"] == "warning" and f["nodes"]]
    assert {"eps_DQ", "g_DQ"} <= set(warned) or {"eps_DQ", "g_DQ"} & {
        u["node"] for u in d["unsupported"]}
    shown = [ln for ln in out.splitlines() if ln.strip().startswith("warning")]
    assert len(shown) < len(warned)  # eps_DQ and g_DQ: one line, the same exact fix
    assert any(" x2 [" in ln and "symmetric_qdq:node=" in ln for ln in shown)
