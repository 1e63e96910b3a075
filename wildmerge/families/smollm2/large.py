"""The SmolLM2 suite's larger variant (``smollm2_large``): as many test items per task as the generators have.

The family's suite scores 100 held-out items per task (``smollm2.yml`` reads 50 of them by default), too few to tell
two merges apart. ``smollm2:large_tasks`` holds the same nine tasks over more items of the same test split: every
skill's test items are drawn by ``skills.eval_items`` with the same seeded stream, so the family's 100 come first,
up to ``LARGE_ITEMS`` distinct prompts per task or as many as the test split has (facts: every country x test
template). Unlike the demo's large suite no item was trained on: the test split is a fixed held-out part of each
question space. Derived data (rewritten when absent or different, outside the family's checksums): the family's
weights, its cache key and its ``tasks/`` stay as they are.
"""

import json
from pathlib import Path

from wildmerge.families import tasks as T
from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.skills import SKILLS, eval_items, make_kb
from wildmerge.families.smollm2.tasks import GENERATION_TASKS
from wildmerge.families.smollm2.tasks import PREFIX as SUITE_PREFIX

LARGE_ITEMS = 1000
FOLDER = "tasks_large"
PREFIX = "smollm2_large_"


def large_items(skill: str, seed: int, kb: dict) -> list:
    """The skill's test items, ``LARGE_ITEMS`` distinct prompts or every one its test split has."""
    return eval_items(skill, LARGE_ITEMS, seed, kb)


def write_large_tasks(info: dict) -> str:
    """Write ``<family>/tasks_large/`` (items and task YAMLs) where absent or different; returns its path."""
    from wildmerge.families.cache import write_if_changed
    from wildmerge.families.items import jsonl

    manifest = json.loads(Path(info["manifest"]).read_text())
    kb = make_kb(manifest["seed"], S.build_spec(manifest["quick"]).n_countries)
    out = Path(info["root"]) / FOLDER
    out.mkdir(exist_ok=True)
    for skill in SKILLS:
        write_if_changed(out / f"{skill}.jsonl", jsonl(i.as_doc() for i in large_items(skill, manifest["seed"], kb)))
    generation = {PREFIX + name.removeprefix(SUITE_PREFIX): (skill, g) for name, (skill, g) in GENERATION_TASKS.items()}
    skills = {PREFIX + s: s for s in SKILLS} | {name: skill for name, (skill, _) in generation.items()}
    T.write_task_yamls(out, skills, "wildmerge SmolLM2 family skill '{skill}', large suite",
                       {name: g for name, (_, g) in generation.items()})
    return str(out)
