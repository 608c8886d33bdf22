"""The atomic write the loaders share (engines, timing caches, calibration caches)."""
from __future__ import annotations

import os
from typing import Any


def write_atomic(path: str, data: Any, fsync: bool = True) -> None:
    """Write `data` to `path` via a temp file and rename: readers never see a partial file."""
    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
