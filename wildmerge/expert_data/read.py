"""The one reader of experts' data: a Source -> records -> texts (unlabelled) or items (prompt / answer).

Every feature that needs an expert's own inputs (RegMean, Chain of Merges, the task alignment score, the
mergeability metrics, the composer) reads them here, so every source kind works for every feature.
"""

import json
from pathlib import Path
from typing import List, Optional

from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.expert_data import cache
from wildmerge.expert_data.schema import ExpertData, Source

DEFAULT_TEXT_FIELD = "text"


def local_path(source: Source, relative_to=None) -> Path:
    """A ``file`` source's path: absolute, or relative to the pool file (else the current folder)."""
    p = Path(source.file).expanduser()
    if not p.is_absolute() and relative_to is not None and (Path(relative_to) / p).exists():
        p = Path(relative_to) / p
    return p.resolve() if p.exists() else p


def _relative_to(source: Source, relative_to) -> str:
    """Where a relative ``file`` was looked for: the pool file's folder only when the data came from a pool."""
    if Path(source.file).expanduser().is_absolute():
        return "the path is absolute: check it"
    if relative_to is not None:
        return f"a relative path starts at the pool file's folder, {relative_to}"
    return f"a relative path starts at the current folder, {Path.cwd()}: give an absolute path"


def _read_file(path: Path) -> list:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".txt":
        return [line for line in text.splitlines() if line.strip()]
    if path.suffix == ".jsonl":
        rows = []
        for k, line in enumerate(text.splitlines()):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise WildmergeError(f"{path}: line {k + 1} is not valid JSON ({exc.msg})") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WildmergeError(f"{path} is not valid JSON ({exc.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise WildmergeError(f"{path} must hold a JSON list of records (or {{'data': [...]}})")
    return data


def _read_dataset(source: Source) -> list:
    """``datasets.load_dataset`` at the entry's ``revision`` (a commit pins it; a branch is read as it is now);
    offline it reads the local datasets cache."""
    try:
        import datasets

        ds = datasets.load_dataset(source.dataset, source.subset, split=source.split, revision=source.revision)
    except Exception as exc:  # offline and not cached, no such split, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WildmergeError(
            f"dataset {source.describe()} cannot be read ({first}); fetch it where there is network (same "
            f"HF_DATASETS_CACHE): python -c \"import datasets; datasets.load_dataset({source.dataset!r}, "
            f"{source.subset!r}, split={source.split!r}, revision={source.revision!r})\"") from None
    return [dict(r) for r in ds]


def _read_lm_eval(source: Source) -> list:
    """An lm-eval task's documents of one split as {prompt, answer}: the context and the gold continuation."""
    from lm_eval.tasks import TaskManager

    include = source.tasks
    if include and include.startswith("demo:"):
        from wildmerge.hub import resolve_path

        include = resolve_path(include)
    tm = TaskManager(include_path=include, include_defaults=False) if include else TaskManager()
    try:
        loaded = tm.load_task_or_group([source.lm_eval_task])
    except KeyError:  # lm-eval's "not a registered task" (pools check names when loaded; a recipe's data here)
        from wildmerge.errors import did_you_mean

        raise ConfigError(f"lm-eval knows no task {source.lm_eval_task!r}"
                          f"{did_you_mean(source.lm_eval_task, tm.all_tasks)}"
                          f"{f' in {source.tasks}' if source.tasks else ''}; name one of its tasks") from None
    except Exception as exc:  # its dataset offline and not cached, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WildmergeError(
            f"lm-eval task {source.lm_eval_task!r} cannot be loaded ({first}); fetch its dataset where there is "
            f"network (same HF_DATASETS_CACHE): python -c \"from lm_eval.tasks import TaskManager; "
            f"TaskManager().load_task_or_group([{source.lm_eval_task!r}])\"") from None
    task = loaded.get(source.lm_eval_task)
    if task is None or isinstance(task, dict):
        raise ConfigError(f"lm-eval task {source.lm_eval_task!r} is a group or unknown: name one task")
    split = source.split
    has = {"train": task.has_training_docs, "validation": task.has_validation_docs, "test": task.has_test_docs}
    if split not in has or not has[split]():
        raise ConfigError(f"lm-eval task {source.lm_eval_task!r} has no {split!r} split; labelled items come from "
                          f"its train split (never the split it is scored on)")
    docs = {"train": task.training_docs, "validation": task.validation_docs, "test": task.test_docs}[split]()
    out = []
    for doc in docs:
        prompt, target = task.doc_to_text(doc), task.doc_to_target(doc)
        if task.OUTPUT_TYPE == "multiple_choice":
            choices = task.doc_to_choice(doc)
            target = choices[target] if isinstance(target, int) else target
        if isinstance(target, list):
            target = target[0]
        out.append({"prompt": str(prompt), "answer": str(target).strip()})
    return out


def read_records(source: Source, *, relative_to=None, model_path=None, generated_dir=None,
                 expert: str = "expert") -> list:
    """The raw records of one source (dicts or strings), cached by content."""
    kind = source.kind
    if kind == "file":
        path = local_path(source, relative_to)
        if not path.is_file():
            raise ConfigError(f"data file {path} not found ({_relative_to(source, relative_to)})")
        return cache.remembered(cache.key_of("file", cache.file_digest(path), path.suffix),
                                lambda: _read_file(path))
    if kind == "demo":
        from wildmerge.hub import resolve_path  # demo: refs resolve through hub's demo hook

        path = Path(resolve_path(source.demo))
        return cache.remembered(cache.key_of("file", cache.file_digest(path), path.suffix), lambda: _read_file(path))
    if kind == "dataset":
        key = cache.key_of("dataset", source.dataset, source.revision, source.subset, source.split)
        return cache.remembered(key, lambda: cache.on_disk(key, lambda: _read_dataset(source)))
    if kind == "lm_eval_task":
        key = cache.key_of("lm_eval", source.lm_eval_task, source.split, source.tasks)
        return cache.remembered(key, lambda: cache.on_disk(key, lambda: _read_lm_eval(source)))
    from wildmerge.expert_data.generate import ensure_generated  # generate

    if model_path is None:
        raise WildmergeError(f"{expert!r}: 'generate' samples text from the expert; its model is not resolved here")
    path = ensure_generated(expert, model_path, source.generate, generated_dir or cache.cache_root() / "generated")
    return _read_file(Path(path))


def _format(template: str, record, where: str) -> str:
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: template {template!r} needs records with fields, got {type(record).__name__}")
    try:
        return template.format(**record)
    except KeyError as exc:
        raise ConfigError(f"{where}: template {template!r} names field {exc.args[0]!r}; records have "
                          f"{sorted(record)}") from None


def _field(record, name: str, where: str, setting: str):
    if isinstance(record, dict) and name in record:
        return record[name]
    keys = sorted(record) if isinstance(record, dict) else type(record).__name__
    raise ConfigError(f"{where}: records have no {name!r} field (found {keys}); set {setting}")


def text_of(record, source: Source, where: str):
    """One record's text (or its pre-tokenised ``input_ids``)."""
    if source.template:
        return _format(source.template, record, where)
    if isinstance(record, str):
        return record
    field = source.field or DEFAULT_TEXT_FIELD
    if isinstance(record, dict) and field not in record:
        if "input_ids" in record:
            return [int(t) for t in record["input_ids"]]
        if source.field is None and "prompt" in record and "answer" in record:
            return f"{record['prompt']} {record['answer']}"
    return _field(record, field, where, "'field' (or 'template') of the text source")


def item_of(record, source: Source, where: str) -> dict:
    """One record as ``{"prompt", "answer"}``; ``prompt`` / ``answer`` are field names or templates."""
    out = {}
    for part in ("prompt", "answer"):
        spec = getattr(source, part) or part
        out[part] = str(_format(spec, record, where) if "{" in spec else _field(record, spec, where, f"'{part}'"))
    return out


def texts(source: Source, where: str, **kw) -> List:
    return [text_of(r, source, where) for r in read_records(source, **kw)]


def items(source: Source, where: str, **kw) -> List[dict]:
    records = read_records(source, **kw)
    if source.kind == "generate":  # the expert's own text, split into a prompt and its continuation
        from wildmerge.expert_data.generate import as_items

        return as_items(records)
    return [item_of(r, source, where) for r in records]


def expert_texts(data: Optional[ExpertData], expert: str, **kw) -> List:
    """An expert's unlabelled text: its text part, else its labelled items as prompt + answer."""
    if data is None or (data.text is None and data.labelled is None):
        raise ConfigError(f"expert {expert!r} has no data: add 'data: generate' (or a file / dataset) under it in "
                          f"the pool file")
    if data.text is not None:
        return texts(data.text, f"text data of {expert!r} ({data.text.describe()})", expert=expert, **kw)
    return [f"{i['prompt']} {i['answer']}" for i in expert_items(data, expert, **kw)]


def expert_items(data: Optional[ExpertData], expert: str, **kw) -> List[dict]:
    """An expert's items as {prompt, answer}: its labelled part, else its text with an empty answer."""
    if data is None or (data.text is None and data.labelled is None):
        raise ConfigError(f"expert {expert!r} has no data: add 'data: generate' (or a file / dataset) under it in "
                          f"the pool file")
    if data.labelled is not None:
        return items(data.labelled, f"labelled data of {expert!r} ({data.labelled.describe()})", expert=expert, **kw)
    if data.text.kind in ("file", "demo") and not (data.text.template or data.text.field):
        records = read_records(data.text, expert=expert, **kw)
        if records and all(isinstance(r, dict) and "prompt" in r and "answer" in r for r in records):
            return [item_of(r, data.text, expert) for r in records]  # an old calibration file of labelled records
    return [{"prompt": t if isinstance(t, str) else "", "answer": ""} for t in expert_texts(data, expert, **kw)]


def text_count(data: Optional[ExpertData], expert: str, relative_to=None) -> int:
    """How many unlabelled texts ``expert_texts`` gives this expert: ``generate`` says how many it will sample
    (nothing is generated), every other source is read (once, then from the cache) and counted. A sweep that asks
    a layer-wise merge for more calibration samples than this cannot be merged."""
    source = None if data is None else data.text or data.labelled
    if source is not None and source.kind == "generate":
        return source.generate.n_samples
    return len(expert_texts(data, expert, relative_to=relative_to))
