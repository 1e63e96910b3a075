"""Where jobs run: long-lived local workers (default; one per GPU), serially one fresh process per job, on Ray (local
GPUs or a cluster), on Slurm (submitit).

The serial, Ray and Slurm executors call ``worker.run_job`` per job, which starts a fresh process and writes the
result file itself, so the store is complete whatever the engine; results travel back as well, for Ray workers
without a shared disk. The local executor (``local.py``) keeps its workers for many jobs. A job that fails, or an
engine error for one job, is recorded and the others go on.
"""

import contextlib
import socket
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from tqdm.auto import tqdm

from wildmerge.errors import WildmergeError, did_you_mean
from wildmerge.eval.local import run_local
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import FAILED, ResultStore, base_record, read_result, write_result
from wildmerge.eval.worker import run_job

Callback = Optional[Callable[[Dict[str, Any]], None]]
# ``claim(job)``: the job's claim (``locks.Claim``) when this command is to run it now, None when another command
# holds it or finished it; asked just before a worker of this command takes the job, so commands split the jobs
Claimer = Optional[Callable[[Dict[str, Any]], Any]]


def _claimed_all(jobs: List[Dict[str, Any]], claim: Claimer):
    """(jobs to run, their claims) for the executors that hand every job to their engine at once (Ray, Slurm)."""
    if claim is None:
        return jobs, []
    held = [(job, claim(job)) for job in jobs]
    return [job for job, c in held if c is not None], [c for _, c in held if c is not None]


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


def run_serial(jobs: List[Dict[str, Any]], options: EvalOptions, on_done: Callback = None,
               claim: Claimer = None) -> List[Dict[str, Any]]:
    records = []
    for job in tqdm(jobs, desc="eval jobs", unit="job"):
        held = claim(job) if claim else None
        if claim and held is None:
            continue
        try:
            records.append(run_job(job))
        finally:
            held and held.release()
        on_done and on_done(records[-1])
    return records


def run_ray(jobs: List[Dict[str, Any]], options: EvalOptions, on_done: Callback = None,
            claim: Claimer = None) -> List[Dict[str, Any]]:
    jobs, claims = _claimed_all(jobs, claim)
    try:
        return _run_engine(ray_map(run_job, _on("ray", jobs), options, "eval jobs (ray)"), on_done)
    finally:
        for c in claims:
            c.release()


def _on(executor: str, jobs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The jobs, each naming the executor that runs it (its result record says so)."""
    return [{**job, "executor": executor} for job in jobs]


def _run_engine(results: Iterator[Tuple[Dict[str, Any], Any]], on_done: Callback) -> List[Dict[str, Any]]:
    records = []
    for job, out in results:
        record = _engine_failure(job, out) if isinstance(out, BaseException) else _keep(job, out)
        records.append(record)
        on_done and on_done(record)
    return records


def check_cluster(options: EvalOptions) -> None:
    """The cluster options checked before anything is submitted: Ray's address answers, Slurm answers and has the
    partition asked for; one line each, naming the flag."""
    if options.executor == "ray" and options.ray_address not in (None, "auto", "local"):
        _check_ray_address(options.ray_address)
    if options.executor == "slurm" and options.slurm_cluster in (None, "slurm"):
        _check_slurm_partition(options.slurm_partition)


def _check_ray_address(address: str) -> None:
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except (OSError, ValueError) as exc:
        raise WildmergeError(f"--ray-address {address}: no Ray cluster answers there ({exc}); start one "
                             f"(ray start --head) or give its address as host:port or ray://host:10001") from None


def _check_slurm_partition(partition: Optional[str]) -> None:
    import subprocess

    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WildmergeError(f"--executor slurm: Slurm does not answer here (sinfo: {exc}); run on a Slurm login "
                             f"node, or use --executor ray or local") from None
    if out.returncode != 0:
        raise WildmergeError(f"--executor slurm: Slurm does not answer here (sinfo: {out.stderr.strip()}); run on a "
                             f"Slurm login node, or use --executor ray or local")
    names = [p.rstrip("*") for p in out.stdout.split()]
    if partition is not None and partition not in names:
        raise WildmergeError(f"--slurm-partition {partition}: no such partition; this cluster has "
                             f"{', '.join(names) or 'none'}{did_you_mean(partition, names)}")


@contextlib.contextmanager
def engine(options: EvalOptions):
    """The cluster engine held open for a driver: yields how many jobs it runs at once (Ray: its CPUs, or GPUs,
    over each job's share; Slurm: ``--slurm-array-parallelism``)."""
    if options.executor != "ray":
        yield int(options.slurm_array_parallelism)
        return
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=options.ray_address, include_dashboard=False, log_to_driver=False)
    try:
        resources = ray.cluster_resources()
        gpus = options.gpus_per_job if options.gpus_per_job is not None else (1 if resources.get("GPU") else 0)
        cpus = 1 if options.cpus_per_job is None else options.cpus_per_job
        yield max(1, int(resources.get("GPU", 0) // gpus if gpus else resources.get("CPU", 1) // cpus))
    finally:
        if started_here:
            ray.shutdown()


def ray_map(fn: Callable, items: List[Any], options: EvalOptions, desc: str) -> Iterator[Tuple[Any, Any]]:
    """``fn(item)`` as one Ray task per item, yielding (item, result or the exception of a lost task) as they end;
    with GPUs, ``gpus_per_job`` (default 1) each, so Ray queues them on free GPUs.

    ``ray_address``: ``auto`` or ``ray://host:10001`` joins a cluster; none starts (or reuses) a local one.
    """
    ray_address, gpus_per_job = options.ray_address, options.gpus_per_job
    cpus_per_job = 1 if options.cpus_per_job is None else options.cpus_per_job
    try:
        import ray
    except ImportError:
        raise WildmergeError("--executor ray needs Ray: pip install 'wildmerge[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
    pending = {}
    try:
        has_gpu = ray.cluster_resources().get("GPU", 0) > 0
        gpus = (1 if has_gpu else 0) if gpus_per_job is None else gpus_per_job
        if gpus and not has_gpu:
            raise WildmergeError(f"--gpus-per-job {gpus} but the Ray cluster has no GPU")
        remote = ray.remote(num_cpus=cpus_per_job, num_gpus=gpus, max_retries=0)(fn)
        pending = {remote.remote(item): item for item in items}
        with tqdm(total=len(items), desc=desc, unit="job") as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                item = pending.pop(done[0])
                try:
                    out = ray.get(done[0])
                except Exception as exc:  # the task died (node lost, worker crash)
                    out = exc
                bar.update()
                yield item, out
    finally:
        for ref in pending:  # the caller stopped early (an error, a kill): no task left running
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def run_slurm(jobs: List[Dict[str, Any]], options: EvalOptions, on_done: Callback = None,
              claim: Claimer = None) -> List[Dict[str, Any]]:
    jobs, claims = _claimed_all(jobs, claim)
    try:
        if not jobs:
            return []
        folder = str(ResultStore.of_result(jobs[0]["result_path"]).slurm_dir)
        return _run_engine(slurm_map(run_job, _on("slurm", jobs), options, folder, "wildmerge-eval"), on_done)
    finally:
        for c in claims:
            c.release()


def slurm_map(fn: Callable, items: List[Any], options: EvalOptions, folder: str,
              name: str) -> Iterator[Tuple[Any, Any]]:
    """``fn(item)`` as one Slurm array task per item via submitit (``slurm_cluster='local'`` runs them here, for
    tests), yielding (item, result or the exception of a lost task); its logs go to ``folder``."""
    try:
        import submitit
    except ImportError:
        raise WildmergeError("--executor slurm needs submitit: pip install 'wildmerge[slurm]'") from None
    if not items:
        return
    executor = submitit.AutoExecutor(folder=folder, cluster=options.slurm_cluster)
    cpus_per_job = 4 if options.cpus_per_job is None else options.cpus_per_job
    params = {"timeout_min": int(options.slurm_time), "cpus_per_task": int(cpus_per_job),
              "slurm_array_parallelism": int(options.slurm_array_parallelism), "name": name}
    if executor.cluster == "slurm":
        params["gpus_per_node"] = int(1 if options.gpus_per_job is None else options.gpus_per_job)
        params["slurm_partition"] = options.slurm_partition
        if options.slurm_mem_gb:
            params["mem_gb"] = options.slurm_mem_gb
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    submitted = executor.map_array(fn, items)
    print(f"submitted {len(submitted)} Slurm job(s) to {executor.cluster}; logs in {folder}")
    waiting = list(zip(items, submitted))
    try:
        with tqdm(total=len(items), desc=f"{name} (slurm)", unit="job") as bar:
            while waiting:
                item, sub = waiting.pop(0)
                try:
                    out = _slurm_result(sub) if executor.cluster == "slurm" else sub.result()
                except Exception as exc:  # timeout, preemption, node failure, scancel
                    out = exc
                bar.update()
                yield item, out
    finally:
        for _, sub in waiting:  # the caller stopped early: no task left queued or running
            sub.cancel(check=False)


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


EXECUTORS = {"local": run_local, "serial": run_serial, "ray": run_ray, "slurm": run_slurm}


def run_jobs(jobs: List[Dict[str, Any]], options: EvalOptions, on_done: Callback = None,
             claim: Claimer = None) -> List[Dict[str, Any]]:
    """Run ``jobs`` on ``options.executor`` with its options (checked when the options were made). With ``claim``,
    a job runs only when its claim is granted: the local and serial executors ask just before a worker takes it
    (and release it when its record is written), Ray and Slurm before they submit."""
    return EXECUTORS[options.executor](jobs, options, on_done, claim)
