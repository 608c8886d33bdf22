"""Will TensorRT take this graph? Static rules and the real parser, as Findings.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'BACKEND_CHOICES': 'workbench.support.checker',
    'DEFAULT_DOMAINS': 'workbench.support.checker',
    'INT32_MAX': 'workbench.support.checker',
    'SupportReport': 'workbench.support.checker',
    'CHECKS': 'workbench.support.checker',
    'static_check': 'workbench.support.checker',
    'check': 'workbench.support.checker',
    'check_files': 'workbench.support.checker',
    'MATRIX_SOURCE': 'workbench.support.rules',
    'MATRIX_UNSUPPORTED': 'workbench.support.rules',
    'MATRIX_SUPPORTED': 'workbench.support.rules',
    'MATRIX_DTYPES': 'workbench.support.rules',
    'PLUGIN_HINT': 'workbench.support.rules',
    'RULES': 'workbench.support.rules',
    'GRAPH_RULES': 'workbench.support.rules',
    'BACKENDS': 'workbench.support.rules',
    'BACKEND_ALIASES': 'workbench.support.rules',
    'DISAGREEMENTS': 'workbench.support.rules',
    'backend_table': 'workbench.support.rules',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
