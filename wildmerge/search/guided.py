"""``wildmerge search``: the best merge of a pool that a budget of evaluations can find.

1. Methods are tuned by the task alignment score on the whole pool (no evaluation; the reality-check paper).
2. Subsets are ranked by a weight-only proxy (``candidates.py``), or by a predictor fitted on an evaluated run of
   the pool (``predictor.py``, ``--fit-from RUN``), and as many (method, subset) candidates are taken
   as successive halving can afford within the budget (counted in full evaluations of the suite).
3. Successive halving on nested item subsets (``halving.py``) stops weak merges early; the winner is scored on every
   item and reported with its paired interval to the base.
Everything is written to the run folder (``search.json``, ``search_log.jsonl``, ``search/``); a rerun after a kill
finds every merge and score on disk and ends with the same result.
"""

import re
from pathlib import Path
from typing import List, Optional

from wildmerge.atomic import write_json
from wildmerge.errors import ConfigError
from wildmerge.eval.options import EvalOptions
from wildmerge.run import RunFolder, Search, SearchCandidate, SearchResult, SearchSettings
from wildmerge.search.candidates import candidate_id, interleave, ranked_subsets
from wildmerge.search.halving import candidates_for, fractions, halve
from wildmerge.search.live import LiveEvaluator, subset_recipe
from wildmerge.search.log import SearchLog

DEFAULT_METHODS = ("ta", "ties")
PROXY = "proxy: minus mean pairwise task-vector cosine minus the coefficient of variation of the norms"


def check_settings(budget: float, first: float, eta: float, methods: List[str], merge_device: str = "cpu") -> None:
    if budget < 2:
        raise ConfigError(f"--budget {budget}: give at least 2 full evaluations of the suite (the winner and the base "
                          f"are each scored on every item)")
    try:
        fractions(first, eta)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not methods:
        raise ConfigError("--methods is empty: give at least one merge method (e.g. ta,ties)")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", merge_device):
        raise ConfigError(f"--merge-device {merge_device!r}: give cpu, cuda or cuda:N")


def search_pool(pool_name: str, budget: float, out=None, suite_name: str = "demo", methods=DEFAULT_METHODS,
                first: float = 0.125, eta: float = 2.0, seed: int = 0, tune: bool = True, tune_samples: int = 32,
                limit: Optional[int] = None, exclude=(), fit_from=None, merge_device: str = "cpu",
                evaluation: Optional[EvalOptions] = None) -> dict:
    """Run (or resume) the search; returns the result ``search.json`` records. ``merge_device``: where candidates
    are merged; ``evaluation``: how they are scored (default: one local worker)."""
    from wildmerge.analysis.pool.geometry import task_vector_geometry
    from wildmerge.eval.evaluate import apply_overrides
    from wildmerge.eval.suites import check_tasks, load_suite
    from wildmerge.pools import load_pool, resolve
    from wildmerge.recipes.method import default_hparams, load_methods

    methods = list(methods)
    check_settings(budget, first, eta, methods, merge_device)
    recipes = load_methods(methods)
    suite = apply_overrides(load_suite(suite_name), {"limit": limit})
    check_tasks(suite)
    pool = load_pool(pool_name, exclude)
    if len(pool.experts) < 2:
        raise ConfigError(f"pool {pool.name!r} has {len(pool.experts)} expert(s); a merge needs at least 2")
    folder = RunFolder(out or Path("runs") / f"search-{pool.name}")
    folder.root.mkdir(parents=True, exist_ok=True)
    resolved = resolve(pool)  # merged in memory: LoRA adapters folded into the base
    base, experts = resolved.base_path, resolved.experts

    geometry = _geometry(folder, base, experts, task_vector_geometry)
    names = geometry["experts"]
    score, ranking = None, PROXY
    if fit_from:  # a predictor fitted on an evaluated run of this pool ranks the subsets instead of the proxy
        from wildmerge.search.predictor import fit_from_run, scorer

        predictor = fit_from_run(fit_from, names, geometry["cosine"], geometry["norms"], suite.name)
        score = scorer(predictor, geometry["cosine"], geometry["norms"], len(names))
        ranking = (f"predictor fitted on {fit_from} ({predictor.rows} merges, in-sample R^2 {predictor.r2:.2f}): "
                   f"suite mean minus the better of the base and its experts' mean")
        print(f"subsets ranked by the {ranking}")
    tuned = {}
    if tune:
        from wildmerge.analysis.tas.tune import tune_methods

        recipes, tuned = tune_methods(pool, recipes, folder.tune_dir, samples=tune_samples)
    ranked = ranked_subsets(names, geometry["cosine"], geometry["norms"], range(2, len(names) + 1), seed=seed,
                            score=score)
    available = sum(len(v) for v in ranked.values()) * len(methods)
    n = candidates_for(budget, first, eta, available)
    chosen = interleave(ranked, methods, n)
    specs = {candidate_id(c): {**c, "hparams": default_hparams(recipes[c["method"]]),
                               "recipe": subset_recipe(recipes[c["method"]], "base", c["experts"], experts)}
             for c in chosen}
    settings = SearchSettings(pool=pool.name, suite=suite.name, limit=limit, budget_full_evaluations=budget,
                              first_fraction=first, eta=eta, seed=seed, methods=methods, tuned=tuned, ranking=ranking)
    record = Search(settings=settings, candidates=[
        SearchCandidate(id=k, **{f: v[f] for f in ("method", "experts", "size", "rank", "proxy", "hparams")})
        for k, v in specs.items()])
    folder.write_search(record)
    print(f"search: {len(specs)} candidates ({', '.join(methods)}; sizes 2..{len(names)}) for a budget of "
          f"{budget:g} full evaluations; rungs at {fractions(first, eta)} of the items")
    evaluator = LiveEvaluator(folder, base, experts, specs, suite, seed=seed, options=evaluation,
                              merge_device=merge_device)
    result = halve(list(specs), evaluator.evaluate, first=first, eta=eta, seed=seed, log=SearchLog(folder.search_log))
    per_model = result["items_per_model"]
    winner = specs[result["winner"]]
    summary = SearchResult(winner=result["winner"], method=winner["method"], experts=winner["experts"],
                           hparams=winner["hparams"], suite_mean=result["score"], base_suite_mean=result["base_score"],
                           vs_base_points=result["vs_base"], items_spent=result["items_spent"],
                           full_evaluations_spent=result["items_spent"] / per_model if per_model else None,
                           model=str(folder.search_model_dir(result["winner"])),
                           score_is="a full evaluation (every item of the suite)")
    folder.write_search(record.model_copy(update={"result": summary}))
    summary = summary.model_dump(mode="json")
    d, lo, hi = result["vs_base"]
    print(f"best merge: {result['winner']} suite mean {result['score']:.4f} (base {result['base_score']:.4f}; "
          f"difference {d:+.2f} points, 95 % paired interval [{lo:+.2f}, {hi:+.2f}]); "
          f"{result['items_spent']} item evaluations = {summary['full_evaluations_spent']:.2f} full evaluations; "
          f"model: {summary['model']}")
    return summary


def _geometry(folder: RunFolder, base: str, experts: dict, compute) -> dict:
    """The pool's pairwise task-vector cosines and norms, computed once per run folder."""
    import json

    path = folder.search_geometry
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached.get("paths") == {"base": base, **experts}:
            return cached
    result = compute(base, experts, progress=False)
    out = {"experts": result["experts"], "cosine": result["cosine"], "norms": result["norms"],
           "paths": {"base": base, **experts}}
    write_json(path, out)
    return out
