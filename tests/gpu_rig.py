"""The GPU tests' worker (tests/gpu/): one check that the worker's interpreter has a usable GPU
and a full TensorRT, skipping the test with the reason otherwise (on a CPU machine, in CI)."""
from __future__ import annotations

from typing import Any, Dict, Tuple

import pytest

from workbench.worker.client import WorkerClient, WorkerError


def open_gpu_worker() -> Tuple[WorkerClient, Dict[str, Any], Dict[str, Any]]:
    """(worker, cuda_info, TensorRT backend_info); the caller closes the worker. Skips (after
    closing it) where there is no GPU or no full TensorRT for the worker."""
    w = WorkerClient()
    try:
        cuda = w.call("cuda_info", timeout=120)
    except WorkerError as e:
        w.close()
        pytest.skip(f"no usable GPU for the TensorRT worker ({w.python}): {e}")
    try:
        info = w.call("backend_info", {"backend": "tensorrt"}, timeout=120)
    except WorkerError as e:
        w.close()
        pytest.skip(f"no full TensorRT in the worker's interpreter ({w.python}): {e}")
    return w, cuda, info


@pytest.fixture(scope="module")
def trt_worker():
    """The worker on a usable GPU with a full TensorRT, for a GPU test module (`from gpu_rig
    import trt_worker`); its TensorRT version printed, for the note."""
    w, _cuda, info = open_gpu_worker()
    print("TensorRT", info["version"])
    yield w
    w.close()
