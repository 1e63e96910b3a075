"""Method recipes: a mergekit recipe without its models, filled in with a base and a list of experts.

``merge_recipes/methods/<name>.yml`` holds one method with the paper's hyperparameters::

    name: ta                       # file name, used on the command line
    label: TA                      # as in the paper's tables
    min_experts: 1                 # optional
    recipe: {merge_method: task_arithmetic, parameters: {lambda: 1.0, normalize: true}, dtype: float32}
    model_parameters: {weight: 1.0}   # given to every expert

``render_recipe`` turns it into a complete mergekit YAML dict that the stock ``mergekit-yaml`` runs.
"""

import copy
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.paths import method_recipes_dir


class MethodRecipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str
    recipe: Dict[str, Any]
    model_parameters: Dict[str, Any] = {}
    min_experts: int = 1
    calibration: Optional[Dict[str, Any]] = None  # layer-wise methods (CoM, RegMean): default per-expert data


def list_method_recipes() -> List[str]:
    return sorted(p.stem for p in method_recipes_dir().glob("*.yml"))


def load_method_recipe(name_or_path: Union[str, Path]) -> MethodRecipe:
    path = Path(name_or_path)
    if not path.suffix:
        path = method_recipes_dir() / f"{name_or_path}.yml"
        if not path.is_file():
            valid = list_method_recipes()
            raise ConfigError(f"unknown method {str(name_or_path)!r}{did_you_mean(name_or_path, valid)}; "
                              f"valid methods: {', '.join(valid)}")
    try:
        return MethodRecipe.model_validate(yaml.safe_load(path.read_text()))
    except (ValidationError, yaml.YAMLError) as exc:
        raise ConfigError(f"method recipe {path} is invalid: {exc}") from None


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


def load_methods(names):
    """Method recipes by name; unknown names fail with the list of valid ones."""
    valid = list_method_recipes()
    out = {}
    for n in names:
        if n not in valid:
            raise ConfigError(f"unknown method {n!r}{did_you_mean(n, valid)}; valid methods: {', '.join(valid)}")
        out[n] = load_method_recipe(n)
    return out


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
