"""FixSession: check -> propose -> apply -> verify -> re-check with the real TensorRT-RTX parser."""
from __future__ import annotations

import shutil
import threading

import pytest

from conftest import SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.support.checker import SupportReport
from workbench.surgery.session import FixSession


@pytest.fixture
def session(tmp_path):
    p = tmp_path / "needs_fixing.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", p)
    return FixSession(p, backend="tensorrt-rtx")


def test_check_propose_apply_recheck_undo(session):
    rep = session.check()
    assert isinstance(rep, SupportReport) and not rep.supported and session.fresh
    assert {(p.recipe, p.node) for p in session.proposals} == {
        ("decompose", "/crop/CenterCropPad"), ("fold_constants", "/flatten/Compress"),
        ("decompose", "/act/FastGelu")}
    assert session.end_to_end() is None  # still the original
    gelu = next(p for p in session.proposals if p.node == "/act/FastGelu")
    preview = session.preview(gelu)
    assert preview.kept and preview.version is None and len(session.history.versions()) == 1
    change = session.apply(gelu)
    assert change.kept and change.verification.max_abs_diff < 1e-5
    assert session.fresh and "/act/FastGelu" not in session.report.unsupported_nodes
    assert len(session.report.unsupported) == 2 and len(session.proposals) == 2
    e2e = session.end_to_end([change.to_dict()])
    assert e2e.status == "equivalent" and e2e.max_abs_diff == change.verification.max_abs_diff
    session.undo()
    assert not session.fresh  # the report was about the undone version
    assert len(session.proposals) == 3 and session.fresh  # re-checked on demand


def test_auto_fix_and_cancel(session):
    steps = []
    res = session.auto_fix(on_step=steps.append)
    assert res.supported and res.stop_reason == "supported" and len(steps) == len(res.steps) == 3
    assert res.support_before.supported is False and res.support_after.supported is True
    assert res.verification.status == "equivalent" and res.verification.max_abs_diff < 1e-5
    assert res.to_dict()["support_after"]["supported"] is True and res.remaining == []
    assert session.proposals == []
    # a cancelled run stops before its first step (from the original again)
    session.history.checkout(session.history.original)
    cancel = threading.Event()
    cancel.set()
    res = session.auto_fix(cancel=cancel)
    assert res.stop_reason == "cancelled" and not res.steps and not res.supported
    assert res.verification is None and res.version == session.history.original


def test_a_checker_must_return_a_support_report(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(SAMPLES / "needs_fixing.onnx", p)
    s = FixSession(p, check=lambda path: {"supported": False, "unsupported": []})
    with pytest.raises(WorkbenchError, match="returned a dict, not a SupportReport"):
        s.check()
