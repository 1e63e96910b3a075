"""``wildmerge search``: the best merge of a pool that a budget of evaluations can find.

1. Methods are tuned by the task alignment score on the whole pool (no evaluation; the reality-check paper).
2. A multi-fidelity bandit (``bandit.py``) over arms (method x subset size, and the experts alone) draws candidates
   bracket by bracket, more of them in arms whose cheap first rungs scored well; inside each bracket, successive
   halving on nested item subsets (``halving.py``) stops weak merges early. The winner is the best full evaluation
   of any bracket, reported with its paired interval to the base.
Everything is written to the run folder (``search.json``, ``search_log.jsonl``, ``search/``); a rerun after a kill
finds every merge and score on disk, draws the same candidates again and ends with the same result.
"""

from pathlib import Path
from typing import List, Optional

from wildmerge.errors import ConfigError
from wildmerge.eval.options import EvalOptions
from wildmerge.numbers import NONNEGATIVE_INT, POSITIVE_INT, float_at_least
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS
from wildmerge.resources import device_problem
from wildmerge.run import RunFolder, Search, SearchCandidate, SearchResult, SearchSettings, default_out
from wildmerge.search.bandit import EXPERT, RULES, Space, search
from wildmerge.search.candidates import candidate_id
from wildmerge.search.defaults import methods_for
from wildmerge.search.halving import fractions
from wildmerge.search.live import LiveEvaluator, subset_recipe
from wildmerge.search.log import SearchLog

RANKING = "a Thompson-sampling bandit over (method, subset size) arms on their first-rung scores"


def check_settings(budget: float, first: float, eta: float, methods: Optional[List[str]], merge_device: str = "cpu",
                   rule: str = "thompson", seed: int = 0, tune_samples: int = 32, limit: Optional[int] = None) -> None:
    """Every setting, in the command line's words (a library caller gets the flags' messages)."""
    float_at_least(2).check("--budget", budget)  # the winner and the base are each scored on every item
    NONNEGATIVE_INT.check("--seed", seed)
    POSITIVE_INT.check("--tune-samples", tune_samples)
    if limit is not None:
        POSITIVE_INT.check("--limit", limit)
    try:
        fractions(first, eta)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if methods is not None and not list(methods):  # None: the pool's default arms
        raise ConfigError("--methods is empty: give at least one merge method (e.g. ta,ties)")
    if device_problem(merge_device, kinds=("cpu", "cuda")):  # the one device rule; no auto / mps here
        raise ConfigError(f"--merge-device {merge_device!r}: give cpu, cuda or cuda:N")
    if rule not in RULES:
        raise ConfigError(f"--rule {rule!r}: give one of {', '.join(RULES)}")


def check_data(pool, recipes: dict) -> List[str]:
    """The layer-wise merge methods among ``recipes`` (RegMean, CoM), once every expert's data for them is checked:
    present, readable, and as many texts as they read (not at their first merge)."""
    from wildmerge.expert_data.check import require_data
    from wildmerge.search.defaults import short_of_texts

    layerwise = sorted({r.recipe["merge_method"] for r in recipes.values()} & set(LAYERWISE_METHODS))
    if not layerwise:
        return []
    require_data(pool.all_data(), layerwise, pool.name)
    short = short_of_texts(pool, recipes)
    if short:
        raise ConfigError(f"{short}: give every expert at least that many texts in {pool.source or 'the pool file'}, "
                          f"or a recipe of your own with a lower calibration n_samples (--methods PATH)")
    return layerwise


def tunable(methods) -> bool:
    """Whether TAS has a grid for any of ``methods`` (RegMean and CoM alone keep their recipes' settings)."""
    from wildmerge.analysis.tas.tune import TUNE_GRIDS

    return any(m in TUNE_GRIDS for m in methods)


def dry_run(pool_name: str, budget: float, suite_name: str = "demo", methods=None, first: float = 0.125,
            limit: Optional[int] = None, eta: float = 2.0, exclude=(), rule: str = "thompson",
            experts: bool = True) -> None:
    """``search --dry-run``: what ``search_pool`` with these settings will cost, printed; nothing runs.
    ``methods``: None for the pool's default arms (``defaults.py``)."""
    from wildmerge.search.plan import print_search_plan

    print_search_plan(pool_name, budget, suite_name, limit, first, eta, exclude, screen=rule == "thompson" and experts,
                      methods=None if methods is None else list(methods), experts=experts)


def search_pool(pool_name: str, budget: float, out=None, suite_name: str = "demo", methods=None,
                first: float = 0.125, eta: float = 2.0, seed: int = 0, tune: bool = True, tune_samples: int = 32,
                limit: Optional[int] = None, exclude=(), merge_device: str = "cpu", rule: str = "thompson",
                experts: bool = True, evaluation: Optional[EvalOptions] = None) -> dict:
    """Run (or resume) the search; returns the result ``search.json`` records. ``methods``: None for the pool's
    default arms (``defaults.py``: with RegMean and CoM where every expert has data); ``merge_device``: where
    candidates are merged; ``evaluation``: how they are scored (default: one local worker); ``experts``: the experts
    alone are candidates too."""
    from wildmerge.eval.evaluate import apply_overrides
    from wildmerge.eval.suites import check_tasks, load_suite
    from wildmerge.pools import load_pool, resolve
    from wildmerge.recipes.method import default_hparams, load_methods

    from wildmerge.resources import checked_device

    checked_device(merge_device, "--merge-device")  # a missing GPU said before any model is read
    check_settings(budget, first, eta, methods, merge_device, rule, seed, tune_samples, limit)
    pool = load_pool(pool_name, exclude)
    methods = methods_for(pool, methods, count=True)  # the default arms: with RegMean / CoM where data allows
    recipes = load_methods(methods)
    suite = load_suite(suite_name).following([pool.base.model] + [e.model for e in pool.experts])  # the pool's family
    suite = apply_overrides(suite, {"limit": limit})
    check_tasks(suite)
    if len(pool.experts) < 2:
        raise ConfigError(f"pool {pool.name!r} has {len(pool.experts)} expert(s); a merge needs at least 2")
    folder = RunFolder(out or default_out("search", pool=pool.name))
    folder.root.mkdir(parents=True, exist_ok=True)
    layerwise = check_data(pool, recipes)  # RegMean / CoM are candidates only where every expert has its data
    resolved = resolve(pool)  # the search's one resolution: merged in memory, LoRA adapters folded into the base
    base, paths = resolved.base_path, resolved.experts
    tuned = {}
    if tune and tunable(methods):
        from wildmerge.analysis.tas.tune import tune_methods

        recipes, tuned = tune_methods(resolved, recipes, folder.tune_dir, samples=tune_samples)
    names = list(paths)
    settings = SearchSettings(pool=pool.name, suite=suite.name, limit=limit, budget_full_evaluations=budget,
                              first_fraction=first, eta=eta, seed=seed, methods=methods, tuned=tuned, ranking=RANKING,
                              rule=rule, experts_are_candidates=experts)
    record = Search(settings=settings, candidates=[])
    folder.write_search(record)
    specs = {}

    def on_new(cid: str, c: dict) -> None:
        hparams = {} if c["method"] == EXPERT else default_hparams(recipes[c["method"]])
        recipe = None if c["method"] == EXPERT else subset_recipe(recipes[c["method"]], "base", c["experts"], paths)
        specs[cid] = {**c, "hparams": hparams, "recipe": recipe}

    print(f"search: {', '.join(methods)}{' and the experts alone' if experts else ''}, sizes 2..{len(names)}, for a "
          f"budget of {budget:g} full evaluations; rungs at {fractions(first, eta)} of the items; rule {rule}")
    evaluator = LiveEvaluator(folder, base, paths, specs, suite, seed=seed, options=evaluation,
                              merge_device=merge_device, pool_models=resolved.pool_models() if layerwise else None,
                              methods=recipes)
    result = search(Space.every(names, methods, range(2, len(names) + 1), experts=experts), evaluator.evaluate,
                    budget, lambda arm, subset: candidate_id({"method": arm[0], "experts": list(subset)}),
                    on_new=on_new, first=first, eta=eta, seed=seed, rule=rule, log=SearchLog(folder.search_log))
    record = record.model_copy(update={"candidates": [
        SearchCandidate(id=k, **{f: v[f] for f in ("method", "experts", "size", "rank", "hparams")}, arm=v["arm"],
                        **{f: result["candidates"][k].get(f) for f in ("bracket", "first_score", "screened")})
        for k, v in specs.items()]})  # bracket and first-rung score as the search ended (specs: as first drawn)
    per_model = result["items_per_model"]
    winner = specs[result["winner"]]
    summary = SearchResult(winner=result["winner"], method=winner["method"], experts=winner["experts"],
                           hparams=winner["hparams"], suite_mean=result["score"], base_suite_mean=result["base_score"],
                           vs_base_points=result["vs_base"], items_spent=result["items_spent"],
                           full_evaluations_spent=result["items_spent"] / per_model,
                           model=evaluator.model_path(result["winner"]),
                           score_is="a full evaluation (every item of the suite)", brackets=result["brackets"],
                           arms=result["observed"])
    folder.write_search(record.model_copy(update={"result": summary}))
    summary = summary.model_dump(mode="json")
    d, lo, hi = result["vs_base"]
    print(f"best: {result['winner']} suite mean {result['score']:.4f} (base {result['base_score']:.4f}; "
          f"difference {d:+.2f} points, 95 % paired interval [{lo:+.2f}, {hi:+.2f}]); "
          f"{result['items_spent']} item evaluations = {summary['full_evaluations_spent']:.2f} full evaluations; "
          f"{len(specs)} candidates in {len(result['brackets'])} brackets; model: {summary['model']}")
    return summary
