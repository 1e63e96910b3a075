"""One evaluation job = (model, suite tasks, lm-eval settings), pure JSON data with a stable id.

The id hashes the model's content fingerprint (``models.fingerprint_model``), the tasks (name, n-shot, metric), the
settings and the lm-eval version, never the model's path: the base, the experts and equal merges get the same id and
are evaluated once; a model that changes gets a new id.
"""

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from wildmerge.eval.suites import Suite


def lm_eval_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lm_eval")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class EvalJob:
    job_id: str
    model_path: str
    fingerprint: str
    suite: str
    tasks: List[Dict[str, Any]]  # [{task, num_fewshot, metric, label[, validation_split]}]
    settings: Dict[str, Any]
    include_path: Optional[str]
    include_defaults: bool
    result_path: str = ""
    log_path: str = ""
    models: List[str] = field(default_factory=list)  # the model ids of a run that share this job
    screen: Optional[Dict[str, Any]] = None  # a screened evaluation's part: {fraction, seed, part} (``parts.py``)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "EvalJob":
        return cls(**data)


def _task_identity(task) -> Dict[str, Any]:
    """A task's part of a job id; its validation split only where it has one, so other ids never change."""
    identity = {"task": task.task, "num_fewshot": task.num_fewshot, "metric": task.metric}
    return {**identity, "validation_split": task.validation_split} if task.validation_split else identity


def job_identity(fingerprint: str, suite: Suite, screen: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Everything that changes the numbers a job produces (labels and descriptions do not). A part of a screened
    evaluation adds its fraction, seed and part, so it never shares an id (or a result) with a full evaluation."""
    identity = {
        "fingerprint": fingerprint,
        "tasks": [_task_identity(t) for t in suite.tasks],
        "settings": suite.settings.model_dump(mode="json"),
        "lm_eval": lm_eval_version(),
    }
    return {**identity, "screen": screen} if screen else identity


def job_id(suite: Suite, identity: Dict[str, Any]) -> str:
    return f"{suite.name}-{hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]}"


def make_job(model_path: str, fingerprint: str, suite: Suite, include_path: Optional[str],
             include_defaults: bool, screen: Optional[Dict[str, Any]] = None) -> EvalJob:
    identity = job_identity(fingerprint, suite, screen)
    return EvalJob(
        job_id=job_id(suite, identity),
        model_path=str(model_path),
        fingerprint=fingerprint,
        suite=suite.name,
        tasks=[t.model_dump() for t in suite.tasks],
        settings=identity["settings"],
        include_path=include_path,
        include_defaults=include_defaults,
        screen=screen,
    )
