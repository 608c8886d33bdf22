"""Where the time goes in a TensorRT engine, mapped back to the ONNX graph."""
from __future__ import annotations
