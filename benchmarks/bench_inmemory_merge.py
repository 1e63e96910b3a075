"""In-memory merges of the K = 12 anchor (``merging.inmemory.CandidateMerger``, what sweeps and the guided search
run): every tensor handed to the method in one call, so that wildmerge's methods merge the large matrices side by
side (``plugins/task_vector_method.groups_side_by_side``), against one tensor per call (how the merger called them
before, and how ``mergekit-yaml``'s executor calls every method).

Each run is a fresh process that loads the base and the experts once (not timed), then merges each method once and
reports each merge's own time; runs are paired and interleaved by ``paired.py`` (ratios to ``one tensor per call``
within each round, medians with min and max, the load of other processes). Conditions: ``quiet`` and ``starting``
(one busy loop per usable core, resumed ``--start-after`` seconds into each merge: a load that starts during the
call). Peak RSS is the process's, loading included.

    python benchmarks/bench_inmemory_merge.py [--methods iso_c ta_sb tsv_m iso_cts] [--experts 12] [--rounds 5]
        [--conditions quiet starting]
"""

import argparse
import os
import tempfile
from pathlib import Path

from bench_merge_methods import build_anchor
from paired import Process, measure, print_table

CHILD = r"""
import sys, time
import torch
from paired import StartingLoad, report_seconds
from bench_merge_methods import recipe
from wildmerge.merging.inmemory import CandidateMerger
from wildmerge.plugins.trim import linear_time_trim
way, busy, start_after, methods, base, experts = (sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                                                  sys.argv[4].split(","), sys.argv[5], sys.argv[6:])
merger = CandidateMerger(base, {e: e for e in experts})

def one_tensor_per_call(r):
    # the merger's loop before this change: one TensorGroup per call, as mergekit's executor calls a method
    method, parameters = merger.method(r), merger.bound_parameters(r)
    with linear_time_trim(), torch.no_grad():
        return {name: method([merger._group(name)], parameters=parameters, dtype=torch.float32,
                             out_dtype=base_tensor.dtype)[0] for name, base_tensor in merger.base.items()}

for name in methods:
    r = recipe(name, base, experts)
    with StartingLoad(busy, start_after):
        t = time.perf_counter()
        merged = merger.merge(r) if way == "all" else one_tensor_per_call(r)
        report_seconds(name, time.perf_counter() - t)
    del merged
"""

CASES = {"one tensor per call": "one", "all tensors in one call": "all"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", nargs="+", default=["iso_c", "ta_sb"])
    ap.add_argument("--experts", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=640)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "wildmerge-bench-anchor"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--conditions", nargs="+", default=["quiet", "starting"], choices=["quiet", "starting"])
    ap.add_argument("--start-after", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    if args.rounds < 5:
        print(f"note: {args.rounds} rounds is a trial; a figure needs at least 5")
    base, experts, n_params = build_anchor(Path(args.workdir), args.experts, args.hidden, args.layers)
    cores = len(os.sched_getaffinity(0))
    print(f"# anchor: {n_params / 1e6:.1f}M parameters, {len(experts)} experts, float32, merged in memory on the "
          f"CPU; {cores} usable cores")
    for condition in args.conditions:
        busy = cores if condition == "starting" else 0
        cases = {case: Process(["-c", CHILD, way, str(busy), str(args.start_after), ",".join(args.methods), base,
                                *experts], timeout=args.timeout)
                 for case, way in CASES.items()}
        m = measure(cases, args.rounds, args.warmup)
        what = {"quiet": "as found",
                "starting": f"{cores} busy loops of ours resumed {args.start_after} s into each merge"}[condition]
        print_table(m, baseline="one tensor per call", keys=tuple(args.methods),
                    title=f"## {condition} ({what}): each method's in-memory merge, seconds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
