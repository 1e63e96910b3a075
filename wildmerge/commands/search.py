"""``wildmerge search``: the best merge a budget of evaluations can find (TAS-tuned methods, a bandit over method x
subset size, successive halving on item subsets; see ``wildmerge.search.guided``)."""

import argparse

from wildmerge.commands.options import device, float_above, float_at_least, nonnegative_int, number_type, positive_int
from wildmerge.numbers import Range


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", "--pool", dest="pool", default="demo", help="pool name or YAML path")
    p.add_argument("--budget", type=float_at_least(2),
                   required=True, help="evaluations to spend, in full evaluations of the suite")
    p.add_argument("--suite", default="demo")
    p.add_argument("--limit", type=positive_int, help="items per task (a cheaper suite)")
    p.add_argument("--methods", help="comma-separated merge methods (default: ta,ties, and regmean,com where every "
                                     "expert of the pool has data; wildmerge/search/defaults.py)")
    p.add_argument("--first-fraction", type=number_type(Range(low=0, high=1, low_open=True), "first_fraction"),
                   default=0.125, help="items per task at the first rung")
    p.add_argument("--eta", type=float_above(1),
                   default=2.0, help="each rung keeps 1/eta of the candidates on eta x the items")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="the search's draws: its candidates and the rungs' items")
    p.add_argument("--rule", default="thompson", choices=("thompson", "random"),
                   help="how arms (method x size) are chosen: thompson (learns from the first rungs) or random")
    p.add_argument("--no-experts", action="store_true", help="only merges are candidates, not the experts alone")
    p.add_argument("--no-tune", action="store_true", help="keep the recipes' hyperparameters (no TAS tuning)")
    p.add_argument("--tune-samples", type=positive_int, default=32, help="unlabelled samples per expert for TAS")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--merge-device", default="cpu", type=device, help="where candidates are merged: cpu, cuda, cuda:N (default "
                                                         "%(default)s)")
    p.add_argument("--out", help="run folder (default runs/search-<pool>); rerun the same command to resume")
    p.add_argument("--dry-run", action="store_true",
                   help="print what the search will cost (brackets, merges, evaluations, hours); run nothing")


def run(args) -> int:
    from wildmerge.search.guided import dry_run, search_pool

    methods = None if args.methods is None else [m for m in args.methods.split(",") if m]
    settings = dict(suite_name=args.suite, methods=methods, first=args.first_fraction, limit=args.limit, eta=args.eta,
                    exclude=args.exclude, rule=args.rule, experts=not args.no_experts)
    if args.dry_run:
        dry_run(args.pool, args.budget, **settings)
        return 0
    search_pool(args.pool, args.budget, out=args.out, seed=args.seed, tune=not args.no_tune,
                tune_samples=args.tune_samples, merge_device=args.merge_device, **settings)
    return 0
