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

from wildmerge.atomic import atomic_dir, clean_stale_tmp, write_json
from wildmerge.plugins.entrypoint import LAYERWISE_METHODS
from wildmerge.sampling.plan import split_hparams

INFO = "merge_info.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def render(entry: dict, models: dict, method) -> tuple[dict, str]:
    """(mergekit recipe dict with this machine's paths, its hash over names instead of paths)."""
    from wildmerge.plugins.recipes import render_recipe

    paths = {e["name"]: e["path"] for e in models["experts"]}
    top, per = split_hparams(method, entry.get("overrides", {}))
    recipe = render_recipe(method, models["base"]["path"], [paths[n] for n in entry["experts"]],
                           overrides=top or None, model_overrides=per or None)
    if recipe["merge_method"] in LAYERWISE_METHODS:  # RegMean / CoM: each expert's own calibration data
        calibration = {e["name"]: e.get("calibration") for e in models["experts"]}
        for m, name in zip(recipe["models"], entry["experts"]):
            if calibration.get(name):
                m["calibration"] = calibration[name]
    logical = json.loads(json.dumps(recipe))  # deep copy; paths replaced by names for a machine-independent hash
    logical["base_model"] = "base"
    for m, name in zip(logical["models"], entry["experts"]):
        m["model"] = name
    digest = hashlib.sha256(json.dumps(logical, sort_keys=True).encode()).hexdigest()
    return recipe, digest


def read_info(path) -> dict | None:
    f = Path(path) / INFO
    try:
        return json.loads(f.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def is_done(path, digest: str) -> bool:
    info = read_info(path)
    if not info or info.get("recipe_sha256") != digest:
        return False
    return info.get("weights_pruned", False) or any(Path(path).glob("*.safetensors"))


def prune_weights(path) -> None:
    """Remove a merged model's weights, keeping its recipe and info (the ``--keep-models none`` policy)."""
    path = Path(path)
    info = read_info(path) or {}
    write_json(path / INFO, {**info, "weights_pruned": True})  # first: a kill mid-prune leaves a 'done' folder
    for f in list(path.glob("*.safetensors")) + list(path.glob("*.safetensors.index.json")):
        f.unlink(missing_ok=True)


def recipe_text(entry: dict, recipe: dict, models: dict) -> str:
    names = {models["base"]["path"]: f"base ({models['base']['model']})"}
    names.update({e["path"]: f"{e['name']} ({e['model']}" + (f"@{e['revision']}" if e.get("revision") else "") + ")"
                  for e in models["experts"]})
    head = [f"# wildmerge {entry['model_id']}: {entry['label']} of subset {entry['subset_id']} (n = {entry['n']})"]
    head += [f"#   {p} = {n}" for p, n in names.items() if p == recipe["base_model"]
             or any(m["model"] == p for m in recipe["models"])]
    return "\n".join(head) + "\n" + yaml.safe_dump(recipe, sort_keys=False)


def merge_options(models: dict, device="cpu", allow_pickle=False, seed=0, **extra):
    """mergekit options: tokenizer copied when the base has one (so merges are evaluable), safe defaults."""
    from mergekit.options import MergeOptions

    has_tok = any((Path(models["base"]["path"]) / f).exists() for f in TOKENIZER_FILES)
    return MergeOptions(copy_tokenizer=has_tok, device=device, lazy_unpickle=allow_pickle, random_seed=seed,
                        quiet=True, trust_remote_code=False, allow_crimes=False, **extra)


def merge_one(entry: dict, recipe: dict, digest: str, text: str, options) -> float:
    """Run one mergekit merge into ``entry['path']``; the folder appears complete or not at all."""
    from importlib.metadata import version

    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge

    start = time.perf_counter()
    with atomic_dir(entry["path"]) as tmp:
        run_merge(MergeConfiguration.model_validate(recipe), str(tmp), options=options, config_source=text)
        (Path(tmp) / "recipe.yml").write_text(text)
        seconds = time.perf_counter() - start
        info = {k: entry.get(k) for k in ("model_id", "method", "label", "n", "subset_id", "hparams", "experts")}
        info.update(recipe_sha256=digest, seconds=round(seconds, 3), mergekit=version("mergekit"),
                    finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        write_json(Path(tmp) / INFO, info)
    return seconds


def run_plan(entries: list[dict], models: dict, methods: dict, options, *, keep_models="all", after_each=None,
             progress=True) -> dict:
    """Merge every ``kind == "merge"`` entry not already done. ``after_each(entry)`` runs after each model is
    available (merged now or earlier), e.g. to evaluate it before ``keep_models="none"`` prunes its weights."""
    from tqdm.auto import tqdm

    from wildmerge.sampling.plan import load_methods

    merges = [e for e in entries if e["kind"] == "merge"]
    for parent in {str(Path(e["path"]).parent) for e in merges}:
        clean_stale_tmp(parent)
    methods = {**load_methods({e["method"] for e in merges} - set(methods)), **methods}
    stats = {"merged": 0, "skipped": 0, "redone": 0, "pruned": 0, "seconds": 0.0}
    bar = tqdm(merges, desc="merging", unit="merge", disable=not progress)
    for entry in bar:
        bar.set_postfix_str(entry["model_id"], refresh=False)
        recipe, digest = render(entry, models, methods[entry["method"]])
        if is_done(entry["path"], digest):
            stats["skipped"] += 1
            if (read_info(entry["path"]) or {}).get("weights_pruned"):
                continue  # pruned only after after_each finished with it
        else:
            stats["redone" if Path(entry["path"]).exists() else "merged"] += 1
            stats["seconds"] += merge_one(entry, recipe, digest, recipe_text(entry, recipe, models), options)
        if after_each is not None:
            after_each(entry)
        if keep_models == "none" and not (read_info(entry["path"]) or {}).get("weights_pruned"):
            prune_weights(entry["path"])
            stats["pruned"] += 1
    stats["seconds"] = round(stats["seconds"], 3)
    return stats
