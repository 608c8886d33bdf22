"""The CLI's fast worker start: a forked worker (no second interpreter) and a lean exec'd one
(-S). Same protocol and the same containment as the ordinary worker, and nothing left behind.

Forking is only safe from a single-threaded process, so every forked scenario runs in a fresh
interpreter of its own (this pytest process may already run threads)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from workbench.worker import forked
from workbench.worker.client import WorkerClient, same_interpreter, worker_command

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_models"

PRELUDE = r'''
import json, os, sys, threading, time
from workbench.worker import forked
from workbench.worker.client import (WorkerCancelled, WorkerClient, WorkerCrashed,
                                     WorkerTimeout)
out = {"can_fork": forked.can_fork(sys.executable)}
w = WorkerClient()
w.warm_up(backend="tensorrt-rtx", fork=True)
out["handle"] = type(w._proc).__name__
out["pid"] = w.pid
with open("/proc/%d/stat" % w.pid) as f:
    out["ppid"] = int(f.read().rsplit(")", 1)[1].split()[1])
out["me"] = os.getpid()
'''

SCENARIOS = {
    "protocol": r'''
info = w.call("ping", timeout=60)
out["ping_pid"] = info["pid"]
out["ops"] = info["ops"]
out["backend"] = w.call("backend_info", {"backend": "tensorrt-rtx"}, timeout=60)["backend"]
events = []
out["sleep"] = w.call("sleep", {"seconds": 0.3, "step": 0.05}, on_event=events.append)
out["progress"] = [e["fraction"] for e in events if e["event"] == "progress"]
''',
    "timeout": r'''
t0 = time.monotonic()
try:
    w.call("sleep", {"seconds": 30}, timeout=0.5)
except WorkerTimeout as e:
    out["error"] = str(e)
out["seconds"] = time.monotonic() - t0
time.sleep(0.2)
out["child_gone"] = not os.path.exists("/proc/%d" % out["pid"]) or \
    open("/proc/%d/stat" % out["pid"]).read().rsplit(")", 1)[1].split()[0] == "Z"
out["next_ping"] = w.call("ping", timeout=60)["pid"] != out["pid"]
''',
    "crash": r'''
try:
    w.call("crash", {"how": "segfault"}, timeout=60)
except WorkerCrashed as e:
    out["error"] = str(e)
''',
    "cancel": r'''
cancel = threading.Event()
threading.Timer(0.3, cancel.set).start()
t0 = time.monotonic()
try:
    w.call("sleep", {"seconds": 30}, cancel=cancel)
except WorkerCancelled as e:
    out["error"] = str(e)
out["seconds"] = time.monotonic() - t0
out["still_usable"] = w.call("ping", timeout=60)["pid"] == out["pid"]
''',
    "release": r'''
w.call("ping", timeout=60)
w.release()
t0 = time.monotonic()
while time.monotonic() - t0 < 5:
    try:
        state = open("/proc/%d/stat" % out["pid"]).read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    if state in ("Z", "gone"):
        break
    time.sleep(0.02)
out["state"] = state
out["alive_after_release"] = w.alive
''',
}


def _scenario(name: str) -> dict:
    code = PRELUDE + SCENARIOS[name] + "\nprint(json.dumps(out))\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, cwd=str(REPO))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check_forked(out: dict) -> None:
    assert out["can_fork"] is True
    assert out["handle"] == "ForkedProcess"
    assert out["ppid"] == out["me"] and out["pid"] != out["me"]


def test_forked_worker_speaks_the_protocol_with_the_real_backend():
    out = _scenario("protocol")
    _check_forked(out)
    assert out["ping_pid"] == out["pid"]
    assert {"build", "parse", "backend_info", "sleep", "crash"} <= set(out["ops"])
    assert out["backend"] == "tensorrt-rtx"
    assert out["sleep"] == {"slept": 0.3}
    assert len(out["progress"]) >= 3 and out["progress"] == sorted(out["progress"])


def test_forked_worker_time_limit_kills_it_and_the_next_call_restarts():
    out = _scenario("timeout")
    _check_forked(out)
    assert "time limit of 0.5 s" in out["error"]
    assert out["seconds"] < 5
    assert out["child_gone"] is True
    assert out["next_ping"] is True


def test_forked_worker_crash_is_contained_with_signal_and_log_tail():
    out = _scenario("crash")
    _check_forked(out)
    assert "SIGSEGV" in out["error"] and "about to crash on purpose" in out["error"]


def test_forked_worker_cancel_stops_the_op_and_stays_usable():
    out = _scenario("cancel")
    _check_forked(out)
    assert "cancelled" in out["error"]
    assert out["seconds"] < 3
    assert out["still_usable"] is True


def test_release_lets_the_forked_worker_go_at_once():
    out = _scenario("release")
    _check_forked(out)
    assert out["state"] in ("Z", "gone")  # killed (a zombie until this process exits)
    assert out["alive_after_release"] is False


def test_fork_is_refused_with_threads_or_another_interpreter(tmp_path):
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        assert forked.can_fork(sys.executable) is False  # a second thread exists
    finally:
        stop.set()
        t.join()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    venv_python = str(venv / "bin" / "python")
    # the venv's python is a symlink to this very binary, but another environment
    assert os.path.samefile(venv_python, sys.executable)
    assert not same_interpreter(venv_python)
    assert forked.can_fork(venv_python) is False
    assert "-S" not in worker_command(venv_python)
    assert worker_command(sys.executable)[1] == "-S"


def test_lean_exec_worker_finds_a_backend_only_site_would_add():
    """The -S worker gets this process's import path; when a backend still does not import
    (installed through a .pth hook), it runs site and tries again."""
    site_packages = [p for p in sys.path if p.endswith("-packages")]
    code = ("import sys; sys.path.insert(0, %r); "
            "sys.path[:] = [p for p in sys.path if not p.endswith('-packages')]; "
            "from workbench.worker.loaders import load_backend; "
            "name, mod = load_backend('tensorrt-rtx'); print(name, mod.__name__)") % str(REPO)
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert site_packages, "test needs a site-packages on sys.path"
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split()[0] == "tensorrt-rtx"


def test_lean_exec_worker_is_a_real_worker():
    w = WorkerClient()
    try:
        info = w.call("ping", timeout=60)
        with open(f"/proc/{w.pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        assert argv[1] == b"-S"
        assert info["pid"] == w.pid
        assert w.call("backend_info", {"backend": "tensorrt-rtx"}, timeout=60)["backend"] == \
            "tensorrt-rtx"
    finally:
        w.close()


def _processes_with(marker: str) -> list:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if marker.encode() in env and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(d.name))
    return found


def test_cli_build_uses_a_forked_worker_and_leaves_no_process(tmp_path):
    marker = f"WB_TEST_MARKER_{uuid.uuid4().hex}"
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"), **{marker: "1"})
    cmd = [sys.executable, "-c", "import sys; from workbench.cli import run; run()",
           "build", str(SAMPLES / "resnet_tiny.onnx"), "-o", str(tmp_path / "r.engine"),
           "--target", "sm89", "--profile", "input:1x3x32x32:4x3x32x32:32x3x32x32", "--json"]
    # slowed down (a test hook in the build op) so that the worker can be seen while it runs
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env, WORKBENCH_BUILD_STEP_DELAY="0.02"))
    cmdlines = {}
    deadline = time.monotonic() + 60
    while proc.poll() is None and len(cmdlines) < 2 and time.monotonic() < deadline:
        for pid in _processes_with(marker):
            try:
                cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                pass
        time.sleep(0.02)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-3000:]
    # two processes, the CLI and its worker, with one command line: forked, not exec'd
    assert len(cmdlines) == 2 and len(set(cmdlines.values())) == 1, cmdlines
    assert b"-S" not in next(iter(cmdlines.values())).split(b"\0")
    d = json.loads(stdout)
    assert d["ok"] and d["backend"] == "tensorrt-rtx" and not d["cache_hit"]
    assert (tmp_path / "r.engine").stat().st_size == d["size_bytes"] > 0
    deadline = time.monotonic() + 5
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []
    # with forking turned off the same build works through an exec'd worker
    env["WORKBENCH_WORKER_FORK"] = "0"
    env["WORKBENCH_HOME"] = str(tmp_path / "home2")
    r2 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert json.loads(r2.stdout)["size_bytes"] == d["size_bytes"]


def test_fork_switch_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("WORKBENCH_WORKER_FORK", "0")
    assert forked.can_fork(sys.executable) is False
