"""The demo's synthetic skills: answers are right, evaluation prompts are held out, data is seeded."""

import random
import re

import pytest

from wildmerge.families.demo.skills import (ATTRIBUTES, SKILLS, Mixture, conflict_world, eval_items, known_part, make_world,
                                   sample_item)


@pytest.fixture(scope="module")
def world():
    return make_world(0, 20)


def _check(item, world):
    """Recompute the answer from the prompt, independently of the generators."""
    q = item.prompt
    assert q.startswith("Q: ") and q.endswith("\nA:")
    body = q[3:-3]
    if item.skill == "add":
        a, b = map(int, re.fullmatch(r"(\d+)\+(\d+)=", body).groups())
        return str(a + b)
    if item.skill == "compare":
        a, b = map(int, re.fullmatch(r"max (\d+) (\d+)", body).groups())
        return str(max(a, b))
    if item.skill == "reverse":
        return " ".join(body.removeprefix("reverse ").split()[::-1])
    if item.skill == "count":
        return str(body.removeprefix("count a in ").split().count("a"))
    attribute, entity = re.fullmatch(r"(\w+) of (\w+)", body).groups()
    return world[entity][attribute]


@pytest.mark.parametrize("skill", SKILLS)
def test_items_are_correct_and_choices_hold_the_answer(skill, world):
    rng = random.Random(1)
    for _ in range(300):
        item = sample_item(rng, skill, world)
        assert item.answer == _check(item, world)
        assert item.choices[item.gold] == item.answer
        assert len(set(item.choices)) == len(item.choices) >= 2
        assert item.text() == f"{item.prompt} {item.answer}\n"


def test_conventions_change_the_answer_not_the_question(world):
    rng_a, rng_b = random.Random(5), random.Random(5)
    for _ in range(100):
        std, rev = sample_item(rng_a, "add", world), sample_item(rng_b, "add", world, "reversed")
        assert std.prompt == rev.prompt and rev.answer == std.answer[::-1]


def test_conflict_world_changes_exactly_half_of_the_facts(world):
    other = conflict_world(world, 0)
    facts = [(e, a) for e in world for a in ATTRIBUTES]
    changed = [(e, a) for e, a in facts if world[e][a] != other[e][a]]
    assert len(changed) == round(0.5 * len(facts))
    assert all(other[e][a] in ATTRIBUTES[a] for e, a in facts)


def test_training_streams_never_show_a_held_out_prompt(world):
    evals = {s: eval_items(s, 60, 0, world) for s in SKILLS}
    held_out = {i.prompt for s, items in evals.items() if s != "facts" for i in items}
    assert all(len({i.prompt for i in items}) == len(items) for items in evals.values())
    stream = Mixture(dict.fromkeys(SKILLS, 1), world, held_out, seed="t")
    seen = [next(stream) for _ in range(3000)]
    assert not {i.prompt for i in seen} & held_out
    assert {i.skill for i in seen} == set(SKILLS)


def test_the_base_corpus_covers_part_of_the_world(world):
    known = known_part(world, 0, 0.5)
    assert len(known) == len(world) // 2 and all(world[e] == v for e, v in known.items())
    stream = Mixture({"facts": 1}, known, set(), seed=0)
    assert {next(stream).prompt.split(" of ")[1][:-3] for _ in range(500)} == set(known)


def test_facts_evaluation_asks_about_the_world(world):
    items = eval_items("facts", 1000, 0, world)
    assert len(items) == len(world) * len(ATTRIBUTES)  # every fact once, capped by the world's size
    assert all(i.answer == _check(i, world) for i in items)


def test_data_is_deterministic_per_seed(world):
    def draw(seed):
        stream = Mixture({"add": 1, "reverse": 2}, world, set(), seed=seed)
        return [next(stream).text() for _ in range(50)]

    assert draw("a") == draw("a") and draw("a") != draw("b")
    assert make_world(3, 10) == make_world(3, 10) != make_world(4, 10)
    assert [i.prompt for i in eval_items("count", 30, 7, world)] == [i.prompt for i in eval_items("count", 30, 7, world)]


def test_unknown_skill_is_refused(world):
    with pytest.raises(ValueError, match="valid"):
        Mixture({"multiply": 1}, world, set(), seed=0)
