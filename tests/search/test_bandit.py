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


def test_every_method_and_the_experts_are_drawn_before_the_search_learns():
    for seed in range(4):
        result, _ = _run(seed=seed)
        first = [c["method"] for c in result["candidates"].values() if c["bracket"] == 0]
        assert set(first[:3]) == {"good", "bad", EXPERT}  # one arm of each, in a seeded order, then Thompson


def test_the_experts_arm_counts_once_per_untried_expert():
    """Each untried expert is an arm of its own: uniform draws pick the experts arm in proportion to how many are
    left, and Thompson's chance for it is the float64 integral of max-of-u draws against the merge arm's draw."""
    from scipy.stats import norm

    arms = [("ta", 2), (EXPERT, 1)]
    rng = np.random.default_rng(3)
    picks = [choose(arms, {}, rng, "random", units={(EXPERT, 1): 9}) for _ in range(4000)]
    assert abs(picks.count((EXPERT, 1)) / 4000 - 0.9) < 0.02
    observed = {("ta", 2): [0.6, 0.5], (EXPERT, 1): [0.55]}
    scale = float(np.std([0.6, 0.5, 0.55]))
    m_ta, sd_ta = (0.6 + 0.5 + 0.55) / 3, scale / np.sqrt(3)  # two own scores and the method's mean as a prior
    m_ex = (0.55 + 0.55) / 2
    x = np.linspace(m_ta - 10 * sd_ta, m_ta + 10 * sd_ta, 20001)
    for u in (1, 5):
        ta_wins = np.trapezoid(norm.pdf(x, m_ta, sd_ta) * norm.cdf(x, m_ex, scale) ** u, x)
        want = 1 - ta_wins if u > 1 else None
        picks = [choose(arms, observed, rng, "thompson", units={(EXPERT, 1): u}) for _ in range(4000)]
        got = picks.count((EXPERT, 1)) / 4000
        if want is not None:
            assert abs(got - want) < 0.03
        else:  # one expert left: an ordinary arm, N(0.55, scale / sqrt(2)) against N(0.55, scale / sqrt(3))
            assert abs(got - 0.5) < 0.03


def test_the_default_bracket_shrinks_until_four_fit():
    from wildmerge.search.bandit import MIN_BRACKETS, default_bracket
    from wildmerge.search.halving import bracket_cost, rung_costs

    costs = rung_costs(SIZES, 0.125, 2.0, 0)  # rungs 1/8, 1/4, 1/2, 1 of 800 items
    assert default_bracket(costs, 2.0, 100 * 800, 4) == 8  # plenty: one survivor of 8 reaches every item
    for left in (800, 4 * 800, 6 * 800, 10 * 800, 20 * 800):
        n = default_bracket(costs, 2.0, left, 4)
        assert n in (2, 4, 8)
        assert n == 2 or MIN_BRACKETS * bracket_cost(n, costs, 2.0) <= left
        assert n == 8 or MIN_BRACKETS * bracket_cost(2 * n, costs, 2.0) > left  # the largest that fits
    # by hand: a bracket of 4 is 4 x 100 + 2 x 200 + 800 (a lone survivor skips to every item) = 1,600 items
    assert bracket_cost(4, costs, 2.0) == 1600 and default_bracket(costs, 2.0, 4 * 1600, 4) == 4


def test_a_size_that_scored_well_for_one_method_is_lent_to_the_others():
    from wildmerge.search.bandit import size_effect

    observed = {("ta", 2): [0.5], ("ties", 2): [0.4], ("ta", 4): [0.7], (EXPERT, 1): [0.9]}
    means = {"ta": 0.6, "ties": 0.4, EXPERT: 0.9}
    assert size_effect(observed, means, 2) == pytest.approx(((0.5 - 0.6) + (0.4 - 0.4)) / 2)
    assert size_effect(observed, means, 4) == pytest.approx(0.1)
    assert size_effect(observed, means, 3) == 0.0 and size_effect(observed, means, 1) == 0.0  # experts lend nothing
    # ties at 4: N(0.4 + 0.1, scale); ties at 2: its score 0.4 and the prior 0.4 - 0.05, N(0.375, scale / sqrt 2)
    from scipy.stats import norm

    scale = float(np.std([0.5, 0.4, 0.7, 0.9]))
    want = norm.cdf((0.5 - 0.375) / np.sqrt(scale ** 2 + scale ** 2 / 2))
    rng = np.random.default_rng(0)
    picks = [choose([("ties", 4), ("ties", 2)], observed, rng, "thompson") for _ in range(4000)]
    assert abs(picks.count(("ties", 4)) / 4000 - want) < 0.03 and want > 0.6
