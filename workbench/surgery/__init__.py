"""Graph surgery: recipes, changes verified against onnxruntime, the fix history.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

import importlib
from typing import Any, Dict

_EXPORTS: Dict[str, str] = {
    'Change': 'workbench.surgery.changes',
    'apply_recipe': 'workbench.surgery.changes',
    'prepare_change': 'workbench.surgery.changes',
    'judge': 'workbench.surgery.changes',
    'diff_models': 'workbench.surgery.changes',
    'Proposal': 'workbench.surgery.changes',
    'propose': 'workbench.surgery.changes',
    'AutoFixResult': 'workbench.surgery.changes',
    'default_checker': 'workbench.surgery.changes',
    'auto_fix': 'workbench.surgery.changes',
    'parse_recipe_arg': 'workbench.surgery.changes',
    'KIND': 'workbench.surgery.history',
    'BLOB_MIN_BYTES': 'workbench.surgery.history',
    'store_version': 'workbench.surgery.history',
    'History': 'workbench.surgery.history',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
