"""trt-workbench: turn ONNX models into fast, correct TensorRT engines.

This package is the engine room: pure Python, no UI imports. Importing it is cheap (heavy
modules such as onnx, onnxruntime and tensorrt are imported lazily by the modules that use
them), and the syntax stays Python 3.9 compatible because the worker process
(``workbench.worker``) runs under the GPU rig's Python 3.9.
"""
from __future__ import annotations

__version__ = "0.1.0"

from workbench.errors import Finding, WorkbenchError  # noqa: E402  (both stdlib-only)

__all__ = ["Finding", "WorkbenchError", "__version__"]
