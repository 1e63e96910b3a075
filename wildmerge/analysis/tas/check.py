"""Does TAS track accuracy on this pool? Evaluate a few grid points and compare (the reality-check paper, Figs. 3-4).

The paper shows, on its own tasks, that lower TAS goes with better performance; on another pool it may not (on the
demo family it has no signal on TIES). ``check_grid`` takes K grid points spread evenly over the TAS ranking (the
TAS choice always among them), merges each in memory, scores it with the evaluation harness and reports the
Spearman correlation of TAS with the suite mean (a good proxy is strongly negative), the regret (best evaluated
suite mean minus the TAS choice's, points) and the plots. ``tracks`` says whether a user may trust ``argmin TAS``.
On a one-hyperparameter grid of 3 or more points AdaMMS* (App. D) is checked beside it on the same evaluations
(its choice evaluated too): its Spearman and regret in ``check.json``'s ``adamms`` and a third panel of the plot
(the paper's Fig. 9 compares the two).
"""

from pathlib import Path
from typing import Dict, List

import numpy as np

from wildmerge.atomic import write_json

TRACKS_SPEARMAN = -0.5  # at most this (strongly negative) ...
TRACKS_REGRET = 1.0  # ... and the TAS choice within this many points of the best evaluated point
MIN_POINTS = 3  # a rank correlation of fewer points says nothing


def points_problem(k) -> str | None:
    """Why ``--check K`` is refused (the one message of the option's type and the library), or None."""
    if k in (1, 2) or (isinstance(k, int) and k < 0):
        return f"expected 0 (no check) or at least {MIN_POINTS} points (a rank correlation needs {MIN_POINTS}), " \
               f"got {k}"
    return None


def _ranks(values) -> np.ndarray:
    """Ranks 0..n-1, tied values sharing their mean rank."""
    x = np.asarray(values, dtype=np.float64)
    ranks = np.empty(len(x))
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    for v in np.unique(x):
        ranks[x == v] = ranks[x == v].mean()
    return ranks


def spearman(x, y) -> float:
    """Rank correlation (ties share their mean rank); nan when either side is constant."""
    rx, ry = _ranks(x), _ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1]) if np.std(rx) > 0 and np.std(ry) > 0 else float("nan")


def spread(records: List[dict], k: int, distance: str = "l2") -> List[dict]:
    """``k`` records evenly spaced over the TAS ranking, best first (the TAS choice is always the first)."""
    ranked = sorted(records, key=lambda r: r["tas"][distance])
    if k >= len(ranked):
        return ranked
    picks = sorted({int(round(i)) for i in np.linspace(0, len(ranked) - 1, max(k, 1))})
    return [ranked[i] for i in picks]


def summarize(rows: List[dict], distance: str = "l2") -> Dict:
    """Spearman of TAS with accuracy, the TAS choice, the best point and the regret (points), and ``tracks``."""
    tas = [r["tas"][distance] for r in rows]
    acc = [r["accuracy"] for r in rows]
    choice = rows[int(np.argmin(tas))]
    best = rows[int(np.argmax(acc))]
    rho = spearman(tas, acc)
    regret = 100 * (best["accuracy"] - choice["accuracy"])
    tracks = bool(len(rows) >= MIN_POINTS and rho <= TRACKS_SPEARMAN and regret <= TRACKS_REGRET)
    return {"distance": distance, "points": len(rows), "spearman": rho, "regret_points": regret,
            "choice": choice["hparams"], "choice_accuracy": choice["accuracy"], "best": best["hparams"],
            "best_accuracy": best["accuracy"], "tracks": tracks}


def adamms_on_grid(tas, method, points: List[dict], grid_dir) -> List[dict] | None:
    """AdaMMS*'s records on the same grid (App. D; ``adamms.json`` when the grid was tuned by it, else computed
    now), or None where its rule does not apply (several hyperparameters, fewer than 3 points)."""
    import json

    from wildmerge.analysis.tas.adamms import adamms_records, swept_key
    from wildmerge.errors import ConfigError

    try:
        swept_key(points)
    except ConfigError:
        return None
    saved = Path(grid_dir) / "adamms.json"
    if saved.is_file():
        records = json.loads(saved.read_text())
        if sorted(map(repr, (r["hparams"] for r in records))) == sorted(map(repr, points)):
            return records
    return adamms_records(tas, method, points, progress=False)


def _same(a: dict, b: dict) -> bool:
    return {k: a[k] for k in sorted(a)} == {k: b[k] for k in sorted(b)}


def summarize_adamms(rows: List[dict], records: List[dict]) -> Dict:
    """AdaMMS* beside TAS on the evaluated points (the reality-check paper, Fig. 9): the Spearman of its score with
    accuracy over the evaluated interior points (lower score = more stable, so a good proxy is negative too), its
    choice and the regret (best evaluated suite mean minus its choice's, points)."""
    from wildmerge.analysis.tas.adamms import select_adamms

    choice = select_adamms(records)
    scored = [(r["score"], row["accuracy"]) for row in rows for r in records
              if r["score"] is not None and _same(r["hparams"], row["hparams"])]
    at_choice = [row["accuracy"] for row in rows if _same(row["hparams"], choice["hparams"])]
    best = max(row["accuracy"] for row in rows)
    rho = spearman(*zip(*scored)) if len(scored) >= 2 else float("nan")
    return {"points": len(scored), "spearman": rho, "choice": choice["hparams"], "choice_score": choice["score"],
            "choice_accuracy": at_choice[0] if at_choice else float("nan"),
            "regret_points": 100 * (best - at_choice[0]) if at_choice else float("nan"),
            "records": [{"hparams": r["hparams"], "score": r["score"]} for r in records]}


def verdict(name: str, summary: Dict) -> str:
    """One line for the console; says plainly when TAS should not be trusted."""
    line = (f"{name}: TAS vs accuracy over {summary['points']} evaluated points: Spearman "
            f"{summary['spearman']:+.2f}, regret {summary['regret_points']:.2f} points "
            f"(TAS chose {summary['choice']}, best {summary['best']})")
    if summary["points"] < MIN_POINTS:
        line += (f"\nwarning: {summary['points']} evaluated point(s) cannot tell whether TAS tracks accuracy (a rank "
                 f"correlation needs {MIN_POINTS}): give a grid of at least {MIN_POINTS} points")
    elif not summary["tracks"]:
        line += (f"\nwarning: TAS does not track accuracy on this pool for {name} (Spearman above "
                 f"{TRACKS_SPEARMAN} or regret above {TRACKS_REGRET} point): evaluate the grid instead of trusting "
                 f"argmin TAS")
    if summary.get("adamms"):
        a = summary["adamms"]
        line += (f"\n{name}: AdaMMS* vs accuracy over {a['points']} evaluated interior points: Spearman "
                 f"{a['spearman']:+.2f}, regret {a['regret_points']:.2f} points (AdaMMS* chose {a['choice']})")
    return line


def plot(name: str, rows: List[dict], out: Path, distance: str = "l2", ylabel: str = "suite mean accuracy",
         adamms: List[dict] | None = None) -> dict:
    """Accuracy against TAS for every point (Fig. 4 left), for a one-axis grid both against the knob (Fig. 3), and
    with ``adamms`` (its records on the grid) accuracy against AdaMMS*'s score beside it (Fig. 9's comparison)."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    fig, axes = plt.subplots(1, 3 if adamms else 2, figsize=(15 if adamms else 10, 4))
    if adamms:
        pairs = [(r["score"], row["accuracy"], row["candidate"]) for row in rows for r in adamms
                 if r["score"] is not None and _same(r["hparams"], row["hparams"])]
        axes[2].scatter([p[0] for p in pairs], [p[1] for p in pairs], color="C2", marker="^")
        for x, y, label in pairs:
            axes[2].annotate(label, (x, y), fontsize=6)
        axes[2].set_xlabel("AdaMMS* score (mean l2 distance to the neighbouring grid points, lower = more stable)")
        axes[2].set_ylabel(ylabel)
        axes[2].set_title(f"{name}: accuracy vs AdaMMS*")
    tas = [r["tas"][distance] for r in rows]
    acc = [r["accuracy"] for r in rows]
    axes[0].scatter(tas, acc)
    for r, x, y in zip(rows, tas, acc):
        axes[0].annotate(r["candidate"], (x, y), fontsize=6)
    axes[0].set_xlabel(f"mean TAS ({distance}, lower = closer to the experts)")
    axes[0].set_ylabel(ylabel)
    axes[0].set_title(f"{name}: accuracy vs TAS")
    keys = list(rows[0]["hparams"])
    if len(keys) == 1:
        ordered = sorted(rows, key=lambda r: r["hparams"][keys[0]])
        xs = [r["hparams"][keys[0]] for r in ordered]
        axes[1].plot(xs, [r["accuracy"] for r in ordered], marker="o", color="C0")
        twin = axes[1].twinx()
        twin.plot(xs, [r["tas"][distance] for r in ordered], marker="s", color="C1")
        axes[1].set_xlabel(keys[0])
        axes[1].set_ylabel("accuracy", color="C0")
        twin.set_ylabel(f"mean TAS ({distance})", color="C1")
    else:
        axes[1].axis("off")
    fig.tight_layout()
    return save_figure(fig, Path(out) / f"tas_check_{name}")


def check_grid(tas, method, records: List[dict], k: int, out_dir, suite: str = "demo", limit=None,
               distance: str = "l2", executor: str = "serial", options=None,
               adamms: List[dict] | None = None) -> Dict:
    """Evaluate ``k`` of the sweep's points (merged in memory, saved under ``out_dir/models``); write
    ``check.json`` and the plots; returns the summary with the evaluated rows. ``options``: the run's
    ``EvalOptions`` (executor, device, workers, dtype, limit), which replace ``executor`` and ``limit``. With
    ``adamms`` (AdaMMS*'s records on the same grid) its choice is evaluated too and the summary's ``adamms``
    compares it with accuracy."""
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions
    from wildmerge.eval.store import OK, ResultStore
    from wildmerge.eval.suites import load_suite

    out = Path(out_dir)
    if options is None:
        options = EvalOptions(executor=executor, limit=limit or None)
    limit = options.limit
    picked = spread(records, k, distance)
    if adamms:
        from wildmerge.analysis.tas.adamms import select_adamms

        choice = select_adamms(adamms)["hparams"]
        if not any(_same(r["hparams"], choice) for r in picked):
            picked.append(next(r for r in records if _same(r["hparams"], choice)))
    paths = [save_candidate(tas, method, r, out / "models" / r["candidate"]) for r in picked]
    scored = load_suite(suite).following([tas.base_path])  # a family's suite: the tasks of the pool's family
    ev = evaluate_models(paths, scored, out / "eval", options)
    store = ResultStore(ev["store"])
    rows = []
    for r, path in zip(picked, paths):
        record = store.load(ev["index"][path])
        if record["status"] != OK:
            continue
        rows.append({"candidate": r["candidate"], "hparams": r["hparams"], "tas": r["tas"],
                     "scores": record["scores"], "accuracy": float(np.mean(list(record["scores"].values())))})
    if not rows:
        from wildmerge.errors import WildmergeError

        raise WildmergeError(f"no checked point of {method.name} could be scored; see {out / 'eval'}")
    summary = {**summarize(rows, distance), "suite": suite, "limit": limit, "rows": rows}
    if adamms:
        summary["adamms"] = summarize_adamms(rows, adamms)
    summary["plots"] = {k: str(v) for k, v in plot(method.name, rows, out, distance, adamms=adamms).items()}
    write_json(out / "check.json", summary)
    return summary


def save_candidate(tas, method, record: dict, path: Path) -> str:
    """The grid point merged in memory and written as a checkpoint (with the base's tokenizer); once."""
    from transformers import AutoTokenizer

    from wildmerge.atomic import atomic_dir
    from wildmerge.recipes.render import render_recipe

    if (path / "config.json").is_file():
        return str(path)
    recipe = render_recipe(method, "base", list(tas.expert_paths), record["hparams"])
    recipe.pop("out_dtype", None)
    tas._load(tas.merged_state(recipe))
    with atomic_dir(path) as tmp:
        tas.model.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(tas.base_path).save_pretrained(tmp)
    return str(path)


def check_tuned(tas, method, points: List[dict], grid_dir, k: int, suite: str = "demo", limit=None,
                distance: str = "l2", options=None) -> Dict:
    """``wildmerge tune --check K`` / ``sample --tune-check K`` for one tuned grid: the sweep's records (read back
    from disk, no TAS recomputed) checked against K evaluations; prints the verdict and returns the summary."""
    from wildmerge.analysis.tas.sweep import sweep

    records = sweep(tas, method, points, grid_dir, progress=False)
    summary = check_grid(tas, method, records, k, Path(grid_dir) / "check", suite=suite, limit=limit,
                         distance=distance, options=options, adamms=adamms_on_grid(tas, method, points, grid_dir))
    print(verdict(method.name, summary))
    return summary
