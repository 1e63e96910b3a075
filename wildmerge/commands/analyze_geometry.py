"""``wildmerge analyze geometry --pool NAME``: how the experts' task vectors relate, before merging anything."""

import argparse
from pathlib import Path

from wildmerge.commands.options import number_type
from wildmerge.numbers import Range
from wildmerge.run import default_out


HELP = "pairwise cosine similarity of task vectors, per model and per layer"
DESCRIPTION = ("Pairwise cosine similarity of the experts' task vectors (whole model) and, per pair, the number of "
               "layers with positive / negative cosine (Hitit et al., arXiv 2511.21437, Figs. 19-26).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", default="demo", help="pool name or YAML path (default: demo)")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--out", help="output folder (default: runs/analysis-<pool>/geometry)")
    p.add_argument("--tolerance", type=number_type(Range(low=0, high=1, high_open=True), "cosine_tolerance"),
                   default=None,
                   help="a layer whose |cosine| is at most this counts as neither positive nor negative "
                        "(default 1e-6)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")


def run(args) -> int:
    from wildmerge.analysis.pool.geometry import ZERO_COSINE_TOLERANCE, task_vector_geometry, write_geometry
    from wildmerge.pools import resolve

    tolerance = ZERO_COSINE_TOLERANCE if args.tolerance is None else args.tolerance
    pool = resolve(args.pool, exclude=args.exclude, allow_pickle=args.allow_pickle)  # adapters folded, as for a merge
    pool.check_weights()  # NaN / Inf, truncation, shards
    result = task_vector_geometry(pool.base_path, pool.experts, tolerance=tolerance)  # added tokens: base's tokens
    out = Path(args.out or default_out("geometry", pool=pool.name))
    for path in write_geometry(result, out):
        print(f"wrote {path}")
    return 0
