"""From a pool to a loaded TAS sweep, and from a sweep to its outputs: every bad input fails before any merge."""

from pathlib import Path
from typing import Dict, List, Optional

import yaml

from wildmerge.analysis.tas.figures import write_distances
from wildmerge.analysis.tas.sweep import DEFAULT_SAMPLES, TASSweep, check_fits, check_points, select, sweep, \
    write_tas_csv
from wildmerge.atomic import write_json, write_text


def check_calibration(pool) -> None:
    """Every expert (its own data or the pool's default) has text for the task alignment score, before any load."""
    from wildmerge.expert_data.check import require_data

    require_data(pool.all_data(), ["tas"], pool.name)


def load_sweep(pool, out_dir, *, samples: int = DEFAULT_SAMPLES, seq_len: Optional[int] = None,
               device: str = "cpu", allow_pickle: bool = False, download=None) -> TASSweep:
    """Resolve and check the pool (unless ``pool`` is a ``ResolvedPool`` already: a command resolves its pool once,
    at its run's pinned commits), load each expert's data, then load every model once."""
    from transformers import AutoTokenizer

    from wildmerge.checkpoints import read_config
    from wildmerge.expert_data.read import expert_texts
    from wildmerge.plugins.layerwise.calibration import CalibrationSpec, apply_seq_len, load_token_batches
    from wildmerge.pools import ResolvedPool, resolve

    if isinstance(pool, ResolvedPool):
        resolved, pool = pool, pool.pool
        check_calibration(pool)
    else:
        check_calibration(pool)
        resolved = resolve(pool, allow_pickle=allow_pickle, download=download)  # adapters folded, vocabularies checked
    relative_to = pool.folder
    base, experts = resolved.base_path, resolved.experts
    check_fits([base, *experts.values()], device)
    config = read_config(base)
    data = pool.all_data()
    texts = {name: expert_texts(data[name], name, relative_to=relative_to, model_path=path,
                                generated_dir=Path(out_dir) / "calibration") for name, path in experts.items()}
    spec = CalibrationSpec(n_samples=samples, batch_size=32, seq_len=seq_len)
    specs = apply_seq_len([spec] * len(experts), list(experts), config.get("max_position_embeddings"))
    tokenizer = AutoTokenizer.from_pretrained(base)
    batches = {name: load_token_batches(spec, tokenizer, name, config["vocab_size"], records=texts[name])
               for name, spec in zip(experts, specs)}
    data_key = [specs[0].model_dump()] + [data[n].model_dump(exclude_none=True) for n in experts]
    return TASSweep(out_dir, base, experts, batches, device=device, data_key=str(data_key))


def tune_grid(tas: TASSweep, method, points: List[dict], out_dir, distance: str = "l2",
              progress: bool = True) -> Dict:
    """Sweep one grid; write ``tas.csv``, ``selected.json``, ``recipe.yml`` (runs with stock mergekit-yaml) and, for
    a one-hyperparameter grid, ``tas_distances.csv`` with its figure."""
    from wildmerge.recipes.render import render_recipe

    out = Path(out_dir)
    records = sweep(tas, method, points, out, progress=progress)
    write_tas_csv(records, out / "tas.csv")
    write_distances(records, out, method.name)  # Fig. 11: the curve under each distance
    best = select(records, distance)
    recipe = render_recipe(method, tas.base_path, list(tas.expert_paths.values()), best["hparams"])
    write_text(out / "recipe.yml", yaml.safe_dump(recipe, sort_keys=False))
    selected = {"method": method.name, "distance": distance, "hparams": best["hparams"],
                "candidate": best["candidate"], "tas": best["tas"], "candidates": len(records),
                "recipe": str(out / "recipe.yml")}
    write_json(out / "selected.json", selected)
    return selected


def grid_points(grids: dict) -> Dict[str, tuple]:
    """{grid name: (method recipe, points)} of ``recipes.sweeps.Sweep`` objects, every grid checked (empty, unknown
    keys) before anything runs."""
    out = {}
    for name, grid in grids.items():
        method = grid.recipe
        points = grid.points() if all(grid.grid.values()) else []
        check_points(method, points, name)
        out[name] = (method, points)
    return out
