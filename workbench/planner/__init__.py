"""The precision planner: the fastest precision plan within an accuracy budget on held-back
samples, as ONNX node lists (`search.plan`); regions TensorRT would fuse (`regions`)."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'Plan': 'workbench.planner.search',
    'plan': 'workbench.planner.search',
    'split_samples': 'workbench.planner.search',
    'graph_regions': 'workbench.planner.regions',
    'engine_regions': 'workbench.planner.regions',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
