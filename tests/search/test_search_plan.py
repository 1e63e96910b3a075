"""The search's cost plan is what ``bandit.search`` spends when no candidate stops early: the same brackets,
candidates, evaluation jobs and item evaluations, within the budget."""

import numpy as np
import pytest

from wildmerge.eval.screening.stats import screen_items
from wildmerge.planning import cost
from wildmerge.search.bandit import Space, search
from wildmerge.search.defaults import WITH_DATA
from wildmerge.search.plan import plan_search, search_seconds, search_space

SIZES = {"a": 300, "b": 120, "c": 80}


def _same_scores(calls):
    """Every model scores the same items alike: no paired interval lies below zero, so nothing stops early."""
    full = {t: (np.arange(n) % 3 == 0).astype(float) for t, n in SIZES.items()}

    def evaluate(ids, fraction):
        subset = screen_items(SIZES, fraction, seed=0)
        calls.extend((c, fraction) for c in ids)
        items = {t: full[t][subset[t]] for t in SIZES}
        return {c: (items, sum(len(v) for v in items.values())) for c in ids}
    return evaluate


def _zero_experts(calls):
    """As ``_same_scores``, but an expert alone scores 0 on every item: screened, none is ever drawn into a bracket."""
    same = _same_scores(calls)

    def evaluate(ids, fraction):
        out = same(ids, fraction)
        return {c: ({t: 0 * v for t, v in got[0].items()}, got[1]) if c.startswith("expert__") else got
                for c, got in out.items()}
    return evaluate


@pytest.mark.parametrize("budget,first,eta,screen", [(6.0, 0.125, 2.0, False), (13.5, 0.125, 2.0, False),
                                                     (9.0, 0.25, 3.0, False), (13.5, 0.125, 2.0, True),
                                                     (12.0, 0.25, 3.0, True), (60.0, 0.125, 2.0, True)])
def test_the_plan_is_what_the_search_spends_without_early_stops(budget, first, eta, screen):
    calls = []
    space = Space.every([f"e{i}" for i in range(9)], ["ta", "ties"], range(2, 8))
    scorer = _zero_experts(calls) if screen else _same_scores(calls)
    result = search(space, scorer, budget, lambda arm, s: f"{arm[0]}__{'+'.join(s)}", first=first,
                    eta=eta, iters=100, screen=screen)
    plan = plan_search(SIZES, budget, first=first, eta=eta, screen=9 if screen else 0)
    assert screen == any(c.get("screened") for c in result["candidates"].values())
    assert plan.item_evaluations == result["items_spent"] <= budget * plan.per_model
    assert plan.candidates == len(result["candidates"])
    assert plan.screened == sum(bool(c.get("screened")) for c in result["candidates"].values())
    assert plan.merges == plan.candidates - plan.screened
    assert plan.brackets == len(result["brackets"])
    assert plan.jobs == len(calls)


@pytest.mark.parametrize("screen", [False, True])
def test_the_plan_ends_where_the_pools_candidates_run_out_as_the_search_does(screen):
    """Three experts, two methods: 11 candidates. A budget of 1000 (or 1e12) buys them all and no more."""
    calls = []
    names, methods = ["e0", "e1", "e2"], ["ta", "ties"]
    result = search(Space.every(names, methods, range(2, 4)), (_zero_experts if screen else _same_scores)(calls),
                    1000, lambda arm, s: f"{arm[0]}__{'+'.join(s)}", iters=100, screen=screen)
    space = search_space(3, 2)
    plan = plan_search(SIZES, 1000, screen=3 if screen else 0, space=space)
    assert space == 11 == plan.candidates == len(result["candidates"]) and plan.exhausted
    assert plan.brackets == len(result["brackets"])
    if screen:  # a screened expert drawn again does not pay its first rung twice: the plan is an upper bound
        assert plan.jobs >= len(calls) and plan.item_evaluations >= result["items_spent"]
    else:
        assert plan.jobs == len(calls) and plan.item_evaluations == result["items_spent"]
    assert plan_search(SIZES, 1e12, screen=3 if screen else 0, space=space) == plan
    small = plan_search(SIZES, 4, space=space)
    assert not small.exhausted and small.candidates < space
    assert (small.brackets, small.candidates, small.jobs) == (lambda p: (p.brackets, p.candidates, p.jobs))(
        plan_search(SIZES, 4))


def test_a_budget_of_1e12_is_planned_without_walking_each_bracket():
    plan = plan_search(SIZES, 1e12)  # no space given: brackets of the same size counted at once
    assert plan.brackets > 10**9 and plan.item_evaluations <= 1e12 * plan.per_model and not plan.exhausted


def test_search_dry_run_says_when_the_budget_buys_every_candidate(capsys):
    from wildmerge.cli import main
    from wildmerge.pools import load_pool

    n = len(load_pool("demo").experts)
    assert main(["search", "--base", "demo", "--budget", "1e12", "--dry-run"]) == 0
    out = capsys.readouterr().out
    arms = len(WITH_DATA)  # the demo pool gives every expert its text: the default arms include RegMean and CoM
    space = search_space(n, arms)
    assert f"that is every candidate of the pool, {space} ({n} experts alone and {arms} method(s)" in out
    assert "buys nothing more" in out and f"{space - n} candidates merged at most" in out
    assert main(["search", "--base", "demo", "--budget", "4", "--dry-run"]) == 0
    assert "buys nothing more" not in capsys.readouterr().out


def test_seconds_add_merges_job_starts_and_tokens():
    plan = plan_search(SIZES, 6.0)
    cal = cost.Calibration("cuda", 2.0, 10.0, 0.5, "by hand", 2.0)
    t = search_seconds(plan, parameters=10**9, tokens_per_model=10**6, mean_inputs=4, cal=cal)
    assert t["merge_s"] == pytest.approx(plan.candidates * 2.0 * 4)
    assert t["eval_s"] == pytest.approx(plan.jobs * (10.0 + 2.0) + 0.5 * 1e9 * 1e6 * plan.full_evaluations / 1e12)
    assert t["wall_s"] == pytest.approx(t["merge_s"] + t["eval_s"])


def test_the_searchs_merges_are_priced_per_method_as_the_protocols():
    """The same service as the protocol's plan: a start per merge, then TA's rate x each method's factor, at the
    mean over the search's methods (by hand: start 0.5 s, 2 s per G read, 1e9 parameters, 4 models read)."""
    plan = plan_search(SIZES, 6.0)
    cal = cost.Calibration("cpu", 2.0, 10.0, 0.5, "by hand", 2.0, merge_start_s=0.5)
    t = search_seconds(plan, parameters=10**9, tokens_per_model=10**6, mean_inputs=4, cal=cal, methods=("ta", "tsv_m"))
    per_merge = ((0.5 + 2.0 * 4) + (0.5 + 2.0 * 4 * 13.21)) / 2  # 57.34
    assert t["merge_s"] == pytest.approx(plan.merges * per_merge)
    by_service = [cost.merge_seconds(10**9, 4, cal, m) for m in ("ta", "tsv_m")]
    assert t["merge_s"] == pytest.approx(plan.merges * sum(by_service) / 2)
    assert t["eval_s"] == pytest.approx(plan.jobs * (10.0 + 2.0) + 0.5 * 1e9 * 1e6 * plan.full_evaluations / 1e12)


def test_search_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from wildmerge.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["search", "--base", "demo", "--budget", "10", "--dry-run"]) == 0
    out = capsys.readouterr().out
    from wildmerge.pools import load_pool

    items = {"add": 100, "add_gen": 100, "compare": 100, "count": 100, "facts": 80, "reverse": 100}  # cost.py's
    n = len(load_pool("demo").experts)
    plan = plan_search(items, 10, screen=n,  # the Thompson search screens the experts first
                       space=search_space(n, len(WITH_DATA)))  # each of the pool's candidates once at most
    assert plan.screened == len(load_pool("demo").experts) and plan.merges == plan.candidates - plan.screened
    assert (f"{plan.screened} experts screened at the first rung, then {plan.brackets} bracket(s), "
            f"{plan.merges} candidates merged at most") in out
    assert f"{plan.jobs} evaluation jobs, <= {plan.item_evaluations:,} item evaluations" in out
    assert "one GPU: merges" in out and "this machine's CPU: merges" in out
    assert "merges (cpu): 0.16 s each + 2.71 s per G parameters read x the method's factor: ta x1, ties x3.7" in out
    assert "priced as TA (no measured factor on cuda): ties" in out
    assert main(["search", "--base", "demo", "--budget", "10", "--methods", "ta,regmean,star", "--dry-run"]) == 0
    out = capsys.readouterr().out  # the user's methods, priced as the protocol's dry run prices them
    assert ("merges (cpu): 0.16 s each + 2.71 s per G parameters read x the method's factor: ta x1; regmean +2 "
            "forward passes per text of each expert (20 tokens a text") in out
    assert "priced as TA (no measured factor on cpu): star" in out
    assert not (tmp_path / "runs").exists()
