"""``wildmerge tune``: hyperparameters chosen by the task alignment score (the reality-check paper), with no evaluation.

For every grid point the merge is built in memory, run over each expert's unlabelled data (the pool's
``calibration:`` entries) and compared with that expert's own features; the lowest mean TAS wins. Outputs per grid:
``tas.csv``, ``selected.json`` and ``recipe.yml`` (the selected configuration for the stock ``mergekit-yaml``).
"""

import argparse
from pathlib import Path

from wildmerge.errors import ConfigError


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pool", default="demo", help="pool name or YAML path; every expert needs 'calibration:'")
    p.add_argument("--grid", help="YAML of sweeps, as for `wildmerge sample --grid`: "
                                  "{name: {method: ta, grid: {lambda: [0.5, 1.0]}}} (method: a name or recipe path)")
    p.add_argument("--ablation", action="append", default=[],
                   help="a named sweep of `wildmerge sample --ablation` (ta_lambda, ties_grid, sb_beta, ...)")
    p.add_argument("--exclude", action="append", default=[], help="leave this expert out (repeatable)")
    p.add_argument("--out", help="output folder (default: runs/tune-<pool>)")
    p.add_argument("--samples", type=int, default=128, help="unlabelled samples per expert (default 128, the paper's)")
    p.add_argument("--seq-len", type=int, help="tokens per sample (default min(256, the model's positions))")
    p.add_argument("--distance", default="l2", choices=("l2", "l1", "cosine", "kl"),
                   help="distance that selects (all four are written to tas.csv; default l2, the paper's)")
    p.add_argument("--device", default="cpu", help="where models are held and run: cpu, cuda, cuda:1")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's; 1 is fastest on a busy machine)")
    p.add_argument("--allow-pickle", action="store_true", help="accept pickle-only checkpoints")


def run(args) -> int:
    from wildmerge.analysis.tas.setup import grid_points, load_sweep, tune_grid
    from wildmerge.sampling.ablations import load_grids
    from wildmerge.sampling.pools import load_pool

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.samples < 1:
        raise ConfigError(f"--samples must be at least 1 (got {args.samples})")
    grids = load_grids([n for a in args.ablation for n in a.split(",") if n], args.grid)
    if not grids:
        raise ConfigError("nothing to tune: give --grid FILE or --ablation NAME")
    sweeps = grid_points(grids)
    pool = load_pool(args.pool)
    if args.exclude:
        pool = pool.without(args.exclude)
    out = Path(args.out or Path("runs") / f"tune-{pool.name}")
    tas = load_sweep(pool, out, samples=args.samples, seq_len=args.seq_len, device=args.device,
                     allow_pickle=args.allow_pickle)
    for name, (method, points) in sweeps.items():
        selected = tune_grid(tas, method, points, out / name, distance=args.distance)
        print(f"{name}: {method.name} {selected['hparams']} (mean TAS {args.distance} "
              f"{selected['tas'][args.distance]:.4g} over {selected['candidates']} candidates); "
              f"recipe: {selected['recipe']}")
    return 0


# --- `wildmerge sample --tune`: each method's hyperparameters chosen by TAS on the run's whole pool ----------------

LAMBDAS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]  # the reality-check paper's TA grid; at most 12 points per method
TUNE_GRIDS = {
    "ta": {"lambda": LAMBDAS},
    "ties": {"density": [0.1, 0.2, 0.3, 0.5], "lambda": [0.3, 0.6, 1.0]},
    "ta_sb": {"beta": [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0]},
    "ties_sb": {"beta": [0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0]},
    "iso_c": {"lambda": [0.5, 0.75, 1.0, 1.25, 1.5]},
    "iso_cts": {"lambda": [0.5, 0.75, 1.0, 1.25, 1.5]},
    "tsv_m": {"lambda": [0.5, 0.75, 1.0, 1.25, 1.5]},
    "norm_avg": {"lambda": [0.5, 1.0, 2.0, 4.0]},
    "metagpt": {"lambda": [0.25, 0.5, 0.75, 1.0]},
}


def tune_methods(pool, methods: dict, out_dir, grid_file=None, samples: int = 128, distance: str = "l2",
                 device: str = "cpu", allow_pickle: bool = False) -> tuple:
    """(methods with their TAS-selected hyperparameters as recipe defaults, {method: what was chosen and how})."""
    from wildmerge.analysis.tas.setup import grid_points, load_sweep, tune_grid
    from wildmerge.sampling.ablations import Grid, load_grids
    from wildmerge.plugins.recipes import split_hparams

    grids = {name: Grid(method=name, grid=TUNE_GRIDS[name]) for name in methods if name in TUNE_GRIDS}
    grids.update({g.method: g for g in load_grids((), grid_file).values()} if grid_file else {})
    grids = {name: g for name, g in grids.items() if name in methods}
    if not grids:
        raise ConfigError(f"--tune: none of the methods {', '.join(methods)} has a grid; give --tune-grid FILE")
    sweeps = grid_points(grids)  # checked before anything is loaded
    tas = load_sweep(pool, out_dir, samples=samples, device=device, allow_pickle=allow_pickle)
    tuned, out = {}, dict(methods)
    for name, (method, points) in sweeps.items():
        selected = tune_grid(tas, method, points, Path(out_dir) / name, distance=distance)
        top, per = split_hparams(method, selected["hparams"])
        recipe = {**method.recipe, "parameters": {**method.recipe.get("parameters", {}), **top}}
        out[name] = method.model_copy(update={"recipe": recipe,
                                              "model_parameters": {**method.model_parameters, **per}})
        tuned[name] = {**selected, "grid": grids[name].grid}
        print(f"tuned {name}: {selected['hparams']} (TAS {distance} {selected['tas'][distance]:.4g})")
    for name in methods:
        if name not in tuned:
            print(f"  note: {name} has no tuning grid; it keeps its recipe's hyperparameters")
    return out, tuned
