"""The local executor: long-lived workers on this machine, one per visible GPU (a few on a CPU), no cluster needed.

Each worker (``serve.py``) imports lm-eval and builds the suite's tasks once, then scores one model after another.
A thread per worker hands it the next job and waits for its answer, with a timeout: a worker that hangs is killed
and its job fails; a worker that dies (a segfault, the out-of-memory killer; while it starts or mid-job) fails only
the job it held, recorded as killed (the next run of the same command redoes it once), and is replaced by a fresh
one for the jobs that remain. Workers outlive one call (until this
process exits), so evaluating one model at a time pays the start-up once, and die with this process however it ends
(``wildmerge.lifeline``), ``kill -9`` included.
"""

import atexit
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from tqdm.auto import tqdm

from wildmerge import lifeline
from wildmerge.atomic import write_json
from wildmerge.checkpoints import weights_bytes
from wildmerge.errors import ConfigError
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import FAILED, OK, ResultStore, read_result
from wildmerge.eval.worker import lost_record
from wildmerge.resources import free_memory, usable_cores, visible_gpus
from wildmerge.threads import thread_share, worker_thread_env

STARTUP_TIMEOUT = 600.0  # importing lm-eval on a busy node
# What one worker holds besides the model it scores: the interpreter with torch, transformers, datasets and lm-eval
# imported (``serve.py`` imports them before it says ready). Measured as the resident memory (VmHWM) of a worker
# once ready (``measure_worker_memory``): 378 MiB on Linux x86-64, Python 3.11, torch 2.13 (CPU build),
# transformers 5.24, lm-eval 0.4.13; 522 MiB after scoring a tiny model on a two-task suite (tests/helpers.py), so
# rounded up to leave room for a suite's tasks and other versions.
# Re-measure: python -c "from wildmerge.eval.local import measure_worker_memory as m; print(m() >> 20, 'MiB')"
# (tests/eval/test_eval_lifeline.py fails when a real worker outgrows it.)
WORKER_MEMORY = 640 << 20


def default_workers(cpus: Optional[int] = None) -> int:
    """On a CPU, one worker per core (at most four, which then share the cores): a worker's forward passes use one
    thread better than two, and its Python overhead overlaps the others' matrix products. Measured on 2 quiet cores,
    paired against one two-thread worker: the demo main job 0.62x wall, the SmolLM2 base and an expert under
    smollm2_bf16 0.45x (with bfloat16; docs/performance.md, "Current figures")."""
    cpus = cpus or usable_cores()
    return max(1, min(4, cpus))


def check_workers(workers: Optional[int], model_bytes: int = 0) -> None:
    """Refuse an explicit worker count this machine cannot hold, before any worker starts: more than the usable
    cores on a CPU, or more than free memory holds at ``WORKER_MEMORY`` + twice the largest model a worker (its
    weights, and the file read into them)."""
    if workers is None:
        return
    gpus, cores, free = visible_gpus(), usable_cores(), free_memory()
    each = WORKER_MEMORY + 2 * model_bytes
    fits = workers if gpus else cores  # on GPUs several workers may share one (round robin)
    if free is not None:
        fits = max(1, min(fits, free // each))
    if workers <= fits:
        return
    memory = "unknown free memory" if free is None else f"{free / 2**30:.1f} GiB free memory"
    raise ConfigError(f"--workers {workers}: this machine holds at most {fits} evaluation worker(s): {cores} usable "
                      f"core(s){f', {len(gpus)} GPU(s)' if gpus else ''}, {memory}, about {each / 2**30:.2f} GiB a "
                      f"worker ({WORKER_MEMORY >> 20} MiB for Python with torch and lm-eval + twice the largest "
                      f"model, {model_bytes / 2**30:.2f} GiB); use --workers {fits}, or leave --workers out for the "
                      f"default")


def measure_worker_memory() -> int:
    """Bytes of resident memory a fresh worker holds once ready (the source of ``WORKER_MEMORY``)."""
    worker = Worker({**os.environ, "TOKENIZERS_PARALLELISM": "false"}, Path(os.devnull))
    worker.start()
    try:
        status = Path(f"/proc/{worker.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024
    finally:
        worker.stop()


def worker_envs(workers: Optional[int]) -> List[Dict[str, str]]:
    """One environment per worker: its GPU, or its share of the CPU threads."""
    base = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    gpus = visible_gpus()
    if gpus:
        count = workers or len(gpus)
        return [{**base, **worker_thread_env(None), "CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]}
                for i in range(count)]
    count = workers or default_workers()
    return [{**base, **worker_thread_env(thread_share(count))} for _ in range(count)]


class WorkerDied(RuntimeError):
    """A worker that ended before it said ready; ``rc`` its exit code (negative: the signal that killed it)."""

    def __init__(self, rc: int):
        self.rc = rc
        super().__init__(f"an evaluation worker exited with code {rc} while it started")


class Worker:
    """One long-lived worker process and the thread-side protocol to talk to it."""

    def __init__(self, env: Dict[str, str], log_path: Path):
        self.env, self.log_path, self.proc, self.lines = env, log_path, None, None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a")
        self.proc = lifeline.popen([sys.executable, "-m", "wildmerge.eval.serve"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=log, env=self.env, text=True, bufsize=1)
        log.close()
        self.lines = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, self.lines), daemon=True).start()
        answer = self._answer(STARTUP_TIMEOUT)
        if answer == "ready":
            return
        if answer is None:  # it died before it was ready: killed (a signal) or an error (its log says which)
            rc = lifeline.reap(self.proc)
            self.proc = None
            raise WorkerDied(rc)
        self.stop()
        raise RuntimeError(f"an evaluation worker did not start; see {self.log_path}")

    @staticmethod
    def _read(proc, lines) -> None:
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)  # end of output: the process is gone

    def _answer(self, timeout: Optional[float]):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return TimeoutError

    def stop(self) -> None:
        """Kill the worker and whatever it started (a hung worker's own subprocesses too)."""
        if self.proc:
            lifeline.kill(self.proc)
        self.proc = None

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.stop()

    def run(self, job: Dict[str, Any], timeout: Optional[float]) -> Dict[str, Any]:
        """The job's result record; the worker is replaced if it hung or died."""
        if self.proc is None:
            self.start()
        job_file = ResultStore.of_result(job["result_path"]).job_path(job["job_id"])
        write_json(job_file, job)
        started = time.time()
        try:
            self.proc.stdin.write(f"{job_file}\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died between jobs: the answer below is end-of-output
        answer = self._answer(timeout)
        if answer == job["job_id"]:
            return read_result(job["result_path"])
        if answer is TimeoutError:
            self.stop()
            return lost_record(job, started, f"timed out after {timeout:.0f} s (--job-timeout); the worker was "
                                             f"stopped and replaced")
        rc = lifeline.reap(self.proc)  # and what it left running
        self.proc = None
        record = read_result(job["result_path"])
        if record["status"] in (OK, FAILED) and record.get("started", 0) >= started:
            return record  # it died after writing the result
        if rc < 0:
            return lost_record(job, started, "", killed=-rc, worker_log=self.log_path)
        return lost_record(job, started, f"the worker exited with code {rc} while scoring this model",
                           worker_log=self.log_path)


_IDLE: List[Worker] = []  # started workers kept between calls (``--keep-models none`` evaluates one model a call)
_IDLE_LOCK = threading.Lock()


def _take_idle(env: Dict[str, str]) -> Optional[Worker]:
    with _IDLE_LOCK:
        for worker in list(_IDLE):
            if worker.proc is None or worker.proc.poll() is not None:
                _IDLE.remove(worker)  # died while parked
            elif worker.env == env:
                _IDLE.remove(worker)
                return worker
    return None


def _park(worker: Worker) -> None:
    if worker.proc is not None and worker.proc.poll() is None:
        with _IDLE_LOCK:
            _IDLE.append(worker)


def _close_parked_except(envs: List[Dict[str, str]]) -> None:
    """Close the parked workers that no worker of this call can take: started with other settings or another
    environment (libraries set variables as they load, e.g. torch's TORCHINDUCTOR_CACHE_DIR), they would wait
    until this process exits, about 1 GB each, one more set per call (seen in a 64-model recording)."""
    with _IDLE_LOCK:
        stale = [w for w in _IDLE if w.env not in envs]
        for worker in stale:
            _IDLE.remove(worker)
    for worker in stale:
        worker.close()


@atexit.register
def close_idle_workers() -> None:
    with _IDLE_LOCK:
        while _IDLE:
            _IDLE.pop().close()


def run_local(jobs: List[Dict[str, Any]], options: EvalOptions,
              on_done: Optional[Callable] = None, claim: Optional[Callable] = None) -> List[Dict[str, Any]]:
    """Run ``jobs`` on long-lived local workers (``options.workers``, ``options.job_timeout``); returns their result
    records (in completion order). ``claim(job)``: asked as a worker takes the job; None skips it (another command
    holds or finished it), a claim is released once the job's record is written."""
    if not jobs:
        return []
    check_workers(options.workers, max(weights_bytes(job["model_path"]) for job in jobs))
    envs = worker_envs(options.workers)[: len(jobs)]
    _close_parked_except(envs)
    logs = ResultStore.of_result(jobs[0]["result_path"]).logs_dir
    todo: "queue.Queue" = queue.Queue()
    for job in jobs:
        todo.put(job)
    records, lock = [], threading.Lock()
    bar = tqdm(total=len(jobs), desc=f"eval jobs ({len(envs)} worker{'s' * (len(envs) > 1)})", unit="job")

    def drive(i: int, env: Dict[str, str]) -> None:
        worker = _take_idle(env) or Worker(env, logs / f"worker-{i}.log")
        try:
            while True:
                try:
                    job = todo.get_nowait()
                except queue.Empty:
                    return
                held = claim(job) if claim else None
                if claim and held is None:
                    with lock:
                        bar.update()
                    continue
                try:
                    record = worker.run(job, options.job_timeout)
                except WorkerDied as died:  # killed while it started: says nothing of the model, redone once
                    record = lost_record(job, time.time(), "while it started" if died.rc < 0 else str(died),
                                         killed=-died.rc if died.rc < 0 else None, worker_log=worker.log_path)
                except Exception as exc:  # the worker could not start: this job fails, the next tries again
                    worker.stop()
                    record = lost_record(job, time.time(), f"{type(exc).__name__}: {exc}")
                finally:
                    held and held.release()
                with lock:
                    records.append(record)
                    on_done and on_done(record)
                    bar.update()
        finally:
            _park(worker)  # closed when this process exits, or reused by the next call

    threads = [threading.Thread(target=drive, args=(i, env), daemon=True) for i, env in enumerate(envs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bar.close()
    return records
