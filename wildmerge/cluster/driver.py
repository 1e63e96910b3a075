"""The driver of a run's model jobs on Ray or Slurm: it renders and checks every merge here, then submits each
model not finished yet as one job (``model_job.py``) and merges nothing itself.

Jobs go out in batches of what the engine runs at once (so at most that many merged checkpoints exist when models
are not kept), each under the driver's claim on the model (``RunFolder.model_job_claim``): two drivers on one run
folder take different batches; a model another driver holds is waited for and done here only if that driver died
without finishing it. A job the engine loses (its process killed, its node gone, ``scancel``), or whose evaluation
was killed, is submitted once more; lost again, the model is recorded as failed with the engine's error. A driver
killed and started again skips the finished models: merged, scored (or failed for good) and, with
``--keep-models none``, pruned."""

import os
import socket
import time
from typing import Any, Dict, List

from wildmerge.cluster.model_job import MERGE, ModelJob, eval_job, run_model_job
from wildmerge.eval.options import EvalOptions
from wildmerge.run import RunFolder, read_merge_info


def _prepared(run_dir, entries, suite, options: EvalOptions):
    """The suite as ``evaluate_run`` scores it (overrides, device; a family's task folder: the run's family), its
    task folder and its result store."""
    from wildmerge.eval.evaluate import apply_overrides, overridden, resolve_device
    from wildmerge.eval.store import ResultStore
    from wildmerge.eval.suites import check_tasks, load_suite

    suite = load_suite(suite).following([e.path for e in entries])
    plain = resolve_device(suite, options.executor, gpus_per_job=options.gpus_per_job)
    scored = resolve_device(apply_overrides(suite, options.suite_overrides()), options.executor,
                            gpus_per_job=options.gpus_per_job)
    store = ResultStore(RunFolder(run_dir).eval_dir(scored.name)).prepare()
    return scored, overridden(scored, plain), scored.resolved_include_path(), check_tasks(scored), store


def check_time_limit(merges, models, merge_options, options: EvalOptions) -> None:
    """A Slurm time limit shorter than the longest merge the cost plan prices (``planning.cost``, the built-in rates
    of the merge device) is refused before anything is submitted."""
    import json
    import math
    from pathlib import Path

    from wildmerge.errors import ConfigError
    from wildmerge.planning import cost

    config = Path(models.base.path) / "config.json"
    if options.executor != "slurm" or not merges or not config.is_file():
        return
    parameters = cost.parameters_from_config(json.loads(config.read_text()))
    cal = cost.DEFAULTS["cuda" if str(merge_options.device).startswith("cuda") else "cpu"]
    priced = {e.model_id: cost.merge_seconds(parameters, len(e.experts) + 1, cal, e.method) for e in merges}
    worst = max(priced, key=priced.get)
    if priced[worst] > 60 * options.slurm_time:
        raise ConfigError(f"--slurm-time {options.slurm_time}: the merge {worst} alone is priced at "
                          f"{priced[worst] / 60:.1f} min ({cal.device} rates, wildmerge/planning/cost.py); give "
                          f"--slurm-time {math.ceil(priced[worst] / 60) * 2} or more (minutes; the job also scores it)")


def finished(job: ModelJob) -> bool:
    """Merged, scored (or failed for good) and, when models are not kept, pruned; or its merge failed."""
    from wildmerge.eval.evaluate import invalid_job_id
    from wildmerge.eval.store import ResultStore, needs_run
    from wildmerge.merging.runner import is_done

    store, retry = ResultStore(job.store), job.options.retry_failed
    if not is_done(job.entry.path, job.merge.digest):
        failed = store.load(invalid_job_id(job.suite, job.entry.path))
        return failed.get("stage") == MERGE and not retry
    info = read_merge_info(job.entry.path)
    if not info.fingerprint or needs_run(store.load(eval_job(job, info.fingerprint)["job_id"]), retry):
        return False
    return job.keep_models == "all" or info.weights_pruned


def _lost(job: ModelJob, why: str) -> None:
    """A model whose job was lost twice: its failure recorded (where its score would be), its weights pruned."""
    from wildmerge.eval.evaluate import failed_model
    from wildmerge.eval.store import FAILED, ResultStore, base_record, needs_run, write_result
    from wildmerge.merging.runner import is_done, prune_weights

    store, error = ResultStore(job.store), f"the {job.options.executor} job was lost twice: {why}"
    info = read_merge_info(job.entry.path) if is_done(job.entry.path, job.merge.digest) else None
    if info is None:
        failed_model(store, job.suite, job.entry.path, error, stage=MERGE, executor=job.options.executor)
        return
    if info.fingerprint:
        spec = eval_job(job, info.fingerprint)
        if needs_run(store.load(spec["job_id"]), False):
            write_result(spec["result_path"], {**base_record(spec), "status": FAILED, "error": error, "attempts": 2,
                                               "finished": time.time()})
    if job.keep_models == "none":
        prune_weights(job.entry.path)


def _run(jobs: List[ModelJob], options: EvalOptions, folder: str, stats: Dict[str, int]) -> None:
    """Submit ``jobs`` (their claims held), each lost one once more; record the ones lost twice."""
    from wildmerge.eval.executors import ray_map, slurm_map

    def submit(todo):
        if options.executor == "ray":
            return ray_map(run_model_job, todo, options, "model jobs (ray)")
        return slurm_map(run_model_job, todo, options, folder, "wildmerge-model")

    todo = jobs
    for attempt in (1, 2):
        lost = []
        for job, out in submit(todo):
            merge_failed = isinstance(out, dict) and out.get("stage") == MERGE  # recorded: it would fail again
            if isinstance(out, BaseException) or not (merge_failed or finished(job)):
                lost.append((job, f"{type(out).__name__}: {out}" if isinstance(out, BaseException) else
                             f"its {out.get('stage')} stage ended {out.get('status')} on {out.get('host')}"))
        stats["submitted"] += len(todo)
        if attempt == 1 and lost:
            print(f"{len(lost)} model job(s) lost ({lost[0][1].splitlines()[0][:200]}); submitting them once more")
        todo = [job for job, _ in lost]
        if not todo:
            return
    for job, why in lost:
        _lost(job, why)
        stats["lost"] += 1


def run_model_jobs(run_dir, entries, models, methods: dict, merge_options, suite, options: EvalOptions,
                   keep_models: str = "all") -> Dict[str, Any]:
    """Merge, score and (``keep_models="none"``) prune every merge of the plan as cluster jobs; the run's stats."""
    from wildmerge.eval.executors import engine
    from wildmerge.locks import try_claim, wait_claim
    from wildmerge.merging.runner import clean_leftovers, render_all

    started, run = time.time(), RunFolder(run_dir)
    merges = [e for e in entries if e.kind == "merge"]
    _, rendered = render_all(merges, models, methods)  # every merge checked here, before any job
    check_time_limit(merges, models, merge_options, options)
    scored, overridden, include_path, include_defaults, store = _prepared(run_dir, entries, suite, options)
    clean_leftovers(run.models_dir)
    me = f"pid {os.getpid()} on {socket.gethostname()}"
    jobs = [ModelJob(e, rendered[e.model_id], models, merge_options, scored, include_path, include_defaults,
                     str(store.root), options, keep_models, me, overridden) for e in merges]
    todo = [j for j in jobs if not finished(j)]
    stats = {"models": len(jobs), "finished_before": len(jobs) - len(todo), "submitted": 0, "lost": 0}
    print(f"{len(todo)} model job(s) to run on {options.executor} ({stats['finished_before']} finished before)")
    busy: List[ModelJob] = []
    with engine(options) as at_once:
        while todo:  # a batch of what the engine runs at once, each under this driver's claim
            batch, claims = [], []
            while todo and len(batch) < at_once:
                job = todo.pop(0)
                claim = try_claim(run.model_job_claim(job.model_id))
                if claim is None:
                    busy.append(job)  # another driver has it
                elif finished(job):  # another driver finished it since we looked
                    claim.release()
                else:
                    batch.append(job)
                    claims.append(claim)
            try:
                _run(batch, options, str(store.slurm_dir), stats)
            finally:
                for c in claims:
                    c.release()
        for job in busy:  # held by another driver: done here only if it died without finishing
            with wait_claim(run.model_job_claim(job.model_id)):
                if not finished(job):
                    _run([job], options, str(store.slurm_dir), stats)
    clean_leftovers(run.models_dir)
    stats["seconds"] = round(time.time() - started, 1)
    return stats
