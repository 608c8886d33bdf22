"""The precision planner: the fastest precision plan within an accuracy budget on held-back
samples, as ONNX node lists (`search.plan`); regions TensorRT would fuse (`regions`)."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.search': ('Plan', 'plan', 'split_samples'),
    '.regions': ('graph_regions', 'engine_regions'),
})
