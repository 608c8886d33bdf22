"""The packages' lazy exports (`workbench.core.lazy.exports`): names resolve from their modules on
first use, are cached (unless live), show in `dir()` and `__all__`, and a name listed twice is
refused."""
import importlib
import subprocess
import sys

import pytest

from workbench.core import lazy

PACKAGES = ['engines', 'compare', 'precision', 'render', 'support', 'surgery', 'matrix', 'planner']


def test_package_import_loads_no_heavy_library():
    code = ("import sys, workbench.engines, workbench.compare, workbench.precision, workbench.surgery;"
            "print(sorted(m for m in ('numpy', 'onnx', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == '[]'


@pytest.mark.parametrize('name', PACKAGES)
def test_every_exported_name_resolves_and_shows_in_dir(name):
    package = importlib.import_module(f'workbench.{name}')
    assert package.__all__ and package.__all__ == sorted(package.__all__)
    for export in package.__all__:
        getattr(package, export)
        assert export in dir(package)


def test_from_import_gives_the_defining_module_object():
    from workbench.compare import find_exclusions
    from workbench.compare.layer_compare import find_exclusions as defined
    from workbench.precision import Shape
    from workbench.precision.profiles import Shape as profile_shape
    assert find_exclusions is defined and Shape is profile_shape


def test_resolved_name_is_cached_and_live_name_is_not():
    import workbench.engines as build
    import workbench.engines.spec as spec
    assert build.BuildConfig is spec.BuildConfig
    assert 'BuildConfig' in vars(build)
    assert build.PRECISIONS == spec.PRECISIONS
    assert 'PRECISIONS' not in vars(build)


def test_relative_and_absolute_modules_and_unknown_name():
    getattr_, dir_, all_ = lazy.exports('workbench.engines', {
        '.spec': ('resolve_route',), 'workbench.core.trtlog': ('NameIndex',)})
    import workbench.engines.spec as spec
    import workbench.core.trtlog as trtlog
    assert all_ == ['NameIndex', 'resolve_route']
    assert getattr_('resolve_route') is spec.resolve_route
    assert getattr_('NameIndex') is trtlog.NameIndex
    assert {'NameIndex', 'resolve_route'} <= set(dir_())
    with pytest.raises(AttributeError, match="'workbench.engines' has no attribute 'absent'"):
        getattr_('absent')


def test_name_listed_under_two_modules_is_refused():
    with pytest.raises(ValueError, match="'Shape' is exported from both workbench.engines.spec and "
                                         "workbench.precision.profiles"):
        lazy.exports('workbench.engines', {'.spec': ('Shape',), 'workbench.precision.profiles': ('Shape',)})
