"""Evaluation results with chosen scores for run folders whose merges are real (or whose paths are borrowed)."""

import json
from pathlib import Path

import numpy as np
import yaml

from helpers import write_plan
from wildmerge.eval.store import write_result
from wildmerge.run import RunFolder

TASKS = ("t1", "t2")
METHODS = ["ta", "model_stock", "ties", "ta_sb", "ties_sb", "tsv_m", "iso_c"]
SIZES = [2, 3, 4, 5, 6, 8, 10]


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


def big_run(root: Path, base: str, ex) -> Path:
    """Base, 12 experts and 532 merges (7 methods x 7 sizes x 10-11 subsets, plus n = 12): 545 models."""
    entries = [{"model_id": "base", "kind": "base", "path": base}]
    entries += [{"model_id": f"expert__e{i:02d}", "kind": "expert", "path": ex[i % 3], "experts": [f"e{i:02d}"]}
                for i in range(12)]
    rng = np.random.default_rng(0)
    for m in METHODS:
        for n in SIZES + [12]:
            for s in range(1 if n == 12 else 11 if n <= 6 else 10):
                mid = f"{m}__n{n:02d}_s{s:02d}"
                members = sorted(rng.choice(12, size=n, replace=False))
                entries.append({"model_id": mid, "kind": "merge", "method": m, "n": n, "subset_id": f"n{n:02d}_s{s:02d}",
                                "path": str(root / "run" / "models" / mid), "experts": [f"e{i:02d}" for i in members]})
    run = write_plan(root / "run", entries)
    for e in entries:  # merged folders borrow a tiny checkpoint (for the norms) and carry a recipe
        if e["kind"] == "merge":
            folder = Path(e["path"])
            folder.mkdir(parents=True)
            src = Path(ex[len(e["model_id"]) % 3])
            for f in src.iterdir():
                (folder / f.name).symlink_to(f)
            (folder / "recipe.yml").write_text(f"merge_method: {e['method']}\n")
    scores = {e["model_id"]: tuple(rng.uniform(0.3, 0.7, size=2)) for e in entries}
    fabricate_results(run, scores, failed={"tsv_m__n04_s03"})
    return run
