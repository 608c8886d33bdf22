"""GPU / MIG listing and pinning (workbench.fleet.gpus): the `nvidia-smi -L` parser on real output,
id/UUID resolution and its errors, the worker's pinned environment, `workbench gpus`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO
from workbench.core.errors import WorkbenchError
from workbench.fleet.gpus import parse_nvidia_smi_list, pinned_client, resolve_gpu

SMI = REPO / "tests" / "data" / "nvidia-smi"


def test_parser_reads_real_output_with_mig_devices():
    gpus = parse_nvidia_smi_list((SMI / "a100-mig-two-gpus.txt").read_text())
    assert [(g.index, g.name, g.uuid) for g in gpus] == [
        (0, "NVIDIA A100-SXM4-40GB", "GPU-2927d07e-3fe9-7904-9e08-b08b82d9a37d"),
        (1, "NVIDIA A100-SXM4-40GB", "GPU-e109d8d9-923e-7235-0429-96b7fdbcbd30")]
    mig = gpus[1].migs
    assert len(mig) == 1 and mig[0].kind == "mig" and mig[0].id == "1:0"
    assert mig[0].uuid == "MIG-b4bcd4f3-6f69-516d-9404-b5ada80d760b"
    assert mig[0].parent == gpus[1].uuid and mig[0].name.endswith("MIG 1g.10gb")
    pod = parse_nvidia_smi_list((SMI / "h100-mig-pod.txt").read_text())
    assert pod[0].name == "NVIDIA H100 80GB HBM3"
    assert [m.uuid for m in pod[0].migs] == ["MIG-b3061c09-2a4c-5026-a575-79f86a5bb12c"]
    assert pod[0].to_dict()["migs"][0]["id"] == "0:0"


def test_parser_skips_noise_and_empty_output():
    assert parse_nvidia_smi_list("") == []
    text = "No devices found.\n" + (SMI / "h100-mig-pod.txt").read_text() + "Warning: x\n"
    assert len(parse_nvidia_smi_list(text)) == 1


def test_resolve_by_index_mig_id_uuid_and_prefix():
    gpus = parse_nvidia_smi_list((SMI / "a100-mig-two-gpus.txt").read_text())
    assert resolve_gpu("1", gpus).uuid == "GPU-e109d8d9-923e-7235-0429-96b7fdbcbd30"
    assert resolve_gpu("0:0", gpus).uuid == "MIG-6e95ef19-5145-571b-b040-7e731f1c1af3"
    assert resolve_gpu("MIG-b4bcd4f3-6f69-516d-9404-b5ada80d760b", gpus).id == "1:0"
    assert resolve_gpu("GPU-2927d07e", gpus).index == 0


def test_unknown_gpu_and_no_gpu_are_one_line_errors():
    gpus = parse_nvidia_smi_list((SMI / "a100-mig-two-gpus.txt").read_text())
    with pytest.raises(WorkbenchError) as e:
        resolve_gpu("GPU-ffffffff", gpus)
    msg = str(e.value)
    assert "GPU 'GPU-ffffffff' not found" in msg and "1:0=MIG-b4bcd4f3" in msg
    assert "\n" not in msg and "workbench gpus" in msg
    with pytest.raises(WorkbenchError) as e:
        resolve_gpu("GPU-2", gpus)  # too short a prefix to be a UUID: not a match
    with pytest.raises(WorkbenchError) as e:
        resolve_gpu("0", [])
    assert "--gpu 0 needs an NVIDIA GPU: no NVIDIA GPU found on this machine" in str(e.value)


def test_pinned_client_sets_cuda_visible_devices_in_the_worker(monkeypatch):
    gpus = parse_nvidia_smi_list((SMI / "h100-mig-pod.txt").read_text())
    monkeypatch.setattr("workbench.fleet.gpus.list_gpus", lambda: gpus)
    client = pinned_client("0:0")
    try:
        assert client.env == {"CUDA_VISIBLE_DEVICES": "MIG-b3061c09-2a4c-5026-a575-79f86a5bb12c"}
        # the real worker process sees it (the op runs in the worker: its environment)
        out = client.call("backend_info", {"backend": "tensorrt-rtx"}, timeout=120)
        assert out["backend"] == "tensorrt-rtx"
        import os
        env = open(f"/proc/{client.pid}/environ", "rb").read().split(b"\0")
        assert b"CUDA_VISIBLE_DEVICES=MIG-b3061c09-2a4c-5026-a575-79f86a5bb12c" in env
        assert os.environ.get("CUDA_VISIBLE_DEVICES") != gpus[0].migs[0].uuid  # not here
    finally:
        client.close()


def test_cli_gpus_lists_and_refuses_unknown_gpu_here():
    """This machine has no GPU: `workbench gpus` says so (exit 0, empty JSON list), and
    `--gpu` on build is refused in one line before any work."""
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the no-GPU answer cannot be checked here")
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "gpus", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"gpus": []}
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "build",
                          str(REPO / "sample_models" / "resnet_tiny.onnx"), "-o", "/tmp/x.engine",
                          "--gpu", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--gpu 0 needs an NVIDIA GPU: no NVIDIA GPU found on this machine" in out.stderr and out.stderr.count("\n") == 1
