"""No silent wait for a lock: a wait says whom it waits for and since when; a lock kept by a
process its dead taker forked is an error naming that process; a forked child never keeps
its parent's locks. Real processes and real flocks."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from workbench.core import fsutil
from workbench.core.errors import WorkbenchError

pytestmark = pytest.mark.skipif(fsutil.fcntl is None, reason="flock: POSIX only")


def _holder(code: str, lock: str) -> subprocess.Popen:
    """A Python process running `code` (with `lock` and fsutil at hand), ready once it
    prints READY."""
    src = textwrap.dedent(f"""
        import os, sys, time
        from workbench.core import fsutil
        lock = {lock!r}
    """) + textwrap.dedent(code)
    p = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "READY"
    return p


def test_a_wait_for_a_held_lock_says_for_whom_and_since_when(tmp_path, capfd):
    lock = str(tmp_path / ".lock")
    p = _holder("""
        with fsutil.locked(lock):
            print("READY", flush=True)
            time.sleep(4)
    """, lock)
    t0 = time.monotonic()
    try:
        with fsutil.locked(lock):
            took = time.monotonic() - t0
    finally:
        p.wait(timeout=30)
    err = capfd.readouterr().err
    assert took > fsutil.WAIT_NOTICE_S  # it did wait, and while it waited it said so:
    m = re.search(r"waiting since (\d\d:\d\d:\d\d) for the lock (\S+), held by pid (\d+) "
                  r"\((.*)\), holding it since \d\d:\d\d:\d\d", err)
    assert m, err
    assert m.group(2) == lock and int(m.group(3)) == p.pid and m.group(4).startswith("python")


def test_a_lock_kept_by_the_child_of_a_dead_taker_is_an_error_naming_the_child(tmp_path):
    lock = str(tmp_path / ".lock")
    # the taker hands its locked fd to a child (as a subprocess with pass_fds does) and exits
    p = _holder("""
        import subprocess
        with fsutil.locked(lock):
            fd = fsutil._held[os.path.abspath(lock)][1]
            c = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 pass_fds=[fd])
            print("READY", flush=True)
            print(c.pid, flush=True)
            os._exit(0)
    """, lock)
    child = int(p.stdout.readline())
    p.wait(timeout=30)
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkbenchError) as e:
            with fsutil.locked(lock):
                pass
        took = time.monotonic() - t0
        assert took < fsutil.WAIT_NOTICE_S + 3
        msg = str(e.value)
        assert f"held by pid {child}" in msg and f"after pid {p.pid}" in msg
        assert f"kill {child}" in msg and lock in msg and "\n" not in msg
    finally:
        os.kill(child, 9)


def test_a_forked_child_does_not_keep_its_parents_lock(tmp_path):
    lock = str(tmp_path / ".lock")
    p = _holder("""
        with fsutil.locked(lock):
            with fsutil.single_flight(lock + ".b"):
                pid = os.fork()
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                print("READY", flush=True)
                print(pid, flush=True)
                os._exit(0)
    """, lock)
    child = int(p.stdout.readline())
    p.wait(timeout=30)
    try:
        assert fsutil._alive(child)
        t0 = time.monotonic()
        with fsutil.locked(lock), fsutil.single_flight(lock + ".b") as waited:
            assert not waited
        assert time.monotonic() - t0 < 1
    finally:
        os.kill(child, 9)


def test_the_holder_is_recorded_and_known_gone_once_it_exits(tmp_path):
    lock = str(tmp_path / ".lock")
    with fsutil.locked(lock):
        h = fsutil.lock_holder(lock)
        assert h["pid"] == os.getpid() and h["alive"] and abs(h["since"] - time.time()) < 5
    p = subprocess.run([sys.executable, "-c", "from workbench.core import fsutil\n"
                        f"with fsutil.locked({lock!r}): pass"], timeout=60)
    assert p.returncode == 0
    h = fsutil.lock_holder(lock)
    assert h["pid"] != os.getpid() and not h["alive"]
