"""A method in tables: its label and its row, both read from the recipe files (``label``, ``table_order``)."""

import functools
from typing import Optional, Tuple

from wildmerge.errors import ConfigError
from wildmerge.recipes.method import list_method_recipes, load_method_recipe

# the baselines that are not merges (``eval/composition.py``): no recipe file names them
COMPOSITION_LABELS = {"ensemble": "Ensemble", "composer": "Composer"}


@functools.lru_cache(maxsize=None)  # one YAML read per method, not per model (545 models: 7 s -> 0)
def method_label(method: Optional[str]) -> str:
    """The label of the paper's tables: the recipe's ``label``, a composition's, else the name itself (a recipe
    that is no longer shipped)."""
    if not method:
        return ""
    if method in COMPOSITION_LABELS:
        return COMPOSITION_LABELS[method]
    try:
        return load_method_recipe(method).label
    except ConfigError:
        return method


@functools.lru_cache(maxsize=None)
def table_order() -> Tuple[str, ...]:
    """The methods of the paper's tables in their order: the shipped recipes with a ``table_order``."""
    recipes = [load_method_recipe(name) for name in list_method_recipes()]
    return tuple(r.name for r in sorted((r for r in recipes if r.table_order is not None),
                                        key=lambda r: r.table_order))


def display_rank(method) -> int:
    """Where a method's rows go in tables: the paper's order, every other method after it."""
    order = table_order()
    return order.index(method) if method in order else len(order)
