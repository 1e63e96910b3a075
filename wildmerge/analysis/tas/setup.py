"""From a pool to a loaded TAS sweep, and from a sweep to its outputs: every bad input fails before any merge."""

from pathlib import Path
from typing import Dict, List, Optional

import yaml

from wildmerge.analysis.tas.sweep import DEFAULT_SAMPLES, TASSweep, check_fits, check_points, select, sweep, \
    write_tas_csv
from wildmerge.atomic import write_json, write_text
from wildmerge.errors import ConfigError


def check_calibration(pool) -> None:
    missing = [e.label for e in pool.experts if not e.calibration]
    if missing:
        raise ConfigError(
            f"expert(s) {', '.join(missing)} of pool {pool.name!r} have no calibration data: the task alignment "
            f"score compares each expert with the merge on that expert's own unlabelled data. Add "
            f"'calibration: path/to/texts.jsonl' to each expert in the pool file (or leave them out with --exclude)")


def load_sweep(pool, out_dir, *, samples: int = DEFAULT_SAMPLES, seq_len: Optional[int] = None,
               device: str = "cpu", allow_pickle: bool = False, download=None) -> TASSweep:
    """Resolve and check the pool, load each expert's data, then load every model once."""
    from transformers import AutoTokenizer

    from wildmerge.checkpoints import check_compatible, read_config
    from wildmerge.hub import resolve_all
    from wildmerge.plugins.layerwise.calibration import apply_seq_len, load_token_batches, resolve_calibration

    check_calibration(pool)
    relative_to = Path(pool.source).parent if pool.source else None
    refs = [("base", pool.base.model, pool.base.revision)] + [(e.label, e.model, e.revision) for e in pool.experts]
    resolved = resolve_all(refs, relative_to=relative_to, allow_pickle=allow_pickle, download=download)
    base = resolved[0].path
    experts = {label: r.path for (label, _, _), r in zip(refs[1:], resolved[1:])}
    check_compatible(base, experts, allow_pickle=allow_pickle, same_vocab=True)  # in-memory merges: no alignment
    check_fits([base, *experts.values()], device)
    config = read_config(base)
    raw = {"calibration": {"n_samples": samples, "batch_size": 32, **({"seq_len": seq_len} if seq_len else {})},
           "models": [{"model": e.label, "calibration": e.calibration} for e in pool.experts]}
    specs = apply_seq_len(resolve_calibration(raw, list(experts), base_dir=relative_to), list(experts),
                          config.get("max_position_embeddings"))
    tokenizer = AutoTokenizer.from_pretrained(base)
    batches = {name: load_token_batches(spec, tokenizer, name, config["vocab_size"])
               for name, spec in zip(experts, specs)}
    data_key = [s.model_dump() for s in specs]
    return TASSweep(out_dir, base, experts, batches, device=device, data_key=str(data_key))


def tune_grid(tas: TASSweep, method, points: List[dict], out_dir, distance: str = "l2",
              progress: bool = True) -> Dict:
    """Sweep one grid; write ``tas.csv``, ``selected.json`` and ``recipe.yml`` (runs with stock mergekit-yaml)."""
    from wildmerge.plugins.recipes import render_recipe
    from wildmerge.plugins.recipes import split_hparams

    out = Path(out_dir)
    records = sweep(tas, method, points, out, progress=progress)
    write_tas_csv(records, out / "tas.csv")
    best = select(records, distance)
    top, per = split_hparams(method, best["hparams"])
    recipe = render_recipe(method, tas.base_path, list(tas.expert_paths.values()),
                           overrides=top or None, model_overrides=per or None)
    write_text(out / "recipe.yml", yaml.safe_dump(recipe, sort_keys=False))
    selected = {"method": method.name, "distance": distance, "hparams": best["hparams"],
                "candidate": best["candidate"], "tas": best["tas"], "candidates": len(records),
                "recipe": str(out / "recipe.yml")}
    write_json(out / "selected.json", selected)
    return selected


def grid_points(grids: dict) -> Dict[str, tuple]:
    """{grid name: (method recipe, points)}, every grid checked (empty, unknown keys) before anything runs."""
    from wildmerge.plugins.recipes import load_method_recipe

    out = {}
    for name, grid in grids.items():
        method = load_method_recipe(grid.method)
        points = grid.points() if all(grid.grid.values()) else []
        check_points(method, points, name)
        out[name] = (method, points)
    return out
