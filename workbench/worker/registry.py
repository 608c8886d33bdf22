"""Op registry and the per-request context handed to ops (progress, logs, cancel)."""
from __future__ import annotations

import json
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, Optional

OPS: Dict[str, Callable[..., Any]] = {}


class OpError(Exception):
    """An error an op reports to the user: message plus optional node/op/hint/details."""

    def __init__(self, message: str, *, node: Optional[str] = None, op: Optional[str] = None,
                 hint: Optional[str] = None, code: str = "op-error",
                 details: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.op = op
        self.hint = hint
        self.code = code
        self.details = details or {}


class Cancelled(OpError):
    def __init__(self, message: str = "cancelled by the user") -> None:
        super().__init__(message, code="cancelled")


def op(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(ctx, **args) -> JSON-serialisable result` under `name`."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        OPS[name] = fn
        return fn

    return deco


class Context:
    """What an op can do besides returning: report progress, log, and check for cancel."""

    def __init__(self, req_id: Any, send: Callable[[Dict[str, Any]], None]) -> None:
        self.id = req_id
        self._send = send
        self.cancel_event = threading.Event()

    def progress(self, phase: str, fraction: Optional[float] = None, message: str = "") -> None:
        self._send({"id": self.id, "event": "progress", "phase": phase,
                    "fraction": fraction, "message": message})

    def log(self, level: str, message: str) -> None:
        self._send({"id": self.id, "event": "log", "level": level, "message": message})

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def check_cancel(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled()


def read_json_lines(lines: Iterable[str], on_bad: Callable[[str], None]) -> Iterator[Any]:
    """The protocol's framing, for both ends: one JSON object per non-empty line; a line that
    is not one goes to `on_bad` and the stream goes on."""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:  # json.JSONDecodeError
            msg = None
        if isinstance(msg, dict):
            yield msg
        else:
            on_bad(line)
