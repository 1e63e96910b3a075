"""AdaMMS* (the reality-check paper, App. D, Eq. 5): pick the most stable point of a one-hyperparameter grid.

For a sorted grid ``a_0 < ... < a_n``: ``score(a_i) = (d(a_{i-1}, a_i) + d(a_i, a_{i+1})) / 2`` where ``d`` is the
feature distance between the models merged at adjacent values (AdaMMS* uses the task alignment score's distance
instead of the original AdaMMS's generations): the l2 distance of the final hidden states, averaged over a sample's
tokens, then over every expert's unlabelled samples together. Only interior points have two neighbours, so only
they are scored (our reading; the paper is silent); the lowest score is chosen. It needs no expert features at all,
works for one scalar hyperparameter only and cannot compare methods.
"""

from pathlib import Path
from typing import List

from wildmerge.errors import ConfigError


def swept_key(points: List[dict]) -> str:
    """The one hyperparameter a grid varies; AdaMMS* refuses grids over several or fewer than 3 points."""
    keys = sorted({k for p in points for k in p if len({repr(q.get(k)) for q in points}) > 1})
    if len(keys) != 1:
        raise ConfigError(f"AdaMMS* needs a grid over exactly one hyperparameter, got {keys or 'none'}")
    if len(points) < 3:
        raise ConfigError(f"AdaMMS* scores interior points: the grid needs at least 3 values, got {len(points)}")
    return keys[0]


def _features(tas, recipe: dict) -> list:
    from wildmerge.analysis.tas.score import features

    tas.model.load_state_dict(tas.merged_state(recipe), strict=False)
    return [f for name in tas.expert_paths for f in features(tas.model, tas.batches[name])]


def _distance(a: list, b: list) -> float:
    return sum(float((x["hidden"].double() - y["hidden"].double()).norm(dim=-1).mean()) for x, y in zip(a, b)) / len(a)


def adamms_records(tas, method, points: List[dict], progress: bool = True) -> List[dict]:
    """One record per grid point, sorted by the swept value: its distances to both neighbours and its score
    (None at the two ends). Two candidates' features are in memory at a time."""
    from tqdm.auto import tqdm

    from wildmerge.recipes.render import render_recipe

    key = swept_key(points)
    points = sorted(points, key=lambda p: p[key])
    names = list(tas.expert_paths)
    records, previous = [], None
    for point in tqdm(points, desc=f"AdaMMS* {method.name}", unit="candidate", disable=not progress):
        recipe = render_recipe(method, "base", names, point)
        recipe.pop("out_dtype", None)
        current = _features(tas, recipe)
        step = None if previous is None else _distance(previous, current)
        if records:
            records[-1]["d_next"] = step
        records.append({"hparams": point, "d_prev": step, "d_next": None})
        previous = current
    for r in records:
        r["score"] = (r["d_prev"] + r["d_next"]) / 2 if r["d_prev"] is not None and r["d_next"] is not None else None
    return records


def select_adamms(records: List[dict]) -> dict:
    """The interior point with the lowest AdaMMS* score."""
    return min((r for r in records if r["score"] is not None), key=lambda r: r["score"])


def tune_grid_adamms(tas, method, points: List[dict], out_dir, progress: bool = True) -> dict:
    """Like ``setup.tune_grid`` with AdaMMS*'s rule: writes ``adamms.json`` (with ``adamms.csv`` and its figure),
    ``selected.json`` and ``recipe.yml``."""
    import yaml

    from wildmerge.analysis.tas.figures import write_adamms
    from wildmerge.atomic import write_json, write_text
    from wildmerge.recipes.render import render_recipe

    out = Path(out_dir)
    records = adamms_records(tas, method, points, progress)
    write_json(out / "adamms.json", records)
    write_adamms(records, out, method.name)  # Fig. 9
    best = select_adamms(records)
    recipe = render_recipe(method, tas.base_path, list(tas.expert_paths.values()), best["hparams"])
    write_text(out / "recipe.yml", yaml.safe_dump(recipe, sort_keys=False))
    selected = {"method": method.name, "rule": "adamms", "hparams": best["hparams"], "score": best["score"],
                "candidates": len(records), "recipe": str(out / "recipe.yml")}
    write_json(out / "selected.json", selected)
    return selected
