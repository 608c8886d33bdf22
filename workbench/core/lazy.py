"""Lazy package exports (PEP 562), one implementation for every package `__init__`.

A package names what it exports, module by module, and takes its `__getattr__`, `__dir__` and
`__all__` from `exports`:

    __getattr__, __dir__, __all__ = lazy.exports(__name__, {
        '.spec': ('BuildConfig', 'resolve_route'),
        'workbench.core.trtlog': ('NameIndex',),
    })

Importing the package costs nothing until a name is used (the CLI reaches its worker fork
without dataclasses/numpy/onnx), and a resolved name is cached on the package so the lookup
runs once. Type checkers see the names through `__getattr__` (as `Any`)."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

Exports = Tuple[Callable[[str], Any], Callable[[], List[str]], List[str]]


def exports(package: str, modules: Dict[str, Sequence[str]], live: Iterable[str] = ()) -> Exports:
    """`__getattr__`, `__dir__` and `__all__` for `package`, which exports the names listed
    under each module (a leading dot: a module of the package). Names in `live` are looked up
    every time (they follow state that can change, e.g. the precision table)."""
    where: Dict[str, str] = {}
    for module, names in modules.items():
        absolute = importlib.util.resolve_name(module, package)
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} is exported from both {where[name]} "
                                 f"and {absolute}; list it under one module")
            where[name] = absolute
    live = frozenset(live)

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        if name not in live:
            setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, sorted(where)
