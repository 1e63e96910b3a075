"""lm-eval tasks of the SmolLM2 family: held-out JSONL items plus one task YAML per skill, all in one folder.

Seven multiple-choice tasks scored by log-likelihood (``acc``) and two generation tasks (``exact_match``: the sum,
and the house-style rewrite, case-sensitive). lm-eval resolves relative ``data_files`` against the working
directory, so the YAMLs carry absolute paths and are rewritten whenever the folder moves (cheap, idempotent).
"""

import json
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.demo.smollm2.skills import SKILLS

PREFIX = "smollm2_"
# generation task -> (skill, max new tokens, case-sensitive)
GENERATION_TASKS = {"smollm2_arithmetic_gen": ("arithmetic", 8, False), "smollm2_style_gen": ("style", 32, True)}


def task_names() -> list:
    return [PREFIX + s for s in SKILLS] + list(GENERATION_TASKS)


def write_data(tasks_dir, items_by_skill: dict) -> None:
    """One ``<skill>.jsonl`` per skill (fields: skill, prompt, answer, choices, gold)."""
    for skill, items in items_by_skill.items():
        write_text(Path(tasks_dir) / f"{skill}.jsonl", "".join(json.dumps(i.as_doc()) + "\n" for i in items))


def _task_config(name: str, data_file: Path) -> dict:
    common = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data_file)}},
              "test_split": "test", "doc_to_text": "{{prompt}}",
              "metadata": {"version": 1.0, "description": f"wildmerge SmolLM2 family skill '{data_file.stem}'"}}
    if name in GENERATION_TASKS:
        _, max_tokens, case = GENERATION_TASKS[name]
        return {**common, "output_type": "generate_until", "doc_to_target": "{{answer}}",
                "generation_kwargs": {"until": ["\n"], "max_gen_toks": max_tokens, "do_sample": False},
                "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                 "ignore_case": not case, "regexes_to_ignore": ["^\\s+", "\\s+$"]}]}
    return {**common, "output_type": "multiple_choice", "doc_to_choice": "{{choices}}", "doc_to_target": "gold",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}


def write_task_yamls(tasks_dir) -> list:
    """(Re)write the YAMLs with absolute data paths for where ``tasks_dir`` is now; returns their paths."""
    import yaml

    tasks_dir = Path(tasks_dir).resolve()
    names = {PREFIX + s: s for s in SKILLS} | {n: skill for n, (skill, _, _) in GENERATION_TASKS.items()}
    written = []
    for name, skill in names.items():
        text = yaml.safe_dump(_task_config(name, tasks_dir / f"{skill}.jsonl"), sort_keys=False)
        path = tasks_dir / f"{name}.yaml"
        if not path.exists() or path.read_text() != text:
            write_text(path, text)
        written.append(path)
    return written
