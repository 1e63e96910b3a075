"""The bandit on a synthetic pool whose scores are known: it spends more on the good arm, stays within its
budget, is the same for one seed and different across seeds, and a replay of recorded scores is the search."""

import zlib

import numpy as np
import pytest

from wildmerge.eval.screening.stats import screen_items
from wildmerge.search.bandit import EXPERT, Space, choose, pick, search

SIZES = {"a": 400, "b": 400}
NAMES = [f"e{i}" for i in range(8)]
MEANS = {"good": 0.75, "bad": 0.35, EXPERT: 0.45}  # per method; a subset's score wobbles around its method's


def _cid(arm, subset):
    return f"{arm[0]}__{'+'.join(subset)}"


def _truth(cid: str) -> float:
    method = cid.split("__")[0]
    wobble = (sum(int(e[1:]) for e in cid.split("__")[1].split("+")) % 5) / 100
    return MEANS[method] + wobble


def _scorer(calls: list, truth=None):
    """Per-item 0/1 scores fixed per candidate (its own seeded draw), cut to the fraction's items."""
    cache, truth = {}, truth or _truth

    def evaluate(ids, fraction):
        subset = screen_items(SIZES, fraction, seed=0)
        out = {}
        for c in ids:
            if c not in cache:
                p = 0.5 if c == "base" else truth(c)
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
        result, _ = _run(seed=seed, screen=False)
        first = [c["method"] for c in result["candidates"].values() if c["bracket"] == 0]
        assert set(first[:3]) == {"good", "bad", EXPERT}  # one arm of each, in a seeded order, then Thompson
        result, _ = _run(seed=seed)  # the experts screened first: then one arm of each method
        assert [c["method"] for c in result["candidates"].values()][:len(NAMES)] == [EXPERT] * len(NAMES)
        ranked = sorted((c for c in result["candidates"].values() if c["bracket"] == 0), key=lambda c: c["rank"])
        assert {c["method"] for c in ranked if not c.get("screened")} >= {"good", "bad"}


def test_the_experts_arm_counts_once_per_untried_expert():
    """Each untried expert is an arm of its own: uniform draws pick the experts arm in proportion to how many are
    left, and Thompson's chance for it is the float64 integral of max-of-u draws against the merge arm's draw (its
    mean's posterior plus one member, as wide as members of an arm differ)."""
    from scipy.stats import norm

    arms = [("ta", 2), (EXPERT, 1)]
    rng = np.random.default_rng(3)
    picks = [choose(arms, {}, rng, "random", units={(EXPERT, 1): 9}) for _ in range(4000)]
    assert abs(picks.count((EXPERT, 1)) / 4000 - 0.9) < 0.02
    observed = {("ta", 2): [0.6, 0.5], (EXPERT, 1): [0.55]}
    scale = float(np.std([0.6, 0.5]))  # the merges' first-rung scores
    within = np.sqrt(((0.6 - 0.55) ** 2 + (0.5 - 0.55) ** 2) / 1)  # around their arm's mean, one degree of freedom
    m_ta = (0.6 + 0.5 + 0.55) / 3  # two own scores and the method's mean as a prior
    sd_ta = np.sqrt(scale ** 2 / 3 + within ** 2)
    m_ex = (0.55 + 0.55) / 2
    x = np.linspace(m_ta - 10 * sd_ta, m_ta + 10 * sd_ta, 20001)
    for u in (1, 5):
        ta_wins = np.trapezoid(norm.pdf(x, m_ta, sd_ta) * norm.cdf(x, m_ex, scale) ** u, x)
        want = 1 - ta_wins if u > 1 else None
        picks = [choose(arms, observed, rng, "thompson", units={(EXPERT, 1): u}) for _ in range(4000)]
        got = picks.count((EXPERT, 1)) / 4000
        if want is not None:
            assert abs(got - want) < 0.03
        else:  # one expert left: an ordinary arm, mean 0.55 against mean 0.55
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
    # ties at 4: mean N(0.4 + 0.1, scale); ties at 2: its score 0.4 and the prior 0.4 - 0.05, N(0.375, scale / sqrt 2);
    # each plus one member N(0, scale) (no arm has two scores yet: the members' spread is the merges' spread)
    from scipy.stats import norm

    scale = float(np.std([0.5, 0.4, 0.7]))
    want = norm.cdf((0.5 - 0.375) / np.sqrt(2 * scale ** 2 + scale ** 2 / 2 + scale ** 2))
    rng = np.random.default_rng(0)
    picks = [choose([("ties", 4), ("ties", 2)], observed, rng, "thompson") for _ in range(4000)]
    assert abs(picks.count(("ties", 4)) / 4000 - want) < 0.03 and want > 0.6


def _one_star(seed, rule="thompson", **kw):
    """The pool of ``_run`` where one expert (e5) beats every merge by far and the other experts are poor."""
    star = {"expert__e5": 0.95}

    def truth(cid):
        return star.get(cid, _truth(cid))
    calls = []
    space = Space.every(NAMES, ["good", "bad"], range(2, 6))
    evaluate = _scorer(calls, truth)
    return search(space, evaluate, 12.0, _cid, seed=seed, rule=rule, iters=200, **kw), calls


def test_the_experts_are_screened_once_at_the_first_rung_and_the_best_one_wins():
    sizes = {t: len(v) for t, v in screen_items(SIZES, 0.125, 0).items()}
    for seed in range(5):
        result, calls = _one_star(seed)
        screening = [c for c, f in calls[1:1 + len(NAMES)]]
        assert screening == [f"{EXPERT}__{n}" for n in NAMES] and {f for _, f in calls[1:1 + len(NAMES)]} == {0.125}
        assert calls.count(("expert__e5", 0.125)) == 1  # its first rung is not paid again in its bracket
        assert result["winner"] == "expert__e5" and result["candidates"]["expert__e5"]["bracket"] == 0
        spent = sum(len(v) for _, f in calls for v in screen_items(SIZES, f, 0).values())
        assert result["items_spent"] == spent and spent - 800 >= len(NAMES) * sum(sizes.values())
        screened = [c for c in result["candidates"].values() if c.get("screened")]
        assert len(screened) == len(NAMES) and all(c["first_score"][0] == 0.125 for c in screened)
    # random search screens nothing: the same pool, uniform arms
    result, calls = _one_star(0, rule="random")
    assert not any(c.get("screened") for c in result["candidates"].values())
    assert [c for c, _ in calls[1:1 + len(NAMES)]] != [f"{EXPERT}__{n}" for n in NAMES]


def test_screening_is_skipped_when_it_costs_more_than_half_of_what_is_left():
    # 8 experts x 100 items (1/8 of 800) = 800 items: screened from 1 + 2 full evaluations left after the base
    result, _ = _run(budget=3.0)
    assert sum(bool(c.get("screened")) for c in result["candidates"].values()) == len(NAMES)
    result, _ = _run(budget=2.9)
    assert not any(c.get("screened") for c in result["candidates"].values())


def test_a_screened_expert_draws_on_its_own_score_and_error():
    """The experts arm bids the best of its untried experts' draws N(score, se); the float64 integral of the
    chance that a given expert's draw beats the merge arm's and the other expert's."""
    from scipy.stats import norm

    observed = {("ta", 2): [0.6, 0.5], (EXPERT, 1): [0.58, 0.62]}
    known = {("a",): (0.58, 0.03), ("b",): (0.62, 0.02)}
    scale = float(np.std([0.6, 0.5]))
    within = np.sqrt((0.05 ** 2 + 0.05 ** 2) / 1)
    m_ta, sd_ta = (0.6 + 0.5 + 0.55) / 3, np.sqrt(scale ** 2 / 3 + within ** 2)
    x = np.linspace(0.2, 1.0, 40001)
    wins = {"ta": np.trapezoid(norm.pdf(x, m_ta, sd_ta) * norm.cdf(x, 0.58, 0.03) * norm.cdf(x, 0.62, 0.02), x),
            "a": np.trapezoid(norm.pdf(x, 0.58, 0.03) * norm.cdf(x, m_ta, sd_ta) * norm.cdf(x, 0.62, 0.02), x),
            "b": np.trapezoid(norm.pdf(x, 0.62, 0.02) * norm.cdf(x, m_ta, sd_ta) * norm.cdf(x, 0.58, 0.03), x)}
    assert sum(wins.values()) == pytest.approx(1, abs=1e-4)
    rng = np.random.default_rng(5)
    got = [pick([("ta", 2), (EXPERT, 1)], observed, rng, "thompson", known=known) for _ in range(6000)]
    share = {"ta": sum(a == ("ta", 2) and m is None for a, m in got) / 6000,
             "a": got.count(((EXPERT, 1), ("a",))) / 6000, "b": got.count(((EXPERT, 1), ("b",))) / 6000}
    for k in wins:
        assert abs(share[k] - wins[k]) < 0.025, (k, share[k], wins[k])


def test_standard_error_and_within_spread_against_float64_by_hand():
    from wildmerge.search.bandit import standard_error, within_spread

    rng = np.random.default_rng(0)
    items = {"a": (rng.random(50) < 0.7).astype(float), "b": (rng.random(20) < 0.4).astype(float)}
    by_hand = 0.0
    for v in items.values():  # variance of a task mean: sample variance over n; the suite mean averages 2 tasks
        mu = sum(v) / len(v)
        by_hand += sum((x - mu) ** 2 for x in v) / (len(v) - 1) / len(v)
    assert standard_error(items) == pytest.approx(by_hand ** 0.5 / 2, rel=1e-12)
    observed = {("ta", 2): [0.6, 0.5, 0.7], ("ties", 3): [0.4, 0.45], ("ta", 4): [0.9], (EXPERT, 1): [0.1, 0.9]}
    ss = sum((x - 0.6) ** 2 for x in (0.6, 0.5, 0.7)) + sum((x - 0.425) ** 2 for x in (0.4, 0.45))
    assert within_spread(observed) == pytest.approx((ss / (2 + 1)) ** 0.5, rel=1e-12)  # experts and lone arms out
    assert within_spread({("ta", 2): [0.5]}) == 0.0
