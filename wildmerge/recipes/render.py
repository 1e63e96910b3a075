"""A method recipe filled in with a base, experts and hyperparameters: the complete mergekit recipe.

``render_recipe`` is the whole recipe of a merge: which hyperparameter goes where (top-level, per expert,
calibration). ``render_merge`` is a run's merge: that recipe plus what the run knows about its models, the tokenizer
plan for experts with another tokenizer and each expert's own data for the layer-wise methods, rendered once per
merge, with the hash by which a run folder recognises a finished merge.
"""

import copy
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from wildmerge.errors import ConfigError
from wildmerge.recipes.method import MethodRecipe, load_method_recipe, split_hparams


def _base_dtype(base: str) -> Optional[str]:
    config = Path(base) / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text())
    return data.get("dtype") or data.get("torch_dtype")


def render_recipe(recipe: Union[str, MethodRecipe], base: str, experts: List[str],
                  hparams: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A complete mergekit recipe: ``recipe`` applied to ``base`` and ``experts`` (paths, or names for an in-memory
    merge) with ``hparams`` (e.g. ``{"lambda": 0.5, "density": 0.3, "n_samples": 5}``) replacing the recipe's own.

    The output dtype follows the base checkpoint's when it is a local folder (merging itself runs in the recipe's
    ``dtype``)."""
    method = recipe if isinstance(recipe, MethodRecipe) else load_method_recipe(recipe)
    if len(experts) < method.min_experts:
        raise ConfigError(f"method {method.name!r} needs at least {method.min_experts} experts, got {len(experts)}")
    if len(set(experts)) != len(experts):
        raise ConfigError(f"duplicate experts in {experts}: each expert may appear once")
    top, per, calibration = split_hparams(method, hparams or {})
    out = copy.deepcopy(method.recipe)
    out["base_model"] = base
    if top:
        out["parameters"] = {**out.get("parameters", {}), **top}
    per_model = {**method.model_parameters, **per}
    out["models"] = [{"model": e, "parameters": dict(per_model)} if per_model else {"model": e} for e in experts]
    if method.calibration is not None:
        out.setdefault("calibration", copy.deepcopy(method.calibration))
        out["calibration"].update(calibration)  # e.g. n_samples of Chain of Merges' Table 4 sweep
    if "out_dtype" not in out and (dtype := _base_dtype(base)):
        out["out_dtype"] = dtype
    return out


# --- a run's merge ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpertText:
    """A layer-wise merge's expert whose own text goes into the recipe (``models[index].calibration``)."""

    index: int
    name: str
    path: str
    source: Any  # expert_data.schema.Source, or None: the expert's data has no text


@dataclass(frozen=True)
class RenderedMerge:
    """One merge of a run: the recipe on this machine's paths, the hash of its machine-independent form (names for
    paths, data settings for cache files) and the run-log line of the tokenizer plan (None: nothing to say)."""

    recipe: Dict[str, Any]  # without the layer-wise experts' data: ``materialised()`` adds it
    digest: str
    note: Optional[str]
    texts: Tuple[ExpertText, ...] = ()
    generated_dir: Optional[str] = None
    swept_samples: bool = False  # the plan sets n_samples (Chain of Merges' Table 4)

    def materialised(self) -> Dict[str, Any]:
        """The recipe to merge: each layer-wise expert's data as a ``calibration:`` entry; text it generates
        (``generate``) is drawn once per run into ``generated_dir``."""
        from wildmerge.expert_data.recipe import materialise, recipe_entry

        recipe = copy.deepcopy(self.recipe)
        for t in self.texts:
            entry = None
            if t.source is not None:
                entry = recipe_entry(materialise(t.source, model_path=t.path, expert=t.name,
                                                 generated_dir=self.generated_dir))
                if t.source.kind == "generate" and not self.swept_samples:
                    entry.setdefault("n_samples", None)  # use what was generated (up to the method's default count)
            recipe["models"][t.index]["calibration"] = entry
        return recipe


def render_merge(method: MethodRecipe, models, names: List[str], hparams: Dict[str, Any],
                 generated_dir=None) -> RenderedMerge:
    """The merge of experts ``names`` of ``models`` (``run.PoolModels``) with ``hparams``.

    Experts whose tokenizer is not the base's are aligned to it (``recipes/tokenizer.py``; RegMean / CoM with a
    resized vocabulary are refused here, before any merge); the layer-wise methods read each expert's own data
    (its ``data:`` in the pool, read through ``wildmerge.expert_data``)."""
    from wildmerge.expert_data.recipe import text_source
    from wildmerge.expert_data.schema import parse_data
    from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS
    from wildmerge.recipes.tokenizer import plan_tokenizer

    experts = models.by_name()
    recipe = render_recipe(method, models.base.path, [experts[n].path for n in names], hparams)
    layerwise = recipe["merge_method"] in LAYERWISE_METHODS
    keys, note = plan_tokenizer(models.base.path, {n: experts[n].path for n in names}, layerwise, method.name)
    recipe.update(keys)
    texts = tuple(ExpertText(i, n, experts[n].path, text_source(parse_data(experts[n].calibration,
                                                                           f"data of {n!r}")))
                  for i, n in enumerate(names) if layerwise and experts[n].calibration)
    logical = copy.deepcopy(recipe)
    logical["base_model"] = "base"
    for m, name in zip(logical["models"], names):
        m["model"] = name
    for t in texts:  # the settings, not this machine's cache file
        logical["models"][t.index]["calibration"] = None if t.source is None else t.source.model_dump(exclude_none=True)
    digest = hashlib.sha256(json.dumps(logical, sort_keys=True).encode()).hexdigest()
    return RenderedMerge(recipe, digest, note, texts, None if generated_dir is None else str(generated_dir),
                         "n_samples" in hparams)
