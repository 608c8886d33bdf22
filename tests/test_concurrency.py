"""Several processes on one model's workspace: the lock, per-session history, the engine-cache
publish, and the acceptance run (4 `workbench fix --auto` + 1 `workbench build` at once, 5
rounds, real TensorRT-RTX parser and builder)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import REPO, SAMPLES
from workbench.core.fsutil import CorruptLineWarning, LockWaitStopped, locked, single_flight
from workbench.surgery.changes import apply_in_history
from workbench.surgery.history import History, replay
from workbench.core.workspace import ModelWorkspace

NF = SAMPLES / "needs_fixing.onnx"
PROFILE = "input:1x4x12x12:2x4x12x12:4x4x12x12"
CLI = [sys.executable, "-c", "import sys; from workbench.cli import run; "
       "sys.argv[0]='workbench'; run()"]


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _surgery(ws: ModelWorkspace):
    return [r for r in ws.history() if r.get("kind") == "surgery"]


# ---------------------------------------------------------------------- the lock
_COUNTER = r"""
import sys
sys.path.insert(0, {repo!r})
from workbench.core.fsutil import locked
for _ in range({n}):
    with locked({lock!r}):
        with open({path!r}) as f:
            v = int(f.read())
        with locked({lock!r}):  # re-entrant: a locked step may call another
            with open({path!r}, "w") as f:
                f.write(str(v + 1))
"""


def test_lock_serialises_read_modify_write_across_processes(tmp_path):
    counter, lock = tmp_path / "counter", tmp_path / "ws" / ".lock"
    counter.write_text("0")
    code = _COUNTER.format(repo=str(REPO), n=150, lock=str(lock), path=str(counter))
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(4)]
    assert [p.wait(120) for p in procs] == [0] * 4
    assert counter.read_text() == "600"  # no lost update


def test_lock_is_released_when_its_holder_is_killed(tmp_path):
    lock = tmp_path / ".lock"
    code = ("import sys, os, signal; sys.path.insert(0, %r); from workbench.core.fsutil import locked\n"
            "with locked(%r):\n    print('HELD', flush=True)\n    signal.pause()\n"
            % (str(REPO), str(lock)))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "HELD"
    probe = ("import sys, fcntl, os; fd = os.open(%r, os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('FREE')\n"
             "except BlockingIOError:\n    print('BUSY')" % str(lock))
    held = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert held.stdout.strip() == "BUSY"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(30)
    t0 = time.monotonic()
    with locked(lock):  # the kernel dropped the dead holder's flock
        pass
    assert time.monotonic() - t0 < 5


def test_single_flight_waits_for_a_killed_holder_and_tells_once(tmp_path):
    """A build's key lock: the second holder waits (one on_wait), and a holder killed
    mid-build frees it at once (the kernel drops its flock); no stale lock ever blocks."""
    lock = tmp_path / "b" / "k.lock"
    code = ("import sys, signal; sys.path.insert(0, %r)\n"
            "from workbench.core.fsutil import single_flight\n"
            "with single_flight(%r):\n    print('HELD', flush=True)\n    signal.pause()\n"
            % (str(REPO), str(lock)))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "HELD"
    waits = []
    with pytest.raises(LockWaitStopped) as e:
        with single_flight(lock, deadline=time.monotonic() + 0.5, on_wait=lambda: waits.append(1)):
            pass
    assert e.value.reason == "timeout" and waits == [1]
    import threading

    cancel = threading.Event()
    cancel.set()
    with pytest.raises(LockWaitStopped) as e:
        with single_flight(lock, cancel=cancel):
            pass
    assert e.value.reason == "cancelled"
    threading.Timer(0.5, lambda: os.kill(p.pid, signal.SIGKILL)).start()
    t0 = time.monotonic()
    with single_flight(lock, on_wait=lambda: waits.append(2), poll=0.05) as waited:
        took = time.monotonic() - t0
    p.wait(30)
    assert waited and waits == [1, 2] and 0.3 < took < 5
    with single_flight(lock) as waited:  # free now: no wait
        assert not waited


def test_single_flight_excludes_threads_of_one_process(tmp_path):
    import threading

    lock, inside, most = tmp_path / "k.lock", [0], [0]
    guard = threading.Lock()

    def worker():
        for _ in range(20):
            with single_flight(lock, poll=0.001):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0.002)
                with guard:
                    inside[0] -= 1

    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    assert most[0] == 1 and inside[0] == 0


def test_a_forked_child_does_not_inherit_the_lock(tmp_path):
    """A child forked while the parent holds the lock waits for it like any other process
    (it must not take the parent's re-entrant hold for its own)."""
    lock, stamp = tmp_path / ".lock", tmp_path / "child-got-it"
    with locked(lock):
        pid = os.fork()
        if pid == 0:  # the child
            try:
                with locked(lock):
                    stamp.write_text(repr(time.monotonic()))
            finally:
                os._exit(0)
        time.sleep(0.5)
        assert not stamp.exists()
        released = time.monotonic()
    os.waitpid(pid, 0)
    assert float(stamp.read_text()) >= released


# ---------------------------------------------------------------------- history sessions
def test_sessions_are_isolated_and_a_recomputed_change_is_not_logged_twice(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(NF, p)
    a, b = History(p), History(p)  # two notebooks opened on one model
    assert a.session["id"] != b.session["id"] and a.original == b.original
    assert len([r for r in _surgery(a.ws) if r["event"] == "init"]) == 1
    ca = apply_in_history(a, "fold_constants")
    assert b.current == b.original  # a's change does not move b
    cb = apply_in_history(b, "fold_constants")
    assert cb.kept and cb.version == ca.version and b.current == a.current
    applies = [r for r in _surgery(a.ws) if r["event"] == "apply"]
    assert len(applies) == 1 and applies[0]["session"] == a.session["id"]
    assert len(a.versions()) == len(b.versions()) == 2
    # b then makes a change of its own; a keeps its state, undo works per session
    cg = apply_in_history(b, "decompose", {"node": "/act/FastGelu"})
    assert a.current == ca.version and b.current == cg.version
    assert a.undo() == a.original and b.current == cg.version
    assert b.lineage() == [b.original, ca.version, cg.version]
    # a new session continues from where the log left off (a's undo was the last move)
    assert History(p).current == a.original
    # one entry per real change: init + 2 applies, no duplicates
    made = replay(_surgery(a.ws))["made"]
    assert [r.get("recipe", "init") for r in made] == ["init", "fold_constants", "decompose"]


def test_staged_version_survives_another_sessions_discard(tmp_path):
    """Session B discards a not-kept change while session A has the same bytes staged: A's
    file stays, so A's verification and record still find it."""
    from workbench.surgery.changes import prepare_change

    p = tmp_path / "m.onnx"
    shutil.copy(NF, p)
    a, b = History(p), History(p)
    proto = prepare_change(a.current_proto(), "fold_constants").proto
    va, vb = a.stage(proto), b.stage(proto)
    assert va == vb != a.original
    b.discard(vb)
    assert a.ws.version_path(va).exists()
    a.discard(va)  # the last stager's discard removes the never-recorded file
    assert not a.ws.version_path(va).exists()


@pytest.mark.filterwarnings("ignore::workbench.core.fsutil.CorruptLineWarning")  # (after the checks)
def test_corrupted_and_stale_history_lines_are_skipped_with_a_warning(tmp_path):
    p = tmp_path / "m.onnx"
    shutil.copy(NF, p)
    h = History(p)
    c1 = apply_in_history(h, "fold_constants")
    c2 = apply_in_history(h, "decompose", {"node": "/act/FastGelu"})
    with open(h.ws.history_path, "a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write("[1, 2, 3]\n")
        f.write(json.dumps({"kind": "surgery", "event": "apply", "parent": c2.version}) + "\n")
        f.write('{"kind": "surgery", "event": "app')  # torn last line: skipped silently
    with pytest.warns(CorruptLineWarning) as rec:
        h2 = History(p, start="latest")
    msgs = " | ".join(str(w.message) for w in rec)
    assert "is not JSON" in msgs and "not an object" in msgs and "cannot be replayed" in msgs
    assert "torn" not in msgs and msgs.count("is not JSON") == 1
    assert h2.current == c2.version and len(h2.versions()) == 3
    # a stale line: the current version's file was removed by hand -> its parent, warned
    h2.ws.version_path(c2.version).unlink()
    with pytest.warns(CorruptLineWarning, match=f"version {c2.version} is missing"):
        h3 = History(p, start="latest")
    assert h3.current == c1.version and h3.lineage() == [h3.original, c1.version]


# ---------------------------------------------------------------------- engine-cache publish
def test_engine_publish_first_complete_engine_wins(tmp_path):
    from workbench.engines.cache import load_cached, publish_engine

    ws = ModelWorkspace(tmp_path / "ws")
    engine, meta_path = ws.engines_dir / "k.engine", ws.engines_dir / "k.json"
    first, second = ws.engines_dir / ".k.1.partial", ws.engines_dir / ".k.2.partial"
    first.write_bytes(b"A" * 10)
    second.write_bytes(b"B" * 12)
    card = {"key": "k", "backend": "tensorrt-rtx", "backend_version": "1.7", "config_hash": "c"}
    m1 = publish_engine(ws, first, engine, meta_path, {**card, "size_bytes": 10, "n": 1})
    m2 = publish_engine(ws, second, engine, meta_path, {**card, "size_bytes": 12, "n": 2})
    assert m1["n"] == m2["n"] == 1 and engine.read_bytes() == b"A" * 10
    assert not first.exists() and not second.exists()
    assert load_cached(engine, meta_path, "k", ws)["n"] == 1
    third = ws.engines_dir / ".k.3.partial"
    third.write_bytes(b"C" * 7)  # --no-cache: the fresh build replaces engine and card together
    m3 = publish_engine(ws, third, engine, meta_path, {**card, "size_bytes": 7, "n": 3},
                        replace=True)
    assert m3["n"] == 3 and load_cached(engine, meta_path, "k", ws)["size_bytes"] == 7


# ---------------------------------------------------------------------- acceptance
def _fix(model, out):
    return subprocess.Popen([*CLI, "fix", str(model), "-o", str(out), "--auto", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def _build(model, out, *extra):
    return subprocess.Popen([*CLI, "build", str(model), "-o", str(out), "--backend",
                             "tensorrt-rtx", "--target", "sm89", "--profile", PROFILE, "--json",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


@pytest.mark.slow
def test_concurrent_fix_auto_and_build_on_one_model_match_a_serial_run(tmp_path):
    """Concurrent use is normal: 4 `workbench fix --auto` processes and one `workbench build` start
    at once on one model, 5 rounds. Every run succeeds with the serial run's output (same bytes,
    same support verdict, same versions); the history holds one entry per real change."""
    model = tmp_path / "needs_fixing.onnx"
    shutil.copy(NF, model)
    ref_out = tmp_path / "serial.onnx"
    r = _fix(model, ref_out)
    out, err = r.communicate(timeout=300)
    assert r.returncode == 0, err
    ref = json.loads(out)
    assert ref["supported"] is True and len(ref["versions"]) == 4
    ref_sha = _sha(ref_out)
    engines = []
    t0 = time.monotonic()
    for rnd in range(5):
        outs = [tmp_path / f"r{rnd}-{i}.onnx" for i in range(4)]
        procs = [_fix(model, o) for o in outs]
        engine = tmp_path / f"r{rnd}.engine"
        builder = _build(ref_out, engine)
        results = [(p, *p.communicate(timeout=300)) for p in procs + [builder]]
        for p, so, se in results:
            assert p.returncode == 0, f"round {rnd}: {se[-2000:]}"
        for (p, so, se), o in zip(results, outs):
            rep = json.loads(so)
            assert rep["supported"] is True and rep["support_after"]["supported"] is True
            assert rep["versions"] == ref["versions"] and _sha(o) == ref_sha
            assert [a["recipe"] for a in rep["applied"]] == [a["recipe"] for a in ref["applied"]]
            assert rep["history"]["changes"] == 3 == len(rep["history"]["steps"]) - 1
        bres = json.loads(results[-1][1])
        assert bres["cache_hit"] is (rnd > 0)
        engines.append(_sha(engine))
    elapsed = time.monotonic() - t0
    assert len(set(engines)) == 1  # later rounds get the first round's engine from the cache
    ws = History(model).ws
    lines = ws.history_path.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(ln) for ln in lines]  # every line whole: no interleaved appends
    surgery = [r for r in recs if r.get("kind") == "surgery"]
    events = Counter(r["event"] for r in surgery)
    assert events["init"] == 1 and events["apply"] == 3, events
    assert set(events) <= {"init", "apply", "checkout"}  # moves, never duplicate changes
    keys = [(r.get("parent"), r["version"]) for r in surgery if r["event"] == "apply"]
    assert len(set(keys)) == len(keys)
    assert [k[1] for k in keys] == ref["versions"][1:]
    assert len(History(model).versions()) == 4
    built = [r for r in History(ref_out).ws.history() if r.get("action") == "build"]
    assert len(built) == 5 and sum(not r["cache_hit"] for r in built) == 1
    print(f"5 rounds of 4 fix --auto + 1 build: {elapsed:.1f} s")
