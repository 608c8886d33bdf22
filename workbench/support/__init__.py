"""Will TensorRT take this graph? Static rules and the real parser, as Findings."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.checker': ('BACKEND_CHOICES', 'DEFAULT_DOMAINS', 'INT32_MAX', 'SupportReport', 'CHECKS',
                 'static_check', 'check', 'check_files'),
    '.rules': ('MATRIX_SOURCE', 'MATRIX_UNSUPPORTED', 'MATRIX_SUPPORTED', 'MATRIX_DTYPES',
               'PLUGIN_HINT', 'RULES', 'GRAPH_RULES', 'BACKENDS', 'BACKEND_ALIASES',
               'DISAGREEMENTS', 'backend_table'),
})
