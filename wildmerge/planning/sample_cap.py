"""Calibration-sample sweeps capped by what the experts have.

Chain of Merges' Table 4 sweep (``com_samples``) asks each expert for up to 500 calibration texts; the shipped
pools give 256 per expert (``data: generate`` 64), so its larger points would fail at merge time, after the
others were merged. Every sweep point that sets ``n_samples`` above the fewest texts an expert of the pool has
(counted through ``expert_data``'s reader) is left out before anything is planned, and the run says so.
"""

from wildmerge.errors import ConfigError

KEY = "n_samples"


def asks_samples(sweep) -> bool:
    """Whether ``sweep`` sets ``n_samples`` (its points, not its recipe, say how many texts a merge reads)."""
    return KEY in sweep.grid or any(KEY in case for case in sweep.cases)


def cap_sample_sweeps(pool, sweeps: dict) -> tuple:
    """(sweeps with their ``n_samples`` points capped, one note per capped sweep). Sweeps that do not set
    ``n_samples`` are returned as they are, and no data is read for them."""
    from wildmerge.expert_data.count import text_counts

    asking = [name for name, sweep in sweeps.items() if asks_samples(sweep)]
    if not asking:
        return sweeps, []
    counts = text_counts(pool)  # an expert without data is the pre-flight's (and the dry run's MISSING DATA) to say
    if not counts:
        return sweeps, []
    fewest = min(counts, key=counts.get)
    have = counts[fewest]
    out, notes = dict(sweeps), []
    for name in asking:
        sweep = sweeps[name]
        grid = {k: [v for v in values if k != KEY or v <= have] for k, values in sweep.grid.items()}
        cases = [c for c in sweep.cases if c.get(KEY, 0) <= have]
        dropped = sorted({p[KEY] for p in sweep.points() if p.get(KEY, 0) > have})
        if not dropped:
            continue
        if (KEY in grid and not grid[KEY]) or (sweep.cases and not cases):
            raise ConfigError(f"sweep {name!r}: every {KEY} point ({', '.join(map(str, dropped))}) asks more "
                              f"calibration texts than expert {fewest!r} has ({have}); give the experts more data "
                              f"in {pool.source or 'the pool file'}, or sweep smaller counts (--grid FILE)")
        capped = sweep.model_copy(update={"grid": grid, "cases": cases})
        out[name] = capped
        notes.append(f"sweep {name!r}: {KEY} {', '.join(map(str, dropped))} left out: expert {fewest!r} has {have} "
                     f"calibration texts, the fewest of the pool's {len(counts)} experts; the sweep keeps "
                     f"{', '.join(map(str, sorted({p[KEY] for p in capped.points()})))}")
    return out, notes
