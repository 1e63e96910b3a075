"""The CPU thread policy (wildmerge/resources.py) against the old default (one thread), quiet and loaded, in one run.

Each case runs in a fresh process (OpenMP reads its wait policy when torch loads): TSV-M and Iso-CTS on T task
vectors of one square matrix, and Iso-C's one SVD, repeated ``--reps`` times (best time kept). Cases:
- ``old``: ``WILDMERGE_LAPACK_THREADS=1`` (the old default);
- ``policy``: the new default (no override; ``OMP_WAIT_POLICY=PASSIVE``, as wildmerge's own processes set it);
- ``all cores``: the policy's choice on a quiet machine forced (``WILDMERGE_LAPACK_THREADS=<usable cores>``,
  passive wait), to show what a quiet machine gains;
- ``all cores, spinning``: the same with OpenMP's default (spinning) wait: why the policy is needed.
Conditions: as found (``quiet``: other users' load is printed; on a shared machine it is approximate) and
``loaded`` (one busy-loop process per usable core but one, at least one). Prints seconds, the ratio
old / case (above 1: faster than the old default), peak RSS and the threads the policy chose.

    python benchmarks/bench_thread_policy.py [--size 768] [--tasks 6] [--reps 3]
"""

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time
from wildmerge.resources import kernel_threads, peak_rss_mib
import torch
from wildmerge.plugins import spectral
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TSVMParams
iso_c, iso_cts, tsv_m = (IsoCParams.with_defaults(spectral.iso_c), IsoCTSParams.with_defaults(spectral.iso_cts),
                         TSVMParams.with_defaults(spectral.tsv_m))
size, tasks, reps = map(int, sys.argv[1:4])
g = torch.Generator().manual_seed(0)
deltas = [torch.randn(size, size, generator=g) * 0.01 for _ in range(tasks)]
threads = kernel_threads()
best = {}
for name, run in (("tsv_m", lambda: tsv_m(deltas)), ("iso_cts", lambda: iso_cts(deltas, 0.8)),
                  ("iso_c", lambda: iso_c(deltas))):
    for _ in range(reps):
        t = time.perf_counter(); run(); dt = time.perf_counter() - t
        best[name] = min(best.get(name, dt), dt)
print(json.dumps({"seconds": best, "threads": threads, "peak_rss_mib": round(peak_rss_mib())}))
"""

BUSY = "import time\nwhile True: pass\n"


def case_env(name: str, cores: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("WILDMERGE_LAPACK_THREADS", "OMP_WAIT_POLICY")}
    if name == "old":
        env["WILDMERGE_LAPACK_THREADS"] = "1"
    elif name == "policy":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif name == "all cores":
        env.update(WILDMERGE_LAPACK_THREADS=str(cores), OMP_WAIT_POLICY="PASSIVE")
    elif name == "all cores, spinning":
        env["WILDMERGE_LAPACK_THREADS"] = str(cores)
    return env


def run_case(name, cores, args, timeout):
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.size), str(args.tasks), str(args.reps)],
                             env=case_env(name, cores), capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    from wildmerge.resources import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=768)
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=240, help="seconds a case may take (a stalled case is cut)")
    args = ap.parse_args()
    cores = usable_cores()
    print(f"usable cores {cores}; {args.tasks} task vectors of {args.size} x {args.size} float32; best of {args.reps}")
    cases = ["old", "policy", "all cores", "all cores, spinning"]
    for condition in ("quiet", "loaded"):
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(max(1, cores - 1))] \
            if condition == "loaded" else []
        try:
            time.sleep(1 if busy else 0)
            load = os.getloadavg()[0]
            print(f"\n## {condition}: load average {load:.2f} on {cores} cores"
                  + (f" ({len(busy)} busy-loop process(es) of ours)" if busy else " (other users' work only)"))
            print("| case | threads | tsv_m s | iso_cts s | iso_c s | old / case (tsv_m, iso_cts, iso_c) | peak RSS MiB |")
            print("|---|---|---|---|---|---|---|")
            results = {c: run_case(c, cores, args, args.timeout) for c in cases}
            old = results["old"]
            for c, r in results.items():
                if r is None:
                    print(f"| {c} | - | > {args.timeout:.0f} s (cut) | | | | |")
                    continue
                s = r["seconds"]
                ratios = ", ".join(f"{old['seconds'][k] / s[k]:.2f}x" for k in ("tsv_m", "iso_cts", "iso_c"))
                print(f"| {c} | {r['threads']} | {s['tsv_m']:.2f} | {s['iso_cts']:.2f} | {s['iso_c']:.2f} | {ratios} "
                      f"| {r['peak_rss_mib']} |")
        finally:
            for p in busy:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
