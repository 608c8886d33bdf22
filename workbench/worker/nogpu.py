"""The one wording for "no GPU here": `workbench gpus`, timing-capture (the worker's CUDA
check), `matrix --gpus`, the notebooks and the panels all say it with these words, so one
machine is never "no NVIDIA GPU found" in one place and "CUDA driver version is insufficient"
in another. Stdlib only: the TensorRT worker imports it too.
"""
from __future__ import annotations

import glob
import os
import sys
from typing import Optional

NO_GPU = "no NVIDIA GPU found on this machine"


def gpu_device_present() -> Optional[bool]:
    """Whether the NVIDIA driver shows a GPU here: True (a device node or the driver's GPU
    list), False (Linux, and neither), None (another OS: cannot tell without CUDA)."""
    if not sys.platform.startswith("linux"):
        return None
    if glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*"):
        return True
    if os.path.exists("/dev/dxg"):  # WSL: the GPU is behind /dev/dxg, CUDA knows
        return None
    return False


def needs_gpu(purpose: str, cuda: Optional[str] = None,
              present: Optional[bool] = None) -> str:
    """`purpose` ("profiling an engine", "GPU variants (--gpus)") needs a GPU this machine
    lacks, in the shared words: NO_GPU where the driver shows no GPU at all (CUDA's own words,
    e.g. "driver version is insufficient", would blame a driver there is none of), else the
    GPU that is there is not usable, with CUDA's words. `present`: gpu_device_present() when
    None."""
    if present is None:
        present = gpu_device_present()
    if present is False or (present is None and not cuda):
        return f"{purpose} needs an NVIDIA GPU: {NO_GPU}"
    return (f"{purpose} needs an NVIDIA GPU: the GPU here is not usable"
            + (f" (CUDA: {cuda})" if cuda else ""))
