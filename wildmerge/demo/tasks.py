"""lm-eval tasks of the demo: held-out JSONL data plus one task YAML per skill, all in one folder.

Five multiple-choice tasks scored by log-likelihood (``acc``) and one generation task (``exact_match``).
lm-eval resolves relative ``data_files`` against the working directory, not the YAML, so the YAMLs carry
absolute paths and are rewritten whenever the folder moves (``write_task_yamls`` is cheap and idempotent).
"""

import json
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.demo.skills import SKILLS

GENERATION_TASKS = {"demo_add_gen": "add"}


def mc_task(skill: str) -> str:
    return f"demo_{skill}"


def task_names() -> list:
    return [mc_task(s) for s in SKILLS] + list(GENERATION_TASKS)


def write_data(tasks_dir, items_by_skill: dict) -> None:
    """One ``<skill>.jsonl`` per skill (fields: skill, prompt, answer, choices, gold)."""
    tasks_dir = Path(tasks_dir)
    tasks_dir.mkdir(parents=True, exist_ok=True)
    for skill, items in items_by_skill.items():
        lines = "".join(json.dumps(item.as_doc()) + "\n" for item in items)
        write_text(tasks_dir / f"{skill}.jsonl", lines)


def _task_config(name: str, skill: str, data_file: Path) -> dict:
    common = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "doc_to_text": "{{prompt}}",
        "metadata": {"version": 1.0, "description": f"wildmerge demo skill '{skill}'"},
    }
    if name in GENERATION_TASKS:
        return {
            **common,
            "output_type": "generate_until",
            "doc_to_target": "{{answer}}",
            "generation_kwargs": {"until": ["\n"], "max_gen_toks": 8, "do_sample": False},
            "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                             "ignore_case": True, "regexes_to_ignore": ["\\s"]}],
        }
    return {
        **common,
        "output_type": "multiple_choice",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "gold",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }


def write_task_yamls(tasks_dir) -> list:
    """(Re)write the task YAMLs with absolute data paths for where ``tasks_dir`` is now; returns the YAML paths."""
    import yaml

    tasks_dir = Path(tasks_dir).resolve()
    names = {mc_task(s): s for s in SKILLS} | GENERATION_TASKS
    written = []
    for name, skill in names.items():
        text = yaml.safe_dump(_task_config(name, skill, tasks_dir / f"{skill}.jsonl"), sort_keys=False)
        path = tasks_dir / f"{name}.yaml"
        if not path.exists() or path.read_text() != text:
            write_text(path, text)
        written.append(path)
    return written
