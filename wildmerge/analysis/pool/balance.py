"""Norm-balanced against norm-unbalanced subsets (the reality-check paper, Fig. 6: every method does best on its most
norm-balanced pair, and adding the large-norm task reverses the method ranking).

A subset's imbalance is ``max_t ||tau_t|| / min_t ||tau_t||`` over its experts' whole-model task-vector norms.
``balance_scorer`` ranks subsets for the sampler's predictor-style selection (``top_subsets``: the k best-scored
per size): ``balanced`` prefers the lowest ratio, ``unbalanced`` the highest. ``balance_table`` compares, per method
and subset size, the mean accuracy of a run's most and least balanced merges.
"""

import math
from typing import Callable, Dict, List, Sequence


def subset_imbalance(norms: Dict[str, float], subset: Sequence[str]) -> float:
    values = [norms[n] for n in subset]
    smallest = min(values)
    return max(values) / smallest if smallest > 0 else math.inf


def balance_scorer(norms: Dict[str, float], balanced: bool = True) -> Callable[[Sequence[str]], float]:
    """Subset -> score, higher first: ``-log(imbalance)`` (balanced) or ``+log(imbalance)`` (unbalanced)."""
    sign = -1.0 if balanced else 1.0

    def score(subset: Sequence[str]) -> float:
        ratio = subset_imbalance(norms, subset)
        return sign * (math.log(ratio) if math.isfinite(ratio) else 1e9)

    return score


def expert_norms(base: str, experts: Dict[str, str], progress: bool = True) -> Dict[str, float]:
    """Whole-model task-vector norm of every expert (one streamed pass, float64)."""
    from wildmerge.analysis.pool.imbalance import layer_grams

    gram = layer_grams(base, experts, progress=progress)["model"]
    return {name: float(math.sqrt(max(gram[i, i], 0.0))) for i, name in enumerate(experts)}


def balance_table(df, norms: Dict[str, float]) -> List[dict]:
    """Per method and subset size n (2 <= n < N): mean accuracy of the merges whose imbalance is at most the
    median of that size's merges (balanced half) against the rest (unbalanced half). ``df``: the report's scores
    (rows with ``kind``, ``method_label``, ``n``, ``experts`` joined by ``;``, ``status``, ``mean``)."""
    merges = df[(df["kind"] == "merge") & (df["status"] == "ok")].copy()
    if merges.empty:
        return []
    merges["imbalance"] = merges["experts"].map(lambda e: subset_imbalance(norms, e.split(";")))
    rows = []
    for (label, n), g in merges.groupby(["method_label", "n"], sort=True):
        if len(g) < 2 or g["imbalance"].nunique() < 2:
            continue
        cut = g["imbalance"].median()
        low, high = g[g["imbalance"] <= cut], g[g["imbalance"] > cut]
        if low.empty or high.empty:
            continue
        rows.append({"method": label, "n": int(n), "merges": len(g),
                     "balanced_ratio": float(low["imbalance"].mean()), "balanced_mean": float(low["mean"].mean()),
                     "unbalanced_ratio": float(high["imbalance"].mean()),
                     "unbalanced_mean": float(high["mean"].mean()),
                     "diff_pp": float(low["mean"].mean() - high["mean"].mean())})
    return rows


def balance_selection(resolved, balanced: bool):
    """(manifest record, scorer) of ``wildmerge sample --select balanced|unbalanced``: the task-vector norms of the
    pool as the run resolved it (a ``ResolvedPool``: adapters folded, as for the merges) from one streamed pass, then
    subsets ranked by their max/min norm ratio."""
    norms = expert_norms(resolved.base_path, resolved.experts)
    record = {"rule": "norm balance", "prefer": "balanced" if balanced else "unbalanced",
              "aggregation": "max / min whole-model task-vector norm over the subset's experts",
              "norms": {k: round(v, 8) for k, v in norms.items()}}
    return record, balance_scorer(norms, balanced)
