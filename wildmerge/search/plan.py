"""What a guided search will cost before it runs (``wildmerge search --dry-run``), in the units of the protocol's
cost plan (``planning/cost.py``), so the two can be read side by side.

The search spends at most ``budget`` full evaluations of the suite: the base's, the experts' screening at the first
rung (the Thompson search's, where it fits), then brackets of successive halving for as long as a bracket's worst
case (no candidate stopped early: ``halving.bracket_cost``) fits what is left, as ``bandit.search`` does. A bracket
of n candidates merges n models (an expert alone needs no merge: counted as a merge, an upper bound) and runs one
evaluation job per candidate and rung it reaches. Early stops, and a screened expert's first rung not paid twice,
spend less, so a real search fits more brackets into the same budget: the item evaluations are an upper bound, the
candidates a lower one. A search space smaller than the budget ends the plan where the candidates run out
(``space``: every subset drawn once), as the search's arms close; brackets of the same size are counted at once.
"""

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from wildmerge.planning import cost
from wildmerge.search.bandit import SCREEN_SHARE, default_bracket, fitting_bracket
from wildmerge.search.defaults import WITHOUT_DATA, methods_for
from wildmerge.search.halving import bracket_cost, fractions, rung_costs


@dataclass(frozen=True)
class SearchPlan:
    brackets: int
    candidates: int  # merged (experts alone included: an upper bound on merges)
    jobs: int  # evaluation jobs: the base's, then one per candidate and rung reached
    item_evaluations: int  # at most
    per_model: int  # items of one full evaluation
    screened: int = 0  # experts scored at the first rung before the brackets (in candidates; never merged)
    space: Optional[int] = None  # candidates the pool holds (every subset of each arm), when known
    exhausted: bool = False  # every candidate drawn before the budget ran out: more budget buys nothing


    @property
    def merges(self) -> int:
        """Merges at most: the candidates less the screened experts (other experts drawn alone still counted)."""
        return self.candidates - self.screened

    @property
    def full_evaluations(self) -> float:
        return self.item_evaluations / self.per_model


def search_space(experts: int, methods: int, alone: bool = True) -> int:
    """Candidates of a pool of ``experts``: each method's subsets of 2..N experts (``Space.every``), and the
    experts alone (``alone``)."""
    return (experts if alone else 0) + methods * max(0, 2 ** experts - 1 - experts)


def plan_search(items_per_task: Dict[str, int], budget: float, first: float = 0.125, eta: float = 2.0,
                bracket: Optional[int] = None, seed: int = 0, screen: int = 0,
                space: Optional[int] = None) -> SearchPlan:
    """Brackets, candidates, jobs and item evaluations of a search of ``budget`` full evaluations on a suite with
    ``items_per_task`` items, its rungs as ``bandit.search`` sets them; ``screen``: the experts the Thompson search
    screens at the first rung first (where that fits ``bandit.SCREEN_SHARE`` of the budget left after the base);
    ``space``: the candidates there are (``search_space``), None for no limit."""
    rungs = fractions(first, eta)
    costs = rung_costs(items_per_task, first, eta, seed)
    per_model = sum(items_per_task.values())
    limit = int(math.floor(budget * per_model + 1e-6))
    spent, jobs, brackets, candidates, lead, screened = per_model, 1, 0, 0, 0, 0
    if screen and screen * costs[rungs[0]] <= SCREEN_SHARE * (limit - spent):
        spent, jobs, candidates = spent + screen * costs[rungs[0]], jobs + screen, screen
        screened = screen
        lead = 1  # the screening's leader opens the first bracket, its first rung already paid
    bracket = bracket or default_bracket(costs, eta, limit - spent, len(rungs))
    drawn, left = 0, math.inf if space is None else space  # draws of the brackets; subsets not drawn yet
    while left:
        n = min(fitting_bracket(bracket, costs, eta, limit - spent), left)
        if not n:
            break
        paid = lead if n > 1 else 0  # a lone candidate skips the first rung anyway
        one = bracket_cost(n, costs, eta) - paid * costs[rungs[0]]
        # the same full bracket again while it fits: all of them at once (a budget of 1e12 is a few steps)
        times = max(1, min((limit - spent) // one, left // n)) if n == bracket and not paid else 1
        spent += times * one
        jobs += times * (_jobs(n, rungs, eta) - paid)
        brackets, drawn, left = brackets + times, drawn + times * n, left - times * n
        candidates, lead = candidates + times * n - lead, 0
    if space is not None:
        candidates = min(candidates, space)  # a screened expert drawn again is no new candidate
    return SearchPlan(brackets, candidates, jobs, spent, per_model, screened, space, space is not None and not left)


def _jobs(n: int, rungs, eta: float) -> int:
    """Evaluation jobs of a bracket of n if none stops early (the survivors of each rung, a lone one skipping on)."""
    total, alive = 0, n
    for f in rungs:
        if alive == 1 and f < 1:
            continue
        total += alive
        alive = max(1, math.ceil(alive / eta))
    return total


def search_seconds(plan: SearchPlan, parameters: int, tokens_per_model: int, mean_inputs: float,
                   cal: cost.Calibration, methods: Sequence[str] = WITHOUT_DATA,
                   text_tokens: int = cost.TEXT_TOKENS) -> Dict[str, float]:
    """Seconds on one device, priced as the protocol's plan prices them (``cost.merge_seconds``,
    ``cost.eval_seconds``): the merges (each reading ``mean_inputs`` models, its method's cost the mean over
    ``methods``, the search's arms: it tries every method), then the jobs (each paying the start
    and the model's read) and the tokens of the item evaluations."""
    per_merge = sum(cost.merge_seconds(parameters, mean_inputs, cal, m, text_tokens=text_tokens)
                    for m in methods) / len(methods)
    merges = plan.merges * per_merge
    starts = plan.jobs * cost.eval_seconds(parameters, 0, cal)
    scoring = cal.eval_s_per_tparam_token * parameters * tokens_per_model * plan.full_evaluations / 1e12
    return {"merge_s": merges, "eval_s": starts + scoring, "wall_s": merges + starts + scoring}


def print_search_plan(pool_name: str, budget: float, suite_name: str = "demo", limit: Optional[int] = None,
                      first: float = 0.125, eta: float = 2.0, exclude=(), screen: bool = True,
                      methods: Optional[Sequence[str]] = None, experts: bool = True) -> SearchPlan:
    """``wildmerge search --dry-run``: the plan's counts and its time at the cost plan's rates (one GPU with the
    default H100 rates, and this machine's CPU), its merges priced per method as the protocol's dry run prices them,
    without resolving a model or writing anything."""
    from wildmerge.eval.suites import load_suite, task_sizes
    from wildmerge.hub import FAMILY_PREFIXES
    from wildmerge.pools import load_pool
    from wildmerge.planning.dryrun import base_parameters, merge_pricing

    pool = load_pool(pool_name, exclude)
    methods = methods_for(pool, methods)  # None: the pool's default arms (defaults.py)
    suite = load_suite(suite_name)
    scored = cost.suite_tokens([t.task for t in suite.tasks], limit, task_sizes(suite))
    items, tokens = {t: i for t, (i, _) in scored.items()}, sum(t for _, t in scored.values())
    space = search_space(len(pool.experts), len(set(methods)), experts)
    plan = plan_search(items, budget, first, eta, screen=len(pool.experts) if screen else 0, space=space)
    print(f"search plan: {budget:g} full evaluations of {plan.per_model} items (suite {suite_name}"
          f"{f', limit {limit}' if limit else ''}), rungs {', '.join(f'{f:g}' for f in fractions(first, eta))}")
    print(f"  methods: {', '.join(methods)}")
    screened = f"{plan.screened} experts screened at the first rung, then " if plan.screened else ""
    print(f"  {screened}{plan.brackets} bracket(s), {plan.merges} candidates merged at most (experts alone included), "
          f"{plan.jobs} evaluation jobs, <= {plan.item_evaluations:,} item evaluations "
          f"({plan.full_evaluations:.3g} full evaluations, the base's included)")
    if plan.exhausted:
        n = len(pool.experts)
        alone = f"{n} experts alone and " if experts else ""
        print(f"  that is every candidate of the pool, {space} ({alone}{len(set(methods))} method(s) x "
              f"{2 ** n - 1 - n} subsets of 2..{n} experts): a budget above {plan.full_evaluations:.3g} full "
              f"evaluations buys nothing more")
    params = base_parameters(pool)
    if not params:
        print(f"  cost: unknown (the base is not on this machine and {pool.source or 'the pool'} declares no size: "
              f"add `parameters: N` to its base)")
        return plan
    mean_inputs = (2 + len(pool.experts)) / 2 + 1  # subsets of 2..N experts, drawn across sizes, and the base
    text_tokens = cost.FAMILY_TEXT_TOKENS if pool.base.model.startswith(FAMILY_PREFIXES) else cost.TEXT_TOKENS
    rates = [cost.DEFAULTS["cuda"]] + ([cost.DEFAULTS["cpu"]] if params < 1e9 else [])  # a CPU plan of a 1B+ model
    for cal in rates:                                                                    # is no plan
        t = search_seconds(plan, params, tokens, mean_inputs, cal, methods, text_tokens)
        where = "one GPU" if cal.device == "cuda" else "this machine's CPU"
        print(f"  {where}: merges {_duration(t['merge_s'])}, evaluations {_duration(t['eval_s'])}, "
              f"{_duration(t['wall_s'])} in all ({cal.source}; good to about x{cal.error:g})")
        print(f"    {merge_pricing(cal, methods, text_tokens)}")
    print(f"  the protocol's plan for the same pool: python sample_and_merge.py --base {pool_name} --evaluate "
          f"--suite {suite_name} --dry-run")
    return plan


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
