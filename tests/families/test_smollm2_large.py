"""The SmolLM2 suite's large variant: the family's own test items first, then more distinct prompts of the same
held-out split (never a training item), written beside the family without touching its checksummed files."""

import json
import random
from pathlib import Path

from wildmerge.eval.suites import load_suite
from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.family import ensure_family, problem
from wildmerge.families.smollm2.large import LARGE_ITEMS, large_items, write_large_tasks
from wildmerge.families.smollm2.skills import SKILLS, eval_items, make_kb, sample_item


def test_large_items_start_with_the_suites_and_are_unique_test_items():
    kb = make_kb(0, S.build_spec(False).n_countries)
    rng = random.Random(7)
    train = {s: {sample_item(rng, s, kb, "train").prompt for _ in range(500)} for s in SKILLS}
    for skill in SKILLS:
        held = eval_items(skill, 100, 0, kb)
        large = large_items(skill, 0, kb)
        prompts = [i.prompt for i in large]
        assert len(set(prompts)) == len(prompts) <= LARGE_ITEMS
        assert large[:len(held)] == held
        assert not train[skill] & set(prompts)
        if skill != "facts":  # facts: every country x test template, fewer than 100
            assert len(large) >= 100
    assert len(large_items("arithmetic", 0, kb)) == LARGE_ITEMS


def test_written_beside_the_family_which_stays_intact(tmp_path):
    info = ensure_family(tmp_path, seed=0, quick=True, progress=False)
    files = json.loads(Path(info["manifest"]).read_text())["files"]
    folder = Path(write_large_tasks(info))
    assert folder.parent == Path(info["root"])
    assert problem(info["root"]) is None and json.loads(Path(info["manifest"]).read_text())["files"] == files
    for task in load_suite("smollm2_large").tasks:
        assert (folder / f"{task.task}.yaml").is_file()
    assert len((folder / "arithmetic.jsonl").read_text().splitlines()) == LARGE_ITEMS
    assert write_large_tasks(info) == str(folder)  # idempotent
