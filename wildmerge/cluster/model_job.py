"""One merged model as one cluster job, run on the node: merge the plan entry (``merging.runner.merge_entry``),
score it (``eval``'s job in a fresh process, ``worker.run_job``), then with ``--keep-models none`` remove its
weights. At most one checkpoint per job in flight exists at once when models are not kept.

Each stage is claimed on the shared run folder (the merge's claim, the evaluation job's claim), so a job left
running by a killed driver and the job a restarted driver submits for the same model never both do the work.
The merge's record (``merge_info.json``) says where it ran (executor, host, device) and keeps the content
fingerprint of the weights, so the evaluation's job id survives their removal."""

import os
import socket
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from wildmerge.eval.options import EvalOptions
from wildmerge.eval.suites import Suite
from wildmerge.run import PlanEntry, PoolModels, read_merge_info, write_merge_info

MERGE, SCORE = "merge", "score"


@dataclass
class ModelJob:
    """Everything the node needs, as plain picklable data (paths on the shared run folder)."""

    entry: PlanEntry
    merge: Any  # recipes.render.RenderedMerge: rendered (and checked) by the driver
    models: PoolModels
    merge_options: Any  # mergekit's MergeOptions
    suite: Suite
    include_path: Optional[str]
    include_defaults: bool
    store: str  # the evaluation's result store, RUN/eval/<suite>
    options: EvalOptions
    keep_models: str = "all"
    command: str = ""  # the driver that submitted it: pid and host
    overridden: Dict[str, Any] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        return self.entry.model_id


def node() -> str:
    """Which of the engine's nodes runs this process: Ray's node id, Slurm's job (array task) and node; ''
    elsewhere (with the host name, what a record says of where it ran)."""
    if os.environ.get("SLURM_JOB_ID"):
        return f"slurm job {os.environ['SLURM_JOB_ID']} on {os.environ.get('SLURMD_NODENAME', socket.gethostname())}"
    try:
        import ray

        if ray.is_initialized():
            return f"ray node {ray.get_runtime_context().get_node_id()[:12]}"
    except ImportError:
        pass
    return ""


def eval_job(job: ModelJob, fingerprint: str) -> Dict[str, Any]:
    """The evaluation job of the merged model: the local run's job (same id), naming the executor and driver."""
    from wildmerge.eval.evaluate import job_of
    from wildmerge.eval.store import ResultStore

    spec = job_of(job.entry.path, fingerprint, job.suite, job.include_path, job.include_defaults,
                  ResultStore(job.store), job.overridden)
    return {**spec, "models": [job.model_id], "executor": job.options.executor, "command": job.command,
            "node": node()}


def _merge(job: ModelJob) -> Optional[float]:
    """The merge under its claim; its record then names this node and the executor."""
    from wildmerge.locks import wait_claim
    from wildmerge.merging.runner import merge_entry
    from wildmerge.run import merge_claim_file

    with wait_claim(merge_claim_file(job.entry.path)):
        seconds = merge_entry(job.entry, job.merge, job.merge_options, job.models)
        info = read_merge_info(job.entry.path)
        if seconds is not None:
            write_merge_info(job.entry.path, info.model_copy(update={
                "executor": job.options.executor, "host": socket.gethostname(), "node": node()}))
    return seconds


def _fingerprint(job: ModelJob) -> str:
    """The merged weights' content fingerprint, computed once and kept in the merge's record."""
    from wildmerge.eval.fingerprint import FingerprintCache, fingerprint_model
    from wildmerge.eval.store import ResultStore

    info = read_merge_info(job.entry.path)
    if info.fingerprint:
        return info.fingerprint
    cache = FingerprintCache(ResultStore(job.store).fingerprints_file)
    fingerprint = fingerprint_model(job.entry.path, cache, job.options.allow_pickle)
    cache.save()  # the driver's pass over the run then reads no weight again
    write_merge_info(job.entry.path, info.model_copy(update={"fingerprint": fingerprint}))
    return fingerprint


def _score(job: ModelJob, fingerprint: str) -> Dict[str, Any]:
    """The evaluation under its job's claim, unless its record is final (ok, or failed for good)."""
    from wildmerge.eval.evaluate import to_run
    from wildmerge.eval.store import ResultStore
    from wildmerge.eval.worker import run_job
    from wildmerge.locks import wait_claim
    from wildmerge.run import weights_pruned

    store, spec = ResultStore(job.store), eval_job(job, fingerprint)
    with wait_claim(store.claim_path(spec["job_id"])):
        runnable = None if weights_pruned(job.entry.path) else to_run(spec, store, job.options)
        return run_job(runnable) if runnable else store.load(spec["job_id"])


def run_model_job(job: ModelJob) -> Dict[str, Any]:
    """On the node: merge, score, prune. A merge that raises is recorded as the model's failure (never retried:
    it would raise again); a job killed by a signal is the engine's loss, which the driver retries once."""
    from wildmerge.eval.evaluate import failed_model
    from wildmerge.eval.store import ResultStore, needs_run
    from wildmerge.merging.runner import prune_weights
    from wildmerge.run import weights_pruned

    host = socket.gethostname()
    try:
        seconds = _merge(job)
    except Exception as exc:  # the model's own failure: recorded where its score would be
        error = f"the merge failed on {host} ({job.options.executor}): {type(exc).__name__}: {exc}"
        failed_model(ResultStore(job.store), job.suite, job.entry.path, error, stage=MERGE, host=host,
                     executor=job.options.executor)
        return {"model_id": job.model_id, "stage": MERGE, "status": "failed", "error": error, "host": host}
    record = _score(job, _fingerprint(job))
    if job.keep_models == "none" and not weights_pruned(job.entry.path) and not needs_run(record, False):
        prune_weights(job.entry.path)  # a killed evaluation keeps them for its retry
    return {"model_id": job.model_id, "stage": SCORE, "status": record["status"], "job_id": record.get("job_id"),
            "host": host, "merge_seconds": seconds}
