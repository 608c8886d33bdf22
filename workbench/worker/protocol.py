"""The worker protocol, shared by the client and the worker process (Python 3.9, stdlib only).

JSON lines, one object per line. The client sends a request ``{"id", "op", "args"}`` or
``{"op": "cancel", "id"}`` (stop request `id`); the worker answers each request with any number
of ``progress`` / ``log`` events and exactly one ``result`` or ``error``, all carrying the
request's id. On start it sends one ``ready`` event (id None). Errors carry a ``type``
(``op``: the op refused, ``cancelled``, ``exception``: a bug, ``protocol``: a bad line) and a
``code`` from CODES; the codes in BAD_INPUT_CODES mean "the user's input is wrong" (CLI exit 2)
rather than "TensorRT failed".

This module is the only thing both ends import, so it stays tiny: names, shapes, framing.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, Iterator, Optional

# -- ops --------------------------------------------------------------------------------------
PING = "ping"
BACKEND_INFO = "backend_info"
SLEEP = "sleep"  # cancellable wait with progress (tests of the plumbing)
CRASH = "crash"  # dies on purpose (crash-containment tests)
BUILD = "build"  # ONNX -> serialized engine (the one build op)
INSPECT_ENGINE = "inspect_engine"
PARSE = "parse"  # parser errors + supported-subgraph partition
CHECK_BUILD = "check_build"  # parse, then try a build, blame the layer
NETWORK_DTYPES = "network_dtypes"  # the parsed network's per-layer dtypes
PROFILE_ENGINE = "profile_engine"  # time a serialized engine on the GPU
CUDA_INFO = "cuda_info"
RUN_ENGINE = "run_engine"  # run a serialized engine on npz samples, outputs to npz files
CANCEL = "cancel"  # not an op: a control message

# the server module that implements each op (the worker imports it on first use)
OP_MODULES = {
    PING: "main", BACKEND_INFO: "main", SLEEP: "main", CRASH: "main",
    BUILD: "ops_build", INSPECT_ENGINE: "ops_build",
    PARSE: "ops_parse", CHECK_BUILD: "ops_parse",
    NETWORK_DTYPES: "ops_precision",
    PROFILE_ENGINE: "ops_profile", CUDA_INFO: "ops_profile",
    RUN_ENGINE: "ops_run",
}

# -- backends ---------------------------------------------------------------------------------
# backend name -> the modules that provide it, tried in order (users' machines have tensorrt /
# tensorrt_rtx; tensorrt_rtx_bindings is the PyPI wheel usable on CPU machines)
BACKEND_MODULES = {
    "tensorrt": ("tensorrt",),
    "tensorrt-rtx": ("tensorrt_rtx", "tensorrt_rtx_bindings"),
}
AUTO_ORDER = ("tensorrt", "tensorrt-rtx")  # what "auto" tries
BUILD_BACKENDS = ("auto",) + AUTO_ORDER  # what `backend=` accepts wherever TensorRT builds
PARSE_BACKENDS = BUILD_BACKENDS  # ... and wherever it parses

# -- error codes ------------------------------------------------------------------------------
CODES = {
    # the user's input is wrong (CLI exit 2)
    "bad-args": "a request argument is missing or malformed",
    "incompatible-engine": "the engine card says it was built for another TensorRT or GPU",
    "bad-profile": "an optimization profile does not fit the network's inputs",
    "bad-target": "an unknown or unsupported compute-capability target",
    "bad-plugin": "a plugin library is missing or does not load",
    "bad-calibration": "calibration data or cache is missing or malformed",
    "bad-precision": "a precision this route cannot build",
    "no-flag": "a builder flag or tactic source this TensorRT does not have",
    "no-backend": "no TensorRT module importable by the worker's interpreter",
    "no-calibrator": "this TensorRT has no INT8 calibrator classes",
    "no-gpu": "the work needs an NVIDIA GPU and none is usable",
    "no-cuda": "the CUDA runtime is not usable from the worker",
    "unknown-op": "the worker has no such op",
    "not-found": "a file named in the request does not exist",
    "bad-input": "an input name, dtype or value the engine does not take",
    "bad-shape": "an input shape outside the engine's optimization profile",
    "bad-engine": "the engine file cannot be read",
    # TensorRT refused or failed (CLI exit 1)
    "parse-failed": "TensorRT's ONNX parser refused the model",
    "build-failed": "TensorRT could not build the engine",
    "cannot-deserialize": "the engine does not deserialize here",
    "cuda-error": "a CUDA call failed",
    "execute-failed": "running the engine failed",
    "op-error": "an op failed (generic)",
    "cancelled": "the request was cancelled",
    # the process itself (set by the client)
    "timeout": "the request exceeded its time limit",
    "worker-crashed": "the worker process died",
    "worker-start": "the worker process could not be started",
}
BAD_INPUT_CODES = frozenset((
    "bad-args", "bad-profile", "bad-target", "bad-plugin", "bad-calibration", "bad-precision",
    "no-flag", "no-backend", "no-calibrator", "no-gpu", "no-cuda", "unknown-op", "not-found",
    "bad-input", "bad-shape", "incompatible-engine"))

ERROR_TYPES = ("op", "cancelled", "exception", "protocol")
EVENTS = ("ready", "progress", "log", "node", "result", "error")


# -- messages ---------------------------------------------------------------------------------
def request(req_id: Any, op: str, args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    return {"id": req_id, "op": op, "args": args or {}}


def cancel(req_id: Any) -> Dict[str, Any]:
    return {"op": CANCEL, "id": req_id}


def ready(pid: int, **extra: Any) -> Dict[str, Any]:
    return dict(extra, id=None, event="ready", pid=pid)


def progress(req_id: Any, phase: str, fraction: Optional[float] = None,
             message: str = "") -> Dict[str, Any]:
    return {"id": req_id, "event": "progress", "phase": phase, "fraction": fraction,
            "message": message}


def node(req_id: Any, stage: str, name: Optional[str], op_type: Optional[str] = None,
         index: Optional[int] = None) -> Dict[str, Any]:
    """The ONNX node TensorRT is working on now (`name` None: none any more; `index`: its
    position in the parser's order, for unnamed nodes): sent as the parser reaches each node,
    so a client whose worker dies can say where it died."""
    return {"id": req_id, "event": "node", "stage": stage, "node": name, "op": op_type,
            "index": index}


def log(req_id: Any, level: str, message: str) -> Dict[str, Any]:
    return {"id": req_id, "event": "log", "level": level, "message": message}


def result(req_id: Any, value: Any) -> Dict[str, Any]:
    return {"id": req_id, "event": "result", "result": value}


def error(req_id: Any, message: str, *, type: str = "op", code: str = "op-error",  # noqa: A002
          node: Optional[str] = None, op: Optional[str] = None, hint: Optional[str] = None,
          details: Optional[Dict[str, Any]] = None, traceback: Optional[str] = None
          ) -> Dict[str, Any]:
    """An error event. `code` is one of CODES (tests check every code the ops raise), or the
    Python class name for type "exception"."""
    err: Dict[str, Any] = {"type": type if type in ERROR_TYPES else "exception", "code": code,
                           "message": message, "node": node, "op": op, "hint": hint,
                           "details": details or {}}
    if traceback is not None:
        err["traceback"] = traceback
    return {"id": req_id, "event": "error", "error": err}


def check_request(msg: Dict[str, Any]) -> Optional[str]:
    """What is wrong with a request, or None: `op` a string, `args` an object."""
    if not isinstance(msg.get("op"), str):
        return "request has no op name"
    if msg.get("args") is not None and not isinstance(msg["args"], dict):
        return "request args must be a JSON object"
    return None


def is_bad_input(code: Optional[str]) -> bool:
    """Does this error code mean the user's input (not TensorRT) is at fault?"""
    return code in BAD_INPUT_CODES


# -- framing ----------------------------------------------------------------------------------
def encode(msg: Dict[str, Any]) -> str:
    """One message as one line (str() for anything JSON cannot hold)."""
    return json.dumps(msg, default=str) + "\n"


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
