"""FixPanel widget state without a browser (real parser, real history)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES


@pytest.fixture
def panel(tmp_path):
    from widgets import FixPanel

    p = tmp_path / "needs_fixing.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", p)
    panel = FixPanel(p)
    panel.wait(120)  # the check on open runs in the background task
    return panel


def test_panel_lists_failing_nodes_and_proposals(panel):
    assert set(panel.failing_nodes) == {"/crop/CenterCropPad", "/flatten/Compress", "/act/FastGelu"}
    assert "NOT supported" in panel.header.value
    opts = list(panel.proposal_list.options)
    assert "decompose on /act/FastGelu" in opts and "fold_constants on /flatten/Compress" in opts
    assert panel.undo_btn.disabled and panel.redo_btn.disabled
    assert "/act/FastGelu" in panel.failing.value.replace("<wbr>", "")  # (break chances)


def test_preview_apply_undo_redo(panel):
    i = list(panel.proposal_list.options).index("decompose on /act/FastGelu")
    panel.proposal_list.index = i
    panel.preview()
    ch = panel.wait(120)
    assert ch.kept and "/act/FastGelu" in ch.diff["nodes_removed"]
    assert "removed: /act/FastGelu" in panel.diff_html.value
    assert "equivalent" in panel.verification_html.value
    assert len(panel.history.versions()) == 1  # preview keeps nothing
    # the removed node is coloured and lit on the graph view
    assert ["removed", "#d62728"] in panel.graph.legend
    assert panel.graph.highlighted == ["/act/FastGelu"] == panel.graph.selected  # zoomed to
    panel.apply_btn.click()
    panel.wait(120)
    assert len(panel.history.versions()) == 2
    assert "/act/FastGelu" not in panel.failing_nodes and len(panel.failing_nodes) == 2
    assert not panel.undo_btn.disabled and panel.redo_btn.disabled
    assert "applied: decompose" in panel.diff_html.value
    # the added nodes are coloured on the new version's graph
    assert ["added", "#2ca02c"] in panel.graph.legend and panel.graph.highlighted
    # ... shown as themselves (their scope opened), selected and zoomed to, not left as a
    # lit group somewhere off screen
    assert all(h.startswith("/act/FastGelu/") for h in panel.graph.highlighted)
    assert panel.graph.selected == panel.graph.highlighted
    panel.undo_btn.click()
    panel.wait(120)
    assert panel.history.current == panel.history.original
    assert "/act/FastGelu" in panel.failing_nodes and not panel.redo_btn.disabled
    panel.redo_btn.click()
    panel.wait(120)
    assert "/act/FastGelu" not in panel.failing_nodes


def test_auto_fix_button_reaches_supported(panel):
    panel.auto_btn.click()
    panel.wait(120)
    assert panel.auto_result.supported
    assert "supported: <b>True</b>" in panel.status.value
    assert "equivalent" in panel.verification_html.value
    assert "NOT" not in panel.header.value and "supported" in panel.header.value
    assert panel.proposal_list.options == () and panel.apply_btn.disabled
    assert len(panel.history.versions()) == 4


def test_errors_show_in_status_not_as_exceptions(panel):
    from workbench.surgery.recipes import Proposal

    panel.apply(Proposal("/fc/Gemm", "Gemm", "decompose", {"node": "/fc/Gemm"}, ""))
    assert panel.wait(120) is None and panel.task.error is not None
    assert "does not apply" in panel.status.value and "no decomposition" in panel.status.value
    assert len(panel.history.versions()) == 1


def test_check_on_open_and_auto_fix_run_in_the_background(tmp_path):
    """The parser check and auto-fix run in the panel's BackgroundTask: the call returns at
    once with the panel busy (buttons off, status says so), a second request is refused, and
    the result lands in the panel when the task ends."""
    from widgets import FixPanel
    from workbench.surgery.session import AutoFixResult

    p = tmp_path / "needs_fixing.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", p)
    panel = FixPanel(p, graph=False)
    assert panel.busy and "parser" in panel.status.value and "unknown" in panel.header.value
    assert panel.wait(120) is panel.report and not panel.busy
    assert "NOT supported" in panel.header.value and not panel.auto_btn.disabled
    panel.auto_btn.click()
    assert panel.busy and panel.auto_btn.disabled and panel.apply_btn.disabled
    assert "auto-fix" in panel.status.value
    panel.check_btn.click()  # refused while auto-fix runs
    assert "still working" in panel.status.value
    res = panel.wait(120)
    assert isinstance(res, AutoFixResult) and res.supported and res is panel.auto_result
    assert not panel.busy and not panel.check_btn.disabled and not panel.undo_btn.disabled
    assert "supported: <b>True</b>" in panel.status.value
    assert len(panel.history.versions()) == 4


def test_kernel_answers_while_auto_fix_runs(tmp_path):
    """Acceptance: in a real kernel, a cell that opens a FixPanel and starts auto-fix returns,
    the next cell (`1+1`) is answered while the panel is still busy, and auto-fix then ends
    supported."""
    import os

    from jupyter_client.manager import start_new_kernel

    from conftest import REPO

    p = tmp_path / "needs_fixing.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", p)
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(REPO), env=dict(os.environ))

    def run(code, timeout=180):
        out = []

        def hook(msg):
            c = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(c["text"])
            elif msg["msg_type"] == "execute_result":
                out.append(c["data"]["text/plain"])
            elif msg["msg_type"] == "error":
                out.append("ERROR " + c["ename"] + ": " + c["evalue"])
        reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
        assert reply["content"]["status"] == "ok", out
        return "".join(out).strip()

    try:
        assert run("from widgets import FixPanel\n"
                   f"panel = FixPanel({str(p)!r})\n"
                   "panel.wait(120)\n"
                   "panel.auto_btn.click()\n"
                   "print(panel.busy)") == "True"
        assert run("1+1, panel.busy", timeout=10) == "(2, True)"
        assert run("res = panel.wait(180)\n"
                   "print(res.supported, res.stop_reason, len(panel.history.versions()), "
                   "panel.busy, 'NOT' in panel.header.value)") == "True supported 4 False False"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_split_proposal_is_applied_as_a_split_into_a_folder(tmp_path):
    """The panel offered 'split on /AffineGrid (manual)' with Apply enabled, and Apply said
    "recipe 'split' does not apply: a split makes two models". Apply now cuts the current
    version as `fix --split` does, verified, into `<name>.split/` in the model's workspace
    (never beside the model, never over an earlier split); Preview says what it will write."""
    import onnx

    from quant_models import detector
    from widgets import FixPanel

    p = tmp_path / "det.onnx"
    onnx.save(detector(), str(p))
    panel = FixPanel(str(p))
    panel.wait(300)
    split = next(x for x in panel.proposals if x.recipe == "split")
    panel.preview(split)
    panel.wait(300)
    assert "Apply writes them to" in panel.status.value and "det.split" in panel.status.value
    folder = panel.history.ws.outputs_dir / "det.split"
    assert not folder.exists()
    panel.apply(split)
    panel.wait(300)
    files = panel.last_split
    assert files and Path(files["prefix"]).parent == folder
    assert sorted(x.name for x in tmp_path.iterdir()) == ["det.onnx"]  # nothing beside it
    for key in ("prefix", "tail", "manifest"):
        assert Path(files[key]).is_file(), key
    assert "verified: prefix then tail compute the original outputs" in panel.status.value
    assert "does not apply" not in panel.status.value
    assert onnx.load(str(p)).SerializeToString() == detector().SerializeToString()  # untouched
    panel.apply(split)  # again: a second folder, the first kept
    panel.wait(300)
    assert Path(panel.last_split["prefix"]).parent == folder.with_name("det.split2")


def test_the_check_on_open_shows_the_refused_nodes_in_the_graph(panel):
    """On a user's model the panel's graph opened coloured by op category, the refused node
    nowhere in sight: the check now selects, highlights and zooms to the nodes it refuses."""
    failing = [n for n in panel.failing_nodes if n]
    assert failing and panel.graph is not None
    assert set(panel.graph.highlighted) == set(failing)
    assert set(panel.graph.selected) == set(failing)


def test_a_panel_that_continues_earlier_changes_says_so_and_can_start_from_the_file(tmp_path):
    """`workbench fix a.onnx -o elsewhere.onnx --recipe ...`, then FixPanel on a copy of
    a.onnx: the panel opened the edited version (FastGelu gone) saying only '1 change(s) from
    the original' (the history is the content's). It says where the change came from, and
    start="original" opens the file as it is."""
    import subprocess
    import sys

    from widgets import FixPanel

    a, b = tmp_path / "a.onnx", tmp_path / "copy" / "b.onnx"
    b.parent.mkdir()
    shutil.copy(SAMPLES / "needs_fixing.onnx", a)
    shutil.copy(SAMPLES / "needs_fixing.onnx", b)
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "fix", str(a), "-o",
                        str(tmp_path / "elsewhere.onnx"), "--recipe",
                        "decompose:node=/act/FastGelu"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode in (0, 1), r.stderr
    p = FixPanel(b, graph=False, check_on_open=False, start="latest")
    assert "(1 change(s) from the original)" in p.header.value
    assert "continued from 1 change(s) an earlier session made" in p.header.value
    assert "FastGelu" not in {n.op_type for n in p.history.current_proto().graph.node}
    q = FixPanel(b, graph=False, check_on_open=False, start="original")
    assert "(0 change(s) from the original)" in q.header.value
    assert "continued from" not in q.header.value
    assert "FastGelu" in {n.op_type for n in q.history.current_proto().graph.node}
