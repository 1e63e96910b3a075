"""The demo suite's larger variant (``demo_large``): enough items per task to tell two merges apart.

The demo suite's 100 held-out items per task give a paired 95 % interval of about +-4.5 points on the difference of
two merges' suite means, wider than most differences the search must resolve. ``demo:large_tasks`` holds the same six
tasks over more items from the same generators (``skills.py``): each task's held-out items first (so the demo suite's
items are among them), then fresh prompts, up to ``LARGE_ITEMS`` unique prompts per task or as many as the generator
has (addition: 20 x 20 operands, 400 prompts; facts: every fact of the world, 2 per entity). The extra prompts were
not held out from training, so an expert may have seen some of them: the large suite measures what a merge keeps of
its experts' skills as much as how they generalise. Derived data (rewritten when absent or different, never part of
the family's checksums): the family's weights, its cache key and its ``tasks/`` stay as they are.
"""

import random
from pathlib import Path

from wildmerge.families import tasks as T
from wildmerge.families.demo import spec as S
from wildmerge.families.demo.skills import SKILLS, eval_items, make_world, sample_item
from wildmerge.families.demo.tasks import GENERATION, GENERATION_TASKS

LARGE_ITEMS = 1000
FOLDER = "tasks_large"
PREFIX = "demo_large_"
TRIES = 200  # draws per wanted item before a generator counts as exhausted


def large_items(skill: str, n: int, seed: int, world: dict, held: int) -> list:
    """``held`` held-out items of ``skill`` (the demo suite's), then fresh unique prompts up to ``n`` (fewer when the
    generator runs out of prompts)."""
    if skill == "facts":
        return eval_items(skill, n, seed, world)  # every fact of the world (the demo suite has them all)
    items = eval_items(skill, held, seed, world)
    seen = {item.prompt for item in items}
    rng = random.Random(f"large-{skill}-{seed}")
    for _ in range(TRIES * n):
        if len(items) >= n:
            break
        item = sample_item(rng, skill, world)
        if item.prompt not in seen:
            seen.add(item.prompt)
            items.append(item)
    return items


def write_large_tasks(info: dict) -> str:
    """Write ``<family>/tasks_large/`` (items and task YAMLs) where absent or different; returns its path."""
    import json

    from wildmerge.families.cache import write_if_changed
    from wildmerge.families.items import jsonl

    manifest = json.loads(Path(info["manifest"]).read_text())
    bs = S.build_spec(manifest["quick"])
    world = make_world(manifest["seed"], bs.n_entities)
    out = Path(info["root"]) / FOLDER
    out.mkdir(exist_ok=True)
    for skill in SKILLS:
        items = large_items(skill, LARGE_ITEMS, manifest["seed"], world, bs.eval_items)
        write_if_changed(out / f"{skill}.jsonl", jsonl(i.as_doc() for i in items))
    generation = {PREFIX + t.removeprefix("demo_"): s for t, s in GENERATION_TASKS.items()}
    skills = {PREFIX + s: s for s in SKILLS} | generation
    T.write_task_yamls(out, skills, "wildmerge demo skill '{skill}', large suite",
                       dict.fromkeys(generation, GENERATION))
    return str(out)
