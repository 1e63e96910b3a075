"""How long the demo family takes to build, how much memory it needs, and how fast a cached family is reused.

Budget: the full family builds in at most 10 minutes on 2 CPU cores within 4 GiB of RAM.
Each build runs in a fresh process so its peak RSS is its own; the cases run interleaved, round after round
(``paired.py``: ratios to the quick build within each round, median [min, max], the load of other processes, LOADED
figures marked), each build into an emptied cache folder of its own, the reuse into the full build's. Timed whole
(``wall``), as the build call alone (``build``) and as the build's CPU time (``cpu``).

    python benchmarks/bench_demo_build.py [--rounds 5]   # quick + full build, then cached reuse
    python benchmarks/bench_demo_build.py --quick-only
"""

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from paired import Process, measure, print_table

CHILD = """
import sys, time
from paired import report_seconds
from wildmerge.families.demo.family import ensure_family
t0, c0 = time.perf_counter(), time.process_time()
ensure_family(sys.argv[1], seed=int(sys.argv[2]), quick=sys.argv[3] == "1", threads=int(sys.argv[4]), progress=False)
report_seconds("build", time.perf_counter() - t0)
report_seconds("cpu", time.process_time() - c0)
"""


def build(cache: Path, seed: int, quick: bool, threads: int, fresh: bool) -> Process:
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WILDMERGE_DEMO_QUICK": "",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    return Process(["-c", CHILD, str(cache), str(seed), "1" if quick else "0", str(threads)], env=env,
                   before=(lambda: shutil.rmtree(cache, ignore_errors=True)) if fresh else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick-only", action="store_true")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds after the warm-up (paired.py)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--cache", help="parent of the cache folders (default: a fresh temporary folder)")
    args = ap.parse_args()
    root = Path(args.cache or tempfile.mkdtemp(prefix="bench_demo_"))
    print(f"caches under {root}; cores visible {os.cpu_count()}")
    cases = {"quick build": build(root / "quick", args.seed, True, args.threads, fresh=True)}
    if not args.quick_only:
        cases["full build"] = build(root / "full", args.seed, False, args.threads, fresh=True)
        cases["full cached reuse"] = build(root / "full", args.seed, False, args.threads, fresh=False)
    m = measure(cases, args.rounds, args.warmup)
    print_table(m, baseline="quick build", keys=("wall", "build", "cpu"))
    if "full build" in cases:
        wall = m.median("full build", "build")
        peak = max(r.peak_rss_mib or 0 for r in m.runs["full build"])
        ok = wall <= 600 and peak <= 4096
        print(f"\nbudget (<= 600 s wall, <= 4096 MiB): {'within' if ok else 'OVER'} (median {wall:.0f} s, "
              f"peak {peak:.0f} MiB{', LOADED' if m.loaded('full build') else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
