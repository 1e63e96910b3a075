"""Method recipes: a mergekit recipe without its models, filled in with a base and a list of experts.

``merge_recipes/methods/<name>.yml`` holds one method with the paper's hyperparameters::

    name: ta                       # file name, used on the command line and in merge ids
    label: TA                      # as in the paper's tables
    min_experts: 1                 # optional
    recipe: {merge_method: task_arithmetic, parameters: {lambda: 1.0, normalize: true}, dtype: float32}
    model_parameters: {weight: 1.0}   # given to every expert

``render_recipe`` turns it into a complete mergekit YAML dict that the stock ``mergekit-yaml`` runs. This module is
the one home of a method recipe: loading, defaults, the hyperparameter split, merge ids, labels and display order.
"""

import copy
import functools
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.named_files import find_named_file, list_names, read_yaml

# recipe names from before papers were named by authors and year: they load the renamed file but keep the old name,
# so the merge ids (and the model folders) of runs planned with them stay the same
ALIASES = {f"s001_{m}": f"zhou2026_{m}" for m in ("ta", "ties", "dare", "wa")}


class MethodRecipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    recipe: Dict[str, Any]
    model_parameters: Dict[str, Any] = {}
    min_experts: int = 1
    calibration: Optional[Dict[str, Any]] = None  # layer-wise methods (CoM, RegMean): default per-expert data


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
    return method


def _base_dtype(base: str) -> Optional[str]:
    config = Path(base) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text())
    return data.get("dtype") or data.get("torch_dtype")


def render_recipe(
    recipe: Union[str, MethodRecipe],
    base: str,
    experts: List[str],
    overrides: Optional[Dict[str, Any]] = None,
    model_overrides: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """A complete mergekit recipe: ``recipe`` applied to ``base`` and ``experts``.

    ``overrides`` update the top-level ``parameters`` (e.g. ``{"lambda": 0.5}``; a key of the recipe's
    ``calibration`` section, e.g. ``n_samples``, updates that section), ``model_overrides`` every expert's parameters
    (e.g. ``{"density": 0.3}``). The output dtype follows the base checkpoint's when it is
    a local folder (merging itself runs in the recipe's ``dtype``).
    """
    method = recipe if isinstance(recipe, MethodRecipe) else load_method_recipe(recipe)
    if len(experts) < method.min_experts:
        raise ConfigError(f"method {method.name!r} needs at least {method.min_experts} experts, got {len(experts)}")
    if len(set(experts)) != len(experts):
        raise ConfigError(f"duplicate experts in {experts}: each expert may appear once")
    out = copy.deepcopy(method.recipe)
    out["base_model"] = base
    calibration = {k: v for k, v in (overrides or {}).items() if k in (method.calibration or {})}
    overrides = {k: v for k, v in (overrides or {}).items() if k not in calibration}
    if overrides:
        out["parameters"] = {**out.get("parameters", {}), **overrides}
    per_model = {**method.model_parameters, **(model_overrides or {})}
    out["models"] = [{"model": e, "parameters": dict(per_model)} if per_model else {"model": e} for e in experts]
    if method.calibration is not None:
        out.setdefault("calibration", copy.deepcopy(method.calibration))
        out["calibration"].update(calibration)  # e.g. n_samples of Chain of Merges' Table 4 sweep
    if "out_dtype" not in out and (dtype := _base_dtype(base)):
        out["out_dtype"] = dtype
    return out


# --- a method in a plan: hyperparameters and merge ids ---------------------------------------------------------

PAPER_METHODS = ("ta", "ties", "model_stock", "tsv_m", "iso_c", "ta_sb", "ties_sb")


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text))


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return safe_name(v)


def load_methods(names) -> Dict[str, MethodRecipe]:
    """{name: recipe} in the order given (a recipe file's path works too); an unknown name fails with the list of
    valid ones."""
    return {n: load_method_recipe(n) for n in names}


def default_hparams(method) -> dict:
    """The recipe's parameters, per-expert parameters and calibration settings (layer-wise methods: ``n_samples``
    ...), each a hyperparameter a grid may sweep."""
    return {**(method.calibration or {}), **method.recipe.get("parameters", {}), **method.model_parameters}


def split_hparams(method, hparams: dict) -> tuple[dict, dict]:
    """(top-level parameters, per-expert parameters); an unknown key is an error naming the valid ones."""
    top, per = {}, {}
    valid = default_hparams(method)
    for k, v in hparams.items():
        if k not in valid:
            raise ConfigError(f"method {method.name!r} has no hyperparameter {k!r}{did_you_mean(k, valid)}; "
                              f"valid: {', '.join(valid)}")
        (per if k in method.model_parameters else top)[k] = v
    return top, per


def merge_id(method: str, subset_id: str, overrides: dict) -> str:
    suffix = "_".join(f"{safe_name(k)}-{_fmt(v)}" for k, v in sorted(overrides.items()))
    return f"{method}__{subset_id}" + (f"__{suffix}" if suffix else "")


# --- a method in tables: label and display order --------------------------------------------------------------

METHOD_ORDER = ["ta", "model_stock", "ties", "ta_sb", "ties_sb", "tsv_m", "iso_c", "iso_cts", "regmean", "com"]
# labels of methods whose recipe is no longer shipped, and of the baselines that are not merges (compositions)
LABELS = {"ta": "TA", "model_stock": "Model Stock", "ties": "TIES", "ta_sb": "TA+SB", "ties_sb": "TIES+SB",
          "tsv_m": "TSV-M", "iso_c": "Iso-C", "iso_cts": "Iso-CTS", "regmean": "RegMean", "com": "CoM",
          "ensemble": "Ensemble", "composer": "Composer"}


@functools.lru_cache(maxsize=None)  # one YAML read per method, not per model (545 models: 7 s -> 0)
def method_label(method: Optional[str]) -> str:
    """The label of the paper's tables: the recipe's ``label``, else a known one, else the name itself."""
    if not method:
        return ""
    try:
        return load_method_recipe(method).label
    except ConfigError:  # a method recipe that is no longer shipped
        return LABELS.get(method, method)


def display_rank(method: Optional[str]) -> int:
    """Where a method's rows go in tables: the paper's order, every other method after it."""
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
