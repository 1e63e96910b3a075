"""Evaluation suites as data: which lm-eval tasks, with how many shots, which metric counts as the task's accuracy.

``merge_recipes/suites/<name>.yml``::

    name: paper16
    description: the 16 tasks of the in-the-wild study
    include_path: null        # folder of custom lm-eval task YAMLs: absolute, relative to this file, or demo:tasks
    tasks:
      - {task: arc_easy, num_fewshot: 0, metric: "acc,none", label: ARC-e, items: 2376, tokens_per_item: 160}
      - {task: demo_probe_add, num_fewshot: 0, label: add, validation_split: validation}  # also scored there
    settings: {dtype: float16, batch_size: auto, apply_chat_template: false, limit: null, backend: hf}

A suite may start from another suite's settings (``extends: paper16``) and give only what differs under its own
``settings:``.
A task's ``items`` and ``tokens_per_item`` (its size, for the dry run's cost plan only: never part of a job's identity)
are optional; ``task_sizes`` gathers them for the planners.
Unknown keys are errors that list the valid ones (lm-eval and mergekit would silently ignore them).
"""

from functools import cache
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator, model_serializer,
                      model_validator)

from wildmerge import numbers
from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.eval.splits import check_validation_splits
from wildmerge.named_files import find_named_file, list_names, read_yaml


class SuiteTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1)
    num_fewshot: int = Field(ge=0)
    metric: str = "acc,none"
    label: Optional[str] = None
    validation_split: Optional[str] = Field(default=None, min_length=1)  # held-out split for choosing (splits.py)
    # the metric's direction where lm-eval's metric registry does not know it (a custom metric); see higher_is_better
    higher_is_better: Optional[bool] = None
    # the task's size for the cost plan (planning/cost.py): documents lm-eval scores and tokens each one scores
    # (context and every choice); planning facts only, so never dumped (job ids and stored suites stay as they were)
    items: Optional[int] = Field(default=None, ge=1, exclude=True)
    tokens_per_item: Optional[int] = Field(default=None, ge=1, exclude=True)

    @model_validator(mode="after")
    def _whole_size(self):
        if (self.items is None) != (self.tokens_per_item is None):
            raise ValueError(f"task {self.task!r} gives only one of items and tokens_per_item: give both (its size "
                             f"in the cost plan) or neither (then it counts as 100 items of 100 tokens)")
        return self

    @property
    def size(self) -> Optional[Tuple[int, int]]:
        """(items, tokens per item) where the suite declares them."""
        return None if self.items is None else (self.items, self.tokens_per_item)

    @field_validator("label")
    @classmethod
    def _no_at(cls, v: Optional[str]) -> Optional[str]:
        if v and "@" in v:
            raise ValueError(f"label {v!r} contains '@', which separates a label from its validation split "
                             f"(add@validation): pick another label")
        return v

    @model_serializer(mode="wrap")
    def _plain_without_split(self, handler):
        """A task without a validation split (or a declared direction) dumps as before: stored suites and job files
        stay byte for byte."""
        data = handler(self)
        for key in ("validation_split", "higher_is_better"):
            if isinstance(data, dict) and data.get(key) is None:
                data.pop(key, None)
        return data

    @field_validator("metric")
    @classmethod
    def _metric_has_filter(cls, v: str) -> str:
        if "," not in v:
            raise ValueError(f"metric {v!r} must be lm-eval's 'metric,filter' key, e.g. 'acc,none' or "
                             f"'exact_match,strict-match'")
        return v

    @property
    def name(self) -> str:
        """The column name in tables: the label, else the task name."""
        return self.label or self.task


def higher_is_better(metric: str, declared: Optional[bool] = None) -> bool:
    """Whether a larger score of ``metric`` ('word_perplexity,none') is better: the suite's ``higher_is_better``
    where it declares one, else lm-eval's metric registry (perplexities and bits per byte are lower-is-better), else
    True (accuracies). The reality-check paper's normalized performance inverts a lower-is-better metric."""
    if declared is not None:
        return declared
    from lm_eval.api.registry import is_higher_better

    known = is_higher_better(metric.split(",", 1)[0])
    return True if known is None else bool(known)


def parse_limit(value) -> Union[int, float]:
    """A limit is a whole number of documents per task (2, 100) or a fraction strictly between 0 and 1 (0.1): ``1.0``
    and ``1.5`` are neither (lm-eval would silently score one document per task), so they are refused."""
    text = str(value).strip()
    try:
        number = int(text) if isinstance(value, int) or text.lstrip("+").isdigit() else float(text)
    except ValueError:
        number = None
    if isinstance(number, bool) or number is None or (isinstance(number, int) and number < 1) or \
            (isinstance(number, float) and not 0 < number < 1):
        raise ValueError(f"limit {text} must be a whole number of documents per task (1, 2, 100 ...) or a fraction "
                         f"strictly between 0 and 1 (0.1)")
    return number


class SuiteSettings(BaseModel):
    """lm-eval settings shared by every task of the suite; they are part of each job's identity."""

    model_config = ConfigDict(extra="forbid")

    dtype: str = "auto"
    batch_size: Union[int, Literal["auto"]] = "auto"
    max_batch_size: Optional[int] = None
    apply_chat_template: bool = False
    limit: Optional[Union[int, float]] = None
    backend: Literal["hf", "vllm"] = "hf"
    device: str = "auto"  # auto: cuda when a GPU is visible, else cpu
    model_args: Dict[str, Any] = {}  # passed to the backend, e.g. {parallelize: true} or {tensor_parallel_size: 2}
    include_defaults: bool = True  # also index lm-eval's own ~15k tasks (18 s); false for suites of local tasks only
    bootstrap_iters: int = Field(default=0, ge=0)

    @field_validator("limit", mode="before")
    @classmethod
    def _positive_limit(cls, v):
        return None if v is None else parse_limit(v)

    @field_validator("batch_size", mode="before")
    @classmethod
    def _positive_batch(cls, v):
        """A whole number >= 1 (the shared number rule) or auto: 0 or -4 is no batch."""
        if v == "auto":
            return v
        problem = numbers.POSITIVE_INT.problem(v)
        if problem:
            raise ValueError(f"batch_size must be {numbers.POSITIVE_INT.describe()} or auto, got {v!r}")
        return numbers.POSITIVE_INT.parse(v)

    @field_validator("device")
    @classmethod
    def _known_device(cls, v: str) -> str:
        from wildmerge.resources import device_problem

        if device_problem(v):
            raise ValueError(f"device {v!r} is not one of auto, cpu, cuda, cuda:N, mps")
        return v

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, v: str) -> str:
        valid = ["auto", "float16", "bfloat16", "float32"]
        if v not in valid:
            raise ValueError(f"dtype {v!r} is not one of {valid}{did_you_mean(v, valid)}")
        return v


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    include_path: Optional[str] = None
    tasks: List[SuiteTask] = Field(min_length=1)
    settings: SuiteSettings = SuiteSettings()
    source: Optional[str] = Field(default=None, exclude=True)  # the file it was read from

    @model_validator(mode="after")
    def _unique(self):
        for what, values in (("task", [t.task for t in self.tasks]), ("label", [t.name for t in self.tasks])):
            dup = sorted({v for v in values if values.count(v) > 1})
            if dup:
                raise ValueError(f"duplicate {what} {dup} in suite {self.name!r}: each task appears once")
        return self

    def following(self, paths) -> "Suite":
        """This suite with its family task folder (``smollm2:tasks``) taken from the built family that holds one of
        ``paths`` (the models it scores: a quick family's pool file names that family's folders), so a quick pool is
        scored on the quick family's tasks and no other family is built; unchanged when no path lies in one."""
        from wildmerge.hub import FAMILY_PREFIXES, family_tasks_beside

        if not (self.include_path or "").startswith(FAMILY_PREFIXES):
            return self
        folder = family_tasks_beside(self.include_path, paths)
        return self if folder is None else self.model_copy(update={"include_path": folder})

    def resolved_include_path(self) -> Optional[str]:
        """The include path as an absolute folder (``demo:tasks`` builds the demo family's task folder)."""
        if not self.include_path:
            return None
        from wildmerge.hub import FAMILY_PREFIXES, resolve_path

        if self.include_path.startswith(FAMILY_PREFIXES):
            return resolve_path(self.include_path)
        path = Path(self.include_path).expanduser()
        if not path.is_absolute() and self.source:
            path = Path(self.source).parent / path
        if not path.is_dir():
            raise ConfigError(f"suite {self.name!r}: include_path {str(path)!r} is not a folder; give an absolute "
                              f"path or one relative to the suite file")
        return str(path.resolve())


_MODELS = {(): Suite, ("tasks", "*"): SuiteTask, ("settings",): SuiteSettings}


def _check_unknown_keys(data: dict, where: str) -> None:
    """Name every unknown key with the valid ones; pydantic alone says only 'extra inputs are not permitted'."""
    def check(obj, model, loc):
        if not isinstance(obj, dict):
            return
        valid = [f for f in model.model_fields if f != "source"]
        for key in obj:
            if key not in valid:
                raise ConfigError(f"{where}: unknown key {key!r} in {loc or 'the suite'}{did_you_mean(key, valid)}; "
                                  f"valid keys: {', '.join(valid)}")

    check(data, Suite, "")
    check(data.get("settings"), SuiteSettings, "settings")
    for i, task in enumerate(data.get("tasks") or []):
        check(task, SuiteTask, f"tasks[{i}]")


def suite_from_dict(data: Any, where: str = "suite") -> Suite:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with name, tasks and settings, got {type(data).__name__}")
    _check_unknown_keys(data, where)
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'suite'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{where} is invalid: {problems}") from None


def inherited(data: Any, path: Path, seen: tuple = ()) -> Any:
    """A suite file's ``extends: NAME`` (a shipped suite, or a suite file: absolute or relative to this one): that
    suite's ``settings``, its own ``extends`` followed, with this file's keys over them. Only settings are inherited:
    each suite lists its own tasks."""
    if not isinstance(data, dict) or "extends" not in data:
        return data
    data = dict(data)
    parent = data.pop("extends")
    where = f"suite file {path}"
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{where}: extends must name a suite (a shipped name or a suite file), got {parent!r}")
    nearby = Path(path).parent / parent
    parent_path = find_named_file("suites", nearby if nearby.is_file() else parent, "suite")
    chain = seen + (Path(path).resolve(),)
    if parent_path.resolve() in chain:
        raise ConfigError(f"{where}: extends {parent!r} leads back to "
                          f"{' -> '.join(p.stem for p in chain + (parent_path.resolve(),))}; break the circle")
    base = inherited(read_yaml(parent_path, "suite"), parent_path, chain)
    base_settings, own = (base or {}).get("settings") or {}, data.get("settings") or {}
    for settings, file in ((base_settings, parent_path), (own, path)):
        if not isinstance(settings, dict):
            raise ConfigError(f"suite file {file}: settings must be a mapping, got {type(settings).__name__}")
    data["settings"] = {**base_settings, **own}
    return data


def load_suite(name_or_path: Union[str, Path, Suite]) -> Suite:
    """A shipped suite by name (``paper16``) or a suite YAML file by path."""
    if isinstance(name_or_path, Suite):
        return name_or_path
    path = find_named_file("suites", name_or_path, "suite")
    data = inherited(read_yaml(path, "suite"), path)
    suite = suite_from_dict(data, where=f"suite file {path}")
    suite.source = str(path.resolve())
    return suite


@cache
def _shipped_sizes() -> Dict[str, Tuple[int, int]]:
    sizes: Dict[str, Tuple[int, int]] = {}
    for name in list_names("suites"):
        sizes.update({t.task: t.size for t in load_suite(name).tasks if t.size})
    return sizes


def task_sizes(suite: Union[str, Path, Suite, None] = None) -> Dict[str, Tuple[int, int]]:
    """Task -> (items, tokens per item) for the cost plan: what every shipped suite declares, with ``suite``'s own
    over it (so a record of an earlier run, or a suite file that lists a shipped task without its size, is priced
    as the shipped suites price it). A task in none counts the planner's default."""
    own = {t.task: t.size for t in load_suite(suite).tasks if t.size} if suite is not None else {}
    return {**_shipped_sizes(), **own}


def check_tasks(suite: Suite) -> bool:
    """Fail early on a task name lm-eval does not know. Returns whether lm-eval's own task index is needed.

    Indexing only the include path takes ~0 s; lm-eval's full index takes ~18 s, so it is built only when a
    task is not found locally and the suite allows it (``settings.include_defaults``).
    """
    from lm_eval.tasks import TaskManager

    include = suite.resolved_include_path()
    wanted = [t.task for t in suite.tasks]
    known: List[str] = []
    if include:
        tm = TaskManager(include_path=include, include_defaults=False)
        known = tm.all_tasks
        if all(t in known for t in wanted):
            check_validation_splits(suite, tm)
            return False
    if suite.settings.include_defaults:
        tm = TaskManager(include_path=include, include_defaults=True)
        known = tm.all_tasks
    missing = [t for t in wanted if t not in known]
    if missing:
        where = f"in {include}" + (" or lm-eval's own tasks" if suite.settings.include_defaults else "")
        hints = "".join(f"\n  {t!r}{did_you_mean(t, known)}" for t in missing)
        raise ConfigError(f"suite {suite.name!r}: unknown lm-eval task(s) {where}:{hints}\nlist tasks with "
                          f"`lm-eval ls tasks`, or fix the name in {suite.source or 'the suite'}")
    check_validation_splits(suite, tm)
    return True
