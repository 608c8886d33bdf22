"""The recipe registry: every graph edit the workbench can apply, by name.

    from workbench.surgery.recipes import get_recipe, list_recipes
    applies, reason, nodes = get_recipe("fold_constants").precondition(proto)

Recipes are discovered like CLI verbs: every module of this package (every folder on its
`__path__`, except `base` and names starting with `_`) is imported once, on first use, and
registers its recipes with `@register`. Adding a recipe is adding a module; nothing else
imports it by name.
"""
from __future__ import annotations

import importlib
import os
from typing import Dict, List, Optional

from workbench.core.errors import WorkbenchError
from workbench.surgery.recipes.base import (REGISTRY, Param, Precondition, Proposal,
                                            ProposeContext, Recipe)

__all__ = ["Param", "Precondition", "Proposal", "ProposeContext", "Recipe", "get_recipe",
           "list_recipes", "all_recipes", "discover", "REGISTRY"]

_discovered: Dict[str, bool] = {}


def discover(package: str = __name__, paths: Optional[List[str]] = None) -> List[str]:
    """Import every recipe module of `package` (once); returns the module names imported now.

    `paths` defaults to the package's `__path__`, so a folder appended there (or another
    package named here) contributes recipes without any other change."""
    pkg = importlib.import_module(package)
    found = []
    for here in (paths if paths is not None else list(getattr(pkg, "__path__", []))):
        try:
            files = sorted(os.listdir(here))  # (pkgutil would import inspect: 5 ms)
        except OSError:
            continue
        for f in files:
            if not f.endswith(".py") or f.startswith("_") or f == "base.py":
                continue
            mod = f"{package}.{f[:-3]}"
            if not _discovered.get(mod):
                importlib.import_module(mod)
                _discovered[mod] = True
                found.append(mod)
    return found


def all_recipes() -> List[Recipe]:
    """Every registered recipe, in proposal order (priority, then name)."""
    discover()
    return sorted(REGISTRY.values(), key=lambda r: (r.priority, r.name))


def get_recipe(name: str) -> Recipe:
    discover()
    if name not in REGISTRY:
        raise WorkbenchError(f"unknown recipe '{name}'", field="recipe",
                             hint=f"recipes: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def recipe_cost(name: str) -> Optional[str]:
    """What a kept change of recipe `name` costs (`Recipe.cost`), None when nothing or unknown."""
    discover()
    r = REGISTRY.get(name)
    return r.cost if r is not None else None


def list_recipes() -> List[Dict]:
    discover()
    return [REGISTRY[k].describe() for k in sorted(REGISTRY)]
