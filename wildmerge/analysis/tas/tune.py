"""Hyperparameters chosen by the task alignment score (the reality-check paper), with no evaluation.

``tune_pool`` is ``wildmerge tune``: sweep named or user grids on a pool and write, per grid, ``tas.csv``,
``selected.json`` and ``recipe.yml``; ``select="adamms"`` picks by AdaMMS*'s stability rule instead (App. D).
``tune_methods`` is ``wildmerge sample --tune``: each method of a run gets the hyperparameters TAS selects on the
run's whole pool, from a built-in grid per method (the reality-check paper's Table 4 grids for its baselines).
``adamerge_pool`` is ``wildmerge tune --adamerging``: coefficients per block and expert learned on the pool's data.
"""

from pathlib import Path

from wildmerge.analysis.tas.setup import grid_points, load_sweep, tune_grid
from wildmerge.analysis.tas.sweep import DEFAULT_SAMPLES
from wildmerge.errors import ConfigError
from wildmerge.run import default_out
from wildmerge.threads import with_threads_argument

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
    # the reality-check paper's Table 4 grids
    "consensus_ta": {"lambda": [0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]},
    "lines_ta": {"lambda": LAMBDAS},
    "lines_consensus": {"lambda": [0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0]},
    "star": {"eta": [0.6, 0.8, 0.9, 0.95], "lambda": [0.8, 1.0, 1.2]},
    "tsv_lossless": {"lambda": [0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]},
    "breadcrumbs": {"lambda": [0.3, 0.5, 0.7], "density": [0.89, 0.79, 0.69]},  # beta 0.1, 0.2, 0.3; gamma 0.01
}
RULES = ("tas", "adamms")


def _pool(pool, exclude=()):
    """The loaded pool of a name, a path or a ``ResolvedPool``."""
    from wildmerge.pools import ResolvedPool, load_pool

    return pool.pool if isinstance(pool, ResolvedPool) else load_pool(pool, exclude)


def _load(pool, out, **kwargs):
    """The TAS sweep of the pool (its in-memory merger names each input with its folder, for LiNeS and the
    per-block / per-model norms)."""
    return load_sweep(pool, out, **kwargs)


def _select(tas, method, points, out_dir, distance: str, rule: str) -> dict:
    if rule == "adamms":
        from wildmerge.analysis.tas.adamms import tune_grid_adamms

        return tune_grid_adamms(tas, method, points, out_dir)
    return tune_grid(tas, method, points, out_dir, distance=distance)


def _said(selected: dict, distance: str) -> str:
    if selected.get("rule") == "adamms":
        return f"AdaMMS* score {selected['score']:.4g}"
    return f"mean TAS {distance} {selected['tas'][distance]:.4g}"


def _check_rule(rule: str, sweeps: dict) -> None:
    if rule not in RULES:
        raise ConfigError(f"unknown selection rule {rule!r}; valid: {', '.join(RULES)}")
    if rule == "adamms":
        from wildmerge.analysis.tas.adamms import swept_key

        for name, (_, points) in sweeps.items():
            try:
                swept_key(points)
            except ConfigError as exc:
                raise ConfigError(f"grid {name!r}: {exc}") from None


def _check_numbers(**values) -> None:
    """The library's callers get the command line's words (``--iterations: expected a whole number >= 1, got 0``)."""
    from wildmerge import numbers

    rules = {"samples": numbers.POSITIVE_INT, "iterations": numbers.POSITIVE_INT, "batch_size": numbers.POSITIVE_INT,
             "lr": numbers.POSITIVE_FLOAT}
    for name, value in values.items():
        rules[name].check("--" + name.replace("_", "-"), value)


def _check_points(check: int) -> None:
    from wildmerge.analysis.tas.check import points_problem

    if points_problem(check):
        raise ConfigError(f"--check: {points_problem(check)}")


@with_threads_argument
def tune_pool(pool_name: str, *, sweeps=(), grid_file=None, exclude=(), out=None, samples: int = DEFAULT_SAMPLES,
              seq_len=None, distance: str = "l2", device: str = "cpu", threads=None, allow_pickle: bool = False,
              check: int = 0, check_suite: str = "demo", check_limit=None, select: str = "tas") -> dict:
    """{sweep name: what was selected}; every bad input (sweep, pool, data, device) fails before any merge.
    ``pool_name``: a pool name or path, or the ``ResolvedPool`` the command resolved (then ``exclude`` is done)."""
    from wildmerge.pools import ResolvedPool
    from wildmerge.recipes.sweeps import load_sweeps

    _check_numbers(samples=samples)
    _check_points(check)
    named = load_sweeps(sweeps, grid_file)
    if not named:
        raise ConfigError("nothing to tune: give --grid FILE or --sweep NAME")
    todo = grid_points(named)
    _check_rule(select, todo)
    pool = _pool(pool_name, exclude)
    out = Path(out or default_out("tune", pool=pool.name))
    tas = _load(pool_name if isinstance(pool_name, ResolvedPool) else pool, out, samples=samples, seq_len=seq_len,
                device=device, allow_pickle=allow_pickle)
    chosen = {}
    for name, (method, points) in todo.items():
        chosen[name] = selected = _select(tas, method, points, out / name, distance, select)
        print(f"{name}: {method.name} {selected['hparams']} ({_said(selected, distance)} over "
              f"{selected['candidates']} candidates); recipe: {selected['recipe']}")
        if check:  # K grid points evaluated: does TAS track accuracy here? (analysis/tas/check.py)
            from wildmerge.analysis.tas.check import check_tuned

            selected["check"] = check_tuned(tas, method, points, out / name, check, check_suite, check_limit, distance)
    return chosen


def tune_methods(pool, methods: dict, out_dir, grid_file=None, samples: int = DEFAULT_SAMPLES, distance: str = "l2",
                 device: str = "cpu", allow_pickle: bool = False, check: int = 0, check_suite: str = "demo",
                 check_limit=None, select: str = "tas", check_options=None) -> tuple:
    """(methods with their TAS-selected hyperparameters as recipe defaults, {method: what was chosen and how}).

    ``pool``: the ``ResolvedPool`` of the run (its pinned commits; a ``Pool`` is resolved here);
    ``check_options``: the run's ``EvalOptions`` for the ``check`` evaluations (else serial, ``check_limit``)."""
    from wildmerge.recipes.method import with_hparams
    from wildmerge.recipes.sweeps import Sweep, load_sweeps

    _check_points(check)
    named = {name: Sweep(method=name, grid=TUNE_GRIDS[name]) for name in methods if name in TUNE_GRIDS}
    named.update({g.method: g for g in load_sweeps((), grid_file).values()} if grid_file else {})
    named = {name: g for name, g in named.items() if name in methods}
    if not named:
        raise ConfigError(f"--tune: none of the methods {', '.join(methods)} has a grid; give --tune-grid FILE")
    todo = grid_points(named)  # checked before anything is loaded
    _check_rule(select, todo)
    tas = _load(pool, out_dir, samples=samples, device=device, allow_pickle=allow_pickle)
    tuned, out = {}, dict(methods)
    for name, (method, points) in todo.items():
        selected = _select(tas, method, points, Path(out_dir) / name, distance, select)
        out[name] = with_hparams(method, selected["hparams"])
        tuned[name] = {**selected, "grid": named[name].grid}
        if check:  # recorded in the run's manifest with the choice; warns when TAS does not track accuracy
            from wildmerge.analysis.tas.check import check_tuned

            summary = check_tuned(tas, method, points, Path(out_dir) / name, check, check_suite, check_limit, distance,
                                  options=check_options)
            tuned[name]["check"] = {k: v for k, v in summary.items() if k != "rows"}
        print(f"tuned {name}: {selected['hparams']} ({_said(selected, distance)})")
    for name in methods:
        if name not in tuned:
            print(f"  note: {name} has no tuning grid; it keeps its recipe's hyperparameters")
    return out, tuned


@with_threads_argument
def adamerge_pool(pool_name: str, *, loss: str = "tas", iterations: int = 500, lr: float = 1e-3, batch_size: int = 16,
                  exclude=(), out=None, samples: int = DEFAULT_SAMPLES, seq_len=None, device: str = "cpu",
                  threads=None, allow_pickle: bool = False) -> dict:
    """AdaMerging+TAS (``loss="tas"``) or AdaMerging (``"entropy"``) on the whole pool (``pool_name``: as for
    ``tune_pool``): writes ``model/`` (the merged checkpoint), ``recipe.yml`` (stock mergekit), ``coefficients.json``
    and its curves (``adamerging.csv``, ``.png``, ``.svg``) under ``out``."""
    from wildmerge.analysis.tas.figures import write_adamerging
    from wildmerge.analysis.tas.setup import check_calibration
    from wildmerge.expert_data.read import expert_texts
    from wildmerge.analysis.tas.adamerging import AdaMergingSettings, adamerge
    from wildmerge.pools import ResolvedPool, resolve

    _check_numbers(samples=samples, iterations=iterations, lr=lr, batch_size=batch_size)
    settings = AdaMergingSettings(loss=loss, iterations=iterations, lr=lr, batch_size=batch_size)
    pool = _pool(pool_name, exclude)
    check_calibration(pool)
    resolved = pool_name if isinstance(pool_name, ResolvedPool) else resolve(pool, allow_pickle=allow_pickle)
    experts = resolved.experts  # adapters folded into the base
    out = Path(out or default_out("adamerging", pool=pool.name))
    data = pool.all_data()
    texts = {name: expert_texts(data[name], name, relative_to=pool.folder, model_path=path,
                                generated_dir=out / "calibration") for name, path in experts.items()}
    written = adamerge(resolved.base_path, experts, texts, out, settings=settings, samples=samples, seq_len=seq_len,
                       device=device, data_key={n: data[n].model_dump(exclude_none=True) for n in experts})
    figure = write_adamerging(out)  # Fig. 14: the loss and each expert's coefficient over the steps
    print(f"AdaMerging ({loss}): model {written['model']}; recipe {written['recipe']}; curves {figure[1]}")
    return written
