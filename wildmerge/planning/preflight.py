"""Every weight of the pool checked for NaN / Inf before anything is merged.

mergekit's methods carry a NaN straight into the merge (a NaN in one expert makes every merge that contains it NaN,
and the evaluation then scores garbage or fails late). The check reads each tensor once; files already found
finite are remembered in the run folder by size and modification time, so a rerun does not read them again.
"""

from pathlib import Path

from wildmerge.checkpoints import nonfinite_in_file, weight_files
from wildmerge.errors import WildmergeError
from wildmerge.run import PoolModels, read_weight_checks, write_weight_checks


def _stamp(file: Path) -> str:
    st = file.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def check_finite(run_dir, models: PoolModels, allow_pickle: bool = False, progress: bool = True) -> None:
    """Raise one error naming every model, file and tensor with NaN / Inf weights (pickle files are not read
    here: mergekit loads them)."""
    from tqdm.auto import tqdm

    checks = read_weight_checks(run_dir)
    files = [(m.name, f.resolve()) for m in [models.base, *models.experts]
             for f in weight_files(m.path, allow_pickle) if f.suffix == ".safetensors"]
    todo = [(name, f) for name, f in files if checks.finite.get(str(f)) != _stamp(f)]
    problems = []
    for name, f in tqdm(todo, desc="checking weights for NaN/Inf", unit="file", disable=not progress or not todo):
        bad = nonfinite_in_file(f)
        if bad:
            more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            problems.append(f"  {name}: {bad[0]}{more} in {f}")
        else:
            checks.finite[str(f)] = _stamp(f)
    if problems:
        raise WildmergeError(
            f"{len(problems)} model(s) have NaN or Inf weights; every merge containing them would be NaN:\n"
            + "\n".join(problems) + "\nReplace the damaged checkpoint (download it again), or leave it out with "
            "--exclude NAME."
        )
    if todo:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_weight_checks(run_dir, checks)


def data_features(methods: dict, sweeps: dict | None = None, tune: bool = False) -> list[str]:
    """What in this plan reads experts' own data: RegMean / Chain of Merges merges (methods and sweeps) and --tune."""
    from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS

    recipes = list(methods.values()) + [sweep.recipe for sweep in (sweeps or {}).values()]
    used = {m.recipe.get("merge_method") for m in recipes}
    return [name for name in LAYERWISE_METHODS if name in used] + (["tas"] if tune else [])


def missing_expert_data(pool, methods: dict, sweeps: dict | None = None, tune: bool = False) -> list[str]:
    """One line per feature of the plan that lacks data for some experts, with the line to add (nothing loaded)."""
    from wildmerge.expert_data.check import missing_data

    return missing_data(pool.all_data(), data_features(methods, sweeps, tune))


def too_few_texts(pool, methods: dict, sweeps: dict | None = None, kinds=None) -> str | None:
    """One line where a data method of the plan (its recipe's ``calibration: n_samples``; a sweep that sets
    ``n_samples`` is capped instead, ``sample_cap.py``) reads more texts of each expert than some expert has: the
    methods, the count they read, those experts and their counts. ``kinds``: count only text sources of these kinds
    (a dry run reads local files only: no hub dataset, no family built)."""
    from wildmerge.expert_data.count import recipe_asks, text_counts, too_few_texts as line
    from wildmerge.planning.sample_cap import asks_samples

    recipes = {**{s.recipe.name: s.recipe for s in (sweeps or {}).values() if not asks_samples(s)}, **methods}
    asks = recipe_asks(recipes)
    return line(asks, text_counts(pool, kinds, fixed=False)) if asks else None


def fix_for_texts(pool) -> str:
    """How to give a data method the texts it reads."""
    return (f"give every expert at least that many texts in {pool.source or 'the pool file'} (or `data: generate`, "
            f"64 sampled from each expert), or lower calibration n_samples in a method recipe of your own (its path "
            f"in --methods)")


def check_expert_data(pool, methods: dict, sweeps: dict | None = None, tune: bool = False) -> None:
    """The sampler's pre-flight: every expert a RegMean / CoM merge or --tune reads has data, and as many texts as
    each data method reads, before any model loads."""
    from wildmerge.errors import ConfigError
    from wildmerge.expert_data.check import require_data

    require_data(pool.all_data(), data_features(methods, sweeps, tune), pool.name)
    short = too_few_texts(pool, methods, sweeps)
    if short:
        raise ConfigError(f"too few texts in pool {pool.name!r}: {short}; {fix_for_texts(pool)}")


# files that carry a tokenizer's vocabulary (tokenizer_config.json alone does not: transformers then asks for
# sentencepiece or tiktoken in a traceback)
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")


def require_tokenizer(folder, what: str, needed_by: str) -> None:
    """A model folder without a tokenizer, said before any work: which folder, what is missing, who needs it."""
    if any((Path(folder) / name).is_file() for name in VOCABULARY_FILES):
        return
    raise WildmergeError(f"{what} {folder} has no tokenizer (none of {', '.join(VOCABULARY_FILES)}), which "
                         f"{needed_by} need(s) to read text: copy the tokenizer files of the model it was trained "
                         f"from into {folder}")


def _pretokenised(data) -> bool:
    """An expert's text is a local JSON-lines file of token ids (``input_ids``): read without a tokenizer."""
    import json

    source = data.text if data is not None else None
    if source is None or not source.file or not str(source.file).endswith(".jsonl"):
        return False
    try:
        with open(source.file) as f:
            return "input_ids" in json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return False  # said by the data checks


def check_base_tokenizer(pool, needed_by: list) -> None:
    """The sampler's pre-flight for a local base folder (hub and family bases ship their tokenizers). RegMean and
    Chain of Merges need none where every expert's text is already token ids."""
    from wildmerge.expert_data.recipe import absolute
    from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS

    if all(_pretokenised(absolute(d, pool.folder)) for d in pool.all_data().values()):
        needed_by = [n for n in needed_by if n not in LAYERWISE_METHODS]
    if not needed_by:
        return
    from wildmerge.hub import Unresolvable, classify

    try:
        kind, path = classify(pool.base.model, pool.folder)
    except Unresolvable:
        return  # said by the resolver, with its own fix
    if kind == "local":
        require_tokenizer(path, f"the base of pool {pool.name!r},", " and ".join(needed_by))
