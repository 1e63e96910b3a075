"""The search's allocation: a multi-fidelity bandit over arms, successive halving inside it.

An arm is a method at a subset size (``("ta", 4)``), or the experts alone (``("expert", 1)``). The search runs
brackets of successive halving (``halving.halve``); each bracket's candidates are drawn arm by arm by Thompson
sampling on the arms' first-rung scores (every candidate's first rung is the same seeded items, so these scores are
comparable across brackets), and each arm draws its own random subsets with the search's seed. An arm that scored
well at the cheap rung gets more candidates; an arm never tried borrows the mean of its method (or of everything)
as its prior, plus what merges of its size scored above their own methods' means (a size that served one method
is lent to the others). The arm's belief is a normal with the spread of all first-rung scores as its scale and one pseudo-
observation of the prior. Before it learns, the search draws one arm of every method (and the experts) in a seeded
order, so no method is judged by its prior alone. The experts arm stands for one arm per expert not tried yet
(experts differ from each other more than subsets of one method do): each untried expert gets its own draw.
``rule="random"`` draws arms uniformly instead (the experts arm weighted by its untried experts): the same halving,
no learning (the baseline of ``benchmarks/experiment_guided_search.py``).

The same code runs live (``evaluate`` merges and scores with lm-eval: ``live.py``) and offline (``evaluate`` looks
recorded per-item scores up), so a replay is the live search's decisions exactly. The base is scored first, on every
item: its items fix what each rung costs, so every bracket is started only when its worst case fits the budget.
Given the same seed and the same scores the search draws the same candidates, so a killed search resumes by replay.
"""

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from wildmerge.eval.screening.stats import paired_interval, suite_score
from wildmerge.search.halving import Evaluate, bracket_cost, fractions, halve, rung_costs

EXPERT = "expert"  # the experts alone: an arm of size 1
Arm = Tuple[str, int]
RULES = ("thompson", "random")
MAX_LISTED = 5000  # subsets of a size listed in full below this; above it, drawn by rejection
PRIOR_SD = 0.1  # the arms' spread before two first-rung scores exist (suite means are fractions)
MIN_BRACKETS = 4  # the default bracket shrinks until this many fit in the budget: rounds to learn from


@dataclass
class Space:
    """What each arm may draw: ``None`` for every subset of its size, or a fixed list (a replay's recorded ones)."""

    names: List[str]
    arms: Dict[Arm, Optional[List[Tuple[str, ...]]]]
    used: Dict[Arm, set] = field(default_factory=dict)

    @classmethod
    def every(cls, names: Sequence[str], methods: Sequence[str], sizes: Sequence[int], experts: bool = True):
        arms = {(m, k): None for m in methods for k in sizes if 2 <= k <= len(names)}
        return cls(list(names), {**({(EXPERT, 1): None} if experts else {}), **arms})

    def left(self, arm: Arm) -> int:
        """How many subsets the arm has not drawn yet."""
        listed = self.arms[arm]
        total = len(listed) if listed is not None else math.comb(len(self.names), arm[1])
        return total - len(self.used.get(arm, ()))

    def draw(self, arm: Arm, rng: np.random.Generator) -> Optional[Tuple[str, ...]]:
        """An unused subset of the arm, at random; None when the arm has none left."""
        used = self.used.setdefault(arm, set())
        listed = self.arms[arm]
        k = arm[1]
        if listed is None and math.comb(len(self.names), k) <= MAX_LISTED:
            listed = list(itertools.combinations(self.names, k))
        if listed is not None:
            left = [s for s in listed if tuple(s) not in used]
            pick = tuple(left[rng.integers(len(left))]) if left else None
        else:
            pick = None
            for _ in range(100):
                s = tuple(self.names[i] for i in sorted(rng.choice(len(self.names), k, replace=False)))
                if s not in used:
                    pick = s
                    break
        if pick is not None:
            used.add(pick)
        return pick


def choose(arms: List[Arm], observed: Dict[Arm, List[float]], rng: np.random.Generator, rule: str,
           units: Optional[Dict[Arm, int]] = None, cover: Sequence[str] = ()) -> Arm:
    """One arm: Thompson sampling on first-rung scores (shrunk to the method's mean), or uniform (``random``).

    ``units``: an arm that stands for several arms of one each (the experts arm: one per expert not tried yet) counts
    that many times, each with its own draw around the arm's mean, so every expert has the chance of an arm of its
    own. ``cover``: methods not drawn yet; Thompson draws among their arms first (every method, and the experts,
    once before the search learns from anything)."""
    units = units or {}
    if rule == "random":
        weights = np.array([units.get(arm, 1) for arm in arms], dtype=np.float64)
        return arms[int(rng.choice(len(arms), p=weights / weights.sum()))]
    fresh = [arm for arm in arms if arm[0] in cover]
    if fresh:
        return fresh[int(rng.integers(len(fresh)))]
    every = [s for v in observed.values() for s in v]
    scale = max(float(np.std(every)), 0.01) if len(every) >= 2 else PRIOR_SD
    overall = float(np.mean(every)) if every else 0.0
    means = {m: float(np.mean([s for a, v in observed.items() if a[0] == m for s in v]))
             for m in {a[0] for a in observed}}
    draws = []
    for arm in arms:
        prior = means.get(arm[0], overall) + size_effect(observed, means, arm[1])
        obs = observed.get(arm, [])
        mean = (sum(obs) + prior) / (len(obs) + 1)
        if units.get(arm, 1) > 1:  # untried members: each its own draw, as wide as the tried ones differ
            spread = max(float(np.std(obs)), scale) if len(obs) >= 2 else scale
            draws.append(float(np.max(rng.normal(mean, spread, units[arm]))))
        else:
            draws.append(rng.normal(mean, scale / math.sqrt(len(obs) + 1)))
    return arms[int(np.argmax(draws))]


def default_bracket(costs: Dict[float, int], eta: float, left: int, rungs: int) -> int:
    """``eta ** (rungs - 1)`` candidates (one survivor reaches every item), halved while fewer than ``MIN_BRACKETS``
    such brackets fit in what is left: a small budget learns from more, smaller brackets (at least 2 each)."""
    n = max(2, math.ceil(eta ** (rungs - 1) - 1e-9))
    while n > 2 and MIN_BRACKETS * bracket_cost(n, costs, eta) > left:
        n = max(2, math.ceil(n / eta))
    return n


def fitting_bracket(n: int, costs: Dict[float, int], eta: float, left: int) -> int:
    """The largest bracket of at most ``n`` candidates whose worst case fits in ``left`` item evaluations (0: none)."""
    while n and bracket_cost(n, costs, eta) > left:
        n -= 1
    return n


def size_effect(observed: Dict[Arm, List[float]], means: Dict[str, float], size: int) -> float:
    """How much merges of ``size`` scored above their methods' means (0 before any merge of that size): what one
    method taught about a size, lent to the others."""
    residuals = [s - means[a[0]] for a, v in observed.items() if a[0] != EXPERT and a[1] == size for s in v]
    return float(np.mean(residuals)) if residuals else 0.0


def search(space: Space, evaluate: Evaluate, budget: float, candidate_id: Callable[[Arm, Tuple[str, ...]], str],
           on_new: Callable[[str, dict], None] = lambda cid, c: None, first: float = 0.125, eta: float = 2.0,
           seed: int = 0, rule: str = "thompson", bracket: Optional[int] = None,
           log: Callable[[dict], None] = lambda record: None, iters: int = 1000) -> Dict:
    """Spend at most ``budget`` full evaluations of the suite (the base's included) on brackets of ``bracket``
    candidates (default ``default_bracket``); returns the winner (the best full
    evaluation of any bracket), its paired interval to the base, what was spent, and every candidate drawn."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: use one of {', '.join(RULES)}")
    rng = np.random.default_rng(seed)
    rungs = fractions(first, eta)
    base_items, per_model = evaluate(["base"], 1.0)["base"]
    sizes = {t: len(v) for t, v in base_items.items()}
    costs = rung_costs(sizes, first, eta, seed)
    limit = int(math.floor(budget * per_model + 1e-6))
    bracket = bracket or default_bracket(costs, eta, limit - per_model, len(rungs))
    spent, lines = per_model, 0
    observed: Dict[Arm, List[float]] = {}
    candidates: Dict[str, dict] = {}
    winners: List[Tuple[str, float, dict]] = []
    curve, brackets = [], []
    open_arms = list(space.arms)

    def logged(record):
        nonlocal lines
        log(record)
        lines += 1

    while open_arms:
        n = fitting_bracket(bracket, costs, eta, limit - spent)
        if not n:
            break
        drawn = []
        while len(drawn) < n and open_arms:
            units = {a: space.left(a) for a in open_arms if a[0] == EXPERT}
            cover = sorted({a[0] for a in open_arms} - {c["method"] for c in candidates.values()})
            arm = choose(open_arms, observed, rng, rule, units=units, cover=cover)
            subset = space.draw(arm, rng)
            if subset is None:
                open_arms.remove(arm)
                continue
            cid = candidate_id(arm, subset)
            candidates[cid] = {"method": arm[0], "experts": list(subset), "size": len(subset), "arm": list(arm),
                               "bracket": len(brackets), "rank": len(candidates)}
            on_new(cid, candidates[cid])
            drawn.append(cid)
        if not drawn:
            break
        result = halve(drawn, evaluate, first=first, eta=eta, seed=seed, log=logged, iters=iters, rung0=lines)
        spent += result["items_spent"]
        for cid, (fraction, score) in result["first_scores"].items():
            candidates[cid]["first_score"] = [fraction, score]
            if fraction == rungs[0]:
                observed.setdefault(tuple(candidates[cid]["arm"]), []).append(score)
        winners.append((result["winner"], result["score"], result["items"]))
        best = max(winners, key=lambda w: w[1])
        curve.append([spent, best[1]])
        brackets.append({"candidates": drawn, "winner": result["winner"], "score": result["score"],
                         "items_spent": result["items_spent"]})
    if not winners:
        raise ValueError(f"a budget of {budget:g} full evaluations buys no candidate after the base; give more")
    winner, score, items = max(winners, key=lambda w: w[1])  # the first bracket's wins a tie
    every = {t: np.arange(n) for t, n in sizes.items()}
    vs_base = [100 * x for x in paired_interval(items, base_items, every, iters=iters, seed=seed)]
    logged({"rung": lines, "fraction": 1.0, "leader": winner, "result": True, "items_spent": spent,
            "decisions": {winner: {"score": score, "decision": "winner of all brackets"}},
            "base_score": suite_score(base_items), "vs_base": vs_base})
    return {"winner": winner, "score": score, "base_score": suite_score(base_items), "vs_base": vs_base,
            "items_spent": spent, "items_per_model": per_model, "candidates": candidates, "brackets": brackets,
            "observed": {f"{a[0]}@{a[1]}": v for a, v in observed.items()}, "curve": curve}

