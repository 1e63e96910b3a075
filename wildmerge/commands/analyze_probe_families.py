"""``wildmerge analyze probe-families RUN RUN ... --suite S``: the fresh-head probe's tables over model seeds, each
run a family trained from its own seed and probed against its own joint reference (the fresh-head probe paper,
Tables 5 and 6)."""

import argparse

HELP = "fresh-head probe over model seeds: runs of families built from different seeds, each with its own J"
DESCRIPTION = ("Reads each run's probe record (RUN/probe/<suite>/probe.json, made by `wildmerge analyze probe RUN "
               "--suite S --reference J` with the run's own family's joint reference J) and writes the per-seed table "
               "(N, FH, J, R = (FH - N) / (J - N)) and mean ± SD over the seeds (ddof = 1) with R (ratio of means), as "
               "the fresh-head probe paper's Tables 5 (model seeds) and 6 (random partitions: the runs of one "
               "partition). Demo families of another seed: WILDMERGE_DEMO_SEED; partition families: "
               "WILDMERGE_DEMO_PARTITION=random:SEED:T (scripts/probe_families_demo.sh runs both).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="+", help="run folders, one per model seed (each probed with its family's joint J)")
    p.add_argument("--suite", required=True, help="the suite the runs were probed on (demo families: demo_probe)")
    p.add_argument("--out", required=True, help="output folder: families.md / .csv / .json, families_summary.csv")


def run(args) -> int:
    from wildmerge.analysis.probe.families import probe_over_families, write_families
    from wildmerge.eval.suites import load_suite

    suite = load_suite(args.suite).name
    per_seed, summary = probe_over_families(args.run, suite)
    for path in write_families(per_seed, summary, args.out, args.run):
        print(f"wrote {path}")
    return 0
