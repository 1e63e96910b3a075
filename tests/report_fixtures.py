"""Evaluation results with chosen scores for run folders whose merges are real (or whose paths are borrowed)."""

import json
from pathlib import Path

import yaml

from wildmerge.eval.store import write_result
from wildmerge.run import RunFolder

TASKS = ("t1", "t2")


def fabricate_results(run_dir, scores, failed=(), suite="mini") -> Path:
    """Sealed result files and the eval index for ``suite``: ``scores`` maps model id -> (t1, t2) fractions."""
    run = RunFolder(run_dir)
    store = run.eval_dir(suite)
    (store / "results").mkdir(parents=True, exist_ok=True)
    (store / "suite.yml").write_text(yaml.safe_dump({"name": suite, "tasks": [
        {"task": t, "num_fewshot": 0, "metric": "acc,none", "label": t} for t in TASKS]}))
    index = {}
    for mid, values in scores.items():
        job = f"{suite}-{mid}"
        index[mid] = job
        record = {"job_id": job, "fingerprint": "sha256:" + mid, "settings": {}, "status": "ok"}
        if mid in failed:
            record.update(status="failed", error="CUDA out of memory")
        else:
            record["scores"] = dict(zip(TASKS, values))
        write_result(store / "results" / f"{job}.json", record)
    (store / "index.json").write_text(json.dumps({"suite": suite, "models": index, "jobs": {}}))
    return store


def mean_pct(values) -> float:
    return 100.0 * sum(values) / len(values)
