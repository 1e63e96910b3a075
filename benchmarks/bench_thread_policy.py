"""The CPU thread policy (wildmerge/resources.py, plugins/linalg.py) against one thread, quiet, busy, and with a load
that starts during the call: the policy must never be more than 5 % slower than one thread, and faster where
threads pay. The policy decides only how many matrices run side by side: each is computed on one thread, so a
merge's bytes never depend on it.

Each run is a fresh process (OpenMP reads its wait policy when torch loads; wildmerge's processes ask for a passive
wait, and so do these) that times TSV-M, Iso-CTS and Iso-C on T task vectors of one square matrix, one kernel after
another, and reports each kernel's own time; runs are paired and interleaved by ``paired.py`` (ratios to ``one
thread`` within each round, medians with min and max, the load of other processes, LOADED figures marked). Cases:
- ``policy``: the default (no override);
- ``one thread``: ``WILDMERGE_LAPACK_THREADS=1``, the old default;
- ``all cores``: ``WILDMERGE_LAPACK_THREADS=<usable cores>``: every core side by side, whatever the load;
- ``policy, malloc kept``: the policy with glibc keeping freed blocks (a diagnosis: page faults are not the cost).
``--diagnose`` also prints, per kernel, the process's CPU seconds, minor page faults and involuntary context switches:
threads waiting at a barrier show as CPU seconds above one thread's.
Conditions (``--conditions``): ``quiet`` (as found), ``busy`` (one busy-loop process per usable core, started before
the runs) and ``starting`` (the same loops, started stopped before each kernel call and resumed ``--start-after``
seconds into it, so the timed process pays nothing for starting interpreters). The busy loops are this benchmark's
own: they do not make a figure LOADED; other processes' work does.

    python benchmarks/bench_thread_policy.py [--sizes 256 512 1024 2048 4096] [--tasks 6] [--rounds 5]
        [--cases policy 'one thread' 'all cores'] [--conditions quiet busy starting] [--kernels tsv_m iso_cts iso_c]
        [--diagnose]
"""

import argparse
import subprocess
import sys
import time

from paired import Process, measure, print_table

CHILD = r"""
import os, resource, sys, time
from wildmerge.threads import prefer_passive_wait
prefer_passive_wait()
import torch
from paired import StartingLoad, report_seconds
from wildmerge.plugins import spectral
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TSVMParams
iso_c, iso_cts, tsv_m = (IsoCParams.with_defaults(spectral.iso_c), IsoCTSParams.with_defaults(spectral.iso_cts),
                         TSVMParams.with_defaults(spectral.tsv_m))
size, tasks, busy, start_after = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
kernels = sys.argv[5].split(",")
g = torch.Generator().manual_seed(0)
deltas = [torch.randn(size, size, generator=g) * 0.01 for _ in range(tasks)]
for name, run in (("tsv_m", lambda: tsv_m(deltas)), ("iso_cts", lambda: iso_cts(deltas, 0.8)),
                  ("iso_c", lambda: iso_c(deltas))):
    if name not in kernels:
        continue
    with StartingLoad(busy, start_after):
        t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        run()
        report_seconds(name, time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_SELF)
    # what the call cost besides its time: CPU seconds of this process, minor page faults, involuntary switches
    report_seconds(f"{name} cpu", after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    report_seconds(f"{name} faults", after.ru_minflt - before.ru_minflt)
    report_seconds(f"{name} preempted", after.ru_nivcsw - before.ru_nivcsw)
"""

BUSY = "while True: pass\n"
KERNELS = ("tsv_m", "iso_cts", "iso_c")
CASES = ("policy", "one thread", "all cores", "policy, malloc kept")
COSTS = ("cpu", "faults", "preempted")  # what each child reports per kernel besides its time (--diagnose)
MALLOC_KEPT = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
               "MALLOC_TOP_PAD_": str(64 << 20)}


def cases(size, args, cores, starting_load):
    child = ["-c", CHILD, str(size), str(args.tasks), str(cores if starting_load else 0), str(args.start_after),
             ",".join(args.kernels)]
    passive = {"OMP_WAIT_POLICY": "PASSIVE"}
    every = {"policy": Process(child, env={"WILDMERGE_LAPACK_THREADS": None, **passive}, timeout=args.timeout),
            "one thread": Process(child, env={"WILDMERGE_LAPACK_THREADS": "1", **passive}, timeout=args.timeout),
            "all cores": Process(child, env={"WILDMERGE_LAPACK_THREADS": str(cores), **passive},
                                 timeout=args.timeout),
            # a diagnosis: glibc keeps freed blocks up to 32 MiB instead of returning them to the kernel, so the
            # threads do not fault fresh pages in (and contend for the address space's lock) on every matrix
            "policy, malloc kept": Process(child, env={"WILDMERGE_LAPACK_THREADS": None, **passive, **MALLOC_KEPT},
                                           timeout=args.timeout)}
    return {name: every[name] for name in CASES if name in args.cases}


def print_costs(m, kernels) -> None:
    """Medians per case of what each kernel cost besides its time: CPU seconds, minor faults, involuntary switches."""
    keys = [f"{k} {c}" for k in kernels for c in COSTS]
    print("| case | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for case in m.runs:
        cells = [m.median(case, key) for key in keys]
        print(f"| {case} | " + " | ".join("-" if v is None else f"{v:.3g}" for v in cells) + " |")


def main():
    from wildmerge.resources import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--conditions", nargs="+", default=["quiet", "busy", "starting"],
                    choices=["quiet", "busy", "starting"])
    ap.add_argument("--cases", nargs="+", default=["policy", "one thread", "all cores"],
                    choices=CASES, help="one thread, the baseline, always runs")
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS,
                    help="which kernels each run times (4096 x 4096 costs minutes a round on one thread)")
    ap.add_argument("--diagnose", action="store_true",
                    help="also print each kernel's CPU seconds, minor page faults and involuntary context switches")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--start-after", type=float, default=0.05, help="seconds into each call the load starts")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a run may take (a stalled run is cut)")
    args = ap.parse_args()
    args.cases = set(args.cases) | {"one thread"}
    cores = usable_cores()
    print(f"# thread policy: {cores} usable cores, every matrix on one thread; {args.tasks} task vectors "
          f"of each size, float32; per-kernel times reported by each run; ratios to one thread (target: policy "
          f"<= 1.05x everywhere, below 1 where threads pay)")
    for condition in args.conditions:
        for size in args.sizes:
            busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(cores)] \
                if condition == "busy" else []
            try:
                time.sleep(0.5 if busy else 0)
                m = measure(cases(size, args, cores, condition == "starting"), args.rounds, args.warmup)
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
            load = {"quiet": "no load of ours", "busy": f"{cores} busy loops of ours running",
                    "starting": f"{cores} busy loops of ours starting {args.start_after} s into each call"}[condition]
            print_table(m, baseline="one thread", keys=args.kernels, title=f"## {condition} ({load}), {size} x {size}")
            if args.diagnose:
                print_costs(m, args.kernels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
