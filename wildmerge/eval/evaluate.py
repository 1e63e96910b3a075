"""Evaluate a run (or a few models) on a suite: fingerprint, dedupe, skip finished jobs, run the rest, summarise.

``evaluate_run(run_dir, suite, options)`` is what ``wildmerge eval RUN`` and ``sample_and_merge.py --evaluate`` call,
with the command's ``EvalOptions`` (``options.py``: checked when made). Results live in ``RUN/eval/<suite>/`` (see
``store.py``).
"""

import hashlib
import os
import socket
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml
from pydantic import ValidationError
from tqdm.auto import tqdm

from wildmerge.atomic import write_text
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.eval.executors import check_cluster, run_jobs
from wildmerge.eval.jobs import make_job
from wildmerge.eval.local import check_workers
from wildmerge.eval.fingerprint import FingerprintCache, check_model_dir, fingerprint_model
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.screening.stages import REFERENCES, SCREEN_SEED, final_job_id, run_screened
from wildmerge.eval.store import FAILED, OK, ResultStore, needs_run, write_result
from wildmerge.eval.suites import Suite, SuiteSettings, check_tasks, load_suite
from wildmerge.eval.wandb_log import wandb_spec
from wildmerge.hub import resolve_path
from wildmerge.resources import checked_device, cuda_available
from wildmerge.run import EvalIndex, PlanEntry, RunFolder, weights_pruned, write_eval_index


def apply_overrides(suite: Suite, overrides: Optional[Dict[str, Any]]) -> Suite:
    """The suite with some settings replaced (e.g. ``{"limit": 10, "device": "cpu"}``); they change job ids."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    if not overrides:
        return suite
    unknown = sorted(set(overrides) - set(SuiteSettings.model_fields))
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}; valid: {', '.join(SuiteSettings.model_fields)}")
    try:
        settings = SuiteSettings.model_validate({**suite.settings.model_dump(), **overrides})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"invalid setting override {first['loc'][0]}={overrides.get(first['loc'][0])!r}: "
                          f"{first['msg']}") from None
    return suite.model_copy(update={"settings": settings})


def resolve_device(suite: Suite, executor: str, cuda: Optional[bool] = None,
                   gpus_per_job: Optional[float] = None) -> Suite:
    """The suite with ``device: auto`` made concrete for jobs that run on this machine: the GPU when there is one,
    else the CPU. The device is part of a job's id, so ``wildmerge sample`` and a later ``wildmerge eval`` of the same
    run agree, and on a CPU the ids are those ``sample`` always gave (it used to pass ``device: cpu``). Ray and Slurm
    workers have their own devices: there ``auto`` stays ``auto`` and each result records the device it ran on,
    except where their jobs get no GPU (``--gpus-per-job 0``): that is the CPU, with the local run's ids."""
    if suite.settings.device != "auto":
        return suite
    if executor not in ("local", "serial"):
        if gpus_per_job != 0:
            return suite
        cuda = False
    if cuda is None:
        cuda = cuda_available()
    settings = suite.settings.model_copy(update={"device": "cuda" if cuda else "cpu"})
    return suite.model_copy(update={"settings": settings})


def overridden(suite: Suite, plain: Suite) -> Dict[str, Any]:
    """The settings in which ``suite`` differs from the suite file's own (``plain``): what a report must state."""
    ours, theirs = suite.settings.model_dump(mode="json"), plain.settings.model_dump(mode="json")
    return {k: v for k, v in ours.items() if theirs.get(k) != v}


def _check_device(suite: Suite, executor: str) -> None:
    """A GPU asked for on a machine without one fails here, not once per job after each model is loaded (only for
    jobs that run on this machine: Ray and Slurm workers have their own GPUs)."""
    if executor in ("serial", "local") and suite.settings.device.startswith("cuda"):
        checked_device(suite.settings.device, "evaluation device")


def check_evaluation(suite, options: Optional[EvalOptions] = None) -> Suite:
    """The suite an evaluation will score (its overrides applied) and its device, checked before any other work: a
    protocol run or a dry run refuses an unknown suite or a missing GPU before its merges, not after them."""
    options = options or EvalOptions()
    suite = resolve_device(apply_overrides(load_suite(suite), options.suite_overrides()), options.executor,
                           gpus_per_job=options.gpus_per_job)
    _check_device(suite, options.executor)
    if options.executor == "local":
        check_workers(options.workers)  # cores and worker memory now; the models' share when evaluation starts
    check_cluster(options)  # Ray's address, Slurm's partition: before anything is merged or submitted
    return suite


def failed_model(store: ResultStore, suite: Suite, path, error: str, **extra) -> str:
    """Record a model that cannot be scored (no folder, a broken one, a failed merge: ``stage``); its job id."""
    job_id = invalid_job_id(suite, path)
    write_result(store.result_path(job_id), {
        "job_id": job_id, "status": FAILED, "error": error, "model_path": str(path), "fingerprint": None,
        "suite": suite.name, "settings": suite.settings.model_dump(mode="json"), "finished": time.time(), **extra})
    return job_id


def _evaluate(entries: List[PlanEntry], suite: Suite, store_root, options: EvalOptions, strict: bool,
              overridden: Optional[Dict[str, Any]] = None, run_config: Optional[Dict[str, Any]] = None,
              run_name: Optional[str] = None) -> Dict[str, Any]:
    executor, screen = options.executor, options.screen
    check_screen(screen, suite)
    _check_device(suite, executor)
    if executor == "local":
        check_workers(options.workers)  # cores and memory, before any store, fingerprint or worker
    check_cluster(options)
    include_path = suite.resolved_include_path()
    include_defaults = check_tasks(suite)  # unknown task names fail here, before any model is loaded
    store = ResultStore(store_root).prepare()
    write_text(store.suite_file, yaml.safe_dump(suite.model_dump(mode="json"), sort_keys=False))
    cache = FingerprintCache(store.fingerprints_file)
    jobs: Dict[str, Dict[str, Any]] = {}
    pruned: Dict[str, Dict[str, Any]] = {}  # jobs of models scored before their weights were removed: not rerun
    fingerprints: Dict[str, Any] = {}  # model id -> (entry, fingerprint), for screening
    # Earlier evaluations stay in the index: a partial evaluation (``model_ids``) must not drop them, and a merged
    # model whose weights were deleted after scoring (``--keep-models none``) keeps its score.
    previous = store.index()
    index: Dict[str, str] = dict(previous.models)
    for e in tqdm(entries, desc="fingerprint models", unit="model"):
        recorded = None if screen else pruned_fingerprint(e.path)
        if recorded:  # a cluster job scored it, then removed its weights: its job id from its recorded content
            job = job_of(e.path, recorded, suite, include_path, include_defaults, store, overridden)
            pruned.setdefault(job["job_id"], job)["models"].append(e.model_id)
            index[e.model_id] = job["job_id"]
            continue
        try:
            fp = fingerprint_model(e.path, cache, options.allow_pickle)
        except WildmergeError as exc:
            if strict:
                raise
            old = index.get(e.model_id)
            if old and store.load(old)["status"] == OK and weights_pruned(e.path):
                continue
            job_id = invalid_job_id(suite, e.path)
            if store.load(job_id).get("stage") != "merge":  # a cluster job's failed merge keeps its own error
                failed_model(store, suite, e.path, str(exc))
            index[e.model_id] = job_id
            continue
        fingerprints[e.model_id] = (e, fp)
        if screen:
            index[e.model_id] = final_job_id(suite, fp, screen, SCREEN_SEED)
            continue
        job = job_of(e.path, fp, suite, include_path, include_defaults, store, overridden)
        job = jobs.setdefault(job["job_id"], job)
        job["models"].append(e.model_id)
        index[e.model_id] = job["job_id"]
    cache.save()
    if overridden:
        print(f"note: settings overridden ({', '.join(f'{k}={v}' for k, v in overridden.items())}): the index of "
              f"{store.root} now points to these jobs, and its report says so at the top and in every CSV")
    all_jobs = {**previous.jobs, **{j: {k: v for k, v in job.items() if k not in ("tasks",)}
                                    for j, job in {**pruned, **jobs}.items()}}
    write_eval_index(store.root, EvalIndex(suite=suite.name, suite_source=suite.source, models=index, jobs=all_jobs))
    if screen:
        summary = run_screened(fingerprints, suite, include_path, include_defaults, store, screen,
                               lambda todo: _run_claimed(todo, store, options), options.retry_failed, SCREEN_SEED)
        write_eval_index(store.root, EvalIndex(suite=suite.name, suite_source=suite.source, models=index,
                                               jobs={**all_jobs, **summary["jobs"]}))
        return _summary(entries, index, store, suite, len(summary["jobs"]), summary["ran"],
                        len(summary["jobs"]) - summary["ran"], screening=summary)
    todo, skipped = [], 0
    for job in jobs.values():
        runnable = to_run(job, store, options, run_config, run_name)
        if runnable is None:
            skipped += 1
        else:
            todo.append(runnable)
    print(f"{len(entries)} model(s) -> {len(jobs)} distinct job(s): {skipped} already done, {len(todo)} to run "
          f"({executor})")
    _run_claimed(todo, store, options)
    return _summary(entries, index, store, suite, len(jobs), len(todo), skipped)


def invalid_job_id(suite: Suite, path) -> str:
    """The id under which a model that cannot be scored (no folder, a broken one, a failed merge) is recorded."""
    return f"{suite.name}-invalid-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def pruned_fingerprint(path) -> Optional[str]:
    """The content fingerprint a cluster job recorded for a merge whose weights it removed afterwards, else None."""
    from wildmerge.run import read_merge_info

    info = read_merge_info(path) if Path(path).is_dir() else None
    return info.fingerprint if info is not None and info.weights_pruned else None


def job_of(path, fingerprint: str, suite: Suite, include_path, include_defaults: bool, store: ResultStore,
           overridden: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The evaluation job of the model at ``path`` (its content ``fingerprint``) on ``suite``, in ``store``."""
    job = make_job(path, fingerprint, suite, include_path, include_defaults).to_dict()
    job["overridden"] = overridden or {}  # settings other than the suite file's: the report states them
    job["result_path"], job["log_path"] = str(store.result_path(job["job_id"])), str(store.log_path(job["job_id"]))
    return job


def to_run(job: Dict[str, Any], store: ResultStore, options: EvalOptions, run_config=None,
           run_name=None) -> Optional[Dict[str, Any]]:
    """``job`` as a worker takes it (its attempt, items, W&B spec) when its record asks for a (re)run, else None."""
    status = store.load(job["job_id"])
    lacks_items = options.record_items and status["status"] == OK and "items" not in status  # asked for: rerun
    if not needs_run(status, options.retry_failed) and not lacks_items:
        return None
    if status["status"] == "corrupt":
        print(f"warning: {status['error']}")
    if status.get("killed") is not None:
        print(f"redoing {job['job_id']}: {status['error'].splitlines()[0]}")
    job["attempt"] = status.get("attempts", 1) + 1 if status["status"] == FAILED else 1
    runnable = {**job, "record_items": options.record_items}
    spec = wandb_spec(options.wandb_args, run_config or {}, job, run_name)
    if spec:
        runnable["wandb"] = spec
    return runnable


def _summary(entries, index, store, suite, jobs: int, ran, skipped, **extra) -> Dict[str, Any]:
    wanted = {e.model_id: index[e.model_id] for e in entries if e.model_id in index}
    records = {job_id: store.load(job_id) for job_id in set(wanted.values())}
    failures = {m: records[j].get("error") for m, j in wanted.items() if records[j]["status"] != OK}
    for model_id, error in failures.items():
        first = (error or "").splitlines()[0] if error else "no result"
        print(f"FAILED {model_id}: {first}")
    if failures:
        print(f"{len(failures)} model(s) failed; details in {store.root}/results and logs; rerun with "
              f"--retry-failed to run only those again")
    return {"store": store.root, "suite": suite.name, "models": len(entries), "jobs": jobs, "ran": ran,
            "skipped": skipped, "ok": sum(r["status"] == OK for r in records.values()),
            "failed": failures, "index": wanted, **extra}


def check_screen(screen: Optional[float], suite: Suite) -> None:
    """``--screen`` (a fraction of each task's items, checked in ``EvalOptions``) scores test items only."""
    validated = [t.task for t in suite.tasks if t.validation_split]
    if screen is not None and validated:
        raise ConfigError(f"--screen scores test items only, but suite {suite.name!r} names validation splits "
                          f"({', '.join(validated)}): drop --screen, or use a suite without validation_split")


def _run_claimed(todo: List[Dict[str, Any]], store: ResultStore, options: EvalOptions) -> None:
    """Run the jobs no other command on this store is running, each claimed only as a worker of this command takes
    it (``run_jobs``' ``claim``); wait for the ones another command holds, and run those whose holder died without
    a result. Two ``wildmerge eval`` on one run thus split the jobs instead of doubling them."""
    from wildmerge.locks import try_claim, wait_claim

    before = {job["job_id"]: store.load(job["job_id"])["status"] for job in todo}
    changed = lambda job: store.load(job["job_id"])["status"] != before[job["job_id"]]  # noqa: E731
    busy, me = [], f"pid {os.getpid()} on {socket.gethostname()}"

    def claim(job):
        held = try_claim(store.claim_path(job["job_id"]))
        if held is None:
            busy.append(job)  # another command runs it: waited for below
        elif changed(job):  # another command finished it since we looked
            held.release()
            held = None
        if held is not None:
            job["command"] = me  # in its record: which command scored it
        return held

    run_jobs(todo, options, claim=claim)
    if busy:
        print(f"{len(busy)} job(s) are being run by another command on {store.root}; waiting for them")
    for job in busy:
        with wait_claim(store.claim_path(job["job_id"])):
            if not changed(job):  # its holder died without a result: run it here
                job["command"] = me
                run_jobs([job], options)


def evaluate_run(run_dir, suite, options: Optional[EvalOptions] = None, *,
                 model_ids: Optional[List[str]] = None) -> Dict[str, Any]:
    """Score every model of ``RUN/plan.json`` (or only ``model_ids``) on ``suite``; identical models once;
    finished jobs are skipped.

    A model that is missing or broken is recorded as failed and the others go on. ``options`` (default: the local
    executor, the suite as written) say where the jobs run and which suite settings are overridden;
    ``options.record_items`` keeps every document's score in the results, for screening (``screening/``);
    ``options.screen`` (a fraction) scores every model on that fraction of each task's items first and the rest only
    where the outcome is open (``screening/stages.py``); the base and the experts are then always part of the
    evaluation, as its references.
    """
    options = options or EvalOptions()
    screen = options.screen
    run = RunFolder(run_dir)
    entries = run.read_plan().entries
    suite = load_suite(suite).following([e.path for e in entries])  # a family's task folder: the run's family
    plain = resolve_device(suite, options.executor, gpus_per_job=options.gpus_per_job)
    suite = resolve_device(apply_overrides(suite, options.suite_overrides()), options.executor,
                           gpus_per_job=options.gpus_per_job)
    if model_ids is not None:
        unknown = sorted(set(model_ids) - {e.model_id for e in entries})
        if unknown:
            raise ConfigError(f"model ids not in {run.plan_path}: {unknown}")
        entries = [e for e in entries if e.model_id in set(model_ids) or (screen and e.kind in REFERENCES)]
    manifest = run.read_manifest() if options.wandb_args else None
    return _evaluate(entries, suite, run.eval_dir(suite.name), options, strict=False,
                     overridden=overridden(suite, plain), run_name=run.name,
                     run_config=manifest.model_dump(mode="json") if manifest else {"run": str(run.root)})


def evaluate_models(models: List[str], suite, out_dir, options: Optional[EvalOptions] = None) -> Dict[str, Any]:
    """Ad hoc: score a few models (paths, hub ids in the local cache, ``demo:<name>``); bad input fails early.
    Results go to ``out_dir/<suite>/`` (an evaluation store of its own, not a run folder)."""
    options = options or EvalOptions()
    if options.screen is not None:
        raise ConfigError("--screen needs a run (a base and experts to compare with): give RUN_DIR, not --model")
    entries = []
    for ref in models:
        path = resolve_path(ref, download=False, allow_pickle=options.allow_pickle)
        check_model_dir(path, options.allow_pickle)
        entries.append(PlanEntry(model_id=ref, kind="expert", path=path))
    suite = load_suite(suite).following([e.path for e in entries])  # a family's task folder: the models' family
    plain = resolve_device(suite, options.executor, gpus_per_job=options.gpus_per_job)
    suite = resolve_device(apply_overrides(suite, options.suite_overrides()), options.executor,
                           gpus_per_job=options.gpus_per_job)
    return _evaluate(entries, suite, Path(out_dir).resolve() / suite.name, options, strict=True,
                     overridden=overridden(suite, plain), run_config={"models": list(models), "suite": suite.name})
