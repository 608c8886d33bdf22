"""FixPanel widget state without a browser (real parser, real history)."""
from __future__ import annotations

import shutil

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
    assert "/act/FastGelu" in panel.failing.value


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
    assert panel.graph.highlighted == ["/act/FastGelu"]
    panel.apply_btn.click()
    panel.wait(120)
    assert len(panel.history.versions()) == 2
    assert "/act/FastGelu" not in panel.failing_nodes and len(panel.failing_nodes) == 2
    assert not panel.undo_btn.disabled and panel.redo_btn.disabled
    assert "applied: decompose" in panel.diff_html.value
    # the added nodes are coloured on the new version's graph
    assert ["added", "#2ca02c"] in panel.graph.legend and panel.graph.highlighted
    assert panel.graph.highlighted[0].startswith("/act/FastGelu/") or any(
        h.startswith("scope:/act") for h in panel.graph.highlighted)
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
