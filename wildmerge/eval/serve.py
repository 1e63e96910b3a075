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
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main() -> int:
    control = os.fdopen(os.dup(1), "w", buffering=1)  # job ids go here; fd 1 itself follows each job's log
    os.dup2(2, 1)
    import lm_eval  # noqa: F401  (paid once per worker, before the first job's timeout starts)

    from wildmerge.eval.worker import score_job

    control.write("ready\n")
    for line in sys.stdin:
        job = json.loads(Path(line.strip()).read_text())
        with output_to(job["log_path"]):
            score_job(job, "long-lived")
        release_memory()
        control.write(job["job_id"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
