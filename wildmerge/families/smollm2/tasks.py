"""lm-eval tasks of the SmolLM2 family: one task YAML per skill over its held-out items (``<skill>.jsonl``), all in
one folder.

Seven multiple-choice tasks scored by log-likelihood (``acc``) and two generation tasks (``exact_match``: the sum,
and the house-style rewrite, case-sensitive). The YAMLs are written by the families' shared ``tasks.py``.
"""

from wildmerge.families.smollm2.skills import SKILLS
from wildmerge.families import tasks as T

PREFIX = "smollm2_"
TRIM = ("^\\s+", "\\s+$")  # leading and trailing white space
# generation task -> (skill, its settings); the style rewrite is case-sensitive
GENERATION_TASKS = {
    "smollm2_arithmetic_gen": ("arithmetic", T.Generation(max_tokens=8, ignore_case=True, ignore=TRIM)),
    "smollm2_style_gen": ("style", T.Generation(max_tokens=32, ignore_case=False, ignore=TRIM)),
}


def task_names() -> list:
    return [PREFIX + s for s in SKILLS] + list(GENERATION_TASKS)


def write_task_yamls(tasks_dir) -> list:
    """(Re)write the YAMLs with absolute data paths for where ``tasks_dir`` is now; returns their paths."""
    skills = {PREFIX + s: s for s in SKILLS} | {name: skill for name, (skill, _) in GENERATION_TASKS.items()}
    return T.write_task_yamls(tasks_dir, skills, "wildmerge SmolLM2 family skill '{skill}'",
                              {name: generation for name, (_, generation) in GENERATION_TASKS.items()})
