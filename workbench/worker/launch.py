"""How an exec'd worker starts: its command line, and whether a Python is this very one.

Start-up trick kept here (measured when cutting the build's overhead): when the worker runs
this same interpreter and environment it starts with `-S` and is handed this process's
import path instead. site's .pth processing (editable-install finders, vendor hooks) cost
30-60 ms per worker start on the 2-core CI machine, and the worker needs none of it; a
backend that only imports through a .pth hook still works (loaders.load_backend runs site
then). WORKBENCH_WORKER_SITE=1 turns it off. The other start path, forking the CLI process,
is workbench.worker.forked. Stdlib only (imported by the client's first call).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List

# the folder that holds the `workbench` package, found by this module's depth in it (also the
# onnxruntime child's; os.path: pathlib and subprocess are imported only when needed, so that a
# CLI reaches its worker's fork in as few milliseconds as it can)
ROOT = os.path.realpath(__file__)
for _ in range(__name__.count(".") + 1):
    ROOT = os.path.dirname(ROOT)
_BOOT = ("import sys; sys.path.insert(0, %r); "
         "from workbench.worker.boot import run; run()")
_BOOT_NO_SITE = ("import sys; sys.path.insert(0, %r); "
                 "sys.path.extend(p for p in %r if p not in sys.path); "
                 "from workbench.worker.boot import run; run()")


def same_interpreter(python: str) -> bool:
    """Is `python` this very interpreter *and environment*? Compared as paths, not as files:
    a venv's bin/python is a symlink to the same binary but has its own site-packages."""
    return os.path.abspath(python) == os.path.abspath(sys.executable)


def worker_command(python: str) -> List[str]:
    """argv that starts the worker under `python` (lean start-up when it is this interpreter;
    WORKBENCH_WORKER_SITE=1 turns that off)."""
    if same_interpreter(python) and not os.environ.get("WORKBENCH_WORKER_SITE"):
        paths = [p for p in sys.path if p and os.path.isabs(p) and os.path.exists(p)]
        return [python, "-S", "-c", _BOOT_NO_SITE % (ROOT, paths)]
    return [python, "-c", _BOOT % ROOT]


def gpu_env(uuid: str) -> Dict[str, str]:
    """The environment entries that pin a worker to one GPU or MIG instance (by UUID, so the
    enumeration order does not matter); the client merges them into the worker's environment."""
    return {"CUDA_VISIBLE_DEVICES": str(uuid)}
