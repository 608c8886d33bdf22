"""The recipe registry: every graph edit the workbench can apply, by name.

    from workbench.surgery.recipes import get_recipe, list_recipes
    applies, reason, nodes = get_recipe("fold_constants").precondition(proto)
"""
from __future__ import annotations

from typing import Dict, List

from workbench.errors import WorkbenchError
from workbench.surgery.recipes.base import REGISTRY, Param, Precondition, Recipe, as_proto
from workbench.surgery.recipes import cleanup as _cleanup  # noqa: F401  (registers)
from workbench.surgery.recipes import decompose as _decompose  # noqa: F401
from workbench.surgery.recipes import plugins as _plugins  # noqa: F401
from workbench.surgery.recipes import qdq as _qdq  # noqa: F401

__all__ = ["Param", "Precondition", "Recipe", "get_recipe", "list_recipes", "REGISTRY", "as_proto"]


def get_recipe(name: str) -> Recipe:
    if name not in REGISTRY:
        raise WorkbenchError(f"unknown recipe '{name}'", field="recipe",
                             hint=f"recipes: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def list_recipes() -> List[Dict]:
    return [REGISTRY[k].describe() for k in sorted(REGISTRY)]
