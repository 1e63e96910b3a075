"""lm-eval tasks of the demo: one task YAML per skill over its held-out items (``<skill>.jsonl``), all in one folder.

Five multiple-choice tasks scored by log-likelihood (``acc``) and one generation task (``exact_match``, ignoring
case and whitespace). The YAMLs are written by the families' shared ``tasks.py``.
"""

from wildmerge.families.demo.skills import SKILLS
from wildmerge.families import tasks as T

GENERATION_TASKS = {"demo_add_gen": "add"}
GENERATION = T.Generation(max_tokens=8, ignore_case=True, ignore=("\\s",))


def mc_task(skill: str) -> str:
    return f"demo_{skill}"


def task_names() -> list:
    return [mc_task(s) for s in SKILLS] + list(GENERATION_TASKS)


def write_task_yamls(tasks_dir) -> list:
    """(Re)write the task YAMLs with absolute data paths for where ``tasks_dir`` is now; returns the YAML paths."""
    skills = {mc_task(s): s for s in SKILLS} | GENERATION_TASKS
    return T.write_task_yamls(tasks_dir, skills, "wildmerge demo skill '{skill}'",
                              dict.fromkeys(GENERATION_TASKS, GENERATION))
