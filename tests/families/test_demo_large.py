"""The demo suite's large variant: the same generators, the demo suite's held-out items first, up to 1,000 unique
prompts per task, written beside the family without touching its checksummed files or its key."""

import json
from pathlib import Path

from wildmerge.eval.suites import load_suite
from wildmerge.families.demo import spec as S
from wildmerge.families.demo.family import ensure_family, family_key, problem
from wildmerge.families.demo.large import LARGE_ITEMS, large_items, write_large_tasks
from wildmerge.families.demo.skills import SKILLS, eval_items, make_world


def test_large_items_start_with_the_held_out_ones_and_are_unique():
    world = make_world(0, S.build_spec(False).n_entities)
    for skill in SKILLS:
        held = eval_items(skill, 100, 0, world)
        large = large_items(skill, LARGE_ITEMS, 0, world, 100)
        prompts = [i.prompt for i in large]
        assert len(set(prompts)) == len(prompts)
        assert {i.prompt for i in held} <= set(prompts)
        if skill in ("compare", "reverse", "count"):
            assert len(large) == LARGE_ITEMS and large[:100] == held
    assert len(large_items("add", LARGE_ITEMS, 0, world, 100)) == 400  # every 20 x 20 addition prompt
    assert len(large_items("facts", LARGE_ITEMS, 0, world, 100)) == 2 * S.build_spec(False).n_entities


def test_written_beside_the_family_which_stays_intact(tmp_path):
    info = ensure_family(tmp_path, seed=0, quick=True, progress=False)
    files = json.loads(Path(info["manifest"]).read_text())["files"]
    folder = Path(write_large_tasks(info))
    assert folder.parent == Path(info["root"]) and Path(info["root"]).name == family_key(0, True)
    assert problem(info["root"]) is None and json.loads(Path(info["manifest"]).read_text())["files"] == files
    suite = load_suite("demo_large")
    for task in suite.tasks:
        assert (folder / f"{task.task}.yaml").is_file()
    lines = (folder / "compare.jsonl").read_text().splitlines()
    assert len(lines) == LARGE_ITEMS
    assert write_large_tasks(info) == str(folder)  # idempotent
