"""Proof of Zhou et al. 2026 on the demo family: do the 28 pairwise metrics predict which pairs merge well, and does the
fitted predictor choose better subsets than random draws?

Steps (each resumable: rerunning skips finished merges, scores and cached metrics):
1. the 28 metrics of all 66 pairs of the 12 demo experts (``wildmerge analyze mergeability``);
2. every pair merged with each method (``wildmerge sample --sizes 2 --k 66``: C(12, 2) = 66, so all pairs);
3. every expert and merge scored with lm-eval on the suite;
4. the predictor fitted per method (leave one expert out; ``wildmerge analyze predictor``);
5. subset selection: the k best-scored subsets of size n (``--select predicted``) against k random subsets of the same
   n, merged with the same methods and scored the same way; target = the same normalized accuracy, averaged over the
   subset's n experts.

Evaluation runs in this one process (``--in-process``, the default here): the harness's fresh Python per job costs
~40 s of imports on a loaded shared CPU, far more than scoring a 1.8M-parameter demo model. The scores are written
into each run's result store exactly as the harness writes them, so ``wildmerge analyze predictor`` reads them.

    python scripts/prove_mergeability.py --out runs/proof-001                       # full: 3 methods, demo suite
    python scripts/prove_mergeability.py --out /tmp/p --suite scripts/mergeability_demo_mc.yml --limit 40
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # single-threaded BLAS: two threads spin against each other here


def sh(*argv) -> None:
    from wildmerge.cli import main

    print("$ wildmerge " + " ".join(argv), flush=True)
    rc = main(list(argv))
    if rc:
        sys.exit(rc)


def in_process_jobs() -> None:
    """Run the harness's evaluation jobs in this process (same job specs, same result records)."""
    import wildmerge.eval.executors as executors
    from wildmerge.atomic import write_json
    from wildmerge.eval.store import read_result
    from wildmerge.eval.worker import child_main

    def run_job(job, job_file=""):
        job_file = job_file or str(Path(job["result_path"]).parent.parent / "jobs" / f"{job['job_id']}.json")
        write_json(job_file, job)
        child_main(job_file)
        return read_result(job["result_path"])

    executors.run_job = run_job


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/proof-001")
    p.add_argument("--methods", default="zhou2026_ta,zhou2026_wa,zhou2026_ties")
    p.add_argument("--suite", default="demo")
    p.add_argument("--limit", default=None, help="documents per task (lm-eval --limit)")
    p.add_argument("--select-n", type=int, default=3, help="subset size of the selection experiment")
    p.add_argument("--select-k", type=int, default=4, help="subsets per arm (predicted and random)")
    p.add_argument("--subprocess", action="store_true", help="one fresh Python per evaluation job (the harness default)")
    args = p.parse_args()
    if not args.subprocess:
        in_process_jobs()
    out = Path(args.out)
    limit = ["--limit", str(args.limit)] if args.limit else []
    started = time.time()
    sh("analyze", "mergeability", "--pool", "demo", "--out", str(out / "metrics"))
    t_metrics = time.time()
    pairs = out / "pairs"
    sh("sample", "--sizes", "2", "--k", "66", "--no-full", "--methods", args.methods, "--out", str(pairs),
       "--no-evaluate")
    sh("eval", str(pairs), "--suite", args.suite, "--no-report", *limit)
    t_pairs = time.time()
    sh("analyze", "predictor", "--run", str(pairs), "--metrics", str(out / "metrics"), "--out", str(out / "fit"),
       "--rank-subsets", str(args.select_n))
    arms = {"predicted": ["--select", "predicted", "--predictor", str(out / "fit")], "random": ["--seed", "1"]}
    for arm, extra in arms.items():
        run = out / f"select-{arm}"
        sh("sample", "--sizes", f"1,{args.select_n}", "--k", str(args.select_k), "--no-full", "--methods",
           args.methods, "--out", str(run), "--no-evaluate", *extra)
        sh("eval", str(run), "--suite", args.suite, "--no-report", *limit)
    summary = selection_summary(out, args)
    seconds = {"metrics": round(t_metrics - started), "pairs_merge_eval": round(t_pairs - t_metrics),
               "fit_and_selection": round(time.time() - t_pairs), "total": round(time.time() - started)}
    from wildmerge.atomic import write_json

    write_json(out / "proof.json", {"args": vars(args), "seconds": seconds, "selection": summary})
    print(f"seconds: {seconds}")
    return 0


def selection_summary(out: Path, args) -> list:
    """Per method and arm: mean and spread of the target over the evaluated subsets."""
    import pandas as pd

    from wildmerge.analysis.mergeability.targets import own_tasks_for, targets_from_scores
    from wildmerge.analysis.report.scores import collect_scores
    from wildmerge.run import RunFolder

    rows = []
    for arm in ("predicted", "random"):
        run = out / f"select-{arm}"
        df, tasks, _ = collect_scores(run)
        suite = RunFolder(run).evaluated_suites()[0]
        manifest = RunFolder(run).read_manifest()
        own = own_tasks_for(manifest.pool, suite, tasks, {m.name: m.domain for m in manifest.models.experts})
        for r in targets_from_scores(df, tasks, own, "normalized" if own else "relative", sizes=(args.select_n,)):
            rows.append({**r, "arm": arm})
    table = pd.DataFrame(rows)
    summary = []
    for (method, arm), g in table.groupby(["method", "arm"]):
        summary.append({"method": method, "arm": arm, "subsets": len(g), "target_mean": float(g["target"].mean()),
                        "target_std": float(g["target"].std(ddof=0)), "suite_mean": float(g["suite_mean"].mean()),
                        "subsets_list": list(g["experts"])})
    print(pd.DataFrame(summary).drop(columns="subsets_list").to_string(index=False))
    table.to_csv(out / "selection_targets.csv", index=False)
    return summary


if __name__ == "__main__":
    sys.exit(main())
