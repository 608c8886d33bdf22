"""The fix notebook's two first-hour defects, on the real TensorRT-RTX parser:

1. the next-step commands (failing nodes' hints, the FixPanel's "Next steps") named the
   workspace copy (<home>/models/<hash>/versions/<vid>.onnx); they now name the user's model,
   or for a fixed version the file it was exported to, else `<name>.fixed.onnx` in the
   model's workspace (`outputs/`, never beside the model) together with the
   `panel.export(...)` call that writes it;
2. re-running notebook 03 grew its history table (it listed every version any run ever made);
   an identical change to the same version reuses its version, so the table (this session's
   history) is the same on every re-run, while new edits still append and undo/redo work.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import nbformat
import onnx
import pytest
from nbclient import NotebookClient

from conftest import REPO, SAMPLES, shown_text
from workbench.core.errors import WorkbenchError
from workbench.support.checker import SupportReport
from workbench.surgery.history import History, history_rows
from workbench.surgery.session import FixSession

NF = SAMPLES / "needs_fixing.onnx"
GELU = "/act/FastGelu"


@pytest.fixture
def model(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(NF, p)
    return p


def _applies(hist: History) -> int:
    return sum(r.get("event") == "apply" for r in hist.ws.history())


def _commands(html_text: str) -> str:
    """The commands a findings table holds in its next steps' tooltips, one a line."""
    import html
    import re

    return "\n".join(html.unescape(t) for t in re.findall(r"title='([^']*)'", html_text))


def _home() -> str:
    return os.environ["WORKBENCH_HOME"]


# ------------------------------------------------------------------ 1. next-step commands
def test_panel_next_steps_name_the_users_files_not_the_workspace(model, tmp_path):
    from widgets import FixPanel

    original = model.read_bytes()
    panel = FixPanel(model, graph=False)
    panel.wait(120)
    home, ws = _home(), str(panel.history.ws.dir)
    assert ws.startswith(home)

    def shown() -> str:
        return (shown_text(panel.failing.value) + _commands(panel.failing.value) + panel.next_html.value
                + " ".join(panel.next_steps()))

    # on the original: the commands run on the model the user opened
    assert home not in shown_text(panel.failing.value)  # (the hints named <home>/models/<hash>/versions/)
    assert home not in shown() and "versions/" not in shown()
    fixed = tmp_path / "m.fixed.onnx"
    assert (f"workbench fix {model} -o {fixed} --recipe decompose:node={GELU}"
            in _commands(panel.failing.value))
    # the table itself shows a short line per step, without the paths
    assert f"fix --recipe decompose:node={GELU}: replaces it with standard ops" in \
        shown_text(panel.failing.value)
    assert any(f"`workbench fix {model} -o {fixed} --auto`" in s for s in panel.next_steps())
    # a kept change: the commands name the suggested output in the workspace's outputs/
    # (never beside the model), and the call that writes it is right there; nothing is
    # written yet
    panel.apply(next(p for p in panel.proposals if p.node == GELU))
    assert panel.wait(120).kept
    assert panel.history.current != panel.history.original
    assert "versions/" not in shown()
    fixed = panel.history.ws.outputs_dir / "m.fixed.onnx"
    assert (f"workbench fix {fixed} -o {fixed.with_name('m.fixed2.onnx')} --recipe "
            "decompose:node=/crop/CenterCropPad" in _commands(panel.failing.value))
    assert not fixed.exists()
    assert any(f"`panel.export('{fixed}')`" in s and "not saved yet" in s
               for s in panel.next_steps())
    assert "<code>panel.export(" in panel.next_html.value
    assert panel.export_path.value == str(fixed)
    # export (the call shown): that file holds the current version, the original is untouched
    out = panel.export()
    assert out == fixed and fixed.exists() and model.read_bytes() == original
    assert [n.op_type for n in onnx.load(str(fixed)).graph.node] == \
        [n.op_type for n in panel.history.current_proto().graph.node]
    assert any(s == f"version {panel.history.current} is saved as {fixed}"
               for s in panel.next_steps())
    # a path the user chose: the commands follow it
    chosen = tmp_path / "chosen.onnx"
    panel.export_path.value = str(chosen)
    panel.export_btn.click()
    assert chosen.exists() and f"workbench fix {chosen} -o {tmp_path / 'chosen.fixed.onnx'} --recipe" \
        in _commands(panel.failing.value)
    assert str(fixed) not in _commands(panel.failing.value) and home not in shown()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["chosen.onnx", "m.onnx"]
    # never over the model the user opened
    with pytest.raises(WorkbenchError, match="refusing to overwrite the original"):
        panel.export(model)
    assert model.read_bytes() == original
    # auto-fix to supported: the next steps write the new version and build that file
    panel.auto_fix()
    assert panel.wait(120).supported
    steps = panel.next_steps()
    assert any(f"`panel.export('{chosen}')`" in s for s in steps), steps
    assert any(s.startswith(f"then `workbench build {chosen} -o {tmp_path / 'chosen.engine'}")
               for s in steps), steps
    assert home not in shown()


def test_session_reports_name_the_users_file_whatever_the_checker_wrote(model, tmp_path):
    """Every text of the report (hints with commands, reasons) is renamed, not only the
    recipes' next steps: the checker's own hints name the file it read (a workspace copy)."""
    seen = []

    def checker(path):
        seen.append(str(path))
        # (a code symmetric_qdq claims, on a node it cannot fix: the split's step comes first)
        return SupportReport(backend="static", backend_version=None, supported=False,
                             unsupported=[{"node": GELU, "op": "FastGelu",
                                           "code": "qdq-zero-point",
                                           "source": "parser", "reason": f"refused in {path}",
                                           "hint": f"`workbench fix {path} --recipe y`"}],
                             model=str(path))

    s = FixSession(model, check=checker, output=tmp_path / "out dir" / "fixed.onnx")
    rep = s.check()
    assert seen[-1].startswith(_home())
    u = rep.unsupported[0]
    assert u["reason"] == f"refused in {model}"
    # the checker's own words name the user's file; the split recipe's step is a record
    # naming it too, its output folder beside it (not in the workspace)
    assert u["hint"] == f"`workbench fix {model} --recipe y`"
    split = u["next_steps"][0]
    assert split["verb"] == "fix" and split["args"] == [str(model)]
    assert ["--split", None] in split["flags"]
    assert ["-o", str(model)[:-5] + "_split"] in split["flags"]
    assert rep.problems[0].hint == u["hint"]
    assert [s.to_dict() for s in rep.problems[0].next_steps] == u["next_steps"]
    s.apply("decompose", {"node": GELU})
    rep = s.report
    assert seen[-1].startswith(_home()) and _home() not in json.dumps(rep.to_dict()["unsupported"])
    # a changed version names `output` (shell-quoted in commands), until exported elsewhere
    quoted = f"'{tmp_path}/out dir/fixed.onnx'"
    assert rep.unsupported[0]["hint"].endswith(f"`workbench fix {quoted} --recipe y`")
    assert s.command_path() == tmp_path / "out dir" / "fixed.onnx"
    out = s.export(tmp_path / "elsewhere.onnx")
    assert s.report.unsupported[0]["hint"].endswith(f"`workbench fix {out} --recipe y`")
    assert s.history.user_path() == out and s.history.exported(s.history.original) is None
    # undo: the original again, named by the user's own path
    s.undo()
    s.check()
    assert s.report.unsupported[0]["hint"] == u["hint"]  # (the original's, as first checked)


# ------------------------------------------------------------------ 2. re-runs, one entry
def test_same_recipe_twice_is_one_history_entry_and_undo_redo_still_work(model):
    from widgets import FixPanel

    # the first run of the notebook
    first = FixSession(model)
    ch = first.apply("decompose", {"node": GELU}, recheck=False)
    v1, orig = ch.version, first.history.original
    assert _applies(first.history) == 1
    rows = [(r["recipe"], r["version"], r["parent"]) for r in history_rows(first.history.view())]
    # a kernel restart: a fresh session on the same model goes back and does it again
    again = FixSession(model)
    assert again.history.current == orig  # it opens the file, offering the earlier change
    assert again.earlier()["version"] == v1
    ch2 = again.apply("decompose", {"node": GELU}, recheck=False)
    assert ch2.kept and ch2.version == v1 and ch2.parent == orig
    assert _applies(again.history) == 1 and len(again.history.versions()) == 2
    assert [(r["recipe"], r["version"], r["parent"])
            for r in history_rows(again.history.view())] == rows
    # ... and a fresh FixPanel, as the notebook's last cell makes it
    panel = FixPanel(model, graph=False)
    panel.wait(120)
    panel.apply(next(p for p in panel.proposals if p.node == GELU))
    assert panel.wait(120).version == v1
    assert _applies(panel.history) == 1 and len(panel.history.versions()) == 2
    view = panel.history_view
    assert view["changes"] == 1 and [s["version"] for s in view["steps"]] == [orig, v1]
    assert panel.versions.value.split("<details")[0].count("<li>") == 2
    # undo / redo still work, and a genuinely new edit still appends
    panel.undo()
    panel.wait(120)
    assert panel.history.current == orig and not panel.redo_btn.disabled
    panel.redo()
    panel.wait(120)
    assert panel.history.current == v1
    panel.apply(next(p for p in panel.proposals if p.recipe == "fold_constants"))
    v2 = panel.wait(120).version
    assert v2 not in (orig, v1) and _applies(panel.history) == 2
    assert panel.history_view["changes"] == 2
    panel.undo()
    panel.wait(120)
    assert panel.history.current == v1
    panel.redo()
    panel.wait(120)
    assert panel.history.current == v2 and panel.history.lineage() == [orig, v1, v2]
    # the same again from yet another session: still two entries
    late = FixSession(model)
    late.history.checkout(v1)
    assert late.apply("fold_constants", recheck=False).version == v2
    assert _applies(late.history) == 2 and len(late.history.versions()) == 3


def _run_notebook(path):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import json\n"
        "print(json.dumps({'ws': str(panel.history.ws.dir), "
        "'shown': panel.failing.value + getattr(panel, 'next_html', panel.failing).value}))"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, f"{errors[0].get('ename')}: {errors[0].get('evalue')}"
    # the text tables show whole sentences (pandas cut them at 50 characters with "...")
    import html

    from workbench.surgery.recipes import list_recipes

    shown = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells
                    if c.cell_type == "code" for o in c.get("outputs", []))
    for r in list_recipes():
        assert r["summary"] in html.unescape(shown), r["name"]
    table = next(c for c in nb.cells if c.cell_type == "code" and "redo  ->" in c.source)
    text = "".join(o.get("data", {}).get("text/plain", "") for o in table.outputs)
    tail = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs))
    return text, tail


@pytest.mark.slow
def test_rerunning_the_fix_notebook_keeps_its_history_table(tmp_path):
    """Notebook 03 run twice on one workspace (a re-run after a kernel restart): the history
    table shows the same versions both times (it grew from 2 rows to 7), and the panel names
    no workspace path."""
    nb = REPO / "notebooks" / "03_fix.ipynb"
    tables, tails = [], []
    for _ in range(2):
        text, tail = _run_notebook(nb)
        tables.append(re.findall(r"\b[0-9a-f]{16}\b", text))
        tails.append(tail)
    assert tables[0] and tables[0] == tables[1], tables
    for tail in tails:
        assert tail["ws"].startswith(_home()) and _home() not in tail["shown"]


def test_a_proposal_previewed_from_code_is_the_one_highlighted(model):
    """`panel.preview(panel.proposals[-1])` (notebook 03) highlighted the first proposal while
    showing the last one's diff; the list now follows what is previewed or applied."""
    from widgets import FixPanel

    panel = FixPanel(model)
    panel.wait(120)
    assert len(panel.proposals) >= 2
    last = panel.proposals[-1]
    panel.preview(last)
    change = panel.wait(120)
    assert panel.proposal_list.index == len(panel.proposals) - 1
    assert panel.selected_proposal() is last and change.recipe == last.recipe
    panel.preview()  # the button: previews what is highlighted
    assert panel.wait(120).recipe == last.recipe
