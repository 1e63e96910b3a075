"""Hyperparameters chosen by the task alignment score (the reality-check paper), with no evaluation.

``tune_pool`` is ``wildmerge tune``: sweep named or user grids on a pool and write, per grid, ``tas.csv``,
``selected.json`` and ``recipe.yml``. ``tune_methods`` is ``wildmerge sample --tune``: each method of a run gets the
hyperparameters TAS selects on the run's whole pool, from a built-in grid per method.
"""

from pathlib import Path

from wildmerge.analysis.tas.setup import grid_points, load_sweep, tune_grid
from wildmerge.analysis.tas.sweep import DEFAULT_SAMPLES
from wildmerge.errors import ConfigError

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


def tune_pool(pool_name: str, *, ablations=(), grid_file=None, exclude=(), out=None, samples: int = DEFAULT_SAMPLES,
              seq_len=None, distance: str = "l2", device: str = "cpu", threads=None, allow_pickle: bool = False) -> dict:
    """{grid name: what was selected}; every bad input (grid, pool, data, device) fails before any merge."""
    from wildmerge.sampling.ablations import load_grids
    from wildmerge.sampling.pools import load_pool

    if threads:
        import torch

        torch.set_num_threads(threads)
    if samples < 1:
        raise ConfigError(f"--samples must be at least 1 (got {samples})")
    grids = load_grids(ablations, grid_file)
    if not grids:
        raise ConfigError("nothing to tune: give --grid FILE or --ablation NAME")
    sweeps = grid_points(grids)
    pool = load_pool(pool_name)
    if exclude:
        pool = pool.without(exclude)
    out = Path(out or Path("runs") / f"tune-{pool.name}")
    tas = load_sweep(pool, out, samples=samples, seq_len=seq_len, device=device, allow_pickle=allow_pickle)
    chosen = {}
    for name, (method, points) in sweeps.items():
        chosen[name] = selected = tune_grid(tas, method, points, out / name, distance=distance)
        print(f"{name}: {method.name} {selected['hparams']} (mean TAS {distance} "
              f"{selected['tas'][distance]:.4g} over {selected['candidates']} candidates); "
              f"recipe: {selected['recipe']}")
    return chosen


def tune_methods(pool, methods: dict, out_dir, grid_file=None, samples: int = DEFAULT_SAMPLES, distance: str = "l2",
                 device: str = "cpu", allow_pickle: bool = False) -> tuple:
    """(methods with their TAS-selected hyperparameters as recipe defaults, {method: what was chosen and how})."""
    from wildmerge.plugins.recipes import split_hparams
    from wildmerge.sampling.ablations import Grid, load_grids

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
