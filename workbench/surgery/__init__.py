"""Graph surgery: self-describing recipes, changes verified against onnxruntime, the fix
session (check -> propose -> apply -> verify -> re-check) and the version history."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.changes': ('Change', 'apply_recipe', 'apply_in_history', 'prepare_change', 'judge',
                 'verify_models', 'diff_models', 'parse_recipe_arg'),
    '.recipes': ('Proposal',),
    '.propose': ('propose', 'advise'),
    '.session': ('FixSession', 'AutoFixResult', 'default_checker', 'auto_fix'),
    '.history': ('KIND', 'BLOB_MIN_BYTES', 'store_version', 'History', 'replay', 'history_lines',
                 'history_rows'),
    '.split': ('split_model', 'SplitResult'),
})
