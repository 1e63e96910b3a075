"""``wildmerge analyze norms --pool NAME``: how unequal the experts' task-vector norms are, per layer."""

import argparse
from pathlib import Path

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
    p.add_argument("--sign-election", type=float, metavar="DENSITY",
                   help="also attribute TIES's sign election to the experts, at this kept fraction (1 = untrimmed)")


def run(args) -> int:
    from wildmerge.analysis.pool.imbalance import imbalance_rows, layer_grams, summary, write_imbalance
    from wildmerge.checkpoints import check_compatible, check_weights
    from wildmerge.hub import resolve_all
    from wildmerge.sampling.adapters import full_checkpoints
    from wildmerge.sampling.pools import load_pool

    pool = load_pool(args.pool)
    if args.exclude:
        pool = pool.without(args.exclude)
    relative_to = Path(pool.source).parent if pool.source else None
    refs = [("base", pool.base.model, pool.base.revision)] + [(e.label, e.model, e.revision) for e in pool.experts]
    resolved = resolve_all(refs, relative_to=relative_to, allow_pickle=args.allow_pickle)
    base, experts = resolved[0].path, {label: r.path for (label, _, _), r in zip(refs[1:], resolved[1:])}
    experts = full_checkpoints(base, experts)  # LoRA adapters: folded into the base, as for a merge
    check_compatible(base, experts, allow_pickle=args.allow_pickle)  # added tokens: read on the base's tokens
    check_weights({"base": base, **experts}, allow_pickle=args.allow_pickle)  # NaN / Inf, truncation, shards
    grams = layer_grams(base, experts)
    rows = imbalance_rows(grams, list(experts))
    out = Path(args.out or Path("runs") / f"analysis-{pool.name}" / "norms")
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
