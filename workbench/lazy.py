"""Lazy package exports (PEP 562), one implementation for every package `__init__`.

A package lists `name -> module` in `_EXPORTS` and sets
`__getattr__ = lazy_exports(__name__, _EXPORTS)`: importing the package costs nothing until a
name is used (the CLI reaches its worker fork without dataclasses/numpy/onnx), and a resolved
name is cached on the package so the lookup runs once."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, Iterable


def lazy_exports(package: str, exports: Dict[str, str],
                 live: Iterable[str] = ()) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package` resolving the names in `exports`; names in
    `live` are looked up every time (they follow state that can change, e.g. the precision
    table)."""
    live = frozenset(live)

    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(mod), name)
        if name not in live:
            setattr(sys.modules[package], name, value)
        return value

    return __getattr__
