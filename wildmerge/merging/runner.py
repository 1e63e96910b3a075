"""Execute the merges of a plan through mergekit, resumably.

Each merged model is built in a temporary sibling and renamed into place (``wildmerge.atomic.atomic_dir``), with
its ``recipe.yml`` and ``merge_info.json`` inside. A folder whose ``merge_info.json`` records the same recipe is
done and skipped; anything else at that path (a folder from another recipe, a hand-damaged one) is merged again.

Several commands may run one plan at once (two ``wildmerge sample`` on one run folder, or a driver per node on a
shared disk): each merge is claimed first (``wildmerge.locks``), so they split the merges, and a temporary folder
is removed only by whoever holds its merge's claim, so nobody deletes a merge that is still being written.
"""

import contextlib
import shutil
import time
from pathlib import Path

import yaml

from wildmerge.atomic import atomic_dir
from wildmerge.locks import split_work, try_claim
from wildmerge.run import (RECIPE, MergeInfo, PlanEntry, PoolModels, generated_calibration_dir, merge_claim_file,
                           read_merge_info, weights_pruned, write_merge_info)
from wildmerge.merging.model_card import write_card
from wildmerge.recipes.render import RenderedMerge, render_merge

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def render(entry: PlanEntry, models: PoolModels, method) -> RenderedMerge:
    """The entry's merge rendered on this machine (recipe, hash, tokenizer note); its generated text goes to the
    run's ``calibration/``."""
    return render_merge(method, models, entry.experts, entry.overrides, generated_calibration_dir(entry.path))


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


def recipe_text(entry: PlanEntry, recipe: dict, models: PoolModels, note: str | None = None) -> str:
    names = {models.base.path: f"base ({models.base.model})"}
    names.update({e.path: f"{e.name} ({e.model}" + (f"@{e.revision}" if e.revision else "") + ")"
                  for e in models.experts})
    head = [f"# wildmerge {entry.model_id}: {entry.label} of subset {entry.subset_id} (n = {entry.n})"]
    head += [f"#   {p} = {n}" for p, n in names.items() if p == recipe["base_model"]
             or any(m["model"] == p for m in recipe["models"])]
    if note:
        head.append(f"# tokenizer: {note}")
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
    from wildmerge.threads import blas_threads

    start = time.perf_counter()
    # one thread per tensor on the CPU: a merge's bytes never depend on the thread count, the merge workers or the
    # load (a reduction on two threads rounds otherwise: Model Stock's merged file differed); the parallelism is
    # across tensors (the planner's tensors side by side) and across merges (--merge-workers)
    threads = blas_threads(1) if str(options.device) == "cpu" else contextlib.nullcontext()
    with wildmerge_checks(strict_params=True), atomic_dir(entry.path) as tmp, threads:
        run_merge(MergeConfiguration.model_validate(recipe), str(tmp), options=options, config_source=text)
        (Path(tmp) / RECIPE).write_text(text)
        if models is not None:
            write_card(tmp, entry, models, text)
        seconds = time.perf_counter() - start
        write_merge_info(tmp, MergeInfo(
            model_id=entry.model_id, method=entry.method, label=entry.label, n=entry.n, subset_id=entry.subset_id,
            hparams=entry.hparams, experts=entry.experts, recipe_sha256=digest, seconds=round(seconds, 3),
            mergekit=version("mergekit"), finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"), device=str(options.device)))
    return seconds


def merge_entry(entry: PlanEntry, merge: RenderedMerge, options, models: PoolModels, say=print):
    """Merge one plan entry (rendered: ``render``) unless it is done; its merge's claim is held by the caller (this
    process or, for a cluster job, the driver that submitted it). The seconds it took, None when it was done."""
    if is_done(entry.path, merge.digest):
        return None
    _remove_leftovers(entry.path)  # a holder that died before us left them
    if merge.note:
        say(f"{entry.model_id}: {merge.note}")
    recipe = merge.materialised()
    return merge_one(entry, recipe, merge.digest, recipe_text(entry, recipe, models, merge.note), options, models)


def _leftover_of(name: str):
    """The merge a temporary sibling belongs to, else None: ``.NAME.tmp-*`` / ``.NAME.old-*``, and
    ``..NAME.tmp-a.tmp-b`` (RegMean / CoM write atomically into the runner's own temporary folder)."""
    if not name.startswith(".") or (".tmp-" not in name and ".old-" not in name):
        return None
    return name.lstrip(".").split(".tmp-")[0].split(".old-")[0]


def _remove_leftovers(model_dir) -> None:
    """Remove the temporary siblings of one merge; only under that merge's claim."""
    model_dir = Path(model_dir)
    for p in model_dir.parent.glob(f"*{model_dir.name}.*"):
        if _leftover_of(p.name) == model_dir.name:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def clean_leftovers(models_dir) -> int:
    """Remove the temporary folders of merges that were killed; one whose merge is claimed (being written by a
    live process) stays."""
    models_dir, removed = Path(models_dir), 0
    if not models_dir.is_dir():
        return 0
    for p in sorted(models_dir.iterdir()):
        owner = _leftover_of(p.name)
        if owner is None:
            continue
        claim = try_claim(merge_claim_file(models_dir / owner))
        if claim is None:
            continue  # in progress elsewhere
        with claim:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            removed += 1
    return removed


@contextlib.contextmanager
def _cpu_share(workers: int, device: str):
    """Worker 0 of several CPU workers uses its share of the cores, as each helper does."""
    if workers <= 1 or device.startswith("cuda") or device == "auto":
        yield
        return
    from wildmerge.threads import cpu_share, thread_share

    with cpu_share(thread_share(workers)):
        yield


def render_all(merges: list[PlanEntry], models: PoolModels, methods: dict):
    """(methods by name, every merge rendered once): its tokenizer handling decided (or refused) before any merge."""
    from wildmerge.recipes.method import load_methods

    # a recipe given by its file's path (``--methods my_com.yml``) names its merges by the recipe's name
    methods = {**methods, **{m.name: m for m in methods.values()}}
    methods = {**load_methods({e.method for e in merges} - set(methods)), **methods}
    return methods, {e.model_id: render(e, models, methods[e.method]) for e in merges}


def run_plan(entries: list[PlanEntry], models: PoolModels, methods: dict, options, *, keep_models="all",
             after_each=None, progress=True, workers: int = 1) -> dict:
    """Merge every ``kind == "merge"`` entry not already done. ``after_each(entry)`` runs after each model is
    available (merged now or earlier), e.g. to evaluate it before ``keep_models="none"`` prunes its weights.

    Merges another process holds are left to it and waited for at the end; if that process died, they are merged
    here. ``workers > 1`` starts that many minus one helper processes on the same plan (``merging.workers``: one
    per GPU, or a share of the cores each); this process stays worker 0 and runs ``after_each`` for every entry."""
    from tqdm.auto import tqdm

    merges = [e for e in entries if e.kind == "merge"]
    for parent in {str(Path(e.path).parent) for e in merges}:
        clean_leftovers(parent)
    methods, rendered = render_all(merges, models, methods)
    stats = {"merged": 0, "skipped": 0, "redone": 0, "pruned": 0, "seconds": 0.0,
             "tokenizer": {k: r.note for k, r in rendered.items() if r.note}}
    helpers = []
    if workers > 1 and merges:
        from wildmerge.merging.workers import start_helpers

        helpers = start_helpers(workers, str(options.device), run_plan, (entries, models, methods, options),
                                {"keep_models": "all", "progress": False})
    bar = tqdm(total=len(merges), desc="merging", unit="merge", disable=not progress)

    def handle(entry: PlanEntry) -> None:  # runs while this process holds the entry's claim
        bar.set_postfix_str(entry.model_id, refresh=False)
        existed = Path(entry.path).exists()
        seconds = merge_entry(entry, rendered[entry.model_id], options, models, say=bar.write)
        if seconds is None:
            stats["skipped"] += 1
            if weights_pruned(entry.path):
                bar.update()
                return  # pruned only after after_each finished with it
        else:
            stats["redone" if existed else "merged"] += 1
            stats["seconds"] += seconds
        if after_each is not None:
            after_each(entry)
        if keep_models == "none" and not weights_pruned(entry.path):
            prune_weights(entry.path)
            stats["pruned"] += 1
        bar.update()

    def waiting(entry: PlanEntry, who: str) -> None:
        bar.write(f"{entry.model_id}: claimed by {who}; waiting for it")

    with _cpu_share(workers if helpers else 1, str(options.device)):
        split_work(merges, lambda e: merge_claim_file(e.path), lambda e: False, handle, on_wait=waiting)
    bar.close()
    if helpers:
        from wildmerge.merging.workers import join_helpers

        stats["by_worker"] = [stats["merged"] + stats["redone"]]  # merges each worker did
        for other in join_helpers(helpers):  # what worker 0 counted as skipped, a helper merged
            stats["by_worker"].append(other["merged"] + other["redone"] if other else None)
            if other:
                done = other["merged"] + other["redone"]
                stats["merged"] += other["merged"]
                stats["redone"] += other["redone"]
                stats["skipped"] -= done
                stats["seconds"] += other["seconds"]
        stats["workers"] = workers
    stats["seconds"] = round(stats["seconds"], 3)
    return stats
