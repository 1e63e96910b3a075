"""lm-eval task YAMLs of an embedded family and of its probe: one YAML per task beside its JSONL data.

A family's tasks score a skill's held-out items by the log-likelihood of each option (``acc``) or by greedy
generation (``exact_match``); a probe task is multiple choice over a fixed label set with train / validation / test
splits. lm-eval resolves relative ``data_files`` against the working directory, not the YAML, so the YAMLs carry
absolute paths and are rewritten whenever the folder moves (cheap and idempotent: a file is rewritten only when its
text changes). The YAMLs are derived, never checksummed.
"""

from dataclasses import dataclass
from pathlib import Path

from wildmerge.families.cache import write_yaml

PROBE_SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class Generation:
    """A generation task: greedy until a newline, then an exact match after dropping ``ignore`` (regexes)."""

    max_tokens: int
    ignore_case: bool
    ignore: tuple


def _acc() -> list:
    return [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]


def task_config(name: str, data_file: Path, description: str, generation: Generation | None = None) -> dict:
    """A family task over ``data_file``'s test items: multiple choice, or generation when ``generation`` is given."""
    common = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data_file)}},
              "test_split": "test", "doc_to_text": "{{prompt}}",
              "metadata": {"version": 1.0, "description": description}}
    if generation:
        return {**common, "output_type": "generate_until", "doc_to_target": "{{answer}}",
                "generation_kwargs": {"until": ["\n"], "max_gen_toks": generation.max_tokens, "do_sample": False},
                "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                 "ignore_case": generation.ignore_case, "regexes_to_ignore": list(generation.ignore)}]}
    return {**common, "output_type": "multiple_choice", "doc_to_choice": "{{choices}}", "doc_to_target": "gold",
            "metric_list": _acc()}


def write_task_yamls(tasks_dir, skills: dict, description: str, generation: dict) -> list:
    """(Re)write the YAML of every task of ``skills`` (``{task: skill}``, data in ``<skill>.jsonl``) for where
    ``tasks_dir`` is now; ``description`` is formatted with the skill; ``generation``: ``{task: Generation}`` for the
    generation tasks. Returns the YAML paths."""
    tasks_dir = Path(tasks_dir).resolve()
    return [write_yaml(tasks_dir / f"{name}.yaml", task_config(name, tasks_dir / f"{skill}.jsonl",
                                                               description.format(skill=skill), generation.get(name)))
            for name, skill in skills.items()]


def probe_task_config(name: str, files: dict, description: str) -> dict:
    return {
        "task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": files},
        "training_split": "train", "validation_split": "validation", "test_split": "test",
        "output_type": "multiple_choice", "doc_to_text": "{{prompt}}", "doc_to_choice": "{{choices}}",
        "doc_to_target": "gold", "metric_list": _acc(), "metadata": {"version": 1.0, "description": description},
    }


def write_probe_task_yamls(tasks_dir, task_names, description: str) -> None:
    """(Re)write the YAMLs of the probe tasks ``task_names`` (data in ``<task>.<split>.jsonl``)."""
    tasks_dir = Path(tasks_dir).resolve()
    for name in task_names:
        files = {s: str(tasks_dir / f"{name}.{s}.jsonl") for s in PROBE_SPLITS}
        write_yaml(tasks_dir / f"{name}.yaml", probe_task_config(name, files, description))
