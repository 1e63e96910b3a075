#!/usr/bin/env python
"""Evaluation throughput on the demo suite: a fresh process per job (``serial``) against long-lived workers
(``local``, 1 and 2 workers), the same models in the same run; a bare lm-eval ``simple_evaluate`` of the base as the
floor of one job; and the demo main job against that bare evaluation. Every part is paired (``paired.py``: the
cases run interleaved, round after round, each into an emptied output folder; ratios within each round, median
[min, max]; the load of other processes, LOADED figures marked); peak RSS (VmHWM) of each process case.

    python benchmarks/bench_eval_harness.py [--rounds 5]            # full demo family (cached), base + 5 experts
    python benchmarks/bench_eval_harness.py --quick                  # the quick family (3 experts)
    python benchmarks/bench_eval_harness.py --parts end-to-end       # the demo main job against one bare evaluation
    python benchmarks/bench_eval_harness.py --parts smollm2-settings --limit 8   # SmolLM2: smollm2_bf16 vs smollm2

Ratios printed: each mode's wall time over the per-process mode's (below 1 is faster: the long-lived speed-up is
its inverse; target >= 4x) and, for the end-to-end part, the demo main job (``sample_and_merge.py``, family cached)
over one bare ``simple_evaluate`` of the base (target <= 12x); for ``smollm2-settings``, one evaluation of the SmolLM2
base under the ``smollm2_bf16`` suite's settings over the same under the ``smollm2`` suite's (the built family's
base; ``--quick``: the quick family's), each in a fresh process with an evaluation worker's threads, timed whole and
inside (``evaluate_job``: the model's load and the scoring, without the imports).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from paired import Call, Process, measure, print_table

ROOT = Path(__file__).resolve().parent.parent
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


def evaluation(paths, out: Path, scores: dict, name: str, **options) -> Call:
    """One mode evaluating every model into an emptied folder; its scores kept to compare across modes."""
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions

    def run():
        shutil.rmtree(out, ignore_errors=True)
        summary = evaluate_models(paths, "demo", out, EvalOptions(**options))
        assert summary["ok"] == len(paths), summary
        scores[name] = {j: json.loads(Path(summary["store"], "results", f"{j}.json").read_text())["scores"]
                        for j in summary["index"].values()}
    return Call(run)


SMOLLM2_CHILD = """
import sys
from wildmerge.eval.jobs import make_job
from wildmerge.eval.suites import load_suite
from wildmerge.eval.worker import evaluate_job
from wildmerge.hub import resolve_path
suite = load_suite(sys.argv[1])
suite.settings.limit, suite.settings.device = int(sys.argv[2]), "cpu"
job = make_job(resolve_path("smollm2:base"), "benchmark", suite, suite.resolved_include_path(), False)
print(evaluate_job(job.to_dict())["scores"])
"""


def smollm2_settings(args) -> dict:
    """One SmolLM2 evaluation under the cheaper suite (``smollm2_bf16``) against the shipped one (``smollm2``)."""
    from wildmerge.eval.local import worker_envs

    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           **{k: v for k, v in worker_envs(None)[0].items() if k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}}
    if args.quick:
        env["WILDMERGE_SMOLLM2_QUICK"] = "1"
    print(f"SmolLM2 base, {args.limit} items per task, {env['OMP_NUM_THREADS']} thread(s), "
          f"load average {os.getloadavg()[0]:.1f}")
    cases = {name: Process(["-c", SMOLLM2_CHILD, name, str(args.limit)], env=env,
                           time_call="wildmerge.eval.worker:evaluate_job") for name in ("smollm2_bf16", "smollm2")}
    m = measure(cases, args.rounds, args.warmup)
    print_table(m, baseline="smollm2", keys=("wall", "evaluate_job"),
                title="## One SmolLM2 evaluation: smollm2_bf16 (bfloat16, batch 64) over smollm2 (float32, batch 16)")
    return m.as_dict()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the quick demo (or SmolLM2) family instead of the full one")
    p.add_argument("--models", type=int, default=6, help="how many models of the family (base first)")
    p.add_argument("--parts", nargs="+", default=["modes", "end-to-end"],
                   choices=["modes", "end-to-end", "smollm2-settings"])
    p.add_argument("--limit", type=int, default=8, help="smollm2-settings: items per task (8: about 20 s quiet)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the warm-up (paired.py)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", help="write every run (times, peak RSS, load samples) to this file")
    args = p.parse_args()
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    results = {"smollm2_settings": smollm2_settings(args)} if "smollm2-settings" in args.parts else {}
    if not set(args.parts) - {"smollm2-settings"}:  # the demo family is not needed
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return 0
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
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    bare = Process(["-c", BARE, paths[0], include, ",".join(tasks), suite.settings.dtype,
                    str(suite.settings.batch_size)], env=env)
    with tempfile.TemporaryDirectory() as tmp:
        if "modes" in args.parts:
            scores = {}
            cases = {"per process (serial)": evaluation(paths, Path(tmp) / "serial", scores, "serial",
                                                        executor="serial"),
                     "long-lived, 1 worker": evaluation(paths, Path(tmp) / "local1", scores, "local1",
                                                        executor="local", workers=1),
                     "long-lived, 2 workers": evaluation(paths, Path(tmp) / "local2", scores, "local2",
                                                         executor="local", workers=2)}
            if gpus:
                cases["long-lived, one per GPU"] = evaluation(paths, Path(tmp) / "gpus", scores, "gpus",
                                                              executor="local")
            m = measure(cases, args.rounds, args.warmup)
            print_table(m, baseline="per process (serial)",
                        title=f"## {len(paths)} models, every mode (wall time of the whole evaluation)")
            same = all(v == scores["serial"] for v in scores.values())
            print(f"scores identical across modes: {'yes' if same else 'NO'}")
            results["modes"] = {**m.as_dict(), "identical_scores": same}
        if "end-to-end" in args.parts:
            run_dir = Path(tmp) / "main-job"
            main_job = Process([str(ROOT / "sample_and_merge.py"), "--out", str(run_dir)], env=env, cwd=str(ROOT),
                               before=lambda: shutil.rmtree(run_dir, ignore_errors=True))
            m = measure({"demo main job (sample_and_merge.py)": main_job, "bare simple_evaluate of the base": bare},
                        args.rounds, args.warmup)
            print_table(m, baseline="bare simple_evaluate of the base",
                        title="## The demo main job against one bare lm-eval evaluation of its base (target <= 12x)")
            results["end_to_end"] = m.as_dict()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
