"""A long-lived evaluation worker: lm-eval imported and the suite's tasks built once, then many models in turn.

``python -m wildmerge.eval.serve`` prints ``ready`` once lm-eval is imported, then reads one job file path per
line on stdin; for each it scores the model (``worker.score_job``, its output going to the job's own log file),
writes the result file, releases the model and prints the job id. The parent (``local.py``) owns timeouts and
replaces a worker that dies; a model that raises fails only its own job.
"""

import contextlib
import gc
import json
import os
import sys
from pathlib import Path

from wildmerge.lifeline import hold
from wildmerge.plugins import host_patches
from wildmerge.resources import cuda_available
from wildmerge.threads import kernel_threads, prefer_passive_wait, thread_share, torch_threads


@contextlib.contextmanager
def output_to(log_path: str):
    """Send this process's stdout and stderr (Python's and native code's) to ``log_path`` for one job."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "w") as log:
        os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def release_memory() -> None:
    """Free the scored model (cycles included) before the next one loads; objects frozen at start-up are skipped."""
    gc.collect()
    if cuda_available():
        import torch

        torch.cuda.empty_cache()


def cache_env_info() -> None:
    """lm-eval describes the environment (torch's ``collect_env``: subprocesses, pip) on every ``simple_evaluate``:
    7 s of a 2-core machine's job under load (profiled); a worker's environment does not change between jobs
    (``host_patches``: lm_eval.evaluator.add_env_info)."""
    host_patches.replace("lm_eval.evaluator.add_env_info", described_once)


def described_once(original):
    """lm-eval's ``add_env_info`` (``original``) called once; each later call gets a copy of what it wrote."""
    cached = {}

    def add_env_info(storage: dict) -> None:
        if not cached:
            original(cached)
        storage.update(cached)

    return add_env_info


def job_threads(share: int):
    """Torch threads for one job: this worker's share of the cores, fewer while other processes hold them
    (``wildmerge.threads``; threads waiting on a busy core stall every barrier); the worker's count back after."""
    return torch_threads(kernel_threads(cap=share))


def main() -> int:
    hold()  # first: this worker and what it starts die with the process that started it
    prefer_passive_wait()  # before torch loads: OpenMP threads sleep at barriers instead of spinning
    share = int(os.environ.get("OMP_NUM_THREADS") or thread_share(1))
    control = os.fdopen(os.dup(1), "w", buffering=1)  # job ids go here; fd 1 itself follows each job's log
    os.dup2(2, 1)
    import lm_eval.evaluator  # noqa: F401  (paid once per worker, before the first job's timeout starts)
    import lm_eval.models.huggingface  # noqa: F401

    from wildmerge.eval.worker import score_job

    cache_env_info()
    gc.freeze()  # the imports live as long as the worker: release_memory's full collection skips their objects
    control.write("ready\n")
    for line in sys.stdin:
        job = json.loads(Path(line.strip()).read_text())
        with job_threads(share), output_to(job["log_path"]):
            score_job(job, "long-lived")
        release_memory()
        control.write(job["job_id"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
