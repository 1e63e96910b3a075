"""Screening statistics against an independent float64 loop written from the definition (stratified paired
bootstrap, percentile interval), plus invariants; and the replay on fabricated suites."""

import numpy as np
import pytest

from wildmerge.eval.screening.stats import paired_interval, screen_items, simulate, suite_score


def _suite(rng, sizes, p):
    return {t: (rng.random(n) < p).astype(float) for t, n in sizes.items()}


def _reference_interval(model, ref, subset, iters, seed, level):
    """Per task, resample the subset's items with replacement (numpy draws in the same order), average the
    per-item differences; the suite difference is the mean over tasks; the interval is its percentiles."""
    rng = np.random.default_rng(seed)
    per_task = {}
    for task in sorted(subset):
        idx = [int(i) for i in subset[task]]
        draws = rng.integers(0, len(idx), size=(iters, len(idx)))
        per_task[task] = [sum(float(model[task][idx[j]]) - float(ref[task][idx[j]]) for j in row) / len(idx)
                          for row in draws]
    boot = sorted(sum(per_task[t][b] for t in per_task) / len(per_task) for b in range(iters))
    point = (sum(sum(model[t][i] for i in subset[t]) / len(subset[t]) for t in subset)
             - sum(sum(ref[t][i] for i in subset[t]) / len(subset[t]) for t in subset)) / len(subset)
    return point, float(np.quantile(boot, (1 - level) / 2)), float(np.quantile(boot, 1 - (1 - level) / 2))


def test_paired_interval_matches_float64_reference():
    rng = np.random.default_rng(3)
    sizes = {"a": 40, "b": 25, "c": 60}
    model, ref = _suite(rng, sizes, 0.6), _suite(rng, sizes, 0.5)
    subset = screen_items(sizes, 0.3, seed=1)
    got = paired_interval(model, ref, subset, iters=300, seed=7, level=0.9)
    want = _reference_interval(model, ref, subset, iters=300, seed=7, level=0.9)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert got[1] <= got[0] <= got[2]


def test_items_are_fixed_stratified_and_complete():
    sizes = {"a": 10, "b": 7}
    s1, s2 = screen_items(sizes, 0.2, seed=0), screen_items(sizes, 0.2, seed=0)
    assert all(np.array_equal(s1[t], s2[t]) for t in sizes)  # the same items for every model
    assert {t: len(v) for t, v in s1.items()} == {"a": 2, "b": 2}  # ceil(0.2 n) per task
    full = screen_items(sizes, 1.0)
    assert all(np.array_equal(full[t], np.arange(n)) for t, n in sizes.items())
    with pytest.raises(ValueError, match="fraction"):
        screen_items(sizes, 0)


def test_identical_models_are_never_decided_and_clear_winners_are():
    rng = np.random.default_rng(0)
    sizes = {"a": 100, "b": 100}
    base = _suite(rng, sizes, 0.5)
    subset = screen_items(sizes, 0.2)
    assert paired_interval(base, base, subset, iters=200) == (0.0, 0.0, 0.0)
    better = {t: np.ones_like(v) for t, v in base.items()}
    point, low, high = paired_interval(better, base, subset, iters=200)
    assert low > 0 and point == pytest.approx(suite_score(better, subset) - suite_score(base, subset))


def test_simulate_saves_work_on_clear_cases_and_keeps_signs():
    rng = np.random.default_rng(1)
    sizes = {"a": 200, "b": 200}
    base = _suite(rng, sizes, 0.5)
    experts = {"e1": _suite(rng, sizes, 0.6), "e2": _suite(rng, sizes, 0.55)}
    merges = {f"m{i}": {"items": _suite(rng, sizes, 0.9 if i % 2 else 0.2), "cell": ("ta", 2 + i % 2)}
              for i in range(6)}
    out = simulate(merges, base, experts, fraction=0.2, iters=300)
    assert out["saved"] == pytest.approx(1 - 0.2)  # every model clearly decided: only the screened items scored
    assert out["sign_changes"] == [] and out["P_moves"] == []
    tied = {"m0": {"items": base, "cell": ("ta", 2)}}  # identical to the base: never stops
    assert simulate(tied, base, experts, fraction=0.2, iters=100)["saved"] == 0
