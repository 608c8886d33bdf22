"""The shared child-process supervisor, with real children: a time limit, a memory limit, a crash,
a Cancel, an ordinary exit, the process-group kill and die-with-parent."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from workbench.worker import childproc

PY = sys.executable


def _py(code: str) -> list:
    return [PY, "-c", code]


def test_a_child_sleeping_past_its_time_limit_is_stopped_with_its_group():
    """The child starts a grandchild in its group and both sleep; at the limit the whole group
    is killed, and the outcome names the limit."""
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print(p.pid, file=sys.stderr, flush=True); "
            "time.sleep(60)")
    t0 = time.monotonic()
    out = childproc.run(_py(code), timeout=1.0)
    took = time.monotonic() - t0
    assert 1.0 <= took < 5.0, took
    assert out.stop == childproc.Stop("time", 1.0)
    assert out.returncode == -signal.SIGKILL and not out.crashed
    assert out.describe() == "exceeded its time limit of 1 s and was stopped"
    grandchild = int(out.log_tail.split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.05)
    assert not _alive(grandchild), "the grandchild outlived the group kill"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_a_child_allocating_past_its_memory_limit_is_stopped_and_named():
    code = ("import time; b = bytearray(400 << 20); "
            "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(30)")
    out = childproc.run(_py(code), max_rss=100 << 20, timeout=60)
    assert out.stop is not None and out.stop.kind == "memory"
    assert out.stop.limit == 100 << 20 and out.stop.rss > 100 << 20
    assert out.returncode == -signal.SIGKILL and not out.crashed
    used = out.stop.rss / 2**20
    assert out.describe() == (f"used {used:.0f} MiB, over its memory limit of 100 MiB, "
                              "and was stopped")
    assert out.stop.limit_text() == "memory limit of 100 MiB"


def test_a_child_that_segfaults_is_named_as_a_crash_with_its_last_words():
    code = ("import os, signal, sys; print('about to crash', file=sys.stderr, flush=True); "
            "os.kill(os.getpid(), signal.SIGSEGV)")
    out = childproc.run(_py(code), timeout=30, max_rss=1 << 30)
    assert out.stop is None and out.returncode == -signal.SIGSEGV and out.crashed
    assert out.describe() == "crashed (SIGSEGV)"
    assert out.log_tail == "about to crash"


def test_a_child_killed_by_sigkill_from_outside_is_named_with_the_oom_killer():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    out = childproc.run(_py(code), timeout=30)
    assert out.stop is None and out.returncode == -signal.SIGKILL and out.crashed
    assert out.describe() == "was killed (SIGKILL: the kernel's OOM killer, or another process)"


def test_a_cancelled_child_is_asked_to_stop_then_killed_after_its_grace():
    """The child ignores the polite SIGTERM: it is killed `grace` seconds after the Cancel."""
    cancel = threading.Event()
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, "
            "lambda *a: print('asked to stop', file=sys.stderr, flush=True)); "
            "print('started', file=sys.stderr, flush=True); time.sleep(60)")
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    out = childproc.run(_py(code), timeout=30, cancel=cancel, grace=1.0)
    took = time.monotonic() - t0
    assert 1.5 <= took < 6.0, took
    assert out.stop == childproc.Stop("cancelled", 1.0)
    assert out.returncode == -signal.SIGKILL
    assert out.describe() == "was cancelled and stopped"
    assert out.log_tail.splitlines() == ["started", "asked to stop"]


def test_a_cancelled_child_that_stops_when_asked_is_reported_cancelled():
    cancel = threading.Event()
    cancel.set()
    out = childproc.run(_py("import time; time.sleep(60)"), cancel=cancel, grace=10.0)
    assert out.stop == childproc.Stop("cancelled", 10.0)
    assert out.returncode == -signal.SIGTERM
    assert out.describe() == "was cancelled and stopped"


def test_a_child_that_exits_is_reported_with_its_status():
    out = childproc.run(_py("import sys; sys.exit(3)"), timeout=30, max_rss=1 << 30)
    assert out == childproc.Outcome(3, None, "")
    assert out.describe() == "ended with exit status 3"
    assert childproc.signal_name(-signal.SIGABRT) == "SIGABRT"
    assert childproc.signal_name(-200) == "signal 200"


def test_the_watch_asks_once_on_cancel_and_stops_after_the_grace():
    """What the worker client does per event: check, ask the op to stop once, stop later."""
    cancel = threading.Event()
    w = childproc.Watch(os.getpid(), timeout=None, cancel=cancel, grace=0.3)
    assert w.check() is None and not w.cancel_requested()
    cancel.set()
    assert w.check() is None and w.cancel_requested() and not w.cancel_requested()
    assert w.wake_by(10.0) <= time.monotonic() + 0.3
    time.sleep(0.35)
    assert w.check() == childproc.Stop("cancelled", 0.3)


def test_a_forked_child_dies_with_its_parent():
    """die_with_parent: the grandchild gets SIGTERM when the middle process is SIGKILLed."""
    code = ("import os, sys, time\n"
            "from workbench.worker import childproc\n"
            "parent = os.getpid()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    childproc.die_with_parent(parent)\n"
            "    time.sleep(60)\n"
            "    os._exit(0)\n"
            "print(pid, flush=True)\n"
            "time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(childproc.__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.Popen(_py(code), stdout=subprocess.PIPE, text=True, env=env)
    try:
        grandchild = int(proc.stdout.readline())
        time.sleep(0.3)  # (prctl set)
        assert _alive(grandchild)
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _alive(grandchild):
            time.sleep(0.05)
        assert not _alive(grandchild), "the forked child outlived its parent"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("fd", [True, False])
def test_wait_pid_with_and_without_a_pidfd_stops_past_the_limit(fd):
    proc = subprocess.Popen(_py("import time; time.sleep(60)"), start_new_session=True)
    pidfd = childproc.open_pidfd(proc.pid) if fd else None
    try:
        status, stop = childproc.wait_pid(
            proc.pid, childproc.Watch(proc.pid, timeout=0.5), fd=pidfd, poll_s=0.05,
            stop=lambda: childproc.send_signal(proc.pid, signal.SIGKILL, pidfd))
    finally:
        if pidfd is not None:
            os.close(pidfd)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert stop == childproc.Stop("time", 0.5) and proc.returncode == -signal.SIGKILL
