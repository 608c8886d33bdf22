"""Proposals are routed by finding code (real TensorRT-RTX 1.7 parser findings on the fixtures),
recipes describe themselves and are discovered, and support knows nothing of surgery."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import POLY, REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.support import codes
from workbench.support.checker import SupportReport, check_files
from workbench.surgery import recipes as recipes_pkg
from workbench.surgery.propose import advise, propose
from workbench.surgery.recipes import REGISTRY, all_recipes, get_recipe

NF = SAMPLES / "needs_fixing.onnx"
# model -> {(recipe, node, auto, code)} from the real parser's structured findings
EXPECTED = {
    "needs_fixing.onnx": {("decompose", "/crop/CenterCropPad", True, codes.UNSUPPORTED_OP),
                          ("fold_constants", "/flatten/Compress", True, codes.UNSUPPORTED_OP),
                          ("decompose", "/act/FastGelu", True, codes.PLUGIN_MISSING)},
    "capability.onnx": {("replace_with_plugin", n, False, codes.PLUGIN_MISSING)
                        for n in ("Fake1", "Fake2", "Fake3")},
    "custom_op_node.onnx": {("replace_with_plugin", "NegPos#0", False, codes.PLUGIN_MISSING)},
    "fake_op_model.onnx": {("replace_with_plugin", "Fake#0", False, codes.PLUGIN_MISSING)},
    "qdq_conv.onnx": {("symmetric_qdq", "onnx_graphsurgeon_node_1", True, codes.QDQ_ZERO_POINT)},
    "bad_graph_with_dup_value_info.onnx": {("rename_duplicates", "", True,
                                            codes.DUPLICATE_TENSOR_NAME)},
    "loop.onnx": set(),  # no recipe declares loop-unbounded-counter
}


@pytest.fixture(scope="module")
def reports():
    paths = [NF] + sorted(POLY.glob("*.onnx"))
    return {p.name: (p, r) for p, r in zip(paths, check_files(paths, backend="tensorrt-rtx"))}


def _props(report, path):
    return {(p.recipe, p.node, p.auto, p.code) for p in propose(report, path)}


def test_propose_routes_real_parser_findings_by_code(reports):
    for name, (path, rep) in reports.items():
        assert _props(rep, path) == EXPECTED.get(name, set()), name
        if rep.supported:
            assert propose(rep, path) == []
        for p in propose(rep, path):  # every proposal answers a code its recipe declares
            r = get_recipe(p.recipe if p.recipe != "set_input_shapes" else "decompose")
            assert p.code in r.fixes or codes.ANY_NODE in r.fixes, (name, p)


def test_routing_ignores_message_wording_and_follows_the_code(reports):
    path, rep = reports["needs_fixing.onnx"]
    garbled = SupportReport.from_dict(rep.to_dict())
    for u in garbled.unsupported:  # no wording left to route on
        u["reason"] = u["message"] = u["hint"] = "zzz"
    assert _props(garbled, path) == EXPECTED["needs_fixing.onnx"]
    # the same node with a code no op-rewriting recipe declares: FastGelu is not decomposed,
    # only the manual routes are left: the plugin (it takes any failure of a custom-domain
    # node) and the split (a refusal no other recipe claims runs outside the engine)
    for u in garbled.unsupported:
        if u["node"] == "/act/FastGelu":
            u["code"] = "loop-unbounded-counter"
    got = {p for p in _props(garbled, path) if p[1] == "/act/FastGelu"}
    assert got == {("replace_with_plugin", "/act/FastGelu", False, "loop-unbounded-counter"),
                   ("split", "/act/FastGelu", False, "loop-unbounded-counter")}


def test_report_round_trips_and_propose_takes_only_reports(reports):
    path, rep = reports["qdq_conv.onnx"]
    back = SupportReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert back.to_dict() == rep.to_dict()
    assert [f.code for f in back.problems] == [codes.QDQ_ZERO_POINT]
    assert _props(back, path) == EXPECTED["qdq_conv.onnx"]
    with pytest.raises(WorkbenchError, match="needs a SupportReport, not a dict"):
        propose(rep.to_dict(), path)


def test_recipes_describe_themselves():
    by_name = {r["name"]: r for r in recipes_pkg.list_recipes()}
    assert set(by_name["decompose"]["fixes"]) >= {codes.UNSUPPORTED_OP, codes.PLUGIN_MISSING}
    assert by_name["rename_duplicates"]["fixes"] == [codes.DUPLICATE_TENSOR_NAME]
    assert by_name["remove_node"]["fixes"] == []  # manual only
    order = [r.name for r in all_recipes()]
    assert order.index("symmetric_qdq") < order.index("fold_constants") < \
        order.index("decompose") < order.index("replace_with_plugin")


_RECIPE = '''
from workbench.surgery.recipes.base import Precondition, Proposal, Recipe, register


@register
class BoundLoop(Recipe):
    name = "test_bound_loop"
    summary = "a recipe that lives only in a test folder"
    fixes = ("loop-unbounded-counter",)

    def precondition(self, model, **params):
        return Precondition(True, "always", [])

    def _apply(self, model, **params):
        return model

    def propose(self, finding, ctx):
        return [Proposal(finding.nodes[0], finding.op, self.name, {}, "test", code=finding.code)]
'''


def test_a_recipe_module_in_a_new_folder_is_discovered(reports, tmp_path, monkeypatch):
    """A module dropped in a folder of the recipes package path is found with no import of it
    anywhere, and `propose` routes the finding it declares to it."""
    folder = tmp_path / "more_recipes"
    folder.mkdir()
    (folder / "bound_loop.py").write_text(textwrap.dedent(_RECIPE))
    monkeypatch.setattr(recipes_pkg, "__path__", list(recipes_pkg.__path__) + [str(folder)])
    monkeypatch.delitem(REGISTRY, "test_bound_loop", raising=False)
    try:
        path, rep = reports["loop.onnx"]
        assert _props(rep, path) == {("test_bound_loop", "cond___while_Less", True,
                                      "loop-unbounded-counter")}
        assert "test_bound_loop" in {r["name"] for r in recipes_pkg.list_recipes()}
    finally:
        REGISTRY.pop("test_bound_loop", None)
        sys.modules.pop("workbench.surgery.recipes.bound_loop", None)
        recipes_pkg._discovered.pop("workbench.surgery.recipes.bound_loop", None)


def test_a_recipe_package_elsewhere_is_discovered(tmp_path, monkeypatch):
    pkg = tmp_path / "site_recipes"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bound_loop.py").write_text(textwrap.dedent(_RECIPE))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert recipes_pkg.discover("site_recipes") == ["site_recipes.bound_loop"]
        assert recipes_pkg.discover("site_recipes") == []  # once
        assert get_recipe("test_bound_loop").fixes == ("loop-unbounded-counter",)
    finally:
        REGISTRY.pop("test_bound_loop", None)
        sys.modules.pop("site_recipes.bound_loop", None)
        sys.modules.pop("site_recipes", None)
        recipes_pkg._discovered.pop("site_recipes.bound_loop", None)


def test_advise_adds_the_decompose_step_once(reports):
    from workbench.core.findings import NextStep

    path, rep = reports["needs_fixing.onnx"]
    rep = SupportReport.from_dict(rep.to_dict())
    advise(rep)
    steps = {u["node"]: [NextStep.from_dict(s) for s in u["next_steps"]]
             for u in rep.unsupported}
    hints = {u["node"]: u["hint"] for u in rep.unsupported}
    fixed = str(path.with_name("needs_fixing.fixed.onnx"))
    # the recipes' steps are records naming the model and the -o fix requires, first
    first = steps["/act/FastGelu"][0]
    assert (first.verb, first.args) == ("fix", (str(path),))
    assert dict(first.flags) == {"-o": fixed, "--recipe": "decompose:node=/act/FastGelu"}
    assert first.why == "replaces it with standard ops" and "--plugin" in hints["/act/FastGelu"]
    assert steps["/crop/CenterCropPad"][0].verb == "fix"
    # no decomposition for Compress: its inputs are constant, so the step is the fold that
    # `fix --auto` applies (the advice does not contradict the recipe used)
    assert not any("decompose" in str(s.flags) for s in steps["/flatten/Compress"])
    assert dict(steps["/flatten/Compress"][0].flags) == {"-o": fixed,
                                                         "--recipe": "fold_constants"}
    # the words a recipe's step replaced carry no command (the step does)
    assert "workbench fix" not in hints["/crop/CenterCropPad"]
    # the error Findings carry the same hints and next steps
    errs = {f.nodes[0]: f for f in rep.findings if f.severity == "error"}
    assert {n: f.hint for n, f in errs.items()} == hints
    assert {n: f.next_steps for n, f in errs.items()} == steps
    again = advise(rep).unsupported[0]  # idempotent
    assert again["hint"] == hints["/crop/CenterCropPad"]
    assert len(again["next_steps"]) == len(steps["/crop/CenterCropPad"])


def test_support_check_imports_no_surgery():
    code = ("import sys, json; from workbench.support.checker import check; "
            f"r = check({str(NF)!r}, backend='static'); "
            "print(json.dumps([r.supported, sorted(m for m in sys.modules "
            "if m.startswith('workbench.surgery'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == [False, []]
