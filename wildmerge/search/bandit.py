"""The search's allocation: a multi-fidelity bandit over arms, successive halving inside it.

An arm is a method at a subset size (``("ta", 4)``), or the experts alone (``("expert", 1)``). The search runs
brackets of successive halving (``halving.halve``); each bracket's candidates are drawn arm by arm by Thompson
sampling on the arms' first-rung scores (every candidate's first rung is the same seeded items, so these scores are
comparable across brackets), and each arm draws its own random subsets with the search's seed.

The goal is the best single candidate, not the best arm on average, so Thompson samples the score of an arm's
*next* candidate: a draw of the arm's mean from its posterior plus a draw of one member around it, as wide as
members of one arm differ (their first-rung scores around their arms' means, pooled). An arm whose members vary
gets drawn more than its mean alone would earn. An arm never tried borrows the mean of its method (or of the
merges) as its prior, plus what merges of its size scored above their own methods' means (a size that served
one method is lent to the others). Before it learns, the search draws one arm of every method in a seeded order,
so no method is judged by its prior alone.

The experts are few and differ far more than subsets of one method do, and one of them may beat every merge, so
the Thompson search first **screens every expert at the first rung** (one call, ``len(experts) * first`` full
evaluations; skipped when that is more than half the budget left after the base). Each untried expert is
then an arm of its own, drawn from N(its screened score, its standard error on the rung's items); the screening's
leader goes on first, into the first bracket, as a rung's leader does in successive halving; after it the experts
arm competes with the best of its untried experts' draws and, chosen, sends that expert into the bracket (a
screened expert's first rung is not paid twice). Without screening the experts arm stands for one arm per untried
expert, each with its own draw around the tried experts' mean.
``rule="random"`` draws arms uniformly instead (the experts arm weighted by its untried experts) and screens
nothing: the same halving, no learning (the baseline of ``benchmarks/experiment_guided_search.py``).

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
SCREEN_SHARE = 0.5  # the experts are screened when that costs at most this share of the budget after the base


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

    def take(self, arm: Arm, subset: Tuple[str, ...]) -> Tuple[str, ...]:
        """Draw this very subset (a screened expert chosen by its score); it must not be drawn already."""
        used = self.used.setdefault(arm, set())
        assert subset not in used, f"{arm} {subset} drawn twice"
        used.add(subset)
        return subset

    def members(self, arm: Arm) -> List[Tuple[str, ...]]:
        """Every subset of a listed or small arm (the experts: one each)."""
        listed = self.arms[arm]
        return [tuple(s) for s in listed] if listed is not None else list(itertools.combinations(self.names, arm[1]))


def choose(arms: List[Arm], observed: Dict[Arm, List[float]], rng: np.random.Generator, rule: str,
           units: Optional[Dict[Arm, int]] = None, cover: Sequence[str] = (),
           known: Optional[Dict[Tuple[str, ...], Tuple[float, float]]] = None) -> Arm:
    """One arm (``pick`` without the member)."""
    return pick(arms, observed, rng, rule, units=units, cover=cover, known=known)[0]


def pick(arms: List[Arm], observed: Dict[Arm, List[float]], rng: np.random.Generator, rule: str,
         units: Optional[Dict[Arm, int]] = None, cover: Sequence[str] = (),
         known: Optional[Dict[Tuple[str, ...], Tuple[float, float]]] = None) -> Tuple[Arm, Optional[Tuple[str, ...]]]:
    """One arm, and for the experts arm after screening the expert: Thompson sampling on the next candidate's
    first-rung score, or uniform (``random``).

    A merge arm draws its mean (shrunk to its method's, ``scale / sqrt(n + 1)`` wide) plus one member around it
    (``within`` wide: how far first-rung scores lie from their arms' means). ``known``: the screened experts not
    tried yet, ``{(expert,): (score, standard error)}``; each draws N(score, se) and the experts arm bids its best
    draw, whose expert comes back with it. ``units``: without screening, an arm that stands for several arms of one
    each (the experts arm: one per expert not tried yet) counts that many times, each with its own draw around the
    arm's mean. ``cover``: methods not drawn yet; Thompson draws among their arms first (every method, and the
    experts, once before the search learns from anything)."""
    units, known = units or {}, known or {}
    if rule == "random":
        weights = np.array([units.get(arm, 1) for arm in arms], dtype=np.float64)
        return arms[int(rng.choice(len(arms), p=weights / weights.sum()))], None
    fresh = [arm for arm in arms if arm[0] in cover]
    if fresh:
        return fresh[int(rng.integers(len(fresh)))], None
    every = [s for v in observed.values() for s in v]
    merged = [s for a, v in observed.items() if a[0] != EXPERT for s in v]
    ref = merged if len(merged) >= 2 else every
    scale = max(float(np.std(ref)), 0.01) if len(ref) >= 2 else PRIOR_SD
    within = within_spread(observed) or scale
    overall = float(np.mean(merged or every)) if every else 0.0  # an untried method: what merges scored
    means = {m: float(np.mean([s for a, v in observed.items() if a[0] == m for s in v]))
             for m in {a[0] for a in observed}}
    draws, member = [], None
    for arm in arms:
        obs = observed.get(arm, [])
        if arm[0] == EXPERT and known:  # screened: each untried expert its own draw on its own score
            names = sorted(known)
            bids = rng.normal([known[n][0] for n in names], [known[n][1] for n in names])
            member = names[int(np.argmax(bids))]
            draws.append(float(np.max(bids)))
            continue
        prior = means.get(arm[0], overall) + size_effect(observed, means, arm[1])
        mean = (sum(obs) + prior) / (len(obs) + 1)
        if units.get(arm, 1) > 1:  # untried members: each its own draw, as wide as the tried ones differ
            spread = max(float(np.std(obs)), scale) if len(obs) >= 2 else scale
            draws.append(float(np.max(rng.normal(mean, spread, units[arm]))))
        else:  # the arm's mean, then its next member around it
            draws.append(rng.normal(mean, scale / math.sqrt(len(obs) + 1)) + rng.normal(0.0, within))
    arm = arms[int(np.argmax(draws))]
    return arm, (member if arm[0] == EXPERT and known else None)


def within_spread(observed: Dict[Arm, List[float]]) -> float:
    """The pooled standard deviation of merge arms' first-rung scores around their own arm's mean (0 before an arm
    has two): how much the next member of an arm may differ from the arm."""
    groups = [v for a, v in observed.items() if a[0] != EXPERT and len(v) >= 2]
    dof = sum(len(v) - 1 for v in groups)
    if not dof:
        return 0.0
    return math.sqrt(sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in groups) / dof)


def standard_error(items: Dict[str, np.ndarray]) -> float:
    """The standard error of a suite mean (mean over tasks of task means) from its items: how far a screened
    expert's score may lie from its full one."""
    per_task = [np.var(v, ddof=1) / len(v) if len(v) > 1 else 0.25 for v in items.values()]
    return math.sqrt(float(np.sum(per_task))) / len(per_task)


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


def _screen(experts, fraction: float, candidate_id, on_new, once, candidates: dict, observed: dict,
            known: dict) -> Tuple[float, dict]:
    """Every expert scored at the first rung, each learnt from on its own score (``known``, ``observed``);
    (items spent, the rung's decisions)."""
    ids = {candidate_id((EXPERT, 1), s): s for s in experts}
    for cid, s in ids.items():
        candidates[cid] = {"method": EXPERT, "experts": list(s), "size": 1, "arm": [EXPERT, 1],
                           "bracket": None, "rank": len(candidates), "screened": True}
        on_new(cid, candidates[cid])
    scored = once(list(ids), fraction)
    decisions = {}
    for cid, s in ids.items():
        score, se = suite_score(scored[cid][0]), standard_error(scored[cid][0])
        known[s] = (score, se)
        candidates[cid]["first_score"] = [fraction, score]
        observed.setdefault((EXPERT, 1), []).append(score)
        decisions[cid] = {"score": score, "standard_error": se, "decision": "screened"}
    return sum(got[1] for got in scored.values()), decisions


def _draw(n: int, space: Space, open_arms: list, lead, rng, rule: str, candidate_id, on_new, candidates: dict,
          observed: dict, known: dict, bracket: int) -> List[str]:
    """Up to ``n`` new candidates for bracket number ``bracket``, the screening's ``lead`` first (when given); an
    arm with no member left is closed (removed from ``open_arms``)."""
    drawn = []
    while len(drawn) < n and open_arms:
        units = {a: space.left(a) for a in open_arms if a[0] == EXPERT}
        cover = sorted({a[0] for a in open_arms} - {c["method"] for c in candidates.values()})
        arm, member = ((EXPERT, 1), lead) if lead else \
            pick(open_arms, observed, rng, rule, units=units, cover=cover, known=known)
        lead = None
        if member:  # a screened expert, chosen by its own draw
            known.pop(member)
            subset = space.take(arm, member)
        else:
            subset = space.draw(arm, rng)
        if subset is None:
            open_arms.remove(arm)
            continue
        cid = candidate_id(arm, subset)
        candidates.setdefault(cid, {"method": arm[0], "experts": list(subset), "size": len(subset),
                                    "arm": list(arm), "rank": len(candidates)})["bracket"] = bracket
        on_new(cid, candidates[cid])
        drawn.append(cid)
    return drawn


def search(space: Space, evaluate: Evaluate, budget: float, candidate_id: Callable[[Arm, Tuple[str, ...]], str],
           on_new: Callable[[str, dict], None] = lambda cid, c: None, first: float = 0.125, eta: float = 2.0,
           seed: int = 0, rule: str = "thompson", bracket: Optional[int] = None,
           log: Callable[[dict], None] = lambda record: None, iters: int = 1000, screen: Optional[bool] = None) -> Dict:
    """Spend at most ``budget`` full evaluations of the suite (the base's included): the experts screened at the
    first rung (``screen``; default: the Thompson rule's), then brackets of ``bracket`` candidates (default
    ``default_bracket``); returns the winner (the best full evaluation of any bracket), its paired interval to the
    base, what was spent, and every candidate drawn."""
    if rule not in RULES:
        raise ValueError(f"rule {rule!r}: use one of {', '.join(RULES)}")
    rng = np.random.default_rng(seed)
    rungs = fractions(first, eta)
    base_items, per_model = evaluate(["base"], 1.0)["base"]
    sizes = {t: len(v) for t, v in base_items.items()}
    costs = rung_costs(sizes, first, eta, seed)
    limit = int(math.floor(budget * per_model + 1e-6))
    spent, lines = per_model, 0
    observed: Dict[Arm, List[float]] = {}
    candidates: Dict[str, dict] = {}
    winners: List[Tuple[str, float, dict]] = []
    curve, brackets = [], []
    open_arms = list(space.arms)
    paid: Dict[Tuple[str, float], tuple] = {}  # (candidate, fraction) -> what evaluate gave: never paid twice

    def logged(record):
        nonlocal lines
        log(record)
        lines += 1

    def once(ids, fraction):
        todo = [c for c in ids if (c, fraction) not in paid]
        if todo:
            paid.update({(c, fraction): got for c, got in evaluate(todo, fraction).items()})
        return {c: paid[c, fraction] if c in todo else (paid[c, fraction][0], 0) for c in ids}

    known: Dict[Tuple[str, ...], Tuple[float, float]] = {}  # screened experts not in a bracket yet
    experts = space.members((EXPERT, 1)) if (EXPERT, 1) in space.arms else []
    if (rule == "thompson" if screen is None else screen) and experts and \
            len(experts) * costs[rungs[0]] <= SCREEN_SHARE * (limit - spent):
        paying, decisions = _screen(experts, rungs[0], candidate_id, on_new, once, candidates, observed, known)
        spent += paying
        logged({"rung": lines, "fraction": rungs[0], "screen": True, "decisions": decisions, "items_spent": spent})
    lead = max(known, key=lambda s: known[s][0]) if known else None  # the screening's leader goes on, first
    bracket = bracket or default_bracket(costs, eta, limit - spent, len(rungs))

    while open_arms:
        n = fitting_bracket(bracket, costs, eta, limit - spent)
        if not n:
            break
        drawn = _draw(n, space, open_arms, lead, rng, rule, candidate_id, on_new, candidates, observed, known,
                      len(brackets))
        lead = None  # the screening's leader opens the first bracket only
        if not drawn:
            break
        result = halve(drawn, once, first=first, eta=eta, seed=seed, log=logged, iters=iters, rung0=lines)
        spent += result["items_spent"]
        for cid, (fraction, score) in result["first_scores"].items():
            if candidates[cid].get("screened"):
                continue  # its first rung was scored and learnt from at screening
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

