"""The in-the-wild protocol (Hitit et al. 2025) as one job: tune -> plan -> merge -> evaluate -> report.

``wildmerge sample`` turns its arguments into ``SampleSettings`` and calls ``run_sample``; ``wildmerge demo report``
runs the same stages on the demo family (``family_report``); ``wildmerge eval`` runs the last two (``evaluate``).
Every bad input fails here, before the first merge.
"""

import hashlib
import sys
import time
from collections import Counter
from pathlib import Path
from typing import List, Literal, NamedTuple, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wildmerge.atomic import write_json
from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.eval.options import EvalOptions
from wildmerge.run import RunFolder, default_out

CLUSTER = ("ray", "slurm")  # executors whose model jobs (merge, score, prune) run on the cluster's nodes
PAPER_SIZES, PAPER_K = (1, 2, 4, 6, 8, 10), 15  # Hitit et al. 2025; n = N (the full pool) is added
# a pool's own defaults (``protocol:`` in its YAML, e.g. the embedded families') replace these
FLAGS = {"pool": "--base", "ablations": "--sweep", "full": "--no-full", "download": "--no-download"}  # the others: --name


class SampleOutcome(NamedTuple):
    run_dir: Path
    code: int  # the command's exit status: 1 if a score failed (a dry run: the dry run's)


class SampleSettings(BaseModel):
    """Everything ``wildmerge sample`` was asked to do (``None``: the default for the pool); kept in sample_log.json.

    The draw itself (``sampling()``) is the manifest's ``sampling`` record."""

    model_config = ConfigDict(extra="forbid")

    pool: str = "demo"
    out: Optional[str] = None  # default runs/<pool>-seed<seed>
    methods: Optional[List[str]] = None  # default the pool's protocol.methods, else the paper's seven; ["all"]: all
    sizes: Optional[List[int]] = None  # default the pool's protocol.sizes, else PAPER_SIZES, below the pool's size
    k: Optional[int] = None
    seed: int = 0
    full: bool = True
    homogeneous: bool = False
    exclude: List[str] = Field(default_factory=list)
    select: Literal["random", "predicted", "balanced", "unbalanced"] = "random"
    predictor: Optional[str] = None
    predictor_method: Optional[str] = None
    ablations: List[str] = Field(default_factory=list)
    grid: Optional[str] = None
    tune: bool = False
    tune_grid: Optional[str] = None
    tune_samples: int = 128
    tune_check: int = 0  # evaluate this many grid points per tuned method: does TAS track accuracy? (manifest)
    dry_run: bool = False
    calibrate_from: Optional[str] = None  # --dry-run's cost plan: per-unit costs from this earlier run folder
    keep_models: Literal["all", "none"] = "all"
    evaluate: Optional[bool] = None  # default: the pool's protocol.evaluate (the embedded families)
    suite: Optional[str] = None  # default: the pool's protocol.suite
    merge_device: str = "cpu"  # mergekit's math device (the evaluation's is ``evaluation.device``)
    merge_workers: Union[int, Literal["auto"], None] = None  # None: one per visible GPU on cuda, else 1
    allow_pickle: bool = False
    download: Optional[bool] = None  # False: the local hub cache only
    evaluation: EvalOptions = Field(default_factory=EvalOptions)

    def __init__(self, **values):
        """A bad value is a ``ConfigError`` naming its flag, as the command line says it (library callers)."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            error = exc.errors()[0]
            name = str(error["loc"][0]) if error["loc"] else ""
            if error["type"] == "extra_forbidden":
                raise ConfigError(f"unknown sample option {name!r}"
                                  f"{did_you_mean(name, type(self).model_fields)}") from None
            raise ConfigError(f"{FLAGS.get(name, '--' + name.replace('_', '-'))}: "
                              f"{error['msg'].removeprefix('Value error, ')}") from None

    def sampling(self, pool, select: Optional[dict] = None):
        """The draw on ``pool`` (a loaded pool, experts already excluded)."""
        from wildmerge.planning.settings import Sampling

        own = pool.protocol
        default = [n for n in (own.sizes or PAPER_SIZES) if n < len(pool.experts)]  # n = N is added anyway
        k = self.k if self.k is not None else (own.k or PAPER_K)
        return Sampling.of(pool, seed=self.seed, sizes=self.sizes or default, k=k, full=self.full,
                           homogeneous=self.homogeneous, select=select)


def _method_names(methods: Optional[List[str]], pool=None) -> List[str]:
    """``pool``: the methods are the pool's ``protocol: methods`` (no --methods given), named in the message."""
    from wildmerge.recipes.method import PAPER_METHODS, list_method_recipes

    if methods == [] and pool is not None:
        raise ConfigError(f"{pool.source or pool.name}: `protocol: methods` is empty; list method recipes there "
                          f"(e.g. [ta, ties]) or remove the key for the paper's seven, or give --methods")
    if methods == []:  # `--methods ''` or `--methods ,`: an empty list is a mistake, not "all"
        raise ConfigError("--methods is empty; give comma-separated method recipes (e.g. ta,ties), or leave the "
                          "option out for the paper's seven")
    names = methods or list(PAPER_METHODS)
    return list(dict.fromkeys(list_method_recipes() if names == ["all"] else names))


def _predicted(s: SampleSettings, resolved=None):
    """(record for the manifest, scorer) of ``--select predicted`` / ``balanced`` / ``unbalanced``; (None, None) for
    random draws. ``resolved``: the command's pool resolver (``_resolver``)."""
    if s.select in ("balanced", "unbalanced"):
        if s.homogeneous:
            raise ConfigError(f"--select {s.select} and --homogeneous both choose the subsets: pick one")
        from wildmerge.analysis.pool.balance import balance_selection

        return balance_selection(resolved(), s.select == "balanced")
    if s.select != "predicted":
        return None, None
    from wildmerge.analysis.mergeability.selection import load_scorer

    if not s.predictor:
        raise ConfigError("--select predicted needs --predictor PATH (predictor.json from `wildmerge analyze predictor`)")
    if s.homogeneous:
        raise ConfigError("--select predicted and --homogeneous both choose the subsets: pick one")
    scorer = load_scorer(s.predictor, s.predictor_method)
    path = Path(s.predictor).resolve()
    path = path / "predictor.json" if path.is_dir() else path
    record = {"predictor": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
              "method": s.predictor_method or "all (z-scored mean over methods)",
              "aggregation": "mean predicted pairwise score over the subset's pairs"}
    return record, scorer


def _scoring(suite: Optional[str], options: EvalOptions):
    """What the dry run's cost plan needs of the evaluation: the suite's tasks, its items per task, the array, the
    weights' dtype, the CPU workers asked for and the default, and the tasks' sizes (the suites'); a run not
    evaluated (``suite`` None) has no tasks, and the shipped suites' sizes price ``--calibrate-from``'s records."""
    from wildmerge.eval.local import default_workers
    from wildmerge.eval.suites import load_suite, task_sizes
    from wildmerge.planning.cost import Scoring

    if suite is None:
        return Scoring([], sizes=task_sizes())
    loaded = load_suite(suite)
    limit = options.limit if options.limit is not None else loaded.settings.limit
    return Scoring([t.task for t in loaded.tasks], limit, options.slurm_array_parallelism,
                   options.dtype or loaded.settings.dtype, options.workers, default_workers(), task_sizes(loaded))


def _resolver(s: SampleSettings, pool, run_dir: Path):
    """The command's one resolution of its pool, made when first needed (the norm balance, the tuning, the merges):
    at the run manifest's pinned commits (a resumed run never mixes in a hub branch that moved) and with
    ``--no-download``; every stage is handed the same ``ResolvedPool``."""
    from functools import cache

    from wildmerge.pools import resolve
    from wildmerge.planning.manifest import pinned_commits

    @cache
    def resolved():
        return resolve(pool, allow_pickle=s.allow_pickle, download=s.download, pinned=pinned_commits(run_dir))

    return resolved


def _checked_sampling(s: SampleSettings, pool, select):
    """The draw's settings on ``pool``, its numbers and sizes checked (the command line's words for library
    callers); the pool's protocol sizes it leaves out are said."""
    from wildmerge import numbers

    sampling = s.sampling(pool, select)
    numbers.POSITIVE_INT.check("--k", sampling.k)  # the command line's words for library callers
    numbers.NONNEGATIVE_INT.check("--seed", s.seed)
    numbers.POSITIVE_INT.check("--tune-samples", s.tune_samples)
    dropped = [n for n in (pool.protocol.sizes or []) if n > len(pool.experts)]
    if dropped and not s.sizes:  # said, not silently left out (e.g. after --exclude)
        print(f"note: pool {pool.name!r} has {len(pool.experts)} experts: its protocol sizes "
              f"{', '.join(map(str, dropped))} are left out (--sizes to choose others)", file=sys.stderr)
    too_big = [n for n in sampling.sizes if n > len(pool.experts) or n < 1]
    if too_big:
        raise ConfigError(f"--sizes {too_big}: pool {pool.name!r} has {len(pool.experts)} experts; "
                          f"use sizes between 1 and {len(pool.experts)}")
    return sampling


def _evaluation_of(s: SampleSettings, pool):
    """(whether the run is evaluated, its suite): the evaluation flags checked against each other, and the suite
    and the evaluation device checked before the merges (and in a dry run)."""
    evaluate = pool.protocol.evaluate if s.evaluate is None else s.evaluate
    suite = s.suite or pool.protocol.suite
    if evaluate and not suite:
        raise ConfigError("--evaluate needs --suite NAME (a file in merge_recipes/suites/ or a suite YAML path)")
    if not evaluate and s.evaluation.screen is not None:
        raise ConfigError(f"--screen {s.evaluation.screen} screens the evaluation, but this run is not evaluated "
                          f"(--no-evaluate, or a pool whose protocol does not evaluate): add --evaluate --suite NAME, or drop --screen")
    if not evaluate and s.evaluation.wandb_args:
        raise ConfigError("--wandb-args logs the evaluation's scores, but this run is not evaluated (--no-evaluate, "
                          "or a pool whose protocol does not evaluate): add --evaluate --suite NAME, or drop --wandb-args")
    if s.tune_check and not s.tune:
        raise ConfigError(f"--tune-check {s.tune_check} checks the --tune choices: add --tune, or drop --tune-check")
    if s.tune_check and not suite:
        raise ConfigError("--tune-check needs a suite to evaluate on: add --suite NAME (the pool names none of its "
                          "own under protocol: suite:)")
    if evaluate or s.tune_check:
        from wildmerge.eval.evaluate import check_evaluation

        check_evaluation(suite, s.evaluation)
    return evaluate, suite


def _check_calibrate_from(s: SampleSettings) -> None:
    """``--calibrate-from`` checked whenever it is given (a damaged or empty folder said now); a dry run's only."""
    if s.calibrate_from:
        from wildmerge.planning.cost import calibrate_from

        calibrate_from(s.calibrate_from)
        if not s.dry_run:
            raise ConfigError(f"--calibrate-from {s.calibrate_from} prices the cost plan of a dry run (a real run "
                              f"measures its own): add --dry-run, or drop --calibrate-from")


def _model_jobs(s: SampleSettings, run_dir: Path, suite: str):
    """On Ray or Slurm, each merged model merged, scored and pruned as one job on the cluster (``wildmerge.cluster``);
    None for the local executors."""
    if s.evaluation.executor not in CLUSTER:
        return None
    from wildmerge.cluster.driver import run_model_jobs

    def jobs(entries, models, methods, options):
        return run_model_jobs(run_dir, entries, models, methods, options, suite, s.evaluation, s.keep_models)

    return jobs


def run_sample(s: SampleSettings) -> SampleOutcome:
    """``wildmerge sample``: check everything, then tune, plan, merge, evaluate and report; the run folder and the
    command's exit status (1 if a score failed)."""
    from wildmerge.eval.evaluate import evaluate_run
    from wildmerge.recipes.method import load_methods
    from wildmerge.pools import load_pool
    from wildmerge.recipes.sweeps import load_sweeps
    from wildmerge.resources import checked_device
    from wildmerge.planning.preflight import check_base_tokenizer, data_features

    if s.evaluation.executor not in CLUSTER:  # a cluster's merges run on its nodes' devices
        checked_device(s.merge_device, "--merge-device")  # a missing GPU said before anything is loaded
    _check_calibrate_from(s)
    pool = load_pool(s.pool, s.exclude)
    run_dir = Path(s.out or default_out("sample", pool=pool.name, seed=s.seed)).resolve()
    resolved = _resolver(s, pool, run_dir)
    select, scorer = _predicted(s, resolved)
    sampling = _checked_sampling(s, pool, select)
    methods = load_methods(_method_names(pool.protocol.methods, pool) if s.methods is None else
                           _method_names(s.methods))
    sweeps = load_sweeps(s.ablations, s.grid)  # each with its method's recipe loaded
    from wildmerge.planning.sample_cap import cap_sample_sweeps

    sweeps, capped = cap_sample_sweeps(pool, sweeps)  # com_samples: no point asks more texts than an expert has
    from wildmerge.merging.workers import worker_count

    worker_count(s.merge_workers, s.merge_device, None, 0)  # cores and helper memory now; the models' share later
    evaluate, suite = _evaluation_of(s, pool)
    check_base_tokenizer(pool, (["the evaluation"] if evaluate else []) + data_features(methods, sweeps, s.tune))
    if s.dry_run:
        from wildmerge.pools.resolved import check_local
        from wildmerge.planning.dryrun import print_dry_run

        check_local(pool, s.allow_pickle)  # the local checkpoints as a real run's resolve checks them
        return SampleOutcome(run_dir, print_dry_run(
            run_dir, pool, sampling, methods, sweeps, s.keep_models, scorer, tune=s.tune,
            scoring=_scoring(suite if evaluate else None, s.evaluation), merge_device=s.merge_device,
            calibrate_from=s.calibrate_from, capped=capped))
    for note in capped:
        print(f"note: {note}", file=sys.stderr)
    from wildmerge.planning.preflight import check_expert_data

    check_expert_data(pool, methods, sweeps, s.tune)  # RegMean / CoM / --tune data, before any model is resolved
    if s.keep_models == "none" and not evaluate:
        raise ConfigError("--keep-models none deletes each merged model's weights once it is evaluated: add "
                          "--evaluate --suite NAME, or use --keep-models all")

    def evaluate_one(entry):
        evaluate_run(str(run_dir), suite, s.evaluation, model_ids=[entry.model_id])

    tuned = {}
    if s.tune:
        from wildmerge.analysis.tas.tune import tune_methods

        methods, tuned = tune_methods(resolved(), methods, RunFolder(run_dir).tune_dir, s.tune_grid,
                                      samples=s.tune_samples, device=s.merge_device, allow_pickle=s.allow_pickle,
                                      check=s.tune_check,
                                      check_suite=suite, check_options=s.evaluation.model_copy(update={"screen": None}))
    jobs = _model_jobs(s, run_dir, suite) if evaluate else None
    log = run_protocol(run_dir, pool, sampling, methods, sweeps, scorer=scorer, merge_device=s.merge_device,
                       merge_workers=s.merge_workers, allow_pickle=s.allow_pickle, keep_models=s.keep_models,
                       after_each=evaluate_one if s.keep_models == "none" and not jobs else None,
                       resolved=resolved(), model_jobs=jobs)
    folder = RunFolder(run_dir)
    if tuned:
        folder.write_manifest(folder.read_manifest().model_copy(update={"tuned": tuned}))
    failed = False
    if evaluate:
        from wildmerge.analysis.report.write import write_report

        failed = bool(evaluate_run(str(run_dir), suite, s.evaluation)["failed"])
        log["report"] = {k: str(v) for k, v in write_report(run_dir).items()}
        print(f"report: {folder.report_dir()}")
    log["args"] = s.model_dump(mode="json")
    write_json(folder.sample_log, log)
    return SampleOutcome(run_dir, 1 if failed else 0)


def run_protocol(run_dir: Path, pool, sampling, methods: dict, sweeps: dict, *, scorer=None, merge_device="cpu",
                 allow_pickle=False, download=None, keep_models="all", after_each=None, merge_workers=None,
                 resolved=None, model_jobs=None) -> dict:
    """Draw (or reuse) the subsets, write the plan, merge what is not done yet; returns the run log.

    ``sampling`` is the draw (``wildmerge.planning.settings.Sampling``); ``scorer`` scores subsets when a predictor
    chooses them; ``resolved``: the pool as the command resolved it (else resolved here, at the manifest's pins);
    ``model_jobs(entries, models, methods, merge options)``, when given, runs the merges instead of this process
    (``wildmerge.cluster``: each model a cluster job)."""
    from wildmerge.merging.runner import merge_options, run_plan
    from wildmerge.merging.workers import worker_count
    from wildmerge.run import Plan, RunFolder, merged_with_previous
    from wildmerge.planning.manifest import prepare
    from wildmerge.planning.plan import build_entries

    started = time.time()
    run = RunFolder(run_dir)
    manifest, models = prepare(run_dir, pool, sampling, scorer=scorer, allow_pickle=allow_pickle, download=download,
                               resolved=resolved)
    entries = build_entries(run_dir, manifest.subsets, models, methods, sweeps)
    if run.has_plan():
        from wildmerge.run import read_record

        plan = read_record(run.plan_path, Plan, "delete it and run this command again: the plan is rebuilt from "
                                                "manifest.json and merges already on disk are not redone (baselines "
                                                "added later, e.g. compositions, must be added again)")
        kept = [e for e in plan.entries if e.kind in ("merge", "composition")]  # and added baselines
        entries = merged_with_previous(kept, entries)
    run.write_plan(Plan(run=run.name, run_dir=str(run.root), pool=pool.name, methods=list(methods),
                        ablations=list(sweeps), entries=entries))
    merges = [e for e in entries if e.kind == "merge"]
    print(f"run {run_dir}: pool {pool.name!r}, {len(pool.experts)} experts, {len(manifest.subsets)} subsets, "
          f"{len(merges)} merges ({', '.join(f'{m} {c}' for m, c in Counter(e.method for e in merges).items())})")
    for note in manifest.notes:
        print(f"  note: {note}")
    options = merge_options(models, device=merge_device, allow_pickle=allow_pickle, seed=sampling.seed)
    if model_jobs is not None:
        stats = model_jobs(entries, models, methods, options)
        print(f"model jobs: {stats['models'] - stats['finished_before']} run, {stats['finished_before']} finished "
              f"before, {stats['lost']} lost twice ({stats['seconds']:.1f} s)")
        return {"command": "wildmerge sample", "settings": sampling.record(), "stats": stats,
                "seconds": round(time.time() - started, 1)}
    workers = worker_count(merge_workers, merge_device, models.base.path, max((len(e.experts) for e in merges), default=1))
    if workers > 1:
        print(f"merging with {workers} workers")
    stats = run_plan(entries, models, methods, options, keep_models=keep_models, after_each=after_each,
                     workers=workers)
    print(f"merges: {stats['merged']} new, {stats['redone']} redone, {stats['skipped']} already done "
          f"({stats['seconds']:.1f} s merging)")
    return {"command": "wildmerge sample", "settings": sampling.record(), "stats": stats,
            "seconds": round(time.time() - started, 1)}


def evaluate(run_dir, models: List[str], suite: str, options: EvalOptions, *, out=default_out("eval"),
             report: bool = True) -> int:
    """``wildmerge eval``: a run's models, then its report; or ad hoc models, then their scores. 1 if one failed."""
    from wildmerge.eval.evaluate import evaluate_models, evaluate_run

    if bool(run_dir) == bool(models):
        raise ConfigError("give either a RUN_DIR or one or more --model PATH, not both and not neither")
    if models:
        summary = evaluate_models(models, suite, out, options)
        _print_scores(summary)
    else:
        summary = evaluate_run(run_dir, suite, options)
        if report:
            from wildmerge.analysis.report.write import write_report

            written = write_report(run_dir, suite=summary["suite"])
            print("leaderboard: " + ", ".join(str(v) for k, v in written.items() if k.endswith("leaderboard_md")))
    return 1 if summary["failed"] else 0


def _print_scores(summary) -> None:
    from wildmerge.eval.store import ResultStore

    store = ResultStore(summary["store"])
    for model, job_id in summary["index"].items():
        record = store.load(job_id)
        if record["status"] == "ok":
            scores = record["scores"]
            mean = 100 * sum(scores.values()) / len(scores)
            cells = "  ".join(f"{k}={100 * v:.1f}" for k, v in scores.items())
            print(f"{model}: mean={mean:.2f}  {cells}")
        else:
            print(f"{model}: FAILED ({(record.get('error') or '').splitlines()[0]})")


def family_report(info: dict, out_dir=None, limit=None) -> dict:
    """``wildmerge demo report``: the base, every expert and their average (the ``ta`` recipe: with normalised
    weights, the plain mean) merged, scored and tabulated as an ordinary run; resumable like any run."""
    from wildmerge.analysis.report.environment import environment
    from wildmerge.analysis.report.run_data import RunData
    from wildmerge.analysis.report.scores import collect_scores
    from wildmerge.atomic import write_text
    from wildmerge.families.demo.report import AVERAGE, default_report_dir, family_table, format_table, table_csv
    from wildmerge.eval.evaluate import evaluate_run
    from wildmerge.eval.suites import load_suite
    from wildmerge.recipes.method import load_methods
    from wildmerge.pools import load_pool
    from wildmerge.planning.settings import Sampling

    run_dir = Path(out_dir) if out_dir else default_report_dir(info)
    pool = load_pool(info["pool_file"])
    run_protocol(run_dir, pool, Sampling.of(pool, seed=info["seed"], sizes=[1], k=1), load_methods(["ta"]), {})
    suite = load_suite("demo").model_copy(update={"include_path": info["tasks"]})  # this family's own task files
    summary = evaluate_run(run_dir, suite, EvalOptions(limit=limit or None))
    if summary["failed"]:
        raise WildmergeError(f"{len(summary['failed'])} model(s) could not be scored; see {summary['store']}")
    df, labels, _ = collect_scores(run_dir, suite.name)
    names = {t.name: t.task for t in suite.tasks}
    scores = {}
    for row in df.to_dict("records"):
        label = {"base": "base", "expert": row["experts"], "merge": AVERAGE}[row["kind"]]
        scores[label] = {names[c]: row[c] / 100.0 for c in labels}
    table = family_table(info, scores)
    folder = RunFolder(run_dir)
    write_json(folder.demo_report_json, table)
    write_text(folder.demo_report_csv, table_csv(table, info["task_names"]))
    write_json(folder.demo_report_environment, environment(RunData.read(run_dir)))
    print(format_table(table, info["task_names"]))
    return table
