"""How long the demo family takes to build, how much memory it needs, and how fast a cached family is reused.

Budget: the full family builds in at most 10 minutes on 2 CPU cores within 4 GiB of RAM.
Each build runs in a fresh subprocess so its peak RSS is its own. Baseline: the quick build in the same run;
ratios are against it. On a shared machine, wall time depends on the load: CPU time is printed too.

    python benchmarks/bench_demo_build.py            # quick + full build, then cached reuse
    python benchmarks/bench_demo_build.py --quick-only
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from wildmerge.resources import peak_rss_mib

CHILD = """
import json, sys, time
from wildmerge.families.demo.family import ensure_family
from wildmerge.resources import peak_rss_mib
t0, c0 = time.perf_counter(), time.process_time()
info = ensure_family(sys.argv[1], seed=int(sys.argv[2]), quick=sys.argv[3] == "1", threads=int(sys.argv[4]),
                     progress=sys.argv[5] == "1")
print("RESULT " + json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
      "peak_rss_mib": peak_rss_mib(), "root": info["root"]}))
"""


def run_child(cache, seed, quick, threads, progress) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WILDMERGE_DEMO_QUICK="")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cache), str(seed), "1" if quick else "0", str(threads),
                           "1" if progress else "0"], env=env, stdout=subprocess.PIPE, text=True, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    result["process_wall_s"] = time.perf_counter() - start  # with interpreter start and imports
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick-only", action="store_true")
    ap.add_argument("--cache", help="cache folder (default: a fresh temporary folder, so nothing is reused)")
    args = ap.parse_args()
    cache = args.cache or tempfile.mkdtemp(prefix="bench_demo_")
    print(f"cache {cache}; cores visible {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}")

    rows = {"quick build": run_child(cache, args.seed, True, args.threads, False)}
    if not args.quick_only:
        rows["full build"] = run_child(cache, args.seed, False, args.threads, True)
        rows["full cached reuse"] = run_child(cache, args.seed, False, args.threads, False)
    base = rows["quick build"]["wall_s"]
    print(f"\n{'step':<20}{'wall s':>10}{'cpu s':>10}{'process s':>11}{'peak RSS MiB':>14}{'x quick':>9}")
    for name, r in rows.items():
        print(f"{name:<20}{r['wall_s']:>10.1f}{r['cpu_s']:>10.1f}{r['process_wall_s']:>11.1f}"
              f"{r['peak_rss_mib']:>14.0f}{r['wall_s'] / base:>9.2f}")
    if "full build" in rows:
        full = rows["full build"]
        ok = full["wall_s"] <= 600 and full["peak_rss_mib"] <= 4096
        print(f"\nbudget (<= 600 s wall, <= 4096 MiB): {'within' if ok else 'OVER'} "
              f"(load average now {os.getloadavg()[0]:.2f}; this process {peak_rss_mib():.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
