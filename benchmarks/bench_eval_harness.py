#!/usr/bin/env python
"""Evaluation throughput on the demo suite: a fresh process per job (``serial``) against long-lived workers
(``local``, 1 and 2 workers), the same models in the same run; plus a bare lm-eval ``simple_evaluate`` per
process as the floor of the per-process mode, and peak RSS (VmHWM).

    python benchmarks/bench_eval_harness.py                 # full demo family (cached), base + 5 experts
    python benchmarks/bench_eval_harness.py --quick         # the quick family (3 experts)
    python benchmarks/bench_eval_harness.py --end-to-end    # also time `python sample_and_merge.py` (family cached)

Ratios printed: ``long_lived_*_speedup`` (jobs per minute against the per-process mode; target >= 4x) and, with
``--end-to-end``, ``main_job_x_bare`` (the demo main job against one bare ``simple_evaluate``; target <= 12x).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wildmerge.resources import peak_rss_mib

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


def timed_eval(paths, out, **options):
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions

    t0 = time.perf_counter()
    summary = evaluate_models(paths, "demo", out, EvalOptions(**options))
    seconds = time.perf_counter() - t0
    assert summary["ok"] == len(paths), summary
    return seconds, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick demo family instead of the full one")
    p.add_argument("--models", type=int, default=6, help="how many models of the family (base first)")
    p.add_argument("--end-to-end", action="store_true", help="also time sample_and_merge.py on the cached family")
    p.add_argument("--no-bare", action="store_true", help="skip the bare simple_evaluate floor")
    args = p.parse_args()
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    if args.quick:
        os.environ["WILDMERGE_DEMO_QUICK"] = "1"
    from wildmerge.families.demo import resolve_demo_ref
    from wildmerge.families.demo.family import ensure_family
    from wildmerge.eval.local import worker_envs
    from wildmerge.eval.suites import load_suite

    suite = load_suite("demo")
    include = suite.resolved_include_path()
    experts = sorted(ensure_family(quick=args.quick)["experts"])
    paths = [resolve_demo_ref(r) for r in (["demo:base"] + [f"demo:{e}" for e in experts])[: args.models]]
    tasks = [t.task for t in suite.tasks]
    gpus = [e.get("CUDA_VISIBLE_DEVICES") for e in worker_envs(None) if e.get("CUDA_VISIBLE_DEVICES")]
    where = f"{len(gpus)} GPU(s)" if gpus else f"CPU, {len(os.sched_getaffinity(0))} cores"
    print(f"{len(paths)} models x {len(tasks)} demo tasks ({'quick' if args.quick else 'full'} family), {where}, "
          f"load average {os.getloadavg()[0]:.1f}")
    result = {"models": len(paths), "where": where, "load_average_start": os.getloadavg()[0]}

    if not args.no_bare:
        t0 = time.perf_counter()
        for path in paths:
            subprocess.run([sys.executable, "-c", BARE, path, include, ",".join(tasks), suite.settings.dtype,
                            str(suite.settings.batch_size)], check=True, capture_output=True)
        result["bare_s_per_model"] = (time.perf_counter() - t0) / len(paths)
    modes = {"per_process": dict(executor="serial"), "long_lived_1": dict(executor="local", workers=1),
             "long_lived_2": dict(executor="local", workers=2)}
    if gpus:
        modes["long_lived_per_gpu"] = dict(executor="local")
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in modes.items():
            seconds, summary = timed_eval(paths, Path(tmp) / name, **options)
            result[f"{name}_jobs_per_min"] = 60 * len(paths) / seconds
            scores[name] = {j: json.loads(Path(summary["store"], "results", f"{j}.json").read_text())["scores"]
                            for j in summary["index"].values()}
        t0 = time.perf_counter()
        again, _ = timed_eval(paths, Path(tmp) / "long_lived_1", executor="local", workers=1)
        result["rerun_all_done_s"] = again
    result["identical_scores"] = all(s == scores["per_process"] for s in scores.values())
    for name in modes:
        if name != "per_process":
            result[f"{name}_speedup"] = result[f"{name}_jobs_per_min"] / result["per_process_jobs_per_min"]
    result["peak_rss_child_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    result["peak_rss_driver_mib"] = peak_rss_mib()
    result["load_average_end"] = os.getloadavg()[0]

    if args.end_to_end:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "sample_and_merge.py", "--out", str(Path(tmp) / "run")], check=True,
                           cwd=Path(__file__).resolve().parent.parent, capture_output=True)
            result["sample_and_merge_s"] = time.perf_counter() - t0
        if "bare_s_per_model" in result:  # target: within 12x one bare simple_evaluate of the base
            result["main_job_x_bare"] = result["sample_and_merge_s"] / result["bare_s_per_model"]

    for key, value in result.items():
        print(f"{key:28s} {value:.2f}" if isinstance(value, float) else f"{key:28s} {value}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
