"""The Ray instance `workbench matrix` starts for itself stays on this machine (every listening
socket of the run on 127.0.0.0/8, no token banner), and GPU variants on a machine without a
GPU are refused at once, in the words `gpus` and `timing-capture` use too."""
from __future__ import annotations

import ipaddress
import re
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, SAMPLES
from workbench.fleet.gpus import list_gpus
from workbench.worker.nogpu import NO_GPU

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")
pytest.importorskip("tensorrt_rtx_bindings")

RESNET = SAMPLES / "resnet_tiny.onnx"


def _cli(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "workbench.cli", *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _listening(root: "psutil.Process") -> set:
    """(process name, address, port) of every TCP socket listening in `root`'s process tree
    (psutil reads /proc/net/tcp and tcp6 and maps each socket's inode to its process)."""
    try:
        tree = {p.pid: p for p in [root, *root.children(recursive=True)]}
    except psutil.NoSuchProcess:
        return set()
    out = set()
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.pid in tree:
            try:
                name = tree[c.pid].name()
            except psutil.NoSuchProcess:
                name = "?"
            out.add((name, c.laddr.ip, c.laddr.port))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def test_a_local_matrix_listens_on_loopback_only_and_prints_no_token_banner(tmp_path):
    p = _cli("matrix", RESNET, "-o", tmp_path / "m", "--precision", "fp32", "--target", "sm89",
             "--samples", "0", "--workers", "1")
    root = psutil.Process(p.pid)
    seen: set = set()
    deadline = time.monotonic() + 400
    while p.poll() is None and time.monotonic() < deadline:
        seen |= _listening(root)
        time.sleep(0.2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err[-3000:]
    names = {n for n, _, _ in seen}
    # the run's own servers were seen (so the check below looked at something)
    assert "gcs_server" in names and "raylet" in names, seen
    outside = sorted(s for s in seen if not _loopback(s[1]))
    assert not outside, f"listening outside 127.0.0.0/8: {outside}"
    assert "Token authentication" not in err and "1/1 variants ok" in out


def test_the_loopback_switch_is_put_back_after_ray_starts(monkeypatch):
    """The switch the local instance is started with does not leak into this process's
    environment (a later `ray.init(address=...)` of the user's is theirs)."""
    from workbench.matrix import run

    monkeypatch.delenv(run._CLUSTER_SWITCH, raising=False)
    with run._loopback_only(local=True):
        assert os.environ[run._CLUSTER_SWITCH] == "0"
    assert run._CLUSTER_SWITCH not in os.environ
    with run._loopback_only(local=False):  # --ray ADDRESS: the user's cluster, untouched
        assert run._CLUSTER_SWITCH not in os.environ


@pytest.mark.skipif(bool(list_gpus()), reason="this machine has a GPU: --gpus is allowed here")
def test_matrix_gpus_without_a_gpu_exits_2_at_once_with_one_line(tmp_path):
    t0 = time.monotonic()
    p = _cli("matrix", RESNET, "-o", tmp_path / "m", "--gpus")
    out, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 2 and took < 5, (took, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench matrix: error: ")
    assert f"matrix --gpus needs an NVIDIA GPU: {NO_GPU}" in lines[0]
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


@pytest.mark.skipif(bool(list_gpus()), reason="this machine has a GPU")
def test_gpus_and_timing_capture_say_no_gpu_in_the_same_words(tmp_path):
    gpus = _cli("gpus")
    out, _ = gpus.communicate(timeout=60)
    assert gpus.returncode == 0 and out.startswith(NO_GPU)
    engine = tmp_path / "r.engine"
    b = _cli("build", RESNET, "-o", engine, "--target", "sm89",
             "--profile", "input:1x3x32x32:1x3x32x32:1x3x32x32")
    _, err = b.communicate(timeout=300)
    assert b.returncode == 0, err[-2000:]
    cap = _cli("timing-capture", engine, "--out", tmp_path / "cap")
    _, err = cap.communicate(timeout=120)
    assert cap.returncode == 2
    assert f"needs an NVIDIA GPU: {NO_GPU}" in err and "driver version" not in err
    # the notebook's capture cell (06_timing) calls capture_onnx: the same words
    from workbench.core.errors import WorkbenchError
    from workbench.measure.capture import capture_onnx

    with pytest.raises(WorkbenchError) as e:
        capture_onnx(RESNET, fp16=True)
    assert f"needs an NVIDIA GPU: {NO_GPU}" in str(e.value)


def test_gpu_tasks_waiting_on_a_cluster_without_a_gpu_say_what_they_wait_for(tmp_path,
                                                                           monkeypatch):
    """On a cluster (--ray ADDRESS) GPUs may come later: the run waits, but not silently."""
    import threading

    import ray

    from workbench.matrix import run
    from workbench.matrix.plan import plan_matrix

    if ray.is_initialized():
        ray.shutdown()
    assert run.start_ray(workers=1, gpus=0) is True  # a cluster with no GPU at all
    try:
        monkeypatch.setattr(run, "WAIT_NOTICE_S", 1.0)
        said, cancel = [], threading.Event()

        def on_wait(line):
            said.append(line)
            cancel.set()

        address = ray.get_runtime_context().gcs_address
        variants = plan_matrix([RESNET], ["fp32"], ["sm89"])
        t0 = time.monotonic()
        res = run.run_matrix(variants, tmp_path / "m", ray_address=address, gpu=True,
                             samples=0, on_wait=on_wait, cancel=cancel, report=False)
        assert time.monotonic() - t0 < 60 and res.results == []
        assert re.match(r"waiting since \d\d:\d\d:\d\d for 1 task\(s\) to finish or start "
                        r"\(each needs 1 GPU; the Ray cluster has 0 of 0 GPU\(s\) free\)",
                        said[0]), said
    finally:
        ray.shutdown()
