"""History sessions on display: `workbench fix` and the FixPanel show this session's
lineage by default and the other sessions folded into one labelled line; "N change(s) from the
original" counts exactly the steps shown."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

from conftest import REPO, SAMPLES
from workbench.surgery.changes import apply_in_history
from workbench.surgery.history import History, history_lines

NF = SAMPLES / "needs_fixing.onnx"


def _cli(*args):
    return subprocess.run([sys.executable, "-c", "import sys; from workbench.cli import run; "
                           "sys.argv[0]='workbench'; run()", *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300)


def _history_block(stdout: str):
    lines = stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("history: "))
    return lines[i:]


def test_cli_shows_this_session_and_folds_earlier_ones(tmp_path):
    model = tmp_path / "m.onnx"
    shutil.copy(NF, model)
    first = _cli("fix", model, "-o", tmp_path / "a.onnx", "--auto")
    assert first.returncode == 0, first.stderr
    block = _history_block(first.stdout)
    m = re.match(r"history: session (\w+) \(started .+, pid (\d+)\), 3 change\(s\) from the "
                 r"original$", block[0])
    assert m, block[0]
    sid1 = m.group(1)
    assert block[1].strip().startswith("0 (original) [")
    assert [ln.split()[1] for ln in block[2:5]] == ["decompose", "fold_constants", "decompose"]
    assert "node=/act/FastGelu" in block[4] and "(from session" not in "".join(block)
    assert len(block) == 5  # nothing earlier: no folded line
    # a second run: same three steps (reused: this run's, saying the first run made them
    # first), the first run folded into one line; the count agrees with the numbered steps
    second = _cli("fix", model, "-o", tmp_path / "b.onnx", "--auto")
    assert second.returncode == 0, second.stderr
    block = _history_block(second.stdout)
    assert block[0].endswith("3 change(s) from the original") and sid1 not in block[0]
    steps = [ln for ln in block[1:] if re.match(r"  \d+ ", ln)]
    assert len(steps) == 4 and all(s.endswith(f"(also made earlier by session {sid1})")
                                   for s in steps[1:])
    assert block[-1] == "  + 1 earlier session, 3 entries (--all-history to show)"
    # --all-history lists them, by session; --json carries the same view
    third = _cli("fix", model, "-o", tmp_path / "c.onnx", "--auto", "--all-history")
    block = _history_block(third.stdout)
    i = block.index("  + 1 earlier session, 3 entries:")
    assert block[i + 1].startswith(f"    session {sid1} (started ")
    assert [ln.split()[0] for ln in block[i + 2:i + 5]] == ["decompose", "fold_constants",
                                                            "decompose"]
    rep = json.loads(_cli("fix", model, "-o", tmp_path / "d.onnx", "--auto", "--json").stdout)
    hist = rep["history"]
    assert hist["changes"] == 3 == len(hist["steps"]) - 1 == len(rep["versions"]) - 1
    assert [s["version"] for s in hist["steps"]] == rep["versions"]
    assert [e["id"] for e in hist["earlier"]] == [sid1]
    assert sum(len(e["entries"]) for e in hist["earlier"]) == 3
    # four runs, three real changes: the log holds one apply line per change
    log = [json.loads(ln) for ln in History(model).ws.history_path.read_text().splitlines()]
    assert sum(r.get("event") == "apply" for r in log) == 3


def test_history_lines_for_a_session_at_the_original(tmp_path):
    """The issue-14 picture: earlier runs made changes, this session is at the original: the
    list shows only the original and '0 change(s)', the earlier entries are one folded line."""
    model = tmp_path / "m.onnx"
    shutil.copy(NF, model)
    old = History(model)
    apply_in_history(old, "fold_constants")
    apply_in_history(old, "decompose", {"node": "/act/FastGelu"})
    h = History(model, start="original")
    view = h.view()
    assert view["changes"] == 0 and len(view["steps"]) == 1
    lines = history_lines(view)
    assert lines[0].endswith(", 0 change(s) from the original")
    assert lines[1].startswith("  0 (original) [") and lines[2] == "  + 1 earlier session, 2 entries"
    assert len(lines) == 3
    # after an undo the undone version is listed as redo, not counted
    apply_in_history(h, "decompose", {"node": "/crop/CenterCropPad"})
    h.undo()
    lines = history_lines(h.view())
    assert "0 change(s)" in lines[0] and lines[2].startswith("  undone (redo): ")


def test_fix_panel_shows_this_session_and_folds_the_others(tmp_path):
    from widgets import FixPanel

    model = tmp_path / "m.onnx"
    shutil.copy(NF, model)
    old = History(model)
    c1 = apply_in_history(old, "fold_constants")
    c2 = apply_in_history(old, "decompose", {"node": "/act/FastGelu"})
    panel = FixPanel(model, graph=False, start="latest")
    panel.wait(120)
    view = panel.history_view
    # resumed, the panel continues where the log left off: two steps, both from the earlier
    # session
    assert view["changes"] == 2 and [s["version"] for s in view["steps"]][1:] == [c1.version,
                                                                                  c2.version]
    assert "(2 change(s) from the original)" in panel.header.value
    html = panel.versions.value
    shown, folded = html.split("<details")
    assert shown.count("<li>") == 3  # original + 2 steps, then the folded part
    assert shown.count(f"(from session {old.session['id']})") == 2 and folded.count("<li>") == 2
    assert "<details class='wb-earlier-sessions'><summary>1 earlier session, 2 entries: show" \
        in html and "<details open" not in html
    # a change made here is this session's: no label, counted, and the fold is unchanged
    crop = next(p for p in panel.proposals if p.node == "/crop/CenterCropPad")
    panel.apply(crop)
    panel.wait(120)
    view = panel.history_view
    assert view["changes"] == 3 and view["steps"][-1]["mine"] and len(view["mine"]) == 1
    assert "(3 change(s) from the original)" in panel.header.value
    ol = panel.versions.value.split("<details")[0]
    assert ol.count("<li>") == 4 and ol.count("(from session") == 2
    assert "1 earlier session, 2 entries: show" in panel.versions.value
    # undo back to the original: 0 changes, one item listed
    for _ in range(3):
        panel.undo()
        panel.wait(120)
    assert "(0 change(s) from the original)" in panel.header.value
    ol = panel.versions.value.split("<details")[0]
    assert ol.count("<li>") == 1 and "undone (redo)" in ol


def test_a_step_this_session_applied_again_is_its_own_saying_who_made_it_first(tmp_path):
    """Re-running a notebook's Apply reuses the version an earlier run made: the panel used to
    label the step just applied '(from session X)', as if this session had not made it."""
    from widgets.fix import history_html

    model = tmp_path / "m.onnx"
    shutil.copy(NF, model)
    old = History(model)
    apply_in_history(old, "fold_constants")
    again = History(model, start="original")
    apply_in_history(again, "fold_constants")
    inherited = History(model, start="latest")  # where the log left off: the old session's
    for h, label in ((again, f"(also made earlier by session {old.session['id']})"),
                     (inherited, f"(from session {old.session['id']})")):
        view = h.view()
        assert view["steps"][1]["recipe"] == "fold_constants"
        assert history_lines(view)[2].endswith(label)
        assert f"<i>{label}</i>" in history_html(view).split("<details")[0]
    assert again.view()["steps"][1]["mine"] and not inherited.view()["steps"][1]["mine"]
