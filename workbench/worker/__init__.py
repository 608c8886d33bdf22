"""The TensorRT worker process and its client.

TensorRT work (parse, build, run, profile) runs in a separate process so that a TensorRT crash
or a 30-minute build never takes the notebook kernel down, builds can be cancelled and
time-limited, and TensorRT can live in another interpreter (``WORKBENCH_TRT_PYTHON``, e.g. the
GPU rig's Python 3.9). Everything under this package imports only the stdlib, numpy, the
TensorRT module and Polygraphy, and keeps Python 3.9 syntax.

Protocol (JSON lines): request ``{"id", "op", "args"}`` on stdin; the worker answers with
``{"id", "event": "progress"|"log"}`` events and exactly one ``{"id", "event": "result"}`` or
``{"id", "event": "error"}``. ``{"op": "cancel", "id": X}`` asks request X to stop.
"""
