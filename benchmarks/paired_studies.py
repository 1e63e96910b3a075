"""Paired bootstrap intervals for the papers' studies on run folders scored with ``--record-items`` (every model
scored on the same items, so every difference is paired; ``eval.screening.stats.paired_interval``: items resampled
within each task, 95 % percentile interval, Koehn 2004).

- ``models RUN --reference MODEL_ID``: each model of the run against one of its models (a sweep's points against
  the recipe's point, a CoM ablation against the full method, ...). With several runs (the same study on other
  subsets of experts), each model id every run holds against the reference, pooled: the mean over the runs of the
  suite-mean differences, each run's tasks resampled on their own.
- ``cells RUN_A RUN_B``: per (method, n), the mean over RUN_A's merges of that cell against the mean over RUN_B's
  (norm-balanced against norm-unbalanced subsets: per-item scores averaged over the cell's subsets first).

Prints one line per comparison, differences and bounds in points of the suite mean.
"""

import argparse
import sys
from collections import defaultdict

import numpy as np

from wildmerge.eval.screening.stats import paired_interval, suite_score
from wildmerge.eval.store import OK, ResultStore
from wildmerge.run import RunFolder


def scored(run_dir: str, suite: str):
    """[(plan entry, {task: per-item scores})] of every model of the run with per-item scores."""
    run = RunFolder(run_dir)
    store = ResultStore(run.eval_dir(suite))
    index = store.index().models
    out = []
    for e in run.read_plan().entries:
        record = store.load(index[e.model_id]) if e.model_id in index else {"status": "missing"}
        if record["status"] == OK and "items" in record:
            out.append((e, {t: np.asarray(v, dtype=np.float64) for t, v in record["items"].items()}))
    if not out:
        sys.exit(f"paired_studies: {run_dir} has no per-item scores on suite {suite!r}; score it with "
                 f"`wildmerge eval {run_dir} --suite {suite} --record-items`")
    return out


def every(items):
    return {t: np.arange(len(v)) for t, v in items.items()}


def line(name: str, a, b, iters: int) -> str:
    d, lo, hi = (100 * x for x in paired_interval(a, b, every(b), iters=iters))
    return f"{name:48s} {100 * suite_score(a):7.2f} vs {100 * suite_score(b):7.2f}  diff {d:+6.2f} [{lo:+6.2f}, {hi:+6.2f}]"


def cell_means(models):
    """{(method, n): mean per-item scores over the cell's merges, and how many merges}."""
    cells = defaultdict(list)
    for e, items in models:
        if e.kind == "merge":
            cells[(e.method, e.n)].append(items)
    return {k: ({t: np.mean([m[t] for m in v], axis=0) for t in v[0]}, len(v)) for k, v in cells.items()}


def pooled(runs):
    """One run's {model id: items} as it is; several runs' pooled over the model ids all of them hold, each run's
    tasks kept apart (``RUN_INDEX/task``), so the suite mean is the mean over the runs of their suite means."""
    if len(runs) == 1:
        return runs[0]
    shared = [m for m in runs[0] if all(m in r for r in runs[1:])]
    return {m: {f"{i}/{t}": v for i, r in enumerate(runs) for t, v in r[m].items()} for m in shared}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("models", "cells"))
    p.add_argument("runs", nargs="+")
    p.add_argument("--reference", help="models: the model id every other model is compared with")
    p.add_argument("--suite", default="demo")
    p.add_argument("--iters", type=int, default=1000)
    args = p.parse_args()
    if args.mode == "models":
        models = pooled([dict((e.model_id, items) for e, items in scored(r, args.suite)) for r in args.runs])
        if args.reference not in models:
            sys.exit(f"paired_studies: --reference {args.reference!r} has no per-item scores in "
                     f"{' and '.join(args.runs)}; pick one of {sorted(models)}")
        if len(args.runs) > 1:
            print(f"pooled over {len(args.runs)} runs: the models every run holds")
        for model_id, items in models.items():
            if model_id != args.reference:
                print(line(f"{model_id} - {args.reference}", items, models[args.reference], args.iters))
        return 0
    if len(args.runs) != 2:
        sys.exit("paired_studies: cells compares two runs: RUN_A RUN_B")
    a, b = (cell_means(scored(r, args.suite)) for r in args.runs)
    for key in sorted(set(a) & set(b)):
        (ia, na), (ib, nb) = a[key], b[key]
        print(line(f"{key[0]} n={key[1]} ({na} vs {nb} merges)", ia, ib, args.iters))
    return 0


if __name__ == "__main__":
    sys.exit(main())
