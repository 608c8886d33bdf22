"""Graph surgery: self-describing recipes, changes verified against onnxruntime, the fix
session (check -> propose -> apply -> verify -> re-check) and the version history.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'Change': 'workbench.surgery.changes',
    'apply_recipe': 'workbench.surgery.changes',
    'apply_in_history': 'workbench.surgery.changes',
    'prepare_change': 'workbench.surgery.changes',
    'judge': 'workbench.surgery.changes',
    'verify_models': 'workbench.surgery.changes',
    'diff_models': 'workbench.surgery.changes',
    'parse_recipe_arg': 'workbench.surgery.changes',
    'Proposal': 'workbench.surgery.recipes',
    'propose': 'workbench.surgery.propose',
    'advise': 'workbench.surgery.propose',
    'FixSession': 'workbench.surgery.session',
    'AutoFixResult': 'workbench.surgery.session',
    'default_checker': 'workbench.surgery.session',
    'auto_fix': 'workbench.surgery.session',
    'KIND': 'workbench.surgery.history',
    'BLOB_MIN_BYTES': 'workbench.surgery.history',
    'store_version': 'workbench.surgery.history',
    'History': 'workbench.surgery.history',
    'replay': 'workbench.surgery.history',
    'history_lines': 'workbench.surgery.history',
    'history_rows': 'workbench.surgery.history',
    'split_model': 'workbench.surgery.split',
    'SplitResult': 'workbench.surgery.split',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
