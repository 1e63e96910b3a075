"""Successive halving on known item scores: the true best merge wins, weak ones stop early, costs add up."""

import numpy as np
import pytest

from wildmerge.search.candidates import interleave, proxy, ranked_subsets, spread_order
from wildmerge.search.halving import candidates_for, fractions, halve, planned_cost
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
    means = {"good": 0.8, "mid": 0.6, **{f"weak{i}": 0.2 for i in range(6)}, "base": 0.5}
    full = _pool(means)
    calls, log = [], []
    result = halve([c for c in means if c != "base"], _evaluator(full, calls), first=0.125, eta=2, log=log.append)
    assert result["winner"] == "good"
    assert result["score"] == pytest.approx(np.mean([full["good"][t].mean() for t in SIZES]))
    assert ("good", 1.0) in calls and ("base", 1.0) in calls
    assert result["vs_base"][1] > 0  # 0.8 against 0.5 on 400 paired items: clearly better
    # the weak merges stop at the first rung: worse than the leader on 1/8 of the items already
    first = log[0]["decisions"]
    assert all(first[f"weak{i}"]["decision"].startswith("stopped") for i in range(6))
    assert not any(c.startswith("weak") and f > 0.125 for c, f in calls)
    spent = sum(len(v) for c, f in calls for v in screen_items(SIZES, f, 0).values())
    assert result["items_spent"] == spent < 8 * 400  # cheaper than evaluating all 8 merges in full
    assert result["items_per_model"] == 400


def test_budget_sets_the_number_of_candidates():
    assert planned_cost(1, 0.125, 2) == 2.0  # the lone candidate and the base, both in full
    n = candidates_for(6, 0.125, 2, available=100)
    assert planned_cost(n, 0.125, 2) <= 6 < planned_cost(n + 1, 0.125, 2)
    assert candidates_for(6, 0.125, 2, available=3) == 3


def test_proxy_prefers_orthogonal_balanced_subsets_and_the_list_spreads_over_sizes():
    names = ["x", "y", "z"]
    cosine = np.array([[1, 0.9, 0.0], [0.9, 1, 0.0], [0.0, 0.0, 1]])
    norms = np.array([1.0, 1.0, 1.0])
    assert proxy([0, 2], cosine, norms) > proxy([0, 1], cosine, norms)
    assert proxy([0, 2], cosine, norms) > proxy([0, 2], cosine, np.array([1.0, 1.0, 5.0]))
    ranked = ranked_subsets(names, cosine, norms, [2, 3])
    assert ranked[2][0]["experts"] in (["x", "z"], ["y", "z"]) and ranked[2][-1]["experts"] == ["x", "y"]
    first = interleave(ranked, ["ta", "ties"], 4)
    assert [(c["size"], c["method"]) for c in first] == [(2, "ta"), (2, "ties"), (3, "ta"), (3, "ties")]


def test_sizes_are_tried_across_their_range_first():
    assert spread_order(range(2, 13)) == [2, 12, 7, 4, 9, 3, 5, 8, 10, 6, 11]
    assert sorted(spread_order(range(2, 13))) == list(range(2, 13))
    assert spread_order([2, 3]) == [2, 3]
