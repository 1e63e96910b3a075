"""``wildmerge analyze norms --pool NAME``: how unequal the experts' task-vector norms are, per layer."""

import argparse
from pathlib import Path

from wildmerge.commands.options import number_type
from wildmerge.numbers import Range
from wildmerge.run import default_out

HELP = "task-vector norms per expert and layer, cosine with their sum, max/min ratio"
DESCRIPTION = ("Per expert and per layer: the task-vector norm, its cosine with the sum of task vectors, and the "
               "max/min norm ratio (the reality-check paper, Figs. 5, 12-13). A ratio above 3 means TIES and MetaGPT will follow "
               "the largest expert: compare with norm_avg. Also: TA's similarity to each expert against lambda "
               "(Fig. 5 right, our definition) and, with --sign-election, whom TIES's elected sign follows.")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", default="demo", help="pool name or YAML path (default: demo)")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--out", help="output folder (default: runs/analysis-<pool>/norms)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")
    p.add_argument("--sign-election", type=number_type(Range(low=0, high=1, low_open=True), "density"),
                   metavar="DENSITY",
                   help="also attribute TIES's sign election to the experts, at this kept fraction (1 = untrimmed)")


def run(args) -> int:
    from wildmerge.analysis.pool.imbalance import imbalance_rows, layer_grams, summary, write_imbalance
    from wildmerge.pools import resolve

    pool = resolve(args.pool, exclude=args.exclude, allow_pickle=args.allow_pickle)  # adapters folded, as for a merge
    pool.check_weights()  # NaN / Inf, truncation, shards
    base, experts = pool.base_path, pool.experts  # added tokens: read on the base's tokens
    grams = layer_grams(base, experts)
    rows = imbalance_rows(grams, list(experts))
    out = Path(args.out or default_out("norms", pool=pool.name))
    for path in write_imbalance(rows, list(experts), out) + _acted_upon(base, experts, grams, out, args):
        print(f"wrote {path}")
    info = summary(rows)
    note = f"; {info['note']}" if info["flagged"] else ""
    print(f"max/min task-vector norm ratio: {info['max_min_ratio']:.2f}{note}")
    return 0


def _acted_upon(base, experts, grams, out: Path, args) -> list:
    """Similarity of TA's merge to each expert against lambda; TIES's sign election per expert (when asked)."""
    import pandas as pd

    from wildmerge.analysis.pool.lambda_similarity import plot_similarity, similarity_curves
    from wildmerge.atomic import write_text

    curves = similarity_curves(grams["model"], list(experts))
    written = [write_text(out / "similarity_vs_lambda.csv", pd.DataFrame(curves).to_csv(index=False))]
    written += list(plot_similarity(curves, out).values())
    if args.sign_election is not None:
        from wildmerge.analysis.pool.sign_election import sign_election

        election = sign_election(base, experts, density=args.sign_election)
        written.append(write_text(out / "sign_election.csv", pd.DataFrame(election).to_csv(index=False)))
    return written
