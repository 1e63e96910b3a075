"""A predictor of merge quality fitted on an evaluated run of the same pool, to rank subsets before any merge.

Target: a merge's suite mean minus the better of the base's and its experts' mean suite mean (points), so a merge
scores well only when it beats both what it started from and what it combines; the mergeability predictor of
Zhou et al. 2026 is fitted instead to "the merge does not hurt its weak members", which picked subsets worse than
random on suite mean. Features are the weight-only ones the proxy uses (``candidates.proxy``): mean pairwise
task-vector cosine and the coefficient of variation of the norms, plus the subset's share of the pool. A ridge
least-squares fit; its in-sample R^2 is reported so a user sees whether it explains anything.
"""

import itertools
from typing import Dict, List, Sequence

import numpy as np

from wildmerge.errors import ConfigError

RIDGE = 1e-3
MIN_ROWS = 5


def features(subset: Sequence[int], cosine: np.ndarray, norms: np.ndarray, pool_size: int) -> np.ndarray:
    idx = list(subset)
    n = norms[idx]
    return np.array([np.mean([cosine[i, j] for i, j in itertools.combinations(idx, 2)]),
                     float(np.std(n) / np.mean(n)) if np.mean(n) > 0 else 0.0, len(idx) / pool_size])


def target(merge_mean: float, expert_means: List[float], base_mean: float) -> float:
    return merge_mean - max(base_mean, float(np.mean(expert_means)))


class Predictor:
    def __init__(self, weights: np.ndarray, r2: float, rows: int):
        self.weights, self.r2, self.rows = weights, r2, rows

    def __call__(self, x: np.ndarray) -> float:
        return float(self.weights[0] + x @ self.weights[1:])


def fit(x: np.ndarray, y: np.ndarray) -> Predictor:
    """Ridge fit of ``y`` on ``x`` with an intercept (not penalised)."""
    if len(y) < MIN_ROWS:
        raise ConfigError(f"the predictor needs at least {MIN_ROWS} evaluated merges to fit, got {len(y)}")
    a = np.hstack([np.ones((len(y), 1)), x])
    penalty = RIDGE * np.eye(a.shape[1])
    penalty[0, 0] = 0.0
    w = np.linalg.solve(a.T @ a + penalty, a.T @ y)
    residual = y - a @ w
    total = float(np.sum((y - y.mean()) ** 2))
    return Predictor(w, 1 - float(residual @ residual) / total if total > 0 else 0.0, len(y))


def fit_from_run(run_dir, names: List[str], cosine, norms, suite=None) -> Predictor:
    """Fit on every scored merge of an evaluated run of this pool (its experts named as in ``names``)."""
    from wildmerge.analysis.report.scores import collect_scores

    df, _, _ = collect_scores(str(run_dir), suite)
    ok = df[df["status"] == "ok"]
    base = ok[ok["kind"] == "base"]["mean"]
    experts = dict(zip(ok[ok["kind"] == "expert"]["model_id"], ok[ok["kind"] == "expert"]["mean"]))
    if base.empty or not experts:
        raise ConfigError(f"{run_dir}: the predictor needs the base's and the experts' scores")
    where = {name: i for i, name in enumerate(names)}
    cosine, norms = np.asarray(cosine, dtype=np.float64), np.asarray(norms, dtype=np.float64)
    x, y = [], []
    for _, row in ok[ok["kind"] == "merge"].iterrows():
        members = [e for e in str(row["experts"]).split(";") if e]
        if len(members) < 2 or any(e not in where or e not in experts for e in members):
            continue
        x.append(features([where[e] for e in members], cosine, norms, len(names)))
        y.append(target(row["mean"], [experts[e] for e in members], float(base.iloc[0])))
    return fit(np.array(x).reshape(len(y), 3), np.array(y))


def scorer(predictor: Predictor, cosine, norms, pool_size: int):
    """``score(subset indices)`` for ``candidates.ranked_subsets``: the predicted target."""
    cosine, norms = np.asarray(cosine, dtype=np.float64), np.asarray(norms, dtype=np.float64)
    return lambda subset: predictor(features(subset, cosine, norms, pool_size))
