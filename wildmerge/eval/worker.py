"""Run one evaluation job: lm-eval's ``simple_evaluate`` in a fresh Python process, result written atomically.

A fresh process per job isolates GPU memory, vLLM state and crashes: a job that raises, runs out of memory or is
killed is recorded as ``failed`` with its error and the other jobs go on. ``run_job`` (the parent side) never
raises. The child is ``python -m wildmerge.eval.worker JOB.json``.
"""

import math
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

from wildmerge.atomic import write_json
from wildmerge.eval.store import FAILED, OK, read_result, write_result

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


def _device(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_lm(job: Dict[str, Any]):
    from lm_eval.api.registry import get_model

    s = job["settings"]
    from wildmerge.eval.composition import MODEL_NAME, is_composition, register

    if is_composition(job["model_path"]):  # ensemble / composer baselines: our registered lm-eval model
        register()
        return get_model(MODEL_NAME).create_from_arg_obj(
            {"pretrained": job["model_path"]}, {"batch_size": s["batch_size"], "device": _device(s["device"])})
    args = {"pretrained": job["model_path"], "dtype": s["dtype"], **s["model_args"]}
    extra = {"batch_size": s["batch_size"], "max_batch_size": s["max_batch_size"]}
    if s["backend"] == "hf" and not args.get("parallelize"):
        extra["device"] = _device(s["device"])
    return get_model(s["backend"]).create_from_arg_obj(args, extra)


def _batches(tasks: List[Dict[str, Any]], tags) -> List[List[Dict[str, Any]]]:
    """Tasks sharing an n-shot run in one ``simple_evaluate`` call; a tag runs alone (its rows are all its own)."""
    batches: Dict[Any, List[Dict[str, Any]]] = {}
    for t in tasks:
        batches.setdefault(("tag", t["task"]) if t["task"] in tags else ("shots", t["num_fewshot"]), []).append(t)
    return list(batches.values())


def evaluate_job(job: Dict[str, Any]) -> Dict[str, Any]:
    """Score the job's model on every task of the suite, with each task's own n-shot; the model loads once."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    s = job["settings"]
    lm = build_lm(job)
    tm = TaskManager(include_path=job["include_path"], include_defaults=job["include_defaults"])
    scores, outputs = {}, {}
    for batch in _batches(job["tasks"], set(tm.all_tags)):
        out = lm_eval.simple_evaluate(
            model=lm, tasks=[t["task"] for t in batch], num_fewshot=batch[0]["num_fewshot"], task_manager=tm,
            limit=s["limit"], bootstrap_iters=s["bootstrap_iters"], apply_chat_template=s["apply_chat_template"],
            log_samples=False,
        )
        outputs[",".join(t["task"] for t in batch)] = {k: out.get(k) for k in LM_EVAL_KEYS if k in out}
        for t in batch:
            scores[t["label"] or t["task"]] = task_score(out, t["task"], t["metric"])
    return {"scores": scores, "lm_eval": outputs}


def base_record(job: Dict[str, Any]) -> Dict[str, Any]:
    return {k: job[k] for k in ("job_id", "model_path", "fingerprint", "suite", "tasks", "settings")}


def child_main(job_file: str) -> int:
    import json

    job = json.loads(Path(job_file).read_text())
    record = {**base_record(job), "host": socket.gethostname(), "versions": versions(), "started": time.time()}
    try:
        record.update(evaluate_job(job), status=OK, error=None)
    except Exception as exc:  # recorded, never fatal to the other jobs
        tb = traceback.format_exc(limit=6)
        record.update(status=FAILED, error=f"{type(exc).__name__}: {exc}", traceback=tb)
        print(tb, file=sys.stderr)
    record["finished"] = time.time()
    record["seconds"] = record["finished"] - record["started"]
    write_result(job["result_path"], record)
    return 0 if record["status"] == OK else 1


def _tail(path, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_job(job: Dict[str, Any], job_file: str = "") -> Dict[str, Any]:
    """Run ``job`` in a fresh process and return its result record; a crash becomes a ``failed`` record."""
    job_file = job_file or str(Path(job["result_path"]).parent.parent / "jobs" / f"{job['job_id']}.json")
    write_json(job_file, job)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    cmd: List[str] = [sys.executable, "-m", "wildmerge.eval.worker", job_file]
    started = time.time()
    try:
        Path(job["log_path"]).parent.mkdir(parents=True, exist_ok=True)
        with open(job["log_path"], "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    except OSError as exc:
        rc, why = None, f"could not start the worker: {exc}"
    record = read_result(job["result_path"])
    if record["status"] in (OK, FAILED):
        return record
    if rc is not None:
        why = f"worker exited with code {rc}" + (" (killed: out of memory?)" if rc in (-9, 137) else "")
    return write_result(job["result_path"], {
        **base_record(job), "status": FAILED, "error": f"{why}; last log lines:\n{_tail(job['log_path'])}",
        "started": started, "finished": time.time(), "seconds": time.time() - started, "host": socket.gethostname(),
    })


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
