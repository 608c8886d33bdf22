"""A parser error that names no node: TensorRT-RTX refuses ScatterElements(reduction=max) as
'Unsupported reduction type' with no node. It was reported as a graph-level problem whose
next step ('replace the node via `workbench fix`') led nowhere, and the split could not cut
there. The static rules that name a cause on nodes of the op the failing importer belongs to
name the node now: check names it, the next step is the split, the split and the first-try
build cut there. Real TensorRT-RTX parser and CPU builds, onnxruntime for the chain."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from conftest import REPO
from workbench.engines.engine import BuildConfig, BuildFailed, build_engine
from workbench.support.checker import check
from workbench.surgery.propose import advise

CFG = BuildConfig(target="sm89", builder_optimization_level=0)


def scatter_max_model() -> onnx.ModelProto:
    """x [N, 4] -> MatMul -> Relu -> ScatterElements(axis 0, reduction=max) with graph inputs
    idx, upd [K, 4] -> Sigmoid."""
    w = nh.from_array(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"], name="/mm"),
             h.make_node("Relu", ["mm"], ["r"], name="/relu"),
             h.make_node("ScatterElements", ["r", "idx", "upd"], ["s"], name="/scatter_max",
                         axis=0, reduction="max"),
             h.make_node("Sigmoid", ["s"], ["y"], name="/sig")]
    g = h.make_graph(nodes, "scatter_max", [
        h.make_tensor_value_info("x", T.FLOAT, ["N", 4]),
        h.make_tensor_value_info("idx", T.INT64, ["K", 4]),
        h.make_tensor_value_info("upd", T.FLOAT, ["K", 4])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], initializer=[w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def uint16_input_model() -> onnx.ModelProto:
    """A UINT16 graph input: refused for the model as a whole, no node, no recipe."""
    g = h.make_graph([h.make_node("Cast", ["x"], ["y"], name="/cast", to=T.FLOAT)], "u16",
                     [h.make_tensor_value_info("x", T.UINT16, [4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture()
def scatter_path(tmp_path):
    p = tmp_path / "scatter_max.onnx"
    onnx.save(scatter_max_model(), str(p))
    return p


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def test_the_parser_names_no_node_and_the_static_rules_do(scatter_path):
    rep = check(str(scatter_path), backend="tensorrt-rtx")
    assert not rep.supported and len(rep.unsupported) == 1
    u = rep.unsupported[0]
    assert u["node"] == "/scatter_max" and u["op"] == "ScatterElements"
    assert u["message"] == "Unsupported reduction type"  # the parser's own words, no node
    assert u["code"] == "scatterelements-reduction" and u["attributed"] == "static-rules"
    assert u["reason"] == ("ScatterElements reduction 'max' is not supported (TensorRT's "
                           "parser: Unsupported reduction type)")
    advise(rep)
    first = rep.unsupported[0]["next_steps"][0]
    assert first["verb"] == "fix" and first["args"] == [str(scatter_path)]
    assert ["--split", None] in first["flags"] and first["why"].startswith(
        "builds everything before it")
    assert "replace the node via" not in (rep.unsupported[0]["hint"] or "")
    assert rep.findings[0].nodes == ["/scatter_max"]


def test_check_cli_names_the_node_and_the_split_as_next_step(scatter_path):
    r = _cli("check", scatter_path)
    assert r.returncode == 1, r.stderr
    assert "(graph)" not in r.stdout
    assert (f"  /scatter_max:" in r.stdout and f"$ workbench fix {scatter_path} --split -o "
            f"{str(scatter_path)[:-5]}_split  # builds everything before it" in r.stdout)


def test_the_split_and_the_first_try_build_cut_at_the_named_node(scatter_path, tmp_path):
    folder = tmp_path / "split"
    r = _cli("fix", scatter_path, "--split", "--build", "-o", folder)
    assert r.returncode == 0, r.stderr + r.stdout
    man = json.loads((folder / "split.json").read_text())
    assert man["refused"] == [{"node": "/scatter_max", "op": "ScatterElements"}]
    assert man["verification"]["status"] == "equivalent"
    res = build_engine(scatter_path, CFG, output=tmp_path / "s.engine")
    assert res.split["refused"] == [{"node": "/scatter_max", "op": "ScatterElements"}]
    assert res.split["verification"].startswith("equivalent")
    with pytest.raises(BuildFailed) as e:
        build_engine(scatter_path, CFG, output=tmp_path / "n.engine", split_tail=False)
    assert e.value.node == "/scatter_max" and e.value.op == "ScatterElements"
    assert "at node '/scatter_max' (ScatterElements): ScatterElements reduction 'max' is " \
        "not supported" in e.value.message


def test_an_error_no_rule_explains_is_put_on_the_ops_only_node(scatter_path):
    """Without a rule (an op the tables do not know yet) the op whose importer failed names
    the node when the model has one of it; with none it stays the model's."""
    from workbench.core.model import open_model
    from workbench.support.checker import _attributed
    from workbench.worker.client import default_client

    res = default_client().call("parse", {"path": str(scatter_path), "backend": "tensorrt-rtx",
                                          "plugins": []}, timeout=120)
    errors = res["results"][0]["errors"]
    assert errors[0]["node"] == "" and errors[0]["func"] == "importScatterElements"
    model = open_model(scatter_path)
    [only] = _attributed(model, errors, [])
    assert only["node"] == "/scatter_max" and only["attributed"] == "only-node"
    other = dict(errors[0], func="importScatterND")
    assert _attributed(model, [other], []) == [other]  # no ScatterND here: graph-level


def test_inspector_counts_refused_nodes_as_its_legend_does(scatter_path, tmp_path):
    from widgets import Inspector

    ins = Inspector(str(scatter_path))
    ins.run_check(wait=True)
    assert "1 node(s) refused" in ins.support_html.value
    assert ["error (1)", "#d62728"] in ins.graph_view.legend
    u16 = tmp_path / "u16.onnx"
    onnx.save(uint16_input_model(), str(u16))
    whole = Inspector(str(u16))
    whole.run_check(wait=True)
    assert "1 problem(s) of the model as a whole (no node named)" in whole.support_html.value
    assert "node(s) refused" not in whole.support_html.value
    assert ["error (0)", "#d62728"] in whole.graph_view.legend
    assert "<code>(graph)</code>" in whole.support_html.value


def test_fix_panel_offers_the_split_and_no_apply_without_a_recipe(scatter_path, tmp_path):
    from widgets import FixPanel

    panel = FixPanel(scatter_path, graph=False)
    panel.wait(120)
    assert list(panel.proposal_list.options) == ["split on /scatter_max (manual)"]
    assert not panel.apply_btn.disabled and panel.apply_row.layout.display is None
    u16 = tmp_path / "u16.onnx"
    onnx.save(uint16_input_model(), str(u16))
    none = FixPanel(u16, graph=False)
    none.wait(120)
    assert none.proposals == [] and none.apply_btn.disabled
    assert none.proposal_list.layout.display == "none"
    assert none.apply_row.layout.display == "none"
    assert "none for these findings, nothing to apply here" in none.proposals_head.value
