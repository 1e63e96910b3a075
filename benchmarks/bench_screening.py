#!/usr/bin/env python
"""Screening replayed on a run scored on every item (``wildmerge sample --record-items`` or ``wildmerge eval
--record-items``): the fraction of the merges' item evaluations saved and whether any Table 1 cell changes. With
zero-shot tasks the replay makes the same decisions as a live ``--screen`` run (the same items, the same
bootstrap draws), so it measures the live rule on a run that was scored once.

    python benchmarks/bench_screening.py RUN [--suite demo] [--fractions 0.1,0.2,0.3]
"""

import argparse
import json
import sys

import numpy as np

from wildmerge.eval.screening.stats import simulate
from wildmerge.eval.store import OK, ResultStore
from wildmerge.run import RunFolder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--suite", default="demo")
    p.add_argument("--fractions", default="0.1,0.2,0.3")
    p.add_argument("--iters", type=int, default=1000)
    args = p.parse_args()
    run = RunFolder(args.run)
    store = ResultStore(run.eval_dir(args.suite))
    index = store.index().models
    base, experts, merges = None, {}, {}
    for e in run.read_plan().entries:
        record = store.load(index.get(e.model_id, "")) if e.model_id in index else {"status": "missing"}
        if record["status"] != OK or "items" not in record:
            print(f"skipped {e.model_id}: {record['status']}, {'no per-item scores' if record['status'] == OK else ''}")
            continue
        items = {t: np.asarray(v, dtype=np.float64) for t, v in record["items"].items()}
        if e.kind == "base":
            base = items
        elif e.kind == "expert":
            experts[e.model_id] = items
        else:
            merges[e.model_id] = {"items": items, "cell": (e.method, e.n)}
    lacking = [what for what, have in (("the base", base is not None), ("an expert", experts), ("a merge", merges))
               if not have]
    if lacking:
        sys.exit(f"bench_screening: {run.root} has no per-item scores on suite {args.suite!r} for "
                 f"{', '.join(lacking)}; replaying screening needs them: score the run with `wildmerge eval "
                 f"{run.root} --suite {args.suite} --record-items` (jobs without per-item scores are run again)")
    print(f"{len(merges)} merges, {len(experts)} experts, {sum(len(v) for v in base.values())} items per model")
    out = {}
    for fraction in (float(f) for f in args.fractions.split(",")):
        result = simulate(merges, base, experts, fraction, iters=args.iters)
        out[fraction] = {"saved": result["saved"], "stopped": result["stopped"], "sign_changes": result["sign_changes"],
                         "P_moves": result["P_moves"], "cells": len(result["cells"])}
        print(f"fraction {fraction:.2f}: {result['stopped']} of {len(merges)} merges stopped, "
              f"{100 * result['saved']:.1f} % of item evaluations saved; "
              f"{len(result['sign_changes'])} of {len(result['cells'])} Table 1 cells change the sign of D "
              f"{result['sign_changes']}; P moves by more than one subset in {result['P_moves']}")
    print(json.dumps({str(k): v for k, v in out.items()}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
