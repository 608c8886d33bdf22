"""The worker's TensorRT as the build sees it: name, version and capabilities, asked once per
interpreter and backend (`backend_info`), and whether that answer is still to come (a cold
worker: the build overlaps the wait with its own work)."""
from __future__ import annotations

import threading
from typing import Any, Dict, Tuple

from workbench.core.errors import WorkbenchError

_backend_lock = threading.Lock()
_backend_memo: Dict[Tuple[str, str], Dict[str, Any]] = {}


def backend_info(backend: str = "auto", client: Any = None) -> Dict[str, Any]:
    """Name, version and capabilities of the worker's TensorRT (memoised per interpreter)."""
    from workbench.worker.client import WorkerError, default_client

    client = client or default_client()
    key = (client.python, backend)
    with _backend_lock:
        if key in _backend_memo:
            return _backend_memo[key]
    try:
        info = getattr(client, "preloaded_backend_info", lambda b: None)(backend) or \
            client.call("backend_info", {"backend": backend}, timeout=120)
    except WorkerError as e:
        raise WorkbenchError(str(e.message), field="backend", hint=e.hint) from None
    with _backend_lock:
        _backend_memo[key] = info
    return info


def is_cold(client: Any, backend: str) -> bool:
    """Has `backend_info` not answered yet for this interpreter and backend?"""
    with _backend_lock:
        return (client.python, backend) not in _backend_memo
