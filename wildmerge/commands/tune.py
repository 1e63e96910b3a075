"""``wildmerge tune``: hyperparameters chosen by the task alignment score (the reality-check paper), with no evaluation.

For every grid point the merge is built in memory, run over each expert's unlabelled data (its ``data:`` in the
pool, or the pool's default; read through wildmerge.expert_data) and compared with that expert's own features; the
lowest mean TAS wins. Outputs per grid:
``tas.csv``, ``selected.json`` and ``recipe.yml`` (the selected configuration for the stock ``mergekit-yaml``).
``--check K`` evaluates K points spread over the TAS ranking and says whether TAS tracks accuracy on this pool.
"""

import argparse

from wildmerge.run import DEFAULT_OUT

from wildmerge.commands.options import check_points, device, positive_float, positive_int


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", default="demo", help="pool name or YAML path; every expert needs text data "
                                                     "('data:', its own or the pool's)")
    p.add_argument("--grid", help="YAML of sweeps, as for `wildmerge sample --grid`: "
                                  "{name: {method: ta, grid: {lambda: [0.5, 1.0]}}} (method: a name or recipe path)")
    p.add_argument("--sweep", "--ablation", dest="sweep", action="append", default=[],
                   help="a named sweep of `wildmerge sample --sweep` (ta_lambda, ties_grid, sb_beta, ...)")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--out", help=f"output folder (default: {DEFAULT_OUT['tune'].format(pool='<pool>')})")
    p.add_argument("--samples", type=positive_int,
                   default=128, help="unlabelled samples per expert (default 128, the paper's)")
    p.add_argument("--seq-len", type=positive_int, help="tokens per sample (default min(256, the model's positions))")
    p.add_argument("--distance", default="l2", choices=("l2", "l1", "cosine", "kl"),
                   help="distance that selects (all four are written to tas.csv; default l2, the paper's)")
    p.add_argument("--device", default="cpu", type=device, help="where models are held and run: cpu, cuda, cuda:1")
    p.add_argument("--threads", type=positive_int,
                   help="torch CPU threads (default: torch's; 1 is fastest on a busy machine)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")
    p.add_argument("--no-download", action="store_true", help="use only the local hub cache, even when online")
    p.add_argument("--select", default="tas", choices=("tas", "adamms"),
                   help="selection rule: tas (lowest mean TAS) or adamms (AdaMMS*: the most stable point of a "
                        "one-hyperparameter grid; the reality-check paper, App. D)")
    p.add_argument("--adamerging", choices=("tas", "entropy"),
                   help="instead of grids: learn coefficients per block and expert (AdaMerging+TAS or AdaMerging's "
                        "entropy loss); writes the merged model and a stock mergekit recipe")
    p.add_argument("--iterations", type=positive_int, default=500, help="--adamerging: optimiser steps (default 500)")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="--adamerging: Adam learning rate (default 1e-3)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="--adamerging: samples per expert and step")
    p.add_argument("--check", type=check_points, default=0, metavar="K",
                   help="evaluate K grid points spread over the TAS ranking: Spearman, regret and plots in "
                        "<grid>/check/ (does TAS track accuracy on this pool?)")
    p.add_argument("--suite", help="suite of the --check evaluations (default: the pool's protocol.suite)")
    p.add_argument("--limit", type=positive_int, help="items per task for the --check evaluations")


def _check_pool_weights(args):
    """The pool resolved, once for the command; its checkpoints complete and free of NaN / Inf, and the base's
    tokenizer there, before any merge is built (as the sampler checks)."""
    from wildmerge.pools import resolve
    from wildmerge.planning.preflight import require_tokenizer

    pool = resolve(args.pool, exclude=args.exclude, allow_pickle=args.allow_pickle,
                   download=False if args.no_download else None)
    pool.check_weights()
    require_tokenizer(pool.base_path, "the base", "the task alignment score (tune)")
    return pool


def _check_suite(args):
    """The suite ``--check`` evaluates on, said aloud: ``--suite``, else the pool's own (``protocol: suite:``);
    ``--suite`` / ``--limit`` without ``--check`` would be ignored, so they are refused."""
    from wildmerge.errors import ConfigError

    if args.check and args.adamerging:
        raise ConfigError(f"--check {args.check} evaluates points of a grid, and --adamerging learns coefficients "
                          f"without one: drop --check, or tune a grid (--grid / --sweep) instead")
    if not args.check:
        given = [flag for flag, value in (("--suite", args.suite), ("--limit", args.limit)) if value is not None]
        if given:
            verb, them = ("apply", "them") if len(given) > 1 else ("applies", "it")
            raise ConfigError(f"{' and '.join(given)} only {verb} to the --check evaluations: add --check K "
                              f"(K >= 3) or leave {them} out")
        return None
    if args.suite:
        return args.suite
    from wildmerge.pools import load_pool

    suite = load_pool(args.pool, args.exclude).protocol.suite
    if not suite:
        raise ConfigError(f"--check needs --suite NAME: pool {args.pool!r} names no suite of its own "
                          f"(protocol: suite:)")
    print(f"tune --check: evaluating on suite {suite!r}, the pool's own (--suite NAME to choose another)")
    return suite


def run(args) -> int:
    from wildmerge.analysis.tas.tune import adamerge_pool, tune_pool
    from wildmerge.resources import checked_device

    checked_device(args.device, "--device")  # a missing GPU said before any model is read
    suite = _check_suite(args)
    pool = _check_pool_weights(args)
    if args.adamerging:
        adamerge_pool(pool, loss=args.adamerging, iterations=args.iterations, lr=args.lr,
                      batch_size=args.batch_size, exclude=args.exclude, out=args.out, samples=args.samples,
                      seq_len=args.seq_len, device=args.device, threads=args.threads, allow_pickle=args.allow_pickle)
        return 0
    tune_pool(pool, sweeps=[n for a in args.sweep for n in a.split(",") if n], grid_file=args.grid,
              exclude=args.exclude, out=args.out, samples=args.samples, seq_len=args.seq_len, distance=args.distance,
              device=args.device, threads=args.threads, allow_pickle=args.allow_pickle, check=args.check,
              check_suite=suite, check_limit=args.limit, select=args.select)
    return 0
