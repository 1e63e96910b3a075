#!/usr/bin/env python
"""Which lm-eval settings cut a SmolLM2 model's evaluation while keeping its scores.

For each candidate setting, the base and the experts of the quick SmolLM2 family are scored item by item on the
suite's nine tasks (the same held-out test items as the ``smollm2`` suite; 50 per task, taken from the large
variant's item files because the quick family's own files hold 8) under the current setting and the candidate.
Reported per model: the paired difference of the suite mean (candidate - current, in points) with its 95 %
interval (``screening.stats.paired_interval``: a paired bootstrap over items within each task), and how many
items flip (scored 1 under one setting and 0 under the other). Work is counted, not timed (the machine is shared):
forward calls and the token positions they compute (rows x padded length, log-likelihood and generation apart),
read by a forward hook on the model.

    python benchmarks/experiment_smollm2_eval_settings.py --limit 50 --json results.json
    python benchmarks/experiment_smollm2_eval_settings.py --limit 2 --settings current bf16    # a rehearsal
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# name -> (dtype, batch size, torch threads or None for the process's own, extra model_args)
SETTINGS = {
    "current": ("float32", 16, None, {}),
    "float32-b64": ("float32", 64, None, {}),
    "float32-1thread": ("float32", 16, 1, {}),
    "bf16": ("bfloat16", 16, None, {"softmax_dtype": "float32"}),
    "bf16-b64": ("bfloat16", 64, None, {"softmax_dtype": "float32"}),
}


class WorkCounter:
    """Forward calls and token positions (rows x length of each call's input) of one model, by phase."""

    def __init__(self, model):
        self.phase, self.counts = "loglikelihood", {}
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        c = self.counts.setdefault(self.phase, {"calls": 0, "positions": 0})
        c["calls"] += 1
        c["positions"] += int(ids.shape[0] * ids.shape[1])


def build(path: str, setting: str):
    from lm_eval.api.registry import get_model

    dtype, batch, threads, extra = SETTINGS[setting]
    import torch

    torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    lm = get_model("hf").create_from_arg_obj({"pretrained": path, "dtype": dtype, **extra},
                                             {"batch_size": batch, "device": "cpu"})
    counter = WorkCounter(lm.model)
    generate = lm.generate_until

    def counted_generate(requests, *a, **k):
        counter.phase = "generation"
        try:
            return generate(requests, *a, **k)
        finally:
            counter.phase = "loglikelihood"
    lm.generate_until = counted_generate
    return lm, counter


def score(path: str, setting: str, tasks, tm, limit: int) -> dict:
    """Per-item scores of every task (document order) and the work counted, for one model under one setting."""
    import lm_eval

    from wildmerge.eval.worker import item_scores

    lm, counter = build(path, setting)
    out = lm_eval.simple_evaluate(model=lm, tasks=[t for t, _ in tasks], num_fewshot=0, task_manager=tm,
                                  limit=limit, bootstrap_iters=0, log_samples=True)
    items = {task: item_scores(out["samples"], task, metric) for task, metric in tasks}
    return {"items": items, "work": counter.counts}


def compare(new: dict, ref: dict) -> dict:
    """Candidate against current on the same items: the suite-mean difference with its interval, and flips."""
    from wildmerge.eval.screening.stats import paired_interval

    a = {t: np.asarray(v) for t, v in new.items()}
    b = {t: np.asarray(v) for t, v in ref.items()}
    diff, low, high = paired_interval(a, b, {t: np.arange(len(v)) for t, v in b.items()})
    flips = {t: int(np.sum(a[t] != b[t])) for t in b}
    return {"points": 100 * diff, "low": 100 * low, "high": 100 * high, "flips": sum(flips.values()),
            "items": sum(len(v) for v in b.values()), "flips_by_task": {t: n for t, n in flips.items() if n}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=50, help="items per task")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS),
                   help="the first is the reference")
    p.add_argument("--models", nargs="+", default=None, help="model names of the quick family (default: all)")
    p.add_argument("--json", help="write the items, work and comparisons here")
    p.add_argument("--also", nargs="*", default=[], help="JSON files of earlier runs of this script (same --limit): "
                   "their runs are used, not made again")
    args = p.parse_args()
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(var, "1")
    os.environ["WILDMERGE_SMOLLM2_QUICK"] = "1"
    from wildmerge.eval.suites import load_suite
    from wildmerge.eval.worker import task_manager
    from wildmerge.families.smollm2.family import ensure_family

    suite = load_suite("smollm2_large")  # the smollm2 suite's tasks over the large item files (same first items)
    tasks = [(t.task, t.metric) for t in suite.tasks]
    tm = task_manager(suite.resolved_include_path(), False)
    family = ensure_family(quick=True)
    models = {"base": family["base"], **family["experts"]}
    names = args.models or list(models)
    unknown = sorted(set(names) - set(models))
    if unknown:
        raise SystemExit(f"--models {unknown}: the quick family has {sorted(models)}")
    results = {"limit": args.limit, "settings": {s: SETTINGS[s] for s in args.settings}, "runs": {}, "compare": {}}
    for other in args.also:  # runs already made (e.g. one model per process, in parallel) are not made again
        earlier = json.loads(Path(other).read_text())
        if earlier["limit"] != args.limit:
            raise SystemExit(f"{other} was made with --limit {earlier['limit']}, not {args.limit}")
        results["runs"].update(earlier["runs"])
    for name in names:
        for setting in args.settings:
            if f"{name}/{setting}" in results["runs"]:
                continue
            print(f"scoring {name} under {setting} ...", flush=True)
            results["runs"][f"{name}/{setting}"] = score(str(models[name]), setting, tasks, tm, args.limit)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    ref = args.settings[0]
    print(f"\n{len(names)} models x {len(tasks)} tasks x {args.limit} items; difference to '{ref}' "
          f"(points of the suite mean, 95 % paired-bootstrap interval) and flipped items")
    for setting in args.settings[1:]:
        for name in names:
            c = compare(results["runs"][f"{name}/{setting}"]["items"], results["runs"][f"{name}/{ref}"]["items"])
            results["compare"][f"{name}/{setting}"] = c
            print(f"{setting:>16} {name:>11}: {c['points']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}], "
                  f"{c['flips']} of {c['items']} items flip {c['flips_by_task'] or ''}")
    print("\nwork counted (forward calls, token positions computed), per model:")
    for key, run in results["runs"].items():
        print(f"{key:>28}: " + "; ".join(f"{ph} {w['calls']} calls, {w['positions']} positions"
                                         for ph, w in sorted(run["work"].items())))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
