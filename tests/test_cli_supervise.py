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
from ort_models import build_crash_library, crashy, slow_feed, slow_loop
from workbench.precision.transform import convert

OVERFLOW = SAMPLES / "fp16_overflow.onnx"


def _cli(*args, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True,
                          text=True, timeout=300, env=e, **kw)


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
    forked = _cli(*args)
    isolated = _cli(*args, env={"WORKBENCH_CLI_FORK": "0"})
    assert forked.returncode == isolated.returncode == 1, forked.stderr + isolated.stderr
    a, b = json.loads(forked.stdout), json.loads(isolated.stdout)
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
    import workbench.ortchild as oc
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
                                 {"WORKBENCH_ORT_TIMEOUT": "30"}])
def test_no_fork_where_the_user_asked_otherwise(env, monkeypatch):
    from workbench.cli import supervise

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert not supervise.wanted(["compare", "a.onnx"])


@pytest.fixture(scope="module")
def crash_lib(tmp_path_factory):
    lib = build_crash_library(tmp_path_factory.mktemp("crashlib"))
    if lib is None:
        pytest.skip("no C compiler to build the crashing custom-op library")
    return lib


def test_a_crash_in_the_worker_is_run_again_isolated_and_named(crash_lib, tmp_path):
    model = tmp_path / "crashy.onnx"
    onnx.save(crashy(), str(model))
    r = _cli("compare", str(model), str(model), "--allow-random",
             env={"WORKBENCH_ORT_CUSTOM_OPS": crash_lib})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert lines[0] == ("workbench compare: the run crashed (SIGSEGV); running it again with "
                        "onnxruntime in a child process, to name the model and node")
    assert lines[-1].startswith(f"workbench compare: error: {model}, node 'boom': onnxruntime "
                                "crashed (SIGSEGV) while running the model")


def test_the_memory_limit_stops_the_worker_with_one_line(overflow_pair):
    fp16, inputs = overflow_pair
    r = _cli("compare", str(OVERFLOW), str(fp16), "--inputs", str(inputs),
             env={"WORKBENCH_ORT_MAX_RSS": str(40 << 20)})  # below what the imports take
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("workbench compare: error: the run used ") and \
        "over its memory limit of 40 MiB, and was stopped" in line


def test_sigterm_reaches_the_worker_and_nothing_is_left_behind(tmp_path):
    model = tmp_path / "slow.onnx"
    onnx.save(slow_loop(), str(model))
    np.savez(tmp_path / "slow.npz", **slow_feed(10 ** 9))
    p = subprocess.Popen([sys.executable, "-m", "workbench.cli", "compare", str(model),
                          str(model), "--inputs", str(tmp_path / "slow.npz")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sup = psutil.Process(p.pid)
    deadline = time.monotonic() + 60
    workers = []
    while time.monotonic() < deadline and not workers:
        workers = sup.children()
        time.sleep(0.05)
    assert workers, "no worker was forked"
    time.sleep(1.5)  # the worker is inside onnxruntime's loop by now
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGTERM
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
