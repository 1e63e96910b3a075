"""Validation splits: a suite task scored a second time on held-out items, for choosing hyperparameters there.

A suite task with ``validation_split: validation`` is also run as a derived lm-eval task: the task's own config with
``test_split`` set to that split, named ``<task>@<split>``. Its score is recorded as its own column,
``<label>@<split>``, in the same job (whose id then includes the split: suites without validation splits keep their
ids). The report chooses sweep points on these columns and reports the test columns (``analysis/report/sweeps.py``),
as the fresh-head probe paper's Tables 3-4 do.
"""

from typing import Any, Dict, List, Optional

from wildmerge.errors import ConfigError

LOCAL_BUILDERS = ("json", "csv", "parquet", "arrow", "text")  # datasets' packaged builders: splits = data_files keys


def derived_name(task: str, split: str) -> str:
    """The lm-eval task name of ``task`` scored on ``split``."""
    return f"{task}@{split}"


def score_key(label: str, split: str) -> str:
    """The score column of a task's validation run (``add@validation``)."""
    return f"{label}@{split}"


def task_config(tm, task: str, suite: str = "") -> Dict[str, Any]:
    """The full config (``include:`` resolved) of a single YAML task: a group or tag has no one test split to swap."""
    from lm_eval.tasks._index import Kind
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = tm.task_index.get(task)
    if entry is None or entry.kind is not Kind.TASK or not entry.yaml_path:
        kind = "unknown" if entry is None else entry.kind.name.lower().replace("py_task", "Python task")
        raise ConfigError(f"suite {suite!r}: task {task!r} names a validation_split, but it is a {kind}, not a "
                          f"single YAML task; name its subtasks in the suite, each with its own validation_split")
    return load_yaml(entry.yaml_path, resolve_func=True)


def derived_config(tm, task: str, split: str) -> Dict[str, Any]:
    """The lm-eval config that scores ``task`` on ``split`` (prompt, metric, few-shot source all unchanged)."""
    config = {k: v for k, v in task_config(tm, task).items() if k not in ("tag", "group", "task_list")}
    return {**config, "task": derived_name(task, split), "test_split": split}


def known_splits(config: Dict[str, Any]) -> Optional[List[str]]:
    """The splits a task's data has when that is known without loading it (local files: the ``data_files`` keys);
    None for a hub dataset (its split names would need the hub or its cache)."""
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if config.get("dataset_path") in LOCAL_BUILDERS and isinstance(files, dict):
        return sorted(files)
    return None


def scored_split(config: Dict[str, Any]) -> Optional[str]:
    """The split lm-eval scores a task on: its test split, else its validation split (lm-eval 0.4's rule)."""
    return config.get("test_split") or config.get("validation_split")


def check_validation_splits(suite, tm) -> None:
    """Fail before any model loads on a validation split that cannot work: a group or tag, the test split itself,
    or a split the task's local data does not have (hub datasets are checked when lm-eval loads them)."""
    for t in suite.tasks:
        split = t.validation_split
        if not split:
            continue
        config = task_config(tm, t.task, suite.name)
        where = f"suite {suite.name!r}, task {t.task!r}: validation_split {split!r}"
        if split == scored_split(config):
            raise ConfigError(f"{where} is the split lm-eval scores the task on (its test split"
                              f"{'' if config.get('test_split') else ', as the task has none'}): choosing on it is "
                              f"choosing on the reported numbers; name a held-out split (e.g. validation) or drop "
                              f"validation_split")
        splits = known_splits(config)
        if splits is not None and split not in splits:
            raise ConfigError(f"{where} is not in the task's data (splits: {', '.join(splits)}); fix it in "
                              f"{suite.source or 'the suite'}")
