"""FixPanel, FixSession and `workbench fix` open the model as it is on disk, and *offer* the
changes an earlier session left for identical content ("3 earlier changes of this model exist")
instead of continuing them silently: after `scripts/demo.sh` fixed needs_fixing.onnx, a
FixPanel on the sample said "supported, Proposed recipes: none needed". The history still
survives a restart and is one explicit step away (`resume()`, *Open them*, `--resume`,
`start="latest"`); sessions running at the same time stay apart."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading

import onnx
import pytest

from conftest import SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.surgery.history import History, earlier_offer
from workbench.surgery.session import FixSession

NF = SAMPLES / "needs_fixing.onnx"
REFUSED = {"/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu"}


def _ops(proto) -> set:
    return {n.op_type for n in proto.graph.node}


def _fix(*args: str, timeout: float = 300):
    return subprocess.run([sys.executable, "-m", "workbench.cli", "fix", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fixed_before(tmp_path):
    """What set-up leaves: `workbench fix needs_fixing.onnx --auto` ran on this content
    (three kept changes in the workspace's log); the test opens a copy, as the tour does."""
    a, b = tmp_path / "demo" / "needs_fixing.onnx", tmp_path / "mine" / "needs_fixing.onnx"
    for p in (a, b):
        p.parent.mkdir()
        shutil.copy(NF, p)
    r = _fix(a, "--auto", "-o", tmp_path / "demo" / "out.onnx")
    assert r.returncode == 0, r.stderr
    return b


def test_python_api_opens_the_file_and_offers_the_earlier_changes(fixed_before):
    s = FixSession(fixed_before)
    h = s.history
    assert h.current == h.original and "FastGelu" in _ops(h.current_proto())
    rep = s.check()
    assert not rep.supported and {u["node"] for u in rep.unsupported} == REFUSED
    assert {p.node for p in s.proposals} >= REFUSED
    offer = s.earlier()
    assert offer is not None and offer["changes"] == 3
    assert [st["recipe"] for st in offer["steps"]] == ["decompose", "fold_constants",
                                                       "decompose"]
    line = earlier_offer(offer)
    assert line.startswith("3 earlier changes of this model exist (decompose, fold_constants;")
    # opening them is explicit, writes nothing to the log, and the parser then takes it
    lines = len(h.ws.history())
    assert s.resume() == offer["version"] and h.current == offer["version"]
    assert len(h.ws.history()) == lines and h.can_undo()
    assert s.check().supported and s.earlier() is None
    assert s.undo() != offer["version"]  # undo walks back through them


def test_a_restart_still_reaches_the_history_by_an_explicit_resume(fixed_before):
    """A kernel restart: a new History on the same file opens it as it is; start="latest"
    (or resume()) continues exactly where the last session left off, redo stack included."""
    h = History(fixed_before, start="latest")
    top = h.current
    h.undo()
    again = History(fixed_before)
    assert again.current == again.original
    assert again.earlier()["version"] == h.current and again.earlier()["changes"] == 2
    assert again.resume() == h.current and again.can_redo()
    assert again.redo() == top
    assert History(fixed_before, start="latest").current == top


def test_nothing_to_offer_on_a_new_model_and_resume_says_so(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(NF, p)
    h = History(p)
    assert h.earlier() is None
    with pytest.raises(WorkbenchError, match="nothing to resume"):
        h.resume()


def test_concurrent_sessions_opened_on_one_model_stay_apart(fixed_before):
    """Two sessions at once: each starts at the file, one resumes, the other applies its own
    change; neither moves the other, and the offer follows the log."""
    a, b = History(fixed_before), History(fixed_before)
    errors = []

    def work(h, resume):
        try:
            if resume:
                h.resume()
            else:
                from workbench.surgery.changes import apply_in_history

                assert apply_in_history(h, "decompose", {"node": "/act/FastGelu"}).kept
        except Exception as e:  # (reported below)
            errors.append(e)
    ts = [threading.Thread(target=work, args=(a, True)), threading.Thread(target=work,
                                                                          args=(b, False))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    assert len(a.lineage()) in (2, 4) and len(b.lineage()) == 2
    assert "FastGelu" not in _ops(b.current_proto()) and "CenterCropPad" in _ops(b.current_proto())
    assert b.earlier() is None  # b is no longer at the original
    assert History(fixed_before).earlier()["version"] == b.current  # the log left off there


def test_cli_starts_from_the_file_offers_the_earlier_changes_and_resumes_them(fixed_before,
                                                                             tmp_path):
    out = tmp_path / "one.onnx"
    r = _fix(fixed_before, "--recipe", "decompose:node=/act/FastGelu", "-o", out)
    assert r.returncode == 0, r.stderr
    assert "1 change(s) kept" in r.stdout
    assert (f"3 earlier changes of this model exist (decompose, fold_constants;" in r.stdout
            and f"`workbench fix {fixed_before} -o {out} --resume` continues from them"
            in r.stdout), r.stdout
    assert "CenterCropPad" in _ops(onnx.load(str(out)))  # from the file, not the earlier fix
    # the offer is in the JSON report too; --resume alone writes where the log left off
    out2 = tmp_path / "two.onnx"
    r = _fix(fixed_before, "--resume", "--check", "-o", out2, "--json")
    assert r.returncode == 1, r.stderr  # the last session's version still has refused nodes
    rep = json.loads(r.stdout)
    assert rep["resumed"] is True and rep["supported"] is False and rep["written"] is True
    assert {u["node"] for u in rep["support_before"]["unsupported"]} == REFUSED - {"/act/FastGelu"}
    assert rep["earlier"]["changes"] == 1 and rep["earlier"]["recipes"] == ["decompose"]
    assert "CenterCropPad" in _ops(onnx.load(str(out2)))  # the last session's one change
    # with no history, --resume is a clear usage error
    fresh = tmp_path / "fresh.onnx"
    m = onnx.load(str(NF))
    m.doc_string = "other content"
    onnx.save(m, str(fresh))
    r = _fix(fresh, "--resume", "-o", tmp_path / "x.onnx")
    assert r.returncode == 2 and "nothing to resume" in r.stderr and "Traceback" not in r.stderr


def test_fix_panel_opens_the_file_and_open_them_resumes(fixed_before):
    from widgets import FixPanel

    panel = FixPanel(fixed_before, graph=False)
    panel.wait(300)
    assert "NOT supported" in panel.header.value and "(0 change(s) from the original)" in \
        panel.header.value
    assert set(panel.failing_nodes) == REFUSED
    assert {p.node for p in panel.proposals} >= REFUSED
    assert "none needed" not in panel.proposals_head.value
    assert panel.earlier_row.layout.display is None
    assert "3 earlier changes of this model exist" in panel.earlier_html.value
    assert not panel.resume_btn.disabled
    panel.resume_btn.click()
    assert panel.wait(300) == panel.history.current
    assert "supported</b>" in panel.header.value and "NOT" not in panel.header.value
    assert "continued from 3 change(s) an earlier session made" in panel.header.value
    assert panel.earlier_row.layout.display == "none"
    assert panel.undo_btn.disabled is False
    # start="latest" opens them at once (what a notebook after a restart may ask for)
    q = FixPanel(fixed_before, graph=False, check_on_open=False, start="latest")
    assert "(3 change(s) from the original)" in q.header.value
    assert q.earlier_row.layout.display == "none"
