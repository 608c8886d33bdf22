"""trt-workbench: turn ONNX models into fast, correct TensorRT engines.

This package is the engine room: pure Python, no UI imports. Importing it is cheap (heavy
modules such as onnx, onnxruntime and tensorrt are imported lazily by the modules that use
them), and the syntax stays Python 3.9 compatible because the worker process
(``workbench.worker``) runs under the GPU rig's Python 3.9.
"""
from __future__ import annotations

from workbench.core.version import __version__  # noqa: F401

__all__ = ["Finding", "WorkbenchError", "__version__", "plan"]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """`workbench.Finding` / `workbench.WorkbenchError` on first use: the worker process
    imports `workbench.worker` and should not pay for dataclasses and pathlib at start-up."""
    if name in ("Finding", "WorkbenchError"):
        from workbench.core import errors

        return getattr(errors, name)
    if name == "plan":  # the precision planner, `workbench.planner.plan`: the package's
        # public entry point re-exported on first use (the root is no layer; resolved by name
        # so importing `workbench` never loads it)
        import importlib

        return importlib.import_module("workbench.planner.search").plan
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
