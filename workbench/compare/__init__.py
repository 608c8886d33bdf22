"""Where precision is lost: layer-wise comparison, run results, the FP32-exclusion search.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

import importlib
from typing import Any, Dict

_EXPORTS: Dict[str, str] = {
    'Feed': 'workbench.compare.layer_compare',
    'SENTINEL': 'workbench.compare.layer_compare',
    'has_low_float': 'workbench.compare.layer_compare',
    'run_all': 'workbench.compare.layer_compare',
    'TensorError': 'workbench.compare.layer_compare',
    'tensor_error': 'workbench.compare.layer_compare',
    'LayerwiseReport': 'workbench.compare.layer_compare',
    'layerwise': 'workbench.compare.layer_compare',
    'save_run_results': 'workbench.compare.layer_compare',
    'load_run_results': 'workbench.compare.layer_compare',
    'ExclusionSearch': 'workbench.compare.layer_compare',
    'find_exclusions': 'workbench.compare.layer_compare',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
