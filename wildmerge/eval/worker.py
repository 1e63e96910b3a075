"""Run one evaluation job: lm-eval's ``simple_evaluate``, result written atomically.

``score_job`` scores a job inside the current process; a long-lived worker (``serve.py``) calls it for many models
in turn. ``run_job`` is the per-process mode: a fresh Python process per job, which isolates GPU memory, vLLM state
and crashes at the price of importing lm-eval and building the tasks every time. Either way a job that raises is
recorded as ``failed`` with its error; a worker killed by a signal (the out-of-memory killer) is recorded as
``killed``, which the next run of the same command redoes once (``store.needs_run``). The child is
``python -m wildmerge.eval.worker JOB.json``; it dies with the process that started it (``wildmerge.lifeline``).
"""

import functools
import math
import os
import signal
import platform
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List, Optional

from wildmerge import lifeline
from wildmerge.atomic import write_json
from wildmerge.eval.splits import derived_config, derived_name, score_key
from wildmerge.eval.store import FAILED, OK, ResultStore, base_record, read_result, write_result
from wildmerge.resources import checked_device

LM_EVAL_KEYS = ("results", "groups", "group_subtasks", "n-shot", "n-samples", "versions", "higher_is_better",
                "date", "lm_eval_version", "transformers_version", "max_length")


class MetricMissing(Exception):
    pass


def versions() -> Dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("wildmerge", "lm_eval", "transformers", "torch", "datasets", "vllm"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def task_score(results: Dict[str, Any], task: str, metric: str) -> float:
    """The suite's accuracy for ``task`` from the ``simple_evaluate`` call that ran it.

    A task or group has its own row; a tag (e.g. ``headqa``) has none and runs alone, so it scores the unweighted
    mean of all the rows of its call. A metric the task does not produce is an error that lists the ones it does.
    """
    rows = results.get("results", {})
    if task in rows:
        value = rows[task].get(metric)
        available = sorted(k for k in rows[task] if "," in k and "_stderr" not in k)
    else:
        values = [row.get(metric) for row in rows.values()]
        value = sum(values) / len(values) if values and all(isinstance(v, (int, float)) for v in values) else None
        available = sorted({k for row in rows.values() for k in row if "," in k and "_stderr" not in k})
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MetricMissing(f"task {task!r} did not produce metric {metric!r}; it produced "
                            f"{', '.join(available) or 'nothing'}: fix `metric` in the suite")
    return float(value)


def build_lm(job: Dict[str, Any]):
    from lm_eval.api.registry import get_model

    s = job["settings"]
    from wildmerge.eval.composition import MODEL_NAME, is_composition

    if is_composition(job["model_path"]):  # ensemble / composer baselines: our registered lm-eval model
        from wildmerge.eval.composition_lm import register

        register()
        device = checked_device(s["device"], "evaluation device")
        return get_model(MODEL_NAME).create_from_arg_obj({"pretrained": job["model_path"]},
                                                         {"batch_size": s["batch_size"], "device": device})
    args = {"pretrained": job["model_path"], "dtype": s["dtype"], **s["model_args"]}
    extra = {"batch_size": s["batch_size"], "max_batch_size": s["max_batch_size"]}
    if s["backend"] == "hf" and not args.get("parallelize"):
        extra["device"] = checked_device(s["device"], "evaluation device")
    return get_model(s["backend"]).create_from_arg_obj(args, extra)


def _batches(tasks: List[Dict[str, Any]], tags) -> List[List[Dict[str, Any]]]:
    """Tasks sharing an n-shot run in one ``simple_evaluate`` call; a tag runs alone (its rows are all its own)."""
    batches: Dict[Any, List[Dict[str, Any]]] = {}
    for t in tasks:
        batches.setdefault(("tag", t["task"]) if t["task"] in tags else ("shots", t["num_fewshot"]), []).append(t)
    return list(batches.values())


def folder_signature(folder) -> tuple:
    """(name, size, mtime) of every file under a task folder: a task whose YAML or data changed is loaded anew."""
    if not folder:
        return ()
    return tuple(sorted((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in Path(folder).rglob("*")
                        if f.is_file()))


def task_manager(include_path, include_defaults: bool):
    """lm-eval's task index for the suite, reused while its task folder is unchanged (see ``_task_manager``)."""
    return _task_manager(include_path, include_defaults, folder_signature(include_path))


@functools.lru_cache(maxsize=8)
def _task_manager(include_path, include_defaults: bool, signature: tuple):
    """lm-eval's task index, built once per process and suite; the tasks it loads are kept for the next model.

    A task is loaded (its dataset read, its documents prepared) on the first ``simple_evaluate`` that names it and
    reused afterwards: ``simple_evaluate`` re-applies n-shot and seeds and rebuilds every request on each call, so
    the scores are those of a fresh process (tested against the per-process mode).
    """
    from lm_eval.tasks import TaskManager

    class ReusingTaskManager(TaskManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.loaded: Dict[Any, Any] = {}

        def load(self, tasks):
            key = _load_key(tasks)
            if key is None:
                return super().load(tasks)
            if key not in self.loaded:
                self.loaded[key] = super().load(list(tasks))
            return self.loaded[key]

    return ReusingTaskManager(include_path=include_path, include_defaults=include_defaults)


def _load_key(tasks) -> Optional[tuple]:
    """What a list of task specs is, for reuse: names, and a validation run's derived config by its derived name
    (unique in one task index, whose folder signature keys the manager); None for anything else."""
    if not isinstance(tasks, (list, tuple)):
        return None
    key = []
    for t in tasks:
        if isinstance(t, str):
            key.append(t)
        elif isinstance(t, dict) and "@" in str(t.get("task", "")):
            key.append(("derived", t["task"], t.get("test_split")))
        else:
            return None
    return tuple(key)


def _specs(batch: List[Dict[str, Any]], tm) -> list:
    """The lm-eval task specs of a batch: each task by name, then each validation run as its derived config."""
    validated = [t for t in batch if t.get("validation_split")]
    return [t["task"] for t in batch] + [derived_config(tm, t["task"], t["validation_split"]) for t in validated]


def evaluate_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """Score the job's model on every task of the suite, with each task's own n-shot; the model loads once."""
    import lm_eval

    from wildmerge.eval.templates import compile_templates_once

    compile_templates_once()
    s = job["settings"]
    lm = build_lm(job)
    tm = task_manager(job["include_path"], job["include_defaults"])
    if job.get("screen"):
        return evaluate_part_job(job, lm, tm)
    scores, outputs, items, logged = {}, {}, {}, []
    for batch in _batches(job["tasks"], set(tm.all_tags)):
        out = lm_eval.simple_evaluate(
            model=lm, tasks=_specs(batch, tm), num_fewshot=batch[0]["num_fewshot"], task_manager=tm,
            limit=s["limit"], bootstrap_iters=s["bootstrap_iters"], apply_chat_template=s["apply_chat_template"],
            log_samples=bool(job.get("record_items")),
        )
        outputs[",".join(t["task"] for t in batch)] = {k: out.get(k) for k in LM_EVAL_KEYS if k in out}
        logged.append(out)
        for t in batch:
            scores[t["label"] or t["task"]] = task_score(out, t["task"], t["metric"])
            if t.get("validation_split"):
                scores[score_key(t["label"] or t["task"], t["validation_split"])] = task_score(
                    out, derived_name(t["task"], t["validation_split"]), t["metric"])
            if job.get("record_items"):
                items[t["label"] or t["task"]] = item_scores(out.get("samples") or {}, t["task"], t["metric"])
    if job.get("wandb"):
        from wildmerge.eval.wandb_log import log_to_wandb

        log_to_wandb(job["wandb"], logged)
    return {"scores": scores, "lm_eval": outputs, **({"items": items} if job.get("record_items") else {})}


def evaluate_part_job(job: Dict[str, Any], lm, tm) -> Dict[str, Any]:
    """A screened evaluation's part (``parts.py``): the scores of the part's documents, kept per document."""
    import lm_eval

    from wildmerge.eval.screening.parts import combine, evaluate_part

    documents = {}
    for batch in _batches(job["tasks"], set(tm.all_tags)):
        documents.update(evaluate_part(lm, tm, batch, job["screen"], job["settings"], lm_eval.simple_evaluate))
    scores = {label: combine(entry) for label, entry in documents.items() if any(
        d["scores"] for d in entry["leaves"].values())}
    return {"scores": scores, "documents": documents}


def item_scores(samples: Dict[str, Any], task: str, metric: str) -> List[float]:
    """The metric of every document of ``task`` in document order (a tag or group: its subtasks one after
    another), for paired comparisons between models on the same items (``screening.py``)."""
    name, filter_key = metric.split(",", 1)
    rows = samples.get(task) or [row for key in sorted(samples) for row in samples[key]]
    rows = sorted((r for r in rows if r.get("filter") == filter_key), key=lambda r: r["doc_id"])
    return [float(r[name]) for r in rows]


def device_name(requested: str) -> str:
    """Where the scores were computed, for cost accounting: ``cpu`` or ``cuda:<card name>``."""
    device = checked_device(requested) if requested == "auto" else requested
    if device.startswith("cuda"):
        try:
            import torch

            return f"cuda:{torch.cuda.get_device_name(torch.device(device))}"
        except Exception:  # no GPU after all: the job itself says why
            return device
    return device


def score_job(job: Dict[str, Any], mode: str) -> Dict[str, Any]:
    """Score ``job`` in this process and write its result record; never raises for a model's own failure."""
    record = {**base_record(job), "host": socket.gethostname(), "versions": versions(), "started": time.time(),
              "worker": mode, "attempts": job.get("attempt", 1)}
    try:
        record["device"] = device_name(job["settings"]["device"])
        record.update(evaluate_job(job), status=OK, error=None)
    except Exception as exc:  # recorded, never fatal to the other jobs
        tb = traceback.format_exc(limit=6)
        record.update(status=FAILED, error=f"{type(exc).__name__}: {exc}", traceback=tb)
        print(tb, file=sys.stderr)
    record["finished"] = time.time()
    record["seconds"] = record["finished"] - record["started"]
    return write_result(job["result_path"], record)


def child_main(job_file: str) -> int:
    import json

    job = json.loads(Path(job_file).read_text())
    return 0 if score_job(job, "process")["status"] == OK else 1


def killed_why(sig: int) -> str:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    oom = " (the out-of-memory killer?)" if sig == signal.SIGKILL else ""
    return f"the worker was killed by {name}{oom}"


def _last_lines(*logs) -> str:
    """"last log lines (LOG):" and the tail of the first log that has any; never an empty heading."""
    for log in logs:
        tail = _tail(log) if log else ""
        if tail.strip():
            return f"last log lines ({log}):\n{tail}"
    named = ", ".join(str(log) for log in logs if log)
    return f"no log lines were written ({named or 'no log'})"


def lost_record(job: Dict[str, Any], started: float, why: str, killed: Optional[int] = None,
                worker_log=None) -> Dict[str, Any]:
    """The result of a job whose worker wrote none: it died, hung or could not start. A long-lived worker writes
    into its own log (``worker_log``), not the job's: the tail comes from whichever has lines."""
    attempts = job.get("attempt", 1)
    if killed is not None:
        why = killed_why(killed) + (f" {why}" if why else "") + (f", {attempts} times: reported as failed" if attempts > 1 else
                                    "; the next run of the same command redoes this job once")
    return write_result(job["result_path"], {
        **base_record(job), "status": FAILED, "error": f"{why}; {_last_lines(job['log_path'], worker_log)}",
        "killed": killed, "attempts": attempts, "started": started, "finished": time.time(),
        "seconds": time.time() - started, "host": socket.gethostname(),
    })


def _tail(path, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_job(job: Dict[str, Any], job_file: str = "") -> Dict[str, Any]:
    """Run ``job`` in a fresh process and return its result record; a crash becomes a ``failed`` record."""
    job_file = job_file or str(ResultStore.of_result(job["result_path"]).job_path(job["job_id"]))
    write_json(job_file, job)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    cmd: List[str] = [sys.executable, "-m", "wildmerge.eval.worker", job_file]
    started = time.time()
    try:
        Path(job["log_path"]).parent.mkdir(parents=True, exist_ok=True)
        with open(job["log_path"], "w") as log:
            rc = lifeline.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    except OSError as exc:
        rc, why = None, f"could not start the worker: {exc}"
    record = read_result(job["result_path"])
    if record["status"] in (OK, FAILED) and record.get("started", 0) >= started:
        return record
    if rc is not None and rc < 0:
        return lost_record(job, started, "", killed=-rc)
    if rc is not None:
        why = f"worker exited with code {rc}"
    return lost_record(job, started, why)


if __name__ == "__main__":
    lifeline.hold()  # first: this job's process and what it starts die with the process that started it
    sys.exit(child_main(sys.argv[1]))
