"""Where jobs run: long-lived local workers (default; one per GPU), serially one fresh process per job, on Ray (local
GPUs or a cluster), on Slurm (submitit).

The serial, Ray and Slurm executors call ``worker.run_job`` per job, which starts a fresh process and writes the
result file itself, so the store is complete whatever the engine; results travel back as well, for Ray workers
without a shared disk. The local executor (``local.py``) keeps its workers for many jobs. A job that fails, or an
engine error for one job, is recorded and the others go on.
"""

import socket
import time
from typing import Any, Callable, Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tqdm.auto import tqdm

from wildmerge.errors import ConfigError, WildmergeError, did_you_mean
from wildmerge.eval.local import check_workers, run_local
from wildmerge.eval.store import FAILED, ResultStore, read_result, write_result
from wildmerge.eval.worker import base_record, run_job

Callback = Optional[Callable[[Dict[str, Any]], None]]


def _engine_failure(job: Dict[str, Any], exc: BaseException) -> Dict[str, Any]:
    """Record a job the engine lost (Ray worker died, Slurm job cancelled) unless the worker wrote a result."""
    record = read_result(job["result_path"])
    if record["status"] in ("ok", "failed"):
        return record
    return write_result(job["result_path"], {**base_record(job), "status": FAILED, "host": socket.gethostname(),
                                             "error": f"{type(exc).__name__}: {exc}", "finished": time.time()})


def _keep(job: Dict[str, Any], record: Dict[str, Any]) -> Dict[str, Any]:
    """Write a record that came back from a remote worker whose disk we do not share."""
    if read_result(job["result_path"])["status"] not in ("ok", "failed") and "checksum" in record:
        write_result(job["result_path"], record)
    return record


class SerialOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workers: Optional[int] = Field(None, ge=1)  # default: one per visible GPU, else one per two CPU cores
    job_timeout: Optional[float] = Field(3600.0, gt=0)  # seconds one model may take before its worker is replaced


class RayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ray_address: Optional[str] = None
    gpus_per_job: Optional[float] = Field(None, ge=0)
    cpus_per_job: float = Field(1, gt=0)


class SlurmOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    folder: Optional[str] = None
    slurm_partition: Optional[str] = None
    slurm_time: int = Field(240, gt=0)  # minutes per job
    gpus_per_job: Optional[float] = Field(None, ge=0)
    cpus_per_job: float = Field(4, gt=0)
    slurm_mem_gb: Optional[int] = Field(None, gt=0)
    slurm_array_parallelism: int = Field(64, gt=0)
    slurm_cluster: Optional[str] = None  # 'local' / 'debug': submitit's stand-ins, for tests
    slurm_extra: Optional[Dict[str, Any]] = None


def run_serial(jobs: List[Dict[str, Any]], on_done: Callback = None) -> List[Dict[str, Any]]:
    records = []
    for job in tqdm(jobs, desc="eval jobs", unit="job"):
        records.append(run_job(job))
        on_done and on_done(records[-1])
    return records


def run_ray(jobs: List[Dict[str, Any]], on_done: Callback = None, ray_address: Optional[str] = None,
            gpus_per_job: Optional[float] = None, cpus_per_job: float = 1) -> List[Dict[str, Any]]:
    """One Ray task per job; with GPUs, ``gpus_per_job`` (default 1) each, so Ray queues jobs on free GPUs.

    ``ray_address``: ``auto`` or ``ray://host:10001`` joins a cluster; none starts (or reuses) a local one.
    """
    try:
        import ray
    except ImportError:
        raise WildmergeError("--executor ray needs Ray: pip install 'wildmerge[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
    try:
        has_gpu = ray.cluster_resources().get("GPU", 0) > 0
        gpus = (1 if has_gpu else 0) if gpus_per_job is None else gpus_per_job
        if gpus and not has_gpu:
            raise WildmergeError(f"--gpus-per-job {gpus} but the Ray cluster has no GPU")
        remote = ray.remote(num_cpus=cpus_per_job, num_gpus=gpus, max_retries=0)(run_job)
        pending = {remote.remote(job): job for job in jobs}
        records = []
        with tqdm(total=len(jobs), desc="eval jobs (ray)", unit="job") as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(done[0])
                try:
                    record = _keep(job, ray.get(done[0]))
                except Exception as exc:  # the task died (node lost, worker crash)
                    record = _engine_failure(job, exc)
                records.append(record)
                on_done and on_done(record)
                bar.update()
        return records
    finally:
        if started_here:
            ray.shutdown()


def run_slurm(jobs: List[Dict[str, Any]], on_done: Callback = None, folder: Optional[str] = None,
              slurm_partition: Optional[str] = None, slurm_time: int = 240, gpus_per_job: Optional[float] = None,
              cpus_per_job: float = 4, slurm_mem_gb: Optional[int] = None, slurm_array_parallelism: int = 64,
              slurm_cluster: Optional[str] = None,
              slurm_extra: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """One Slurm array task per job via submitit (``slurm_cluster='local'`` runs them here, for tests)."""
    try:
        import submitit
    except ImportError:
        raise WildmergeError("--executor slurm needs submitit: pip install 'wildmerge[slurm]'") from None
    if not jobs:
        return []
    folder = folder or str(ResultStore.of_result(jobs[0]["result_path"]).slurm_dir)
    executor = submitit.AutoExecutor(folder=folder, cluster=slurm_cluster)
    params = {"timeout_min": int(slurm_time), "cpus_per_task": int(cpus_per_job),
              "slurm_array_parallelism": int(slurm_array_parallelism), "name": "wildmerge-eval"}
    if executor.cluster == "slurm":
        params["gpus_per_node"] = int(1 if gpus_per_job is None else gpus_per_job)
        params["slurm_partition"] = slurm_partition
        if slurm_mem_gb:
            params["mem_gb"] = slurm_mem_gb
        params.update(slurm_extra or {})
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    submitted = executor.map_array(run_job, jobs)
    print(f"submitted {len(submitted)} Slurm job(s) to {executor.cluster}; logs in {folder}")
    records = []
    for job, sub in tqdm(list(zip(jobs, submitted)), desc="eval jobs (slurm)", unit="job"):
        try:
            record = _keep(job, _slurm_result(sub) if executor.cluster == "slurm" else sub.result())
        except Exception as exc:  # timeout, preemption, node failure, scancel
            record = _engine_failure(job, exc)
        records.append(record)
        on_done and on_done(record)
    return records


def _slurm_result(sub, poll: float = 2.0):
    """``sub.result()``, also where ``sacct`` does not answer (a cluster without accounting): submitit learns a
    task's end from ``sacct`` and would wait forever for one cancelled or killed; here a task that has left the
    queue (``squeue``) without writing its result has failed."""
    import subprocess
    import time

    gone = 0
    while not sub.done():
        queued = subprocess.run(["squeue", "-h", "-j", str(sub.job_id)], capture_output=True, text=True)
        gone = gone + 1 if queued.returncode != 0 or not queued.stdout.strip() else 0
        if gone >= 3:  # three polls: a result written just before the task left the queue is seen first
            raise WildmergeError(f"Slurm task {sub.job_id} left the queue without a result (cancelled, killed, "
                                 f"timed out or out of memory); see {sub.paths.stderr}")
        time.sleep(poll)
    return sub.result()


EXECUTORS = {"local": (run_local, LocalOptions), "serial": (run_serial, SerialOptions), "ray": (run_ray, RayOptions), "slurm": (run_slurm, SlurmOptions)}


def executor_options(executor: str, options: Dict[str, Any]) -> Dict[str, Any]:
    """``options`` checked against the executor's (unset ones, None, dropped): a misspelled or misplaced option is
    an error that names the valid ones, never silently ignored."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r}{did_you_mean(executor, EXECUTORS)}; valid executors: "
                          f"{', '.join(EXECUTORS)}")
    schema = EXECUTORS[executor][1]
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(schema.model_fields))
    if unknown:
        valid = ", ".join(schema.model_fields) or "none"
        raise ConfigError(f"option {unknown[0]!r}{did_you_mean(unknown[0], schema.model_fields)} does not apply to the "
                          f"{executor} executor (its options: {valid})")
    try:
        checked = schema.model_validate(given).model_dump()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{executor} executor option {first['loc'][0]!r}: {first['msg']}") from None
    if executor == "local":
        check_workers(checked["workers"])  # cores and memory, before any model (run_local checks the models too)
    return checked


def run_jobs(jobs: List[Dict[str, Any]], executor: str = "serial", on_done: Callback = None,
             **options) -> List[Dict[str, Any]]:
    checked = executor_options(executor, options)
    return EXECUTORS[executor][0](jobs, on_done, **checked)
