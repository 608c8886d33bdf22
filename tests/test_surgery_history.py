"""History: versions on disk, undo/redo, restart, and a SIGKILL in the middle of a recipe."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import onnx
import pytest

from conftest import POLY, REPO, SAMPLES
from workbench.core.errors import WorkbenchError
from workbench.surgery.changes import apply_in_history
from workbench.surgery.history import History
from workbench.core.model import open_model


def test_versions_undo_redo_and_original_untouched(tmp_path):
    src = SAMPLES / "needs_fixing.onnx"
    before = src.read_bytes()
    h = History(src)
    v0 = h.current
    c1 = apply_in_history(h, "fold_constants")
    c2 = apply_in_history(h, "decompose", {"node": "/act/FastGelu"})
    assert [v["recipe"] for v in h.versions()] == ["(original)", "fold_constants", "decompose"]
    assert h.lineage() == [v0, c1.version, c2.version]
    assert c2.parent == c1.version and c1.parent == v0
    rec = h.versions()[2]
    assert rec["verification"]["status"] == "equivalent"
    assert "/act/FastGelu" in rec["diff"]["nodes_removed"]
    assert h.undo() == c1.version and h.current == c1.version and h.can_redo()
    assert h.undo() == v0 and not h.can_undo()
    with pytest.raises(WorkbenchError, match="nothing to undo"):
        h.undo()
    assert h.redo() == c1.version
    # a new change after undo drops the redo stack
    c3 = apply_in_history(h, "decompose", {"node": "/crop/CenterCropPad"})
    assert not h.can_redo() and h.current == c3.version
    with pytest.raises(WorkbenchError, match="nothing to redo"):
        h.redo()
    assert src.read_bytes() == before
    out = h.export(tmp_path / "fixed.onnx")
    assert open_model(out).content_hash != open_model(src).content_hash
    with pytest.raises(WorkbenchError, match="overwrite the original"):
        h.export(src)
    # a second History object (same process, e.g. after a kernel restart) opens the file as
    # it is, offers the state the first left, and resumes it
    h2 = History(src)
    assert h2.current == v0 and h2.earlier()["version"] == c3.version
    assert h2.resume() == c3.version and h2.current == c3.version
    assert len(h2.versions()) == 4


def test_not_kept_change_is_not_a_version(tmp_path, monkeypatch):
    from surgery_models import single_op_cases
    from workbench.surgery.recipes import decompose as dec

    p = tmp_path / "quick.onnx"
    onnx.save(single_op_cases()["QuickGelu"], str(p))
    h = History(p)
    orig = dec.REGISTRY[("com.microsoft", "QuickGelu")]
    monkeypatch.setitem(dec.REGISTRY, ("com.microsoft", "QuickGelu"), dec.Decomposition(
        orig.domain, orig.op, orig.summary, orig.check,
        lambda ctx, e: e.op("Sigmoid", [ctx.node.input[0]], out=ctx.node.output[0])))
    ch = apply_in_history(h, "decompose")
    assert not ch.kept and len(h.versions()) == 1 and h.current == h.original
    forced = apply_in_history(h, "decompose", force=True)
    assert forced.kept and h.versions()[1]["forced"] is True


_CHILD = r"""
import sys
sys.path.insert(0, {repo!r})
from workbench.surgery.changes import apply_in_history
from workbench.surgery.history import History
h = History({model!r})
for name, params in [("fold_constants", {{}}), ("decompose", {{"node": "/act/FastGelu"}})]:
    ch = apply_in_history(h, name, params)
    print("VERSION", ch.version, flush=True)
import os
os.environ["WORKBENCH_SURGERY_PAUSE"] = {point!r} + ":120"
apply_in_history(h, "decompose", {{"node": "/crop/CenterCropPad"}})
print("UNREACHABLE", flush=True)
"""


@pytest.mark.parametrize("point", ["apply", "commit"])
def test_sigkill_mid_recipe_keeps_history(point, tmp_path):
    """Kill the process inside a recipe (point=apply: while the recipe runs; point=commit: after
    the new version file is written but before its log line): every earlier version survives,
    the log parses, and a new process lists exactly the versions made before the kill."""
    model = tmp_path / "needs_fixing.onnx"
    model.write_bytes((SAMPLES / "needs_fixing.onnx").read_bytes())
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(repo=str(REPO), model=str(model),
                                                                 point=point)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    made = []
    deadline = time.time() + 120
    paused = False
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith("WORKBENCH_SURGERY_PAUSED"):
            paused = True
            break
    assert paused, "the child never reached the pause point"
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    made = [ln.split()[1] for ln in out.splitlines() if ln.startswith("VERSION")]
    assert len(made) == 2 and "UNREACHABLE" not in out
    # a fresh process reads the history
    code = ("import sys, json; sys.path.insert(0, %r); from workbench.surgery.history import History; "
            "h = History(%r, start='latest'); print(json.dumps({'versions': [v['version'] for v in h.versions()], "
            "'exists': [v['exists'] for v in h.versions()], 'current': h.current, "
            "'log': str(h.ws.history_path)}))" % (str(REPO), str(model)))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["versions"][1:] == made and info["current"] == made[-1]
    assert all(info["exists"])
    lines = open(info["log"], encoding="utf-8").read().splitlines()
    assert all(json.loads(ln) for ln in lines)  # no torn line
    for vid in info["versions"]:
        p = os.path.join(os.path.dirname(info["log"]), "versions", vid + ".onnx")
        onnx.checker.check_model(onnx.load(p))
    # the original file was never touched
    assert model.read_bytes() == (SAMPLES / "needs_fixing.onnx").read_bytes()


def test_big_weights_are_shared_blobs_between_versions(tmp_path):
    """Versions reference large initializers as content-addressed external blobs: a change
    that leaves the weights alone adds a small file, onnxruntime and the real parser read the
    versions from disk, and export writes a self-contained model."""
    from workbench.support.checker import check

    src = tmp_path / "residual_block.onnx"
    src.write_bytes((POLY / "residual_block.onnx").read_bytes())
    h = History(src)
    blobs = h.ws.versions_dir / "blobs"
    n_blobs = len(list(blobs.glob("*.bin")))
    assert n_blobs >= 3  # the 3x3/1x1 conv weights of 64+ channels
    v0 = h.version_path(h.original)
    blob_bytes = sum(b.stat().st_size for b in blobs.glob("*.bin"))
    assert v0.stat().st_size * 4 < blob_bytes
    ch = apply_in_history(h, "set_input_shapes", {"batch": "N"})
    assert ch.kept and ch.verification.equivalent and ch.verification.max_abs_diff == 0
    assert len(list(blobs.glob("*.bin"))) == n_blobs  # same weights, no new blob
    assert h.current_path().stat().st_size * 4 < blob_bytes
    assert check(str(h.current_path()), backend="tensorrt-rtx").supported
    out = h.export(tmp_path / "out.onnx")
    m = onnx.load(str(out))
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in m.graph.initializer)
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    # a fresh History (new process after a restart) reads the versions with their weights
    h2 = History(src)
    assert len(h2.current_proto().graph.initializer) == len(m.graph.initializer)
