"""Checks run when a pool is loaded (local files: exist, have the fields, hold enough items) and the pre-flight
listing of which methods or diagnostics lack data for which experts, with the line to add to the pool file."""

from pathlib import Path
from typing import Dict, List, Optional

from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.expert_data.read import item_of, read_records, text_of
from wildmerge.expert_data.schema import ExpertData

# what each feature reads: "text" (unlabelled; labelled items also serve) or "labelled" (prompt / answer)
NEEDS = {
    "regmean": "text",
    "chain_of_merges": "text",
    "mats": "text",
    "fisher": "text",
    "prodistill": "text",
    "localize_stitch_trained": "text",
    "adamerging": "text",
    "adamerging_pp": "text",
    "tas": "text",
    "composer": "text",
    "activation metrics": "text",
    "gradient metrics": "labelled",
}


def check_sources(name: str, data: Optional[ExpertData], relative_to=None) -> None:
    """Every source of one expert's data checked when the pool is loaded (dry runs included), whichever part the
    run's methods read: a local file read now (missing file, field or items), a family reference's name
    (``demo:unlabelled/<expert>``: its expert exists; nothing is built), an lm-eval task's name (close matches
    named). One line naming the expert, not a traceback at the first merge that reads it."""
    if data is None:
        return
    for part, source in (("text", data.text), ("labelled", data.labelled)):
        if source is None:
            continue
        if source.kind == "lm_eval_task":
            _check_task_name(source, f"{part} data of expert {name!r}", relative_to)
        if source.kind == "demo":
            _check_family_ref(source.demo, f"{part} data of expert {name!r}")
        if source.kind != "file":
            continue
        where = f"{part} data of expert {name!r} ({source.file})"
        try:
            records = read_records(source, relative_to=relative_to, expert=name)
        except WildmergeError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        usable = _usable(records, source, part, where)
        if usable < (source.n or 1):
            raise ConfigError(f"{where}: {usable} non-empty item(s), at least {source.n or 1} needed; add data or "
                              f"lower n")


def _check_family_ref(ref: str, where: str) -> None:
    from wildmerge.hub import check_family_ref

    try:
        check_family_ref(ref)
    except WildmergeError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_task_name(source, where: str, relative_to=None) -> None:
    """An ``lm_eval_task`` that lm-eval does not know fails at pool load, with the closest name (not a KeyError at
    the first read). A family's task folder (``demo:tasks``) is checked against the names the family writes there,
    without building it; a folder written with the family (``demo:probe_tasks``) when it is read."""
    from wildmerge.errors import did_you_mean
    from wildmerge.hub import every_family_task, family_task_names

    task, include = source.lm_eval_task, source.tasks
    if include and include.startswith(("demo:", "smollm2:")):
        _check_family_ref(include, f"{where}: tasks")
        known = family_task_names(include)
        if known is not None and task not in known:
            raise ConfigError(f"{where}: {include} has no task {task!r}{did_you_mean(task, known)}; valid: "
                              f"{', '.join(known)}")
        return
    if include and relative_to is not None and not Path(include).is_absolute():
        include = str(Path(relative_to) / include)
    if include and not Path(include).is_dir():
        raise ConfigError(f"{where}: tasks folder {include} does not exist")
    known = _lm_eval_tasks(include)
    if task in known:
        return
    close = did_you_mean(task, known)
    family = every_family_task()
    if not include and not close and did_you_mean(task, family):  # a family's task, without its folder
        near = did_you_mean(task, family)
        folder = family[near.split("'")[1]]
        raise ConfigError(f"{where}: lm-eval knows no task {task!r}{near}: that is a task of {folder}, so add "
                          f"`tasks: {folder}` beside lm_eval_task")
    raise ConfigError(f"{where}: lm-eval knows no task {task!r}{close}; name one of its tasks (`lm_eval --tasks "
                      f"list`){'' if include else ', or give tasks: FOLDER with your own task YAMLs'}")


def _lm_eval_tasks(include) -> set:
    """The task names lm-eval knows (with ``include``: those of that folder). Indexing lm-eval's own ~14,000 tasks
    takes 10-20 s, so their names are kept in the data cache, keyed by lm-eval's version and tasks folder."""
    key = include or ""
    if key not in _TASK_NAMES:
        if include:
            from lm_eval.tasks import TaskManager

            _TASK_NAMES[key] = set(TaskManager(include_path=include, include_defaults=False).all_tasks)
        else:
            import importlib.metadata
            import importlib.util

            from wildmerge.expert_data import cache

            folder = Path(importlib.util.find_spec("lm_eval").submodule_search_locations[0]) / "tasks"
            stamp = cache.key_of("lm-eval task names", importlib.metadata.version("lm_eval"), str(folder),
                                 folder.stat().st_mtime_ns)
            _TASK_NAMES[key] = set(cache.on_disk(stamp, _every_lm_eval_task))
    return _TASK_NAMES[key]


def _every_lm_eval_task() -> list:
    from lm_eval.tasks import TaskManager

    return sorted(TaskManager().all_tasks)


_TASK_NAMES: Dict[str, set] = {}


def _usable(records, source, part: str, where: str) -> int:
    """Items with text (every record checked for its fields or template)."""
    if part == "text":
        return sum(1 for r in records if text_of(r, source, where))
    return sum(1 for r in records if item_of(r, source, where)["prompt"])


def check_remote(data: Dict[str, Optional[ExpertData]], features: List[str]) -> None:
    """Hub datasets and lm-eval tasks the features read, read now (once, then from the cache): an uncached or
    misnamed dataset fails before any model is resolved, every one listed with how to fetch it."""
    problems = []
    for name, d in data.items():
        if d is None:
            continue
        parts = {NEEDS[f] for f in features}
        sources = [("text", d.text or d.labelled)] if "text" in parts else []
        sources += [("labelled", d.labelled)] if "labelled" in parts else []
        for part, source in sources:
            if source is None or source.kind not in ("dataset", "lm_eval_task"):
                continue
            where = f"{part} data of expert {name!r} ({source.describe()})"
            try:
                records = read_records(source, expert=name)
                if _usable(records, source, part, where) < (source.n or 1):
                    problems.append(f"  {where}: fewer than {source.n or 1} non-empty items")
            except WildmergeError as exc:
                problems.append(f"  {where}: {str(exc).splitlines()[0]}")
    if problems:
        raise WildmergeError("expert data cannot be read:\n" + "\n".join(problems))


def has(data: Optional[ExpertData], what: str) -> bool:
    """Whether ``data`` serves a feature that reads ``what``; decided without loading any model."""
    if data is None:
        return False
    if what == "text" or data.labelled is not None:
        return (data.text or data.labelled) is not None
    text = data.text  # an old calibration file whose records carry prompt and answer is labelled too
    if text is None or text.template or text.field:
        return False
    if text.kind == "demo":
        return text.demo.startswith(("demo:calibration/", "smollm2:labelled/"))
    if text.kind == "file":
        try:
            records = read_records(text)
        except WildmergeError:
            return False
        return bool(records) and all(isinstance(r, dict) and "prompt" in r and "answer" in r for r in records)
    return False


def line_to_add(what: str) -> str:
    if what == "labelled":
        return "data: {labelled: {lm_eval_task: TASK, split: train}}  (or {dataset: ORG/NAME, revision: COMMIT, " \
               "prompt: FIELD, answer: FIELD}, or generate: the expert's own text, its second half the answer)"
    return "data: generate  (text sampled from the expert; or a file / {dataset: ORG/NAME, revision: COMMIT})"


def missing_data(data: Dict[str, Optional[ExpertData]], features: List[str]) -> List[str]:
    """One line per feature that lacks data for some experts: who, and what to add to the pool file."""
    lines = []
    for feature in features:
        what = NEEDS[feature]
        lacking = [name for name, d in data.items() if not has(d, what)]
        if lacking:
            lines.append(f"{feature} needs each expert's {what} data; none for {', '.join(lacking)}. Add under each "
                         f"of them (or once at the pool's top level): {line_to_add(what)}")
    return lines


def require_data(data: Dict[str, Optional[ExpertData]], features: List[str], pool_name: str = "") -> None:
    """The pre-flight: one error listing every missing piece, before any model is loaded."""
    lines = missing_data(data, features)
    if lines:
        pool = f" of pool {pool_name!r}" if pool_name else ""
        raise ConfigError(f"missing expert data{pool}:\n" + "\n".join(f"  {l}" for l in lines)
                          + "\n(or leave those experts out with --exclude NAME)")
    check_remote(data, features)
