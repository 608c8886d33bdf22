"""The console script runs `compare` in a forked worker with onnxruntime in-process
(`workbench.cli.supervise`): the same answer as the isolated route, a crash still one line that
names the model and node, the memory limit still kept, signals passed on, nothing left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import psutil
import pytest

from conftest import REPO, SAMPLES
from ort_models import crashy, slow_feed, slow_loop
from workbench.precision.transform import convert

OVERFLOW = SAMPLES / "fp16_overflow.onnx"


ROUTE_ENV = ("WORKBENCH_CLI_FORK", "WORKBENCH_ORT_ISOLATE", "WORKBENCH_ORT_TIMEOUT",
             "WORKBENCH_ORT_ADDRESS_SPACE", "WORKBENCH_ORT_MAX_RSS")


def _env(env=None):
    e = {k: v for k, v in os.environ.items() if k not in ROUTE_ENV}  # (the test's own route)
    e.update(env or {})
    return e


def _cli(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                          text=True, timeout=300, env=_env(env), **kw)


def _traced(*args, env=None):
    """Run the CLI, sampling its process tree: (returncode, stdout, stderr, the command lines
    of every process seen under it)."""
    p = subprocess.Popen([sys.executable, "-m", "workbench.cli", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env(env))
    root, seen = psutil.Process(p.pid), set()
    while p.poll() is None:
        try:
            for c in root.children(recursive=True):
                try:
                    seen.add(" ".join(c.cmdline()))
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        time.sleep(0.005)
    out, err = p.communicate()
    return p.returncode, out, err, seen


@pytest.fixture
def overflow_pair(tmp_path):
    fp16 = tmp_path / "o16.onnx"
    onnx.save(convert(onnx.load(str(OVERFLOW)), "fp16").proto, str(fp16))
    np.savez(tmp_path / "in.npz",
             input=np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32))
    return fp16, tmp_path / "in.npz"


def test_the_forked_worker_gives_the_isolated_routes_answer(overflow_pair):
    fp16, inputs = overflow_pair
    args = ["compare", str(OVERFLOW), str(fp16), "--inputs", str(inputs), "--json"]
    rc_f, out_f, err_f, seen_f = _traced(*args)
    rc_i, out_i, err_i, seen_i = _traced(*args, env={"WORKBENCH_CLI_FORK": "0"})
    assert rc_f == rc_i == 1, err_f + err_i
    # the routes taken: a fork of the command (same command line), no onnxruntime child; and
    # the onnxruntime child (workbench.runtime.ortserver) when forking is off
    assert any("workbench.cli compare" in c for c in seen_f), seen_f
    assert not any("workbench.runtime.ortserver" in c for c in seen_f), seen_f
    assert any("workbench.runtime.ortserver" in c for c in seen_i), seen_i
    a, b = json.loads(out_f), json.loads(out_i)
    assert a["culprits"][0]["node"] == "/scale/Mul"
    assert a == b  # every figure of every tensor


def test_run_forked_runs_the_work_in_another_process_with_onnxruntime_in_it(tmp_path):
    """The worker is a fork (another pid) told to run onnxruntime in-process; its exit code is
    the command's; the supervisor imports neither numpy nor onnxruntime."""
    out = tmp_path / "worker.json"
    code = f"""
import json, os, sys
from workbench.cli import supervise
def work():
    import workbench.runtime.ortchild as oc
    with open({str(out)!r}, "w") as f:
        json.dump({{"pid": os.getpid(), "isolated": oc.isolated_by_default()}}, f)
    os._exit(7)
assert supervise.wanted(["compare", "a.onnx"]) and not supervise.wanted(["compare", "-h"])
rc = supervise.run_forked("compare", work)
print(json.dumps({{"rc": rc, "pid": os.getpid(),
                  "heavy": [m for m in ("numpy", "onnx", "onnxruntime") if m in sys.modules]}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(REPO))
    assert r.returncode == 0, r.stderr
    here = json.loads(r.stdout)
    worker = json.loads(out.read_text())
    assert here["rc"] == 7 and worker["pid"] != here["pid"] and worker["isolated"] is False
    assert here["heavy"] == []


@pytest.mark.parametrize("env", [{"WORKBENCH_CLI_FORK": "0"}, {"WORKBENCH_ORT_ISOLATE": "0"},
                                 {"WORKBENCH_ORT_ADDRESS_SPACE": str(8 << 30)}])
def test_no_fork_where_the_user_asked_otherwise(env, monkeypatch):
    from workbench.cli import supervise

    for k in ROUTE_ENV:
        monkeypatch.delenv(k, raising=False)
    threads = [2]  # (this test process has threads of earlier tests: the count is set here)
    monkeypatch.setattr(supervise.threading, "active_count", lambda: threads[0])
    assert not supervise.wanted(["compare", "a.onnx"])  # threads alive: never fork
    threads[0] = 1
    assert supervise.wanted(["compare", "a.onnx"])
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert not supervise.wanted(["compare", "a.onnx"])


def test_a_crash_in_the_worker_is_run_again_isolated_and_named(crash_lib, tmp_path):
    """The re-run names model and node as the isolated route does; what the worker appended to
    --stats before it crashed is cut back first (the tensor before the crash is there once)."""
    model = tmp_path / "crashy.onnx"
    onnx.save(crashy(), str(model))
    stats = tmp_path / "stats.jsonl"
    stats.write_text("kept\n")
    r = _cli("compare", str(model), str(model), "--allow-random", "--stats", str(stats),
             "--memory-budget", "0.00001",  # a tensor per segment: 'a' is compared, then boom
             env={"WORKBENCH_ORT_CUSTOM_OPS": crash_lib})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert lines[0] == ("workbench compare: the run with onnxruntime in-process stopped (it "
                        "crashed (SIGSEGV)); running it again with onnxruntime in a child process")
    # (the two streams' requests in flight: the crash may be met loading or running a segment)
    assert lines[-1].startswith(f"workbench compare: error: {model}") and \
        "onnxruntime crashed (SIGSEGV) while" in lines[-1]
    rows = stats.read_text().splitlines()  # ('a' is there if the re-run compared it in time)
    assert rows[0] == "kept" and [json.loads(x)["tensor"] for x in rows[1:]] in ([], ["a"])


def test_a_crashed_workers_appends_are_cut_back(tmp_path):
    """run_forked: the worker appends to one file and creates another, then crashes: both are
    as before the fork when run_forked returns None (the command is then run again)."""
    old, new = tmp_path / "stats.jsonl", tmp_path / "fresh.jsonl"
    old.write_text("kept\n")
    code = f"""
import os, signal, sys
from workbench.cli import supervise
def work():
    with open({str(old)!r}, "a") as f:
        f.write("from the worker\\n")
    open({str(new)!r}, "w").write("x")
    os.kill(os.getpid(), signal.SIGSEGV)
print(supervise.run_forked("compare", work, [{str(old)!r}, {str(new)!r}]))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(REPO), env=_env())
    assert r.stdout.strip() == "None", r.stderr
    assert "stopped (it crashed (SIGSEGV))" in r.stderr
    assert old.read_text() == "kept\n" and not new.exists()


def test_a_crash_mid_run_is_named_by_node_after_the_isolated_rerun(crash_lib, tmp_path):
    model = tmp_path / "crashy.onnx"
    onnx.save(crashy(), str(model))
    r = _cli("compare", str(model), str(model), "--allow-random", "--json",
             env={"WORKBENCH_ORT_CUSTOM_OPS": crash_lib})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 2 and "Traceback" not in r.stderr, r.stderr
    # the isolated route's own words: the streams' two requests are in flight when the child
    # dies; the run's error names the node, a segment load's says it crashed while loading
    assert lines[-1].startswith(f"workbench compare: error: {model}") and \
        "onnxruntime crashed (SIGSEGV) while" in lines[-1]
    d = json.loads(r.stdout)  # the --json error object, once
    assert d["ok"] is False and d["message"] == lines[-1]
    assert d.get("node") in (None, "boom")
    assert ("node 'boom'" in lines[-1]) == (d.get("node") == "boom")


@pytest.mark.parametrize("json_out", [False, True])
def test_past_the_memory_limit_the_run_is_redone_isolated(overflow_pair, tmp_path, json_out):
    """A worker past the memory limit is stopped and the command redone with onnxruntime in its
    child. The memory is read every WATCH_S, so the worker must stay over the limit for longer
    than that: with the tiny model's own inputs it passed 40 MiB only in its last ~80 ms, and a
    run on CI ended unseen (rc 1, nothing said); 48 MiB of inputs are held for the whole run.
    The limit counts onnxruntime's child alone there, which may stay below it (the plain run's
    answer) or not (one line naming the model) - it depends on the machine's libraries."""
    fp16, _ = overflow_pair
    inputs = tmp_path / "big.npz"
    np.savez(inputs, input=np.random.default_rng(3).standard_normal((3 << 16, 64))
             .astype(np.float32))
    args = ["compare", str(OVERFLOW), str(fp16), "--inputs", str(inputs),
            *(["--json"] if json_out else [])]
    r = _cli(*args, env={"WORKBENCH_ORT_MAX_RSS": str(40 << 20)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("workbench compare: the run with onnxruntime in-process stopped "
                               "(it used ") and "over the memory limit of 40 MiB" in lines[0]
    if r.returncode == 2:  # the isolated child went past the limit too: the line names the
        # model whose run saw it (both run in the one child; the other run's stop is not said)
        assert len(lines) == 2 and lines[1].startswith(
            (f"workbench compare: error: {OVERFLOW}", f"workbench compare: error: {fp16}"))
        assert "limit" in lines[1] and "crashed" not in lines[1], lines[1]
        if json_out:
            assert json.loads(r.stdout)["message"] == lines[1]
    elif json_out:  # (1: the FP16 candidate overflows, as a plain run says)
        plain = _cli(*args)
        assert plain.returncode == 1 and json.loads(r.stdout) == json.loads(plain.stdout)


def _slow(tmp_path):
    model = tmp_path / "slow.onnx"
    onnx.save(slow_loop(), str(model))
    np.savez(tmp_path / "slow.npz", **slow_feed(10 ** 9))
    return model, tmp_path / "slow.npz"


def test_the_per_run_time_limit_holds_in_the_worker(tmp_path):
    model, feed = _slow(tmp_path)
    t0 = time.monotonic()
    r = _cli("compare", str(model), str(model), "--inputs", str(feed),
             env={"WORKBENCH_ORT_TIMEOUT": "1"})
    assert time.monotonic() - t0 < 60
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "onnxruntime exceeded its time limit of 1 s while running the model" in lines[0]


def test_sigterm_reaches_the_worker_and_nothing_is_left_behind(tmp_path):
    model, feed = _slow(tmp_path)
    p = subprocess.Popen([sys.executable, "-m", "workbench.cli", "compare", str(model),
                          str(model), "--inputs", str(feed)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    sup = psutil.Process(p.pid)
    deadline = time.monotonic() + 60
    workers = []
    while time.monotonic() < deadline:
        workers = sup.children()
        # inside onnxruntime's loop once it has spent a while of CPU
        if workers and sum(workers[0].cpu_times()[:2]) > 2.0:
            break
        time.sleep(0.05)
    assert workers, "no worker was forked"
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGTERM  # ended by the signal, as the worker was
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive


def test_the_forked_worker_drives_the_tensorrt_worker(tmp_path):
    """`compare --engine-from-build` from the console script: the forked worker starts the
    TensorRT(-RTX) worker, builds, and (no GPU here) ends with the one-line reason."""
    pytest.importorskip("tensorrt_rtx_bindings")
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is here: tests/gpu/test_engine_compare.py runs engines")
    resnet = SAMPLES / "resnet_tiny.onnx"
    r = _cli("compare", str(resnet), "--engine-from-build", "--backend", "tensorrt-rtx",
             "--target", "sm89", "--opt-level", "0", "--inputs",
             str(SAMPLES / "calib" / "resnet_tiny.npz"), "--samples", "2")
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and "needs an NVIDIA GPU" in err[0], r.stderr


def test_an_in_process_run_keeps_the_childs_time_limit():
    """The worker's (and any in-process) onnxruntime run stops at its time limit, as the
    child's does: onnxruntime's terminate flag, set from a timer, stops the Loop inside."""
    from workbench.runtime.ortchild import OrtLimitExceeded
    from workbench.runtime.runners import OnnxRuntimeRunner

    r = OnnxRuntimeRunner(slow_loop(), isolated=False, timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(OrtLimitExceeded) as e:
        r.infer(slow_feed(10 ** 9))
    assert time.monotonic() - t0 < 30
    assert "\n" not in str(e.value) and "time limit of 1 s while running the model" in str(e.value)
    out = OnnxRuntimeRunner(slow_loop(), isolated=False, timeout=30.0).infer(slow_feed(3))
    assert np.isfinite(next(iter(out.values()))).all()  # a run within its limit is untouched


def test_verb_of_reads_only_a_leading_verb():
    from workbench.cli import verb_of

    assert verb_of(["compare", "a.onnx", "--json"]) == "compare"
    assert verb_of(["--json", "compare"]) is None  # an option first: no verb (argparse says)
    assert verb_of([]) is None


class _Stream:
    def __init__(self, exc=None):
        self.exc, self.flushed = exc, 0

    def flush(self):
        self.flushed += 1
        if self.exc:
            raise self.exc


@pytest.mark.parametrize("exc, ok", [(None, True), (BrokenPipeError(), True),
                                     (OSError(28, "No space left on device"), False),
                                     (ValueError("I/O operation on closed file"), False)])
def test_flush_streams_says_when_output_was_lost(monkeypatch, exc, ok):
    """Before os._exit both streams are flushed; a closed pipe is no loss, a full disk is (the
    process then exits 120, as CPython's own exit)."""
    from workbench.cli.common import flush_streams

    out, err = _Stream(exc), _Stream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert flush_streams() is ok
    assert out.flushed == err.flushed == 1  # stderr still flushed after stdout failed


@pytest.mark.parametrize("user, preloaded, expected", [
    (None, False, "1"), ("3", False, "3"), (None, True, None)])
def test_the_console_script_asks_for_one_blas_thread(user, preloaded, expected):
    """Before numpy is imported the console script asks OpenBLAS for one thread (its threads
    spin at import); a count the user set is kept, and a numpy already loaded is left alone."""
    code = ("import os, sys\n"
            + ("import numpy\n" if preloaded else "")
            + "from workbench.cli import _one_blas_thread\n_one_blas_thread()\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
            "import numpy\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["PYTHONPATH"] = str(REPO)
    if user is not None:
        env["OPENBLAS_NUM_THREADS"] = user
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(expected)
