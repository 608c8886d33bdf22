"""Op registry, the error ops raise, and the per-request context handed to ops (progress,
logs, cancel). The message shapes are the protocol module's."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Optional

from workbench.worker import protocol

OPS: Dict[str, Callable[..., Any]] = {}


class OpError(Exception):
    """An error an op reports to the user: message plus optional node/op/hint/details;
    `code` is one of protocol.CODES."""

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
        self._send(protocol.progress(self.id, phase, fraction, message))

    def log(self, level: str, message: str) -> None:
        self._send(protocol.log(self.id, level, message))

    def working_on(self, stage: str, node: Optional[str], op: Optional[str] = None,
                   index: Optional[int] = None) -> None:
        """Say which ONNX node TensorRT is on (None: done with nodes), before it works on it."""
        self._send(protocol.node(self.id, stage, node, op, index))

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def check_cancel(self) -> None:
        if self.cancel_event.is_set():
            raise Cancelled()
