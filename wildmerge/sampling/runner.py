"""Execute the merges of a plan through mergekit, resumably.

Each merged model is built in a temporary sibling and renamed into place (``wildmerge.atomic.atomic_dir``), with
its ``recipe.yml`` and ``merge_info.json`` inside. A folder whose ``merge_info.json`` records the same recipe is
done and skipped; anything else at that path (a folder from another recipe, a hand-damaged one) is merged again.
"""

import hashlib
import json
import time
from pathlib import Path

import yaml

from wildmerge.atomic import atomic_dir, clean_stale_tmp
from wildmerge.plugins.layerwise_methods import LAYERWISE_METHODS
from wildmerge.run import RECIPE, MergeInfo, PlanEntry, PoolModels, read_merge_info, write_merge_info
from wildmerge.sampling.model_card import write_card
from wildmerge.sampling.plan import split_hparams

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def render(entry: PlanEntry, models: PoolModels, method) -> tuple[dict, str]:
    """(mergekit recipe dict with this machine's paths, its hash over names instead of paths)."""
    from wildmerge.plugins.recipes import render_recipe

    experts = models.by_name()
    top, per = split_hparams(method, entry.overrides)
    recipe = render_recipe(method, models.base.path, [experts[n].path for n in entry.experts],
                           overrides=top or None, model_overrides=per or None)
    if recipe["merge_method"] in LAYERWISE_METHODS:  # RegMean / CoM: each expert's own calibration data
        for m, name in zip(recipe["models"], entry.experts):
            if experts[name].calibration:
                m["calibration"] = experts[name].calibration
    logical = json.loads(json.dumps(recipe))  # deep copy; paths replaced by names for a machine-independent hash
    logical["base_model"] = "base"
    for m, name in zip(logical["models"], entry.experts):
        m["model"] = name
    digest = hashlib.sha256(json.dumps(logical, sort_keys=True).encode()).hexdigest()
    return recipe, digest


def is_done(path, digest: str) -> bool:
    info = read_merge_info(path)
    if info is None or info.recipe_sha256 != digest:
        return False
    return info.weights_pruned or any(Path(path).glob("*.safetensors"))


def prune_weights(path) -> None:
    """Remove a merged model's weights, keeping its recipe and info (the ``--keep-models none`` policy)."""
    path = Path(path)
    info = read_merge_info(path) or MergeInfo()
    write_merge_info(path, info.model_copy(update={"weights_pruned": True}))  # first: a kill mid-prune leaves 'done'
    for f in list(path.glob("*.safetensors")) + list(path.glob("*.safetensors.index.json")):
        f.unlink(missing_ok=True)


def _pruned(path) -> bool:
    info = read_merge_info(path)
    return bool(info and info.weights_pruned)


def recipe_text(entry: PlanEntry, recipe: dict, models: PoolModels) -> str:
    names = {models.base.path: f"base ({models.base.model})"}
    names.update({e.path: f"{e.name} ({e.model}" + (f"@{e.revision}" if e.revision else "") + ")"
                  for e in models.experts})
    head = [f"# wildmerge {entry.model_id}: {entry.label} of subset {entry.subset_id} (n = {entry.n})"]
    head += [f"#   {p} = {n}" for p, n in names.items() if p == recipe["base_model"]
             or any(m["model"] == p for m in recipe["models"])]
    return "\n".join(head) + "\n" + yaml.safe_dump(recipe, sort_keys=False)


def merge_options(models: PoolModels, device="cpu", allow_pickle=False, seed=0, **extra):
    """mergekit options: tokenizer copied when the base has one (so merges are evaluable), safe defaults."""
    from mergekit.options import MergeOptions

    has_tok = any((Path(models.base.path) / f).exists() for f in TOKENIZER_FILES)
    return MergeOptions(copy_tokenizer=has_tok, device=device, lazy_unpickle=allow_pickle, random_seed=seed,
                        quiet=True, trust_remote_code=False, allow_crimes=False, **extra)


def merge_one(entry: PlanEntry, recipe: dict, digest: str, text: str, options, models: PoolModels = None) -> float:
    """Run one mergekit merge into ``entry.path``; the folder appears complete or not at all, with a model card
    that names the pinned sources when ``models`` is given."""
    from importlib.metadata import version

    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge

    from wildmerge.plugins.entrypoint import wildmerge_checks

    start = time.perf_counter()
    with wildmerge_checks(strict_params=True), atomic_dir(entry.path) as tmp:
        run_merge(MergeConfiguration.model_validate(recipe), str(tmp), options=options, config_source=text)
        (Path(tmp) / RECIPE).write_text(text)
        if models is not None:
            write_card(tmp, entry, models, text)
        seconds = time.perf_counter() - start
        write_merge_info(tmp, MergeInfo(
            model_id=entry.model_id, method=entry.method, label=entry.label, n=entry.n, subset_id=entry.subset_id,
            hparams=entry.hparams, experts=entry.experts, recipe_sha256=digest, seconds=round(seconds, 3),
            mergekit=version("mergekit"), finished=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    return seconds


def run_plan(entries: list[PlanEntry], models: PoolModels, methods: dict, options, *, keep_models="all",
             after_each=None, progress=True) -> dict:
    """Merge every ``kind == "merge"`` entry not already done. ``after_each(entry)`` runs after each model is
    available (merged now or earlier), e.g. to evaluate it before ``keep_models="none"`` prunes its weights."""
    from tqdm.auto import tqdm

    from wildmerge.sampling.plan import load_methods

    merges = [e for e in entries if e.kind == "merge"]
    for parent in {str(Path(e.path).parent) for e in merges}:
        clean_stale_tmp(parent)
    methods = {**load_methods({e.method for e in merges} - set(methods)), **methods}
    stats = {"merged": 0, "skipped": 0, "redone": 0, "pruned": 0, "seconds": 0.0}
    bar = tqdm(merges, desc="merging", unit="merge", disable=not progress)
    for entry in bar:
        bar.set_postfix_str(entry.model_id, refresh=False)
        recipe, digest = render(entry, models, methods[entry.method])
        if is_done(entry.path, digest):
            stats["skipped"] += 1
            if _pruned(entry.path):
                continue  # pruned only after after_each finished with it
        else:
            stats["redone" if Path(entry.path).exists() else "merged"] += 1
            stats["seconds"] += merge_one(entry, recipe, digest, recipe_text(entry, recipe, models), options,
                                           models)
        if after_each is not None:
            after_each(entry)
        if keep_models == "none" and not _pruned(entry.path):
            prune_weights(entry.path)
            stats["pruned"] += 1
    stats["seconds"] = round(stats["seconds"], 3)
    return stats
