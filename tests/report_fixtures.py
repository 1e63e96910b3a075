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


def fabricate_results(run_dir, scores, failed=(), suite="mini", validation=None) -> Path:
    """Sealed result files and the eval index for ``suite``: ``scores`` maps model id -> (t1, t2) fractions;
    ``validation`` (model id -> (t1, t2)) gives both tasks a ``validation`` split with those scores."""
    run = RunFolder(run_dir)
    store = run.eval_dir(suite)
    (store / "results").mkdir(parents=True, exist_ok=True)
    split = {"validation_split": "validation"} if validation else {}
    (store / "suite.yml").write_text(yaml.safe_dump({"name": suite, "tasks": [
        {"task": t, "num_fewshot": 0, "metric": "acc,none", "label": t, **split} for t in TASKS]}))
    index = {}
    for mid, values in scores.items():
        job = f"{suite}-{mid}"
        index[mid] = job
        record = {"job_id": job, "fingerprint": "sha256:" + mid, "settings": {}, "status": "ok"}
        if mid in failed:
            record.update(status="failed", error="CUDA out of memory")
        else:
            record["scores"] = dict(zip(TASKS, values))
            record["scores"].update({f"{t}@validation": v for t, v in zip(TASKS, (validation or {}).get(mid, ()))})
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


# a small run with two methods: scores, one failed job and one hand-edited (corrupt) result
SCORES = {"base": (0.50, 0.30), "e1": (0.40, 0.30), "e2": (0.60, 0.30), "e3": (0.50, 0.20),
          "ta_2_s0": (0.50, 0.40), "ta_2_s1": (0.40, 0.36), "ta_2_s2": (0.50, 0.30), "ta_3_s0": (0.60, 0.40),
          "ties_2_s0": (0.42, 0.40)}
FAILED = {"ties_2_s1"}
CORRUPT = {"ties_3_s0"}


def fabricate_run(run: Path, family, base_scores=True) -> Path:
    ex = family["experts"]
    paths = {"base": family["base"], "e1": ex[0], "e2": ex[1], "e3": ex[2], "ta_2_s0": ex[0], "ta_2_s1": ex[1],
             "ta_2_s2": ex[2], "ta_3_s0": family["base"], "ties_2_s0": ex[2], "ties_2_s1": ex[0], "ties_3_s0": ex[1]}
    entries = []
    for mid, path in paths.items():
        kind = "base" if mid == "base" else "expert" if mid.startswith("e") else "merge"
        method, n, subset = (mid.split("_")[0], int(mid.split("_")[1]), mid.split("_")[2]) if kind == "merge" \
            else (None, 1 if kind == "expert" else 0, None)
        entries.append({"model_id": mid, "kind": kind, "path": path, "method": method, "n": n, "subset_id": subset,
                        "hparams": {"lambda": 1.0 if method == "ta" else 0.1} if method else {}})
    write_plan(run, entries)
    store = run / "eval" / "mini"
    (store / "results").mkdir(parents=True)
    suite = {"name": "mini", "tasks": [{"task": "t1", "num_fewshot": 0, "metric": "acc,none", "label": "t1"},
                                       {"task": "t2", "num_fewshot": 0, "metric": "acc,none", "label": "t2"}]}
    (store / "suite.yml").write_text(yaml.safe_dump(suite))
    index = {}
    for mid in paths:
        job = f"mini-{mid}"
        index[mid] = job
        record = {"job_id": job, "fingerprint": "sha256:" + mid, "settings": {}, "status": "ok"}
        if mid in FAILED:
            record.update(status="failed", error="CUDA out of memory")
        elif mid == "base" and not base_scores:
            record.update(status="failed", error="boom")
        else:
            t1, t2 = SCORES.get(mid, (0.9, 0.9))
            record["scores"] = {"t1": t1, "t2": t2}
        write_result(store / "results" / f"{job}.json", record)
        if mid in CORRUPT:  # a hand-edited result must never be used
            path = store / "results" / f"{job}.json"
            path.write_text(path.read_text().replace("0.9", "0.95"))
    (store / "index.json").write_text(json.dumps({"suite": "mini", "models": index, "jobs": {}}))
    return run


# the "study" run: real TA merges of conftest's tiny family (`wildmerge sample`, sizes 1-2, a lambda grid), chosen
# scores (t1, t2 as lm-eval fractions)
STUDY_SCORES = {"base": (0.50, 0.30), "expert__x0": (0.40, 0.30), "expert__x1": (0.60, 0.30),
                "expert__x2": (0.50, 0.20), "ta__n02_s00": (0.50, 0.34), "ta__n02_s01": (0.52, 0.36),
                "ta__n03_full": (0.60, 0.40), "ta__n03_full__lambda-0.5": (0.56, 0.36),
                "ta__n03_full__lambda-1.5": (0.40, 0.20)}


def study_pool(root: Path, family) -> Path:
    lines = ["name: tiny", f"base: {{model: {family['base']}}}", "experts:"]
    lines += [f"  - {{model: {e}, name: x{i}}}" for i, e in enumerate(family["experts"])]
    (root / "pool.yml").write_text("\n".join(lines) + "\n")
    (root / "grid.yml").write_text("lam: {method: ta, grid: {lambda: [0.5, 1.0, 1.5]}}\n")
    return root / "pool.yml"


def sample_study(root: Path, family) -> Path:
    """The study run under ``root/run``, merged for real and given ``STUDY_SCORES`` (no report written yet)."""
    from wildmerge.cli import main

    pool = study_pool(root, family)
    run = root / "run"
    assert main(["sample", "--base", str(pool), "--out", str(run), "--sizes", "1,2", "--k", "2", "--methods", "ta",
                 "--grid", str(root / "grid.yml"), "--no-evaluate"]) == 0
    assert {e.model_id for e in RunFolder(run).read_plan().entries} == set(STUDY_SCORES)
    fabricate_results(run, STUDY_SCORES)
    return run
