"""Successive halving on known item scores: the true best merge wins, weak ones stop early, costs add up."""

import numpy as np
import pytest

from wildmerge.search.halving import bracket_cost, fractions, halve, rung_costs
from wildmerge.eval.screening.stats import screen_items

SIZES = {"a": 200, "b": 200}


def _pool(means: dict, seed: int = 0) -> dict:
    """Fully scored 0/1 items per candidate, with the given per-item success probabilities."""
    rng = np.random.default_rng(seed)
    return {c: {t: (rng.random(n) < p).astype(float) for t, n in SIZES.items()} for c, p in means.items()}


def _evaluator(full: dict, calls: list):
    def evaluate(candidates, fraction):
        subset = screen_items(SIZES, fraction, seed=0)
        calls.extend((c, fraction) for c in candidates)
        items = {c: {t: full[c][t][idx] for t, idx in subset.items()} for c in candidates}
        return {c: (v, sum(len(x) for x in v.values())) for c, v in items.items()}
    return evaluate


def test_rungs_are_nested_fractions_ending_at_every_item():
    assert fractions(0.125, 2) == [0.125, 0.25, 0.5, 1.0]
    assert fractions(1.0, 3) == [1.0]
    with pytest.raises(ValueError):
        fractions(0.1, 1.0)


def test_the_best_merge_wins_and_its_score_is_a_full_evaluation():
    means = {"good": 0.8, "mid": 0.6, **{f"weak{i}": 0.2 for i in range(6)}}
    full = _pool(means)
    calls, log = [], []
    result = halve(list(means), _evaluator(full, calls), first=0.125, eta=2, log=log.append, rung0=3)
    assert result["winner"] == "good"
    assert result["score"] == pytest.approx(np.mean([full["good"][t].mean() for t in SIZES]))
    assert ("good", 1.0) in calls
    assert [r["rung"] for r in log] == [3 + i for i in range(len(log))]
    # the weak merges stop at the first rung: worse than the leader on 1/8 of the items already
    first = log[0]["decisions"]
    assert all(first[f"weak{i}"]["decision"].startswith("stopped") for i in range(6))
    assert not any(c.startswith("weak") and f > 0.125 for c, f in calls)
    spent = sum(len(v) for c, f in calls for v in screen_items(SIZES, f, 0).values())
    costs = rung_costs(SIZES, 0.125, 2, 0)
    assert result["items_spent"] == spent <= bracket_cost(8, costs, 2) < 8 * 400
    assert result["first_scores"]["weak0"][0] == 0.125


def test_bracket_cost_is_the_worst_case_of_the_rungs():
    costs = rung_costs(SIZES, 0.125, 2, 0)
    assert costs == {0.125: 50, 0.25: 100, 0.5: 200, 1.0: 400}
    assert bracket_cost(1, costs, 2) == 400  # a lone candidate goes straight to every item
    assert bracket_cost(8, costs, 2) == 8 * 50 + 4 * 100 + 2 * 200 + 400
