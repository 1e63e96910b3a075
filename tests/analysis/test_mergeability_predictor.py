"""The sparse Pearson predictor (Zhou et al., arXiv 2601.22285, §4): folds, scaling, a planted sparse linear relation
recovered, agreement statistics, metric-set fallbacks, and subset selection from pair scores."""

import itertools

import numpy as np
import pandas as pd
import pytest

from wildmerge.analysis.mergeability import predictor as PR
from wildmerge.analysis.mergeability.fitting import choose_metrics, fit_methods
from wildmerge.analysis.mergeability.registry import METRICS, REDUCED
from wildmerge.errors import WildmergeError
from wildmerge.planning.sampler import top_subsets

EXPERTS = [f"x{i:02d}" for i in range(10)]
PAIRS = list(itertools.combinations(EXPERTS, 2))


def _metrics(seed=0, n_metrics=8):
    rng = np.random.default_rng(seed)
    cols = METRICS[:n_metrics]
    df = pd.DataFrame(rng.normal(size=(len(PAIRS), n_metrics)) * rng.uniform(0.1, 10, n_metrics), columns=cols)
    df.insert(0, "expert_b", [b for _, b in PAIRS])
    df.insert(0, "expert_a", [a for a, _ in PAIRS])
    df.insert(0, "pair", [f"{a}__{b}" for a, b in PAIRS])
    return df


def test_leave_one_expert_out_folds():
    folds = PR.expert_folds(PAIRS, EXPERTS)
    assert len(folds) == len(EXPERTS)
    for f in folds:
        assert len(f["val"]) == len(EXPERTS) - 1 and len(f["train"]) == 36  # C(9, 2)
        assert all(f["held_out"] in PAIRS[i] for i in f["val"])
        assert not any(f["held_out"] in PAIRS[i] for i in f["train"])
        assert set(f["val"]) | set(f["train"]) == set(range(len(PAIRS)))
    seen = np.zeros(len(PAIRS), int)
    for f in folds:
        seen[f["val"]] += 1
    assert (seen == 2).all()  # every pair is validated once in the fold of each of its experts


def test_minmax_uses_training_range_only():
    Xtr, Xva = np.array([[0.0, 5.0], [10.0, 5.0]]), np.array([[20.0, 1.0]])
    lo, rng = PR.minmax_fit(Xtr)
    assert np.allclose(PR.minmax_apply(Xtr, lo, rng), [[-1, -1], [1, -1]])
    assert np.allclose(PR.minmax_apply(Xva, lo, rng), [[3, -9]])  # outside [-1, 1]; constant column: range 1


def test_planted_sparse_relation_is_recovered():
    df = _metrics()
    m = df[METRICS[:8]].to_numpy()
    z = (m - m.mean(0)) / m.std(0)
    y = 2.0 * z[:, 1] - 1.0 * z[:, 5] + 0.05 * np.random.default_rng(1).normal(size=len(df))
    targets = pd.DataFrame({"method": "planted", "expert_a": df["expert_a"], "expert_b": df["expert_b"], "target": y})
    fits = fit_methods(df, targets, metric_set="all")
    r = fits["methods"]["planted"]
    assert r["val_r"] > 0.9 and r["train_r"] > 0.9
    w = np.array(r["w_mean"])
    assert set(np.argsort(-np.abs(w))[:2]) == {1, 5}
    assert w[1] > 0 and w[5] < 0
    assert r["nonzero_freq"][1] == 1.0 and r["nonzero_freq"][5] == 1.0
    assert all(abs(x) >= PR.ZERO or x == 0 for f in r["folds"] for x in f["w"])  # post-hoc threshold applied
    # the L1 penalty keeps the fit sparse: noise metrics get much smaller weights than the planted ones
    assert np.abs(np.delete(w, [1, 5])).max() < 0.5 * min(abs(w[1]), abs(w[5]))


def test_fit_is_reproducible_and_profiles_differ_only_in_stopping():
    df = _metrics(2)
    X = PR.minmax_apply(df[METRICS[:8]].to_numpy(), *PR.minmax_fit(df[METRICS[:8]].to_numpy()))
    y = X[:, 0] + 0.1 * X[:, 3]
    w1, it1 = PR.fit(X, y, seed=3)
    w2, it2 = PR.fit(X, y, seed=3)
    assert np.array_equal(w1, w2) and it1 == it2
    assert PR.fit(X, y, profile="paper")[1] <= PR.PROFILES["paper"]["iters"]


def test_agreement_statistics():
    assert PR.top_k_overlap([5, 4, 3, 2, 1, 0], [0, 4, 3, 2, 1, 5], k=5) == 0.8
    assert PR.sign_agreement([1, -1, 0.0005, 2], [1, 1, -0.0005, 2]) == 0.5
    assert PR.sign_agreement([1, -1, 0.0005, 2], [1, 1, -0.0005, 2], threshold=1e-3) == 0.75
    assert np.isnan(PR.pearson([1, 2, 3], [1, 1, 1]))


def test_nan_and_constant_metrics_are_recorded_and_fewer_pairs_fall_back():
    df = _metrics(n_metrics=28)
    df.loc[3, METRICS[0]] = np.nan
    df[METRICS[2]] = 1.5
    cols, notes = choose_metrics(df, n_train_pairs=36)
    assert METRICS[0] not in cols and METRICS[2] not in cols
    assert any("NaN for 1 pair" in n for n in notes) and any("constant" in n for n in notes)
    cols, notes = choose_metrics(df, n_train_pairs=10)
    assert set(cols) <= set(REDUCED) and any("reduced" in n for n in notes)
    small = df[df["expert_a"].isin(EXPERTS[:3]) & df["expert_b"].isin(EXPERTS[:3])]
    targets = pd.DataFrame({"method": "m", "expert_a": small["expert_a"], "expert_b": small["expert_b"],
                            "target": [0.1, 0.2, 0.3]})
    with pytest.raises(WildmergeError, match="at least 4 experts"):
        fit_methods(small.reset_index(drop=True), targets)


def test_top_subsets_take_the_best_scored():
    good = {"x01", "x04", "x07"}
    score = lambda names: sum(n in good for n in names) - 0.01 * sum(int(n[1:]) for n in names)
    draw = top_subsets(EXPERTS, sizes=[1, 3], k=2, score=score, full=True)
    n3 = [s for s in draw.subsets if s.n == 3]
    assert set(n3[0].experts) == good and len(n3) == 2
    assert len([s for s in draw.subsets if s.n == 1]) == 10 and any(s.n == 10 for s in draw.subsets)
