"""Successive halving on item subsets: weak merges stop after a few items, the strong ones earn the full suite.

Rung r scores every surviving candidate on the same nested item subset (a fraction ``first * eta**r`` of each
task's items, drawn once with a seed as in screening, so comparisons are paired). A candidate
whose paired bootstrap interval to the rung's leader lies below zero stops (it is worse, with 95 % confidence); of
the others the best ``ceil(n / eta)`` go on (a lone survivor skips to the last rung). The last rung is every item:
the bracket's winner is reported with its full evaluation, not the estimate that picked it. Jamieson & Talwalkar
(2016), "Non-stochastic best arm identification and hyperparameter optimization"; the paired interval is
``eval.screening.stats.paired_interval``. ``bandit.py`` runs one such bracket after another.
"""

import math
from typing import Callable, Dict, List, Tuple

import numpy as np

from wildmerge.eval.screening.stats import Items, paired_interval, screen_items, suite_score

# ([candidate ids or "base"], fraction) -> {id: (items, item evaluations it costs)}; one call per rung, so an
# executor can score the rung's models together. Live: merge + lm-eval; replay: a lookup in recorded items.
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


def rung_costs(sizes: Dict[str, int], first: float, eta: float, seed: int) -> Dict[float, int]:
    """Item evaluations one model costs at each rung (``screen_items`` rounds up per task)."""
    return {f: sum(len(v) for v in screen_items(sizes, f, seed).values()) for f in fractions(first, eta)}


def bracket_cost(n: int, costs: Dict[float, int], eta: float) -> int:
    """Item evaluations of a bracket of ``n`` candidates if none stops early (an upper bound on what it spends)."""
    total, alive = 0, n
    for f, cost in costs.items():
        if alive == 1 and f < 1:
            continue  # a lone survivor goes straight to the full rung
        total += alive * cost
        alive = max(1, math.ceil(alive / eta))
    return total


def halve(candidates: List[str], evaluate: Evaluate, first: float = 0.125, eta: float = 2.0, seed: int = 0,
          log: Callable[[dict], None] = lambda record: None, iters: int = 1000, rung0: int = 0) -> Dict:
    """Run one bracket's rungs over ``candidates`` (ties keep their order); every decision goes to ``log``, rungs
    numbered from ``rung0``. Returns the winner, its full items and score, each candidate's score at the first rung
    it was scored on (``first_scores``), the item evaluations spent and the rungs' records."""
    alive, spent, rungs, first_scores = list(candidates), 0, [], {}
    for fraction in fractions(first, eta):
        if len(alive) == 1 and fraction < 1:
            continue  # nothing left to compare: the survivor goes straight to the full rung
        scored = evaluate(alive, fraction)
        items = {c: scored[c][0] for c in alive}
        spent += sum(scored[c][1] for c in alive)
        scores = {c: suite_score(v) for c, v in items.items()}
        for c in alive:
            first_scores.setdefault(c, (fraction, scores[c]))
        order = sorted(alive, key=lambda c: -scores[c])  # stable: the draw order breaks ties
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
        record = {"rung": rung0 + len(rungs), "fraction": fraction, "leader": leader, "decisions": decisions,
                  "items_spent": spent}
        log(record)
        rungs.append(record)
        alive = kept
        if fraction >= 1:
            return {"winner": leader, "score": scores[leader], "items": items[leader], "items_spent": spent,
                    "first_scores": first_scores, "rungs": rungs}
    raise AssertionError("the last rung is every item")


def _all(items: Items) -> Dict[str, np.ndarray]:
    return {t: np.arange(len(v)) for t, v in items.items()}
