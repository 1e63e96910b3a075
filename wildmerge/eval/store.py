"""The result store: one JSON file per job, written atomically, with a checksum so a damaged file is never used.

Layout of a store folder (``RUN/eval/<suite>/`` for a run)::

    index.json            model id -> job id, and each job's spec (written before the jobs run)
    suite.yml             the suite as it was run
    results/<job>.json    status ok|failed, scores, lm-eval output, versions, settings, fingerprint, checksum
    logs/<job>.log        the worker's stdout and stderr
    jobs/<job>.json       the job as handed to a worker
    claims/<job>.lock     held while a command runs the job (``wildmerge.locks``)
    slurm/                submitit's folder for --executor slurm
    fingerprints.json     cached per-file hashes

What a result record starts with (``base_record``) and whether a job's record asks for a (re)run (``needs_run``)
live here too, so the workers, the executors and the screened evaluation share them without importing each other.
"""

import hashlib
import json
from pathlib import Path
from typing import Any, Dict

from wildmerge.atomic import clean_stale_tmp, write_json
from wildmerge.run import CLAIMS, EVAL_INDEX, EvalIndex, read_eval_index

OK, FAILED, CORRUPT, MISSING = "ok", "failed", "corrupt", "missing"
REQUIRED_KEYS = ("job_id", "status", "fingerprint", "settings")


def _checksum(record: Dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    return "sha256:" + hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def seal(record: Dict[str, Any]) -> Dict[str, Any]:
    """Round-trip through JSON (so the checksum covers what is on disk) and add the checksum."""
    record = json.loads(json.dumps(record, default=str))
    record["checksum"] = _checksum(record)
    return record


def write_result(path, record: Dict[str, Any]) -> Dict[str, Any]:
    record = seal(record)
    write_json(path, record)
    return record


def read_result(path) -> Dict[str, Any]:
    """The result record, or ``{"status": "missing"|"corrupt", "error": why}``: a damaged file is never trusted."""
    path = Path(path)
    if not path.is_file():
        return {"status": MISSING, "error": f"no result file {path}"}
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"status": CORRUPT, "error": f"result file {path} is not valid JSON ({exc}); it will be recomputed"}
    if not isinstance(record, dict) or any(k not in record for k in REQUIRED_KEYS):
        return {"status": CORRUPT, "error": f"result file {path} lacks {list(REQUIRED_KEYS)}; it will be recomputed"}
    if record.get("checksum") != _checksum(record):
        return {"status": CORRUPT, "error": f"result file {path} fails its checksum (edited or truncated); "
                                            f"it will be recomputed"}
    if record["status"] not in (OK, FAILED):
        return {"status": CORRUPT, "error": f"result file {path} has unknown status {record['status']!r}"}
    return record


def base_record(job: Dict[str, Any]) -> Dict[str, Any]:
    """What every result record of ``job`` starts with: which job, model, fingerprint, suite, tasks and settings
    (and ``command``, the pid and host of the command that claimed it, where one did; ``executor`` and ``node``, a cluster's)."""
    return {**{k: job[k] for k in ("job_id", "model_path", "fingerprint", "suite", "tasks", "settings")},
            **{k: job[k] for k in ("command", "executor", "node") if k in job}}


def needs_run(record: Dict[str, Any], retry_failed: bool) -> bool:
    """Whether a job must (re)run: no valid result, a failure the user asks to retry, or a first kill by a signal
    (a killed worker says nothing about the model; a second kill does)."""
    if record["status"] == OK:
        return False
    if record["status"] == FAILED:
        return retry_failed or (record.get("killed") is not None and record.get("attempts", 1) < 2)
    return True


class ResultStore:
    """Paths of one result store; the only code that knows its layout."""

    def __init__(self, root):
        self.root = Path(root)
        self.index_path = self.root / EVAL_INDEX
        self.suite_file = self.root / "suite.yml"
        self.fingerprints_file = self.root / "fingerprints.json"
        self.logs_dir = self.root / "logs"
        self.slurm_dir = self.root / "slurm"

    @classmethod
    def of_result(cls, result_path) -> "ResultStore":
        """The store that holds ``<store>/results/<job>.json`` (a job carries its result path, not its store)."""
        return cls(Path(result_path).parent.parent)

    def prepare(self) -> "ResultStore":
        for sub in ("results", "logs", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            clean_stale_tmp(self.root / sub)
        return self

    def result_path(self, job_id: str) -> Path:
        return self.root / "results" / f"{job_id}.json"

    def log_path(self, job_id: str) -> Path:
        return self.logs_dir / f"{job_id}.log"

    def job_path(self, job_id: str) -> Path:
        return self.root / "jobs" / f"{job_id}.json"

    def claim_path(self, job_id: str) -> Path:
        """The lock file that claims one job, so two commands on one store split the jobs."""
        return self.root / CLAIMS / f"{job_id}.lock"

    def load(self, job_id: str) -> Dict[str, Any]:
        return read_result(self.result_path(job_id))

    def index(self) -> EvalIndex:
        return read_eval_index(self.root)
