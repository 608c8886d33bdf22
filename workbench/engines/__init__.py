"""Engine builds, one module per job: spec (BuildConfig, profiles, route), result, cache (keys,
hashes, cached builds), card (engine cards: what an engine is, where it runs), engine
(orchestration through the worker, run as the stages in workbench.engines.stages), options
(one object per build option), export, triton (model repository), log."""
from __future__ import annotations

from workbench.core import lazy

__getattr__, __dir__, __all__ = lazy.exports(__name__, {
    '.spec': ('PRECISIONS', 'ROUTES', 'BACKENDS', 'CALIBRATE_METHODS', 'SPEC_FIELDS', 'Shape',
              'BuildConfig', 'resolve_route'),
    '.result': ('BuildResult',),
    '.cache': ('CACHE_SCHEMA', 'cache_key', 'hash_calibration'),
    '.engine': ('PathLike', 'BuildFailed', 'BuildCancelled', 'BuildTimeout', 'backend_info',
                'build_engine', 'inspect_engine'),
    '.export': ('MIGRATION', 'migration_markdown', 'migration_html', 'parse_mem', 'trtexec_command',
                'config_from_trtexec', 'polygraphy_command', 'python_script', 'export_for'),
    '.card': ('read_card', 'write_card', 'check_engine', 'card_path'),
    '.triton': ('export_triton', 'triton_config', 'TritonModel'),
    'workbench.core.trtlog': ('NameIndex', 'findings_from_log', 'memory_from_log'),
}, live=('PRECISIONS',))
