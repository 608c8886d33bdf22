"""Which GPUs and MIG instances this machine has, and pinning the TensorRT worker to one.

    gpus = list_gpus()                 # [Gpu(index=0, name='NVIDIA H200', uuid='GPU-...'), ...]
    gpu = resolve_gpu("0")             # by index, UUID (or a unique UUID prefix), "0:1" for MIG
    client = pinned_client("MIG-...")  # a WorkerClient whose worker sees only that device

Listing reads NVML through `pynvml` when it is importable, else parses `nvidia-smi -L`; it never
changes a GPU setting (no MIG reconfiguration, clocks or persistence mode). Pinning sets
CUDA_VISIBLE_DEVICES=UUID in the worker's environment only (workbench.worker.launch.gpu_env):
a UUID names the same device whatever the enumeration order, and is how CUDA addresses a MIG
instance. No GPU, or an unknown id, is one WorkbenchError saying what exists. Stdlib only
(pynvml optional).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from workbench.core.errors import WorkbenchError

_GPU_LINE = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\)\s*$")


@dataclass
class Gpu:
    """A GPU (`mig` empty) or a MIG instance (`kind` "mig", `parent` its GPU's UUID).

    `id` is how to name it on the command line: "0" for GPU 0, "0:1" for its MIG device 1."""

    index: int
    name: str
    uuid: str
    kind: str = "gpu"
    mig_index: Optional[int] = None
    parent: Optional[str] = None
    compute_capability: Optional[str] = None
    memory_mb: Optional[int] = None
    migs: List["Gpu"] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.index) if self.mig_index is None else f"{self.index}:{self.mig_index}"

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["id"] = self.id
        d["migs"] = [m.to_dict() for m in self.migs]
        return d


def parse_nvidia_smi_list(text: str) -> List[Gpu]:
    """GPUs with their MIG devices from `nvidia-smi -L` output (lines it does not know, e.g.
    warnings, are skipped)."""
    gpus: List[Gpu] = []
    for line in text.splitlines():
        m = _GPU_LINE.match(line.strip())
        if m:
            gpus.append(Gpu(index=int(m.group(1)), name=m.group(2), uuid=m.group(3)))
            continue
        m = _MIG_LINE.match(line)
        if m and gpus:
            parent = gpus[-1]
            parent.migs.append(Gpu(index=parent.index, name=f"{parent.name} MIG {m.group(1)}",
                                   uuid=m.group(3), kind="mig", mig_index=int(m.group(2)),
                                   parent=parent.uuid, compute_capability=None))
    return gpus


def _from_nvml() -> Optional[List[Gpu]]:
    """GPUs through NVML (pynvml), or None when pynvml or the driver is not there."""
    try:
        import pynvml  # type: ignore
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    try:
        out: List[Gpu] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            try:
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                cc: Optional[str] = f"{major}.{minor}"
            except Exception:
                cc = None
            try:
                mem: Optional[int] = int(pynvml.nvmlDeviceGetMemoryInfo(h).total) >> 20
            except Exception:
                mem = None
            gpu = Gpu(index=i, name=text(pynvml.nvmlDeviceGetName(h)),
                      uuid=text(pynvml.nvmlDeviceGetUUID(h)), compute_capability=cc,
                      memory_mb=mem)
            try:
                n = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
            except Exception:
                n = 0
            for k in range(n):
                try:
                    mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                except Exception:
                    continue
                gpu.migs.append(Gpu(index=i, name=f"{gpu.name} MIG",
                                    uuid=text(pynvml.nvmlDeviceGetUUID(mh)), kind="mig",
                                    mig_index=k, parent=gpu.uuid, compute_capability=cc))
            out.append(gpu)
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _from_nvidia_smi() -> Optional[List[Gpu]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return parse_nvidia_smi_list(out.stdout)


def list_gpus() -> List[Gpu]:
    """This machine's GPUs (each with its MIG devices): NVML first, else `nvidia-smi -L`;
    an empty list when neither finds one."""
    found = _from_nvml()
    if found is None:
        found = _from_nvidia_smi()
    return found or []


def _all(gpus: List[Gpu]) -> List[Gpu]:
    return [d for g in gpus for d in [g] + g.migs]


def resolve_gpu(wanted: str, gpus: Optional[List[Gpu]] = None) -> Gpu:
    """The GPU or MIG device `wanted` names: an id ("0", "0:1"), a UUID ("GPU-...", "MIG-..."),
    or a unique UUID prefix. Raises WorkbenchError naming what exists when it is not there."""
    gpus = list_gpus() if gpus is None else gpus
    wanted = str(wanted).strip()
    if not gpus:
        from workbench.worker.nogpu import needs_gpu

        raise WorkbenchError(needs_gpu(f"--gpu {wanted}", present=False) + " (neither NVML "
                             "nor `nvidia-smi -L` lists one)", field="gpu",
                             hint="drop --gpu on a machine without a GPU, or run where "
                             "`nvidia-smi -L` lists the device")
    devices = _all(gpus)
    for d in devices:
        if wanted in (d.id, d.uuid):
            return d
    prefix = [d for d in devices if len(wanted) >= 8 and d.uuid.startswith(wanted)]
    if len(prefix) == 1:
        return prefix[0]
    listing = ", ".join(f"{d.id}={d.uuid}" for d in devices)
    raise WorkbenchError(f"GPU '{wanted}' not found; this machine has {listing}", field="gpu",
                         hint="pass an id or UUID from `workbench gpus`")


def pinned_client(wanted: Optional[str]) -> Any:
    """A WorkerClient whose worker sees only the device `wanted` names (None: the shared
    default client, unpinned)."""
    from workbench.worker.client import WorkerClient, default_client
    from workbench.worker.launch import gpu_env

    if wanted is None:
        return default_client()
    return WorkerClient(env=gpu_env(resolve_gpu(wanted).uuid))
