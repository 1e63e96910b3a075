#!/usr/bin/env python
"""Evaluation harness overhead: wildmerge jobs against a bare lm-eval ``simple_evaluate`` of the same models/tasks.

Both sides start a fresh Python process per model (the harness always does, to isolate GPU state), so the ratio
shows what the harness adds: fingerprinting, one ``simple_evaluate`` per task (own n-shot), the result record.
Also prints jobs per minute on the demo suite and peak RSS.

    python benchmarks/bench_eval_harness.py            # quick demo family (3 experts), demo suite
    python benchmarks/bench_eval_harness.py --full     # the full demo family (builds it first if needed)
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from wildmerge.memory import peak_rss_mib

BARE = """
import sys, json, lm_eval
from lm_eval.tasks import TaskManager
path, include, tasks, dtype, bs = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4], sys.argv[5]
tm = TaskManager(include_path=include, include_defaults=False)
out = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": path, "dtype": dtype}, device="cpu",
                              tasks=tasks, task_manager=tm, num_fewshot=0, batch_size=int(bs), bootstrap_iters=0,
                              log_samples=False)
print(json.dumps({t: out["results"][t] for t in tasks}, default=str))
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="the full demo family instead of the quick one")
    p.add_argument("--models", type=int, default=4, help="how many models of the family (base first)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if not args.full:
        os.environ["WILDMERGE_DEMO_QUICK"] = "1"
    from wildmerge.demo import resolve_demo_ref
    from wildmerge.eval.api import evaluate_models
    from wildmerge.eval.suites import load_suite

    suite = load_suite("demo")
    include = suite.resolved_include_path()
    experts = sorted(n for n in __import__("wildmerge.demo.family", fromlist=["x"]).ensure_family(
        quick=not args.full)["experts"])
    refs = (["demo:base"] + [f"demo:{e}" for e in experts])[: args.models]
    paths = [resolve_demo_ref(r) for r in refs]
    tasks = [t.task for t in suite.tasks]
    print(f"{len(paths)} models x {len(tasks)} demo tasks ({'full' if args.full else 'quick'} family), CPU")

    t0 = time.perf_counter()
    for path in paths:
        subprocess.run([sys.executable, "-c", BARE, path, include, ",".join(tasks), suite.settings.dtype,
                        str(suite.settings.batch_size)], check=True, capture_output=True)
    bare = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        summary = evaluate_models(paths, "demo", out)
        harness = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = evaluate_models(paths, "demo", out)
        rerun = time.perf_counter() - t0
    assert summary["ok"] == len(paths) and again["ran"] == 0, (summary, again)

    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    self_rss = peak_rss_mib()
    result = {
        "models": len(paths), "bare_s_per_model": bare / len(paths), "harness_s_per_job": harness / len(paths),
        "overhead_ratio": harness / bare, "jobs_per_minute": 60 * len(paths) / harness,
        "rerun_all_done_s": rerun, "peak_rss_child_mib": child_rss, "peak_rss_driver_mib": self_rss,
    }
    print(f"bare simple_evaluate (fresh process): {result['bare_s_per_model']:.1f} s/model")
    print(f"wildmerge job (fresh process):        {result['harness_s_per_job']:.1f} s/job")
    print(f"overhead ratio harness/bare:          {result['overhead_ratio']:.2f}x")
    print(f"jobs per minute (demo suite, serial): {result['jobs_per_minute']:.2f}")
    print(f"rerun with every job done:            {rerun:.1f} s")
    print(f"peak RSS: worker {child_rss:.0f} MiB, driver {self_rss:.0f} MiB")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
