"""``wildmerge analyze tas GRID GRID ...``: one grid's TAS curves from several ``wildmerge tune`` runs on one axis."""

import argparse

from wildmerge.run import default_out

HELP = "TAS curves of one grid tuned on different data, min-max scaled on one axis (1 against 50 batches)"
DESCRIPTION = ("Reads each grid folder written by `wildmerge tune` (GRID/candidates/*.json) and draws their mean TAS "
               "against the swept value, each min-max scaled, on one axis: the reality-check paper's Fig. 10 (one "
               "batch against 50 batches per task give almost the same curve) when the runs differ in --samples "
               "(the sweep reads 32 samples per batch). Writes tas_batches.csv and tas_batches.png / .svg.")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("grids", nargs="+", metavar="GRID", help="grid folders of `wildmerge tune` runs, e.g. "
                                                             "runs/tune-demo/ta_lambda (at least two)")
    p.add_argument("--out", default=str(default_out("tas")), help="output folder (default: %(default)s)")
    p.add_argument("--distance", default="l2", choices=("l2", "l1", "cosine", "kl"),
                   help="which distance's TAS to draw (default l2, the paper's)")


def run(args) -> int:
    from wildmerge.analysis.tas.figures import write_batches
    from wildmerge.errors import ConfigError

    if len(args.grids) < 2:
        raise ConfigError("give at least two grid folders to draw together (e.g. the same grid tuned with "
                          "--samples 32 and --samples 256)")
    for path in write_batches(args.grids, args.out, args.distance):
        print(f"wrote {path}")
    return 0
