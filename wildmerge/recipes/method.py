"""A method recipe: a mergekit recipe without its models, the hyperparameters a plan may vary, and merge ids.

``merge_recipes/methods/<name>.yml`` holds one method with the paper's hyperparameters::

    name: ta                       # file name, used on the command line and in merge ids
    label: TA                      # as in the paper's tables
    table_order: 1                 # optional: its row in the paper's tables (methods without one come after)
    min_experts: 1                 # optional
    recipe: {merge_method: task_arithmetic, parameters: {lambda: 1.0, normalize: true}, dtype: float32}
    model_parameters: {weight: 1.0}   # given to every expert
    cost: {factors: {cpu: {value: 3.8, source: ...}}}   # optional: the dry run's measured facts (MethodCost)
"""

import functools
import math
import re
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.named_files import find_named_file, list_names, read_yaml

# recipe names from before papers were named by authors and year: they load the renamed file but keep the old name,
# so the merge ids (and the model folders) of runs planned with them stay the same
ALIASES = {f"s001_{m}": f"zhou2026_{m}" for m in ("ta", "ties", "dare", "wa")}

PAPER_METHODS = ("ta", "ties", "model_stock", "tsv_m", "iso_c", "ta_sb", "ties_sb")  # `sample`'s default methods


class CostFactor(BaseModel):
    """The method's merge seconds per parameter read as a multiple of task arithmetic's on one device, and where it
    was measured (the dry run's cost plan, ``planning/cost.py``)."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(gt=0)
    source: str = Field(min_length=1)


class DataPassCost(BaseModel):
    """A method that reads data: forward-pass equivalents per calibration text of each expert (a backward pass
    counts 2), at the recipe's defaults, and texts per expert when the merge does not set ``n_samples``."""

    model_config = ConfigDict(extra="forbid")

    passes: float = Field(gt=0)
    texts: int = Field(gt=0)
    source: str = Field(min_length=1)


class MethodCost(BaseModel):
    """What a merge with this method costs beyond task arithmetic's read: measured factors per device (cpu, cuda;
    a device not listed counts 1) and the data passes of a method that reads data."""

    model_config = ConfigDict(extra="forbid")

    factors: Dict[Literal["cpu", "cuda"], CostFactor] = {}
    data_passes: Optional[DataPassCost] = None


class MethodRecipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    table_order: Optional[int] = None
    recipe: Dict[str, Any]
    model_parameters: Dict[str, Any] = {}
    min_experts: int = 1
    calibration: Optional[Dict[str, Any]] = None  # layer-wise methods (CoM, RegMean): default per-expert data
    cost: Optional[MethodCost] = Field(default=None, exclude=True)  # the dry run's facts; never in a record


@functools.cache
def method_costs() -> Dict[str, MethodCost]:
    """{shipped method: its ``cost:``} of the recipes that state one (read once; the cost plan's method facts)."""
    out = {}
    for name in list_method_recipes():
        path = find_named_file("methods", name, "method")
        data = (read_yaml(path, "method recipe") or {}).get("cost")
        if data is not None:
            try:
                out[name] = MethodCost.model_validate(data)
            except ValidationError as exc:
                raise ConfigError(f"method recipe {path}: cost is invalid: {exc}") from None
    return out


def list_method_recipes() -> List[str]:
    """The shipped recipes by their current names (aliases are not listed)."""
    return list_names("methods")


def load_method_recipe(name_or_path: Union[str, Path]) -> MethodRecipe:
    """A shipped recipe by name (an old name in ``ALIASES`` keeps that name) or a recipe file by path."""
    path = find_named_file("methods", name_or_path, "method", ALIASES)
    try:
        method = MethodRecipe.model_validate(read_yaml(path, "method recipe"))
    except ValidationError as exc:
        raise ConfigError(f"method recipe {path} is invalid: {exc}") from None
    if str(name_or_path) in ALIASES:
        method.name = str(name_or_path)
    check_finite(method.name, default_hparams(method), f"method recipe {path}")
    return method


def check_finite(method: str, hparams: Dict[str, Any], where: str) -> None:
    """NaN and infinities never pass as a hyperparameter, whichever method reads it (mergekit's own methods
    included, whose ranges wildmerge does not declare): one line naming where, the method, the parameter and the
    value, before anything is merged. The one check of a recipe's values and of every sweep or grid point."""
    for key, value in hparams.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is not None:
            raise ConfigError(f"{where}: {method}: parameter {key!r} = {bad} is not a finite number; give a finite "
                              f"value")


def load_methods(names) -> Dict[str, MethodRecipe]:
    """{name: recipe} in the order given (a recipe file's path works too); an unknown name fails with the list of
    valid ones."""
    return {n: load_method_recipe(n) for n in names}


# --- a method in a plan: hyperparameters and merge ids ---------------------------------------------------------


def default_hparams(method: MethodRecipe) -> dict:
    """The recipe's parameters, per-expert parameters and calibration settings (layer-wise methods: ``n_samples``
    ...), each a hyperparameter a sweep may vary."""
    return {**(method.calibration or {}), **method.recipe.get("parameters", {}), **method.model_parameters}


def check_hparams(method: MethodRecipe, hparams: dict) -> None:
    """A key the recipe does not state is an error naming the valid ones (plans and sweeps vary stated ones only)."""
    valid = default_hparams(method)
    for k in hparams:
        if k not in valid:
            raise ConfigError(f"method {method.name!r} has no hyperparameter {k!r}{did_you_mean(k, valid)}; "
                              f"valid: {', '.join(valid)}")


def split_hparams(method: MethodRecipe, hparams: Dict[str, Any]) -> Tuple[dict, dict, dict]:
    """(top-level parameters, per-expert parameters, calibration settings): a key the recipe gives every expert
    goes to every expert, a key of its ``calibration`` section there, any other key to the top-level parameters."""
    top, per, calibration = {}, {}, {}
    for k, v in hparams.items():
        where = per if k in method.model_parameters else calibration if k in (method.calibration or {}) else top
        where[k] = v
    return top, per, calibration


def with_hparams(method: MethodRecipe, hparams: Dict[str, Any]) -> MethodRecipe:
    """The recipe with ``hparams`` as its own settings (a tuned method: its merges render them by default)."""
    top, per, calibration = split_hparams(method, hparams)
    recipe = {**method.recipe, "parameters": {**method.recipe.get("parameters", {}), **top}}
    update = {"recipe": recipe, "model_parameters": {**method.model_parameters, **per}}
    if calibration:
        update["calibration"] = {**method.calibration, **calibration}
    return method.model_copy(update=update)


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text))


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return safe_name(v)


def merge_id(method: str, subset_id: str, overrides: dict) -> str:
    suffix = "_".join(f"{safe_name(k)}-{_fmt(v)}" for k, v in sorted(overrides.items()))
    return f"{method}__{subset_id}" + (f"__{suffix}" if suffix else "")
