"""The bandit on a synthetic pool whose scores are known: it spends more on the good arm, stays within its
budget, is the same for one seed and different across seeds, and a replay of recorded scores is the search."""

import zlib

import numpy as np
import pytest

from wildmerge.eval.screening.stats import screen_items
from wildmerge.search.bandit import EXPERT, Space, choose, search

SIZES = {"a": 400, "b": 400}
NAMES = [f"e{i}" for i in range(8)]
MEANS = {"good": 0.75, "bad": 0.35, EXPERT: 0.45}  # per method; a subset's score wobbles around its method's


def _cid(arm, subset):
    return f"{arm[0]}__{'+'.join(subset)}"


def _truth(cid: str) -> float:
    method = cid.split("__")[0]
    wobble = (sum(int(e[1:]) for e in cid.split("__")[1].split("+")) % 5) / 100
    return MEANS[method] + wobble


def _scorer(calls: list):
    """Per-item 0/1 scores fixed per candidate (its own seeded draw), cut to the fraction's items."""
    cache = {}

    def evaluate(ids, fraction):
        subset = screen_items(SIZES, fraction, seed=0)
        out = {}
        for c in ids:
            if c not in cache:
                p = 0.5 if c == "base" else _truth(c)
                rng = np.random.default_rng(zlib.crc32(c.encode()))
                cache[c] = {t: (rng.random(n) < p).astype(float) for t, n in SIZES.items()}
            items = {t: cache[c][t][subset[t]] for t in SIZES}
            calls.append((c, fraction))
            out[c] = (items, sum(len(v) for v in items.values()))
        return out
    return evaluate


def _run(seed=0, rule="thompson", budget=12.0, **kw):
    calls = []
    space = Space.every(NAMES, ["good", "bad"], range(2, 6))
    return search(space, _scorer(calls), budget, _cid, seed=seed, rule=rule, iters=200, **kw), calls


def test_more_candidates_in_the_good_arm_and_the_winner_is_from_it():
    result, _ = _run()
    methods = [c["method"] for c in result["candidates"].values()]
    assert methods.count("good") > 2 * methods.count("bad")
    assert result["winner"].startswith("good__")
    random, _ = _run(rule="random")
    assert methods.count("good") > [c["method"] for c in random["candidates"].values()].count("good")


def test_the_budget_is_respected_and_counted():
    for budget in (2.0, 5.0, 12.0):
        result, calls = _run(budget=budget)
        spent = sum(len(v) for _, f in calls for v in screen_items(SIZES, f, 0).values())
        assert result["items_spent"] == spent <= budget * 800
        assert result["items_per_model"] == 800
        assert calls[0] == ("base", 1.0) and [c for c, _ in calls].count("base") == 1
    with pytest.raises(ValueError, match="budget"):
        _run(budget=1.5)


def test_deterministic_per_seed_and_different_across_seeds():
    a, _ = _run(seed=1)
    b, _ = _run(seed=1)
    c, _ = _run(seed=2)
    assert list(a["candidates"]) == list(b["candidates"]) and a["winner"] == b["winner"]
    assert list(a["candidates"]) != list(c["candidates"])


def test_experts_are_candidates_and_arms_draw_without_repeats():
    rng = np.random.default_rng(0)
    space = Space.every(["x", "y", "z"], ["ta"], [2, 3])
    assert (EXPERT, 1) in space.arms
    drawn = [space.draw(("ta", 2), rng) for _ in range(4)]
    assert sorted(drawn[:3]) == [("x", "y"), ("x", "z"), ("y", "z")] and drawn[3] is None
    assert {space.draw((EXPERT, 1), rng) for _ in range(3)} == {("x",), ("y",), ("z",)}
    recorded = Space(["x", "y", "z"], {("ta", 2): [("x", "y")]})  # a replay: only what was recorded
    assert recorded.draw(("ta", 2), rng) == ("x", "y") and recorded.draw(("ta", 2), rng) is None


def test_thompson_prefers_the_arm_that_scored_well():
    rng = np.random.default_rng(0)
    observed = {("good", 2): [0.8, 0.78], ("bad", 2): [0.3, 0.32]}
    picks = [choose([("good", 2), ("bad", 2)], observed, rng, "thompson") for _ in range(200)]
    assert picks.count(("good", 2)) > 190
    # an arm never tried borrows its method's mean: ("good", 3) beats ("bad", 3)
    picks = [choose([("good", 3), ("bad", 3)], observed, rng, "thompson") for _ in range(200)]
    assert picks.count(("good", 3)) > 150
