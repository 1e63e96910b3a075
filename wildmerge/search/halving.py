"""Successive halving on item subsets: weak merges stop after a few items, the strong ones earn the full suite.

Rung r scores every surviving candidate on the same nested item subset (a fraction ``first * eta**r`` of each
task's items, drawn once with a seed as in screening, so comparisons are paired). A candidate
whose paired bootstrap interval to the rung's leader lies below zero stops (it is worse, with 95 % confidence); of
the others the best ``ceil(n / eta)`` go on (a lone survivor skips to the last rung). The last rung is every item:
the winner's reported score is a full evaluation, not the estimate that picked it, and its paired interval to the
base (scored once, in full) is on every item. Jamieson & Talwalkar (2016), "Non-stochastic best arm identification
and hyperparameter optimization"; the paired interval is ``eval.screening.stats.paired_interval``.
"""

import math
from typing import Callable, Dict, List, Tuple

import numpy as np

from wildmerge.eval.screening.stats import Items, paired_interval, suite_score

# ([candidate ids or "base"], fraction) -> {id: (items, item evaluations it costs)}; one call per rung, so an
# executor can score the rung's models together
Evaluate = Callable[[List[str], float], Dict[str, Tuple[Items, int]]]


def fractions(first: float, eta: float) -> List[float]:
    """The rungs' item fractions: first, first * eta, ... up to 1 (the last rung is always every item)."""
    if not 0 < first <= 1 or eta <= 1:
        raise ValueError(f"successive halving needs 0 < first fraction <= 1 and eta > 1 (got {first}, {eta})")
    out = []
    while first < 1 - 1e-9:
        out.append(round(first, 6))
        first *= eta
    return out + [1.0]


def planned_cost(n: int, first: float, eta: float) -> float:
    """Full-evaluation equivalents spent on ``n`` candidates if none stops early (plus the base, once, in full)."""
    cost, alive = 1.0, n
    for f in fractions(first, eta):
        if alive == 1 and f < 1:
            continue  # a lone survivor goes straight to the full rung
        cost += alive * f
        alive = max(1, math.ceil(alive / eta))
    return cost


def candidates_for(budget: float, first: float, eta: float, available: int) -> int:
    """The most candidates whose halving fits ``budget`` full-evaluation equivalents (at least 1)."""
    n = 1
    while n < available and planned_cost(n + 1, first, eta) <= budget:
        n += 1
    return n


def halve(candidates: List[str], evaluate: Evaluate, first: float = 0.125, eta: float = 2.0, seed: int = 0,
          log: Callable[[dict], None] = lambda record: None, iters: int = 1000) -> Dict:
    """Run the rungs over ``candidates`` (best prior first: ties keep that order); every decision goes to ``log``.

    Returns the winner, its full score, its paired interval to the base (points; the base is scored once, on every
    item, at the end) and the item evaluations spent, the base's included.
    """
    alive, spent, rungs = list(candidates), 0, []
    for rung, fraction in enumerate(fractions(first, eta)):
        if len(alive) == 1 and fraction < 1:
            continue  # nothing left to compare: the survivor goes straight to the full rung
        scored = evaluate(alive, fraction)
        items = {c: scored[c][0] for c in alive}
        spent += sum(scored[c][1] for c in alive)
        scores = {c: suite_score(v) for c, v in items.items()}
        order = sorted(alive, key=lambda c: -scores[c])  # stable: the prior breaks ties
        leader = order[0]
        keep = max(1, math.ceil(len(alive) / eta)) if fraction < 1 else 1
        decisions, kept = {}, []
        for c in order:
            diff = paired_interval(items[c], items[leader], _all(items[c]), iters=iters, seed=seed)
            worse = c != leader and diff[2] < 0
            go_on = not worse and len(kept) < keep
            kept += [c] if go_on else []
            decisions[c] = {"score": scores[c], "vs_leader": [100 * x for x in diff],
                            "decision": "continue" if go_on and fraction < 1 else
                            "winner" if go_on else "stopped: worse than the leader" if worse else "stopped: rank"}
        record = {"rung": len(rungs), "fraction": fraction, "leader": leader, "decisions": decisions,
                  "items_spent": spent}
        alive = kept
        if fraction < 1:
            log(record)
            rungs.append(record)
            continue
        base, base_cost = evaluate(["base"], 1.0)["base"]
        spent += base_cost
        vs_base = [100 * x for x in paired_interval(items[leader], base, _all(base), iters=iters, seed=seed)]
        record.update(items_spent=spent, base_score=suite_score(base), vs_base=vs_base)
        log(record)
        rungs.append(record)
        return {"winner": leader, "score": scores[leader], "vs_base": vs_base, "base_score": suite_score(base),
                "items_spent": spent, "items_per_model": base_cost, "rungs": rungs}
    raise AssertionError("the last rung is every item")


def _all(items: Items) -> Dict[str, np.ndarray]:
    return {t: np.arange(len(v)) for t, v in items.items()}
