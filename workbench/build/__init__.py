"""Engine builds, one module per job: spec (BuildConfig, profiles, route), result, cache (keys,
hashes, cached builds), card (engine cards: what an engine is, where it runs), engine
(orchestration through the worker, run as the stages in
workbench.build.stages), export, triton (model repository), log.

Public names resolve lazily (PEP 562): importing the package costs nothing until a name is
used, which keeps CLI start-up lean."""
from __future__ import annotations

from typing import Dict

from workbench.lazy import lazy_exports

_EXPORTS: Dict[str, str] = {
    'PRECISIONS': 'workbench.build.spec',
    'ROUTES': 'workbench.build.spec',
    'BACKENDS': 'workbench.build.spec',
    'CALIBRATE_METHODS': 'workbench.build.spec',
    'SPEC_FIELDS': 'workbench.build.spec',
    'Shape': 'workbench.build.spec',
    'BuildConfig': 'workbench.build.spec',
    'resolve_route': 'workbench.build.spec',
    'BuildResult': 'workbench.build.result',
    'CACHE_SCHEMA': 'workbench.build.cache',
    'ModelRef': 'workbench.build.cache',
    'cache_key': 'workbench.build.cache',
    'hash_calibration': 'workbench.build.cache',
    'PathLike': 'workbench.build.engine',
    'BuildFailed': 'workbench.build.engine',
    'BuildCancelled': 'workbench.build.engine',
    'BuildTimeout': 'workbench.build.engine',
    'backend_info': 'workbench.build.engine',
    'build_engine': 'workbench.build.engine',
    'inspect_engine': 'workbench.build.engine',
    'MIGRATION': 'workbench.build.export',
    'migration_markdown': 'workbench.build.export',
    'migration_html': 'workbench.build.export',
    'parse_mem': 'workbench.build.export',
    'trtexec_command': 'workbench.build.export',
    'config_from_trtexec': 'workbench.build.export',
    'polygraphy_command': 'workbench.build.export',
    'python_script': 'workbench.build.export',
    'export_for': 'workbench.build.export',
    'read_card': 'workbench.build.card',
    'write_card': 'workbench.build.card',
    'check_engine': 'workbench.build.card',
    'card_path': 'workbench.build.card',
    'export_triton': 'workbench.build.triton',
    'triton_config': 'workbench.build.triton',
    'TritonModel': 'workbench.build.triton',
    'NameIndex': 'workbench.trtlog',
    'findings_from_log': 'workbench.trtlog',
    'memory_from_log': 'workbench.trtlog',
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS, live=("PRECISIONS",))
