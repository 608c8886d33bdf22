"""Engine builds: the build spec, the engine cache, orchestration through the worker, exports.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

import importlib
from typing import Any, Dict

_EXPORTS: Dict[str, str] = {
    'PRECISIONS': 'workbench.build.engine',
    'ROUTES': 'workbench.build.engine',
    'BACKENDS': 'workbench.build.engine',
    'CALIBRATE_METHODS': 'workbench.build.engine',
    'CACHE_SCHEMA': 'workbench.build.engine',
    'PathLike': 'workbench.build.engine',
    'Shape': 'workbench.build.engine',
    'BuildFailed': 'workbench.build.engine',
    'BuildCancelled': 'workbench.build.engine',
    'BuildTimeout': 'workbench.build.engine',
    'BuildConfig': 'workbench.build.engine',
    'BuildResult': 'workbench.build.engine',
    'backend_info': 'workbench.build.engine',
    'resolve_route': 'workbench.build.engine',
    'cache_key': 'workbench.build.engine',
    'build_engine': 'workbench.build.engine',
    'inspect_engine': 'workbench.build.engine',
    'MIGRATION': 'workbench.build.export',
    'migration_markdown': 'workbench.build.export',
    'trtexec_command': 'workbench.build.export',
    'config_from_trtexec': 'workbench.build.export',
    'polygraphy_command': 'workbench.build.export',
    'python_script': 'workbench.build.export',
    'export_for': 'workbench.build.export',
    'NameIndex': 'workbench.build.log',
    'findings_from_log': 'workbench.build.log',
    'memory_from_log': 'workbench.build.log',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
