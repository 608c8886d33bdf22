"""INT8 calibration on the legacy route (Polygraphy's Calibrator): the batches the client
wrote, and an entropy (or minmax) calibrator that feeds them through workbench.worker.cuda."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from workbench.worker.loaders.files import write_atomic
from workbench.worker.registry import OpError


def load_calibration_npz(path: str) -> List[Dict[str, Any]]:
    """Batches written by the client: keys 'b<index>:<input name>' (allow_pickle=False)."""
    import numpy as np

    batches: Dict[int, Dict[str, Any]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            head, sep, name = key.partition(":")
            if not sep or not head.startswith("b") or not head[1:].isdigit():
                raise OpError("calibration file %s has an unexpected key '%s'" % (path, key),
                              code="bad-calibration")
            batches.setdefault(int(head[1:]), {})[name] = data[key]
    return [batches[i] for i in sorted(batches)]


def make_calibrator(trt: Any, ctx: Any, batches: List[Dict[str, Any]],
                    cache_path: Optional[str], method: str) -> Any:
    """An entropy (or minmax) calibrator fed from `batches`; device buffers through cuda.Cuda.
    An exception inside is kept in `.error` (it must not cross into TensorRT)."""
    base_name = {"minmax": "IInt8MinMaxCalibrator", "legacy": "IInt8LegacyCalibrator"
                 }.get(method, "IInt8EntropyCalibrator2")
    base = getattr(trt, base_name, None) or getattr(trt, "IInt8EntropyCalibrator2", None)
    if base is None:
        raise OpError("this TensorRT has no INT8 calibrator classes", code="no-calibrator",
                      hint="use the strongly typed route (Q/DQ in the ONNX) instead")

    class _Calibrator(base):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.batches = batches
            self.index = 0
            self.cuda: Any = None
            self.ptrs: Dict[str, int] = {}
            self.error: Optional[BaseException] = None

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is part of each input's shape

        def get_batch(self, names: List[str]) -> Optional[List[int]]:
            try:
                if (ctx is not None and ctx.cancelled) or self.index >= len(self.batches):
                    return None
                if self.cuda is None:
                    from workbench.worker.cuda import Cuda

                    self.cuda = Cuda("INT8 calibration")
                batch = self.batches[self.index]
                ptrs = []
                for name in names:
                    if name not in batch:
                        raise OpError("calibration batch %d has no data for input '%s'"
                                      % (self.index, name), code="bad-calibration")
                    if name not in self.ptrs:
                        self.ptrs[name] = self.cuda.malloc(
                            max(b[name].nbytes for b in self.batches if name in b))
                    self.cuda.upload(self.ptrs[name], batch[name])
                    ptrs.append(self.ptrs[name])
                self.index += 1
                if ctx is not None:
                    ctx.progress("calibrating", None, "batch %d/%d" % (self.index,
                                                                       len(self.batches)))
                return ptrs
            except BaseException as e:  # an exception must not cross into TensorRT
                self.error = e
                return None

        def read_calibration_cache(self) -> Optional[bytes]:
            if cache_path and os.path.isfile(cache_path) and os.path.getsize(cache_path):
                with open(cache_path, "rb") as f:
                    return f.read()
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            if cache_path:
                write_atomic(cache_path, bytes(cache), fsync=False)

        def free(self) -> None:
            if self.cuda is not None:
                self.cuda.free_all()

    return _Calibrator()
