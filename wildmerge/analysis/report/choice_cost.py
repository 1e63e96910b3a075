"""The cost of choosing each method's hyperparameters: a grid evaluated on validation data against one TAS sweep.

The reality-check paper (Zhou et al. 2026) prices a merging method by what choosing its hyperparameters costs
(Table 1's merging cost, GPU time; Fig. 2): a hyperparameter-based method merges and evaluates every grid point,
while the task alignment score (TAS) scores each candidate in memory on a few batches of the experts' own data.
From a run's records, per method:

- grid: the method's sweep points (``wildmerge sample --ablation / --grid``, ``recipes/sweeps.py``): merges and
  their ``merge_info.json`` seconds, evaluations and their result records' seconds. One evaluation job scores the
  test split and the validation splits together, so its seconds bound the validation scoring from above;
- TAS: the candidates a ``wildmerge sample --tune`` sweep scored and their seconds (``analysis/tas``); the experts'
  features, computed once and shared by every method's sweep, are a line of their own.
"""

from pathlib import Path
from typing import Dict, Optional

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.report.sweeps import ON_VALIDATION
from wildmerge.recipes.labels import method_label

COLUMNS = ["method", "grid_points", "grid_merges_timed", "grid_merge_seconds", "grid_evaluations",
           "grid_eval_seconds", "grid_seconds", "tas_candidates", "tas_seconds", "grid_over_tas"]
CAPTION = ("Cost of choosing hyperparameters per method (the reality-check paper's Table 1, merging cost, and "
           "Fig. 2): a grid merged and evaluated against one TAS sweep")


def choice_cost(entries, merge_seconds: Dict[str, float], eval_seconds: Dict[str, float], tas: dict):
    """One row per method with a grid or a TAS sweep. ``entries``: the plan's entries (a grid point is a merge with
    ``ablations``); ``merge_seconds`` / ``eval_seconds``: model id -> seconds from its records; ``tas``:
    ``analysis.tas.sweep.recorded_cost`` of the run's tune folder."""
    import pandas as pd

    grid: Dict[str, list] = {}
    for e in entries:
        if e.kind == "merge" and e.ablations and e.method:
            grid.setdefault(e.method, []).append(e.model_id)
    rows = []
    for method in list(dict.fromkeys([*grid, *(m for m in tas if m is not None)])):
        points = grid.get(method, [])
        merged = [merge_seconds[m] for m in points if m in merge_seconds]
        scored = [eval_seconds[m] for m in points if m in eval_seconds]
        total = sum(merged) + sum(scored) if points else float("nan")
        candidates, tas_seconds = tas.get(method, (0, float("nan")))
        rows.append({"method": method_label(method), "grid_points": len(points), "grid_merges_timed": len(merged),
                     "grid_merge_seconds": sum(merged), "grid_evaluations": len(scored),
                     "grid_eval_seconds": sum(scored), "grid_seconds": total, "tas_candidates": candidates,
                     "tas_seconds": tas_seconds,
                     "grid_over_tas": total / tas_seconds if tas_seconds and tas_seconds == tas_seconds else
                     float("nan")})
    return pd.DataFrame(rows, columns=COLUMNS)


def choice_cost_markdown(table, tas: dict, validated: bool) -> str:
    """The report's section: the table, what each column counts and the TAS features' shared cost."""
    if table.empty:
        return ""

    def num(v, digits=1):
        return "" if v != v else f"{v:.{digits}f}"

    rows = [[r["method"], r["grid_points"], f"{r['grid_merges_timed']} / {num(r['grid_merge_seconds'])}",
             f"{r['grid_evaluations']} / {num(r['grid_eval_seconds'])}", num(r["grid_seconds"]),
             f"{r['tas_candidates']} / {num(r['tas_seconds'])}", num(r["grid_over_tas"])]
            for _, r in table.iterrows()]
    shared = tas.get(None)
    on = ("The grid is chosen on the validation splits (each evaluation also scores the test split, so its seconds "
          "bound the validation cost from above)" if validated else
          "This suite has no validation split: the grid is chosen on test, at the same cost")
    return (f"## {CAPTION}\n\n"
            f"Wall seconds from the run's records: grid = the method's sweep points, merged (`merge_info.json`) and "
            f"evaluated (result records); TAS = the candidates `wildmerge sample --tune` scored in memory. {on}. "
            + (f"The experts' TAS features, computed once for every method's sweep: {num(shared[1])} s.\n\n"
               if shared else "\n\n")
            + markdown_table(rows, ["Method", "grid points", "merges / s", "evaluations / s", "grid s",
                                    "TAS candidates / s", "grid / TAS"]))


POINT_COLUMNS = ["method", "choice", "choice_seconds", "accuracy", "n", "merges", "setting", "model_ids", "source"]
FIGURE_CAPTION = ("Accuracy against the cost of choosing hyperparameters, each method by its grid and by TAS (the "
                  "reality-check paper's Fig. 2)")


def _matches(hparams: str, chosen: dict) -> bool:
    import json

    hp = json.loads(hparams) if hparams else {}
    return all(k in hp and hp[k] == v for k, v in chosen.items())


def _grid_point(rows) -> Optional[dict]:
    """The grid's choice: the report's sweep selection (``sweeps.selection``) over the method's sweep points."""
    from wildmerge.analysis.report.sweeps import selection, sweep_table

    picked = selection(sweep_table(rows, None)) if len(rows) else None
    if picked is None:
        return None
    on = "validation" if picked["rule"] == ON_VALIDATION else "test"
    n = rows.loc[rows["model_id"] == picked["chosen_model_id"], "n"].iloc[0]
    return {"choice": "grid", "accuracy": picked["chosen_test_mean"], "n": n, "merges": 1,
            "setting": picked["chosen_setting"], "model_ids": picked["chosen_model_id"],
            "source": f"the sweep point chosen on {on}, its test mean"}


def _tas_point(rows, main, chosen: dict) -> Optional[dict]:
    """The TAS choice's accuracy: the sweep point at the chosen settings where the grid has it (same pool as the
    grid's choice), else the method's main merges (made at the chosen settings) at their largest n, averaged."""
    setting = ", ".join(f"{k}={v}" for k, v in chosen.items())
    ok = rows[(rows["status"] == "ok") & rows["hparams"].map(lambda h: _matches(h, chosen))]
    if len(ok):
        r = ok.iloc[0]
        return {"choice": "TAS", "accuracy": float(r["mean"]), "n": r["n"], "merges": 1, "setting": setting,
                "model_ids": r["model_id"], "source": "the sweep point at the TAS choice"}
    main = main[main["status"] == "ok"]
    if main.empty:
        return None
    top = main[main["n"] == main["n"].max()]
    return {"choice": "TAS", "accuracy": float(top["mean"].mean()), "n": top["n"].iloc[0], "merges": len(top),
            "setting": setting, "model_ids": ";".join(top["model_id"]),
            "source": "the main merges at the TAS choice, largest n, mean over subsets"}


def choice_points(df, table, tuned: dict):
    """Fig. 2's points, one per method and way of choosing: grid (x: its merge + evaluation seconds, y: the chosen
    point's test mean) and TAS (x: its sweep's seconds, y: the accuracy at its choice; ``tuned``: the manifest's
    method -> what TAS chose). None without a point."""
    import pandas as pd

    from wildmerge.analysis.report.scores import protocol_rows

    merges = df[df["kind"] == "merge"]
    cost = table.set_index("method")
    rows = []
    for name in dict.fromkeys(merges["method"].dropna()):
        label = method_label(name)
        if label not in cost.index:
            continue
        mine = merges[merges["method"] == name]
        grid = mine[mine["ablations"].fillna("") != ""]
        found = [(_grid_point(grid), cost.loc[label, "grid_seconds"])]
        if name in tuned and tuned[name].get("hparams") is not None:
            main = protocol_rows(df)
            found.append((_tas_point(grid, main[main["method"] == name], tuned[name]["hparams"]),
                          cost.loc[label, "tas_seconds"]))
        rows += [{"method": label, "choice_seconds": float(seconds), **point} for point, seconds in found
                 if point is not None and seconds == seconds]
    return pd.DataFrame(rows, columns=POINT_COLUMNS) if rows else None


def draw_choice(points, out_dir, title: str) -> Dict[str, Path]:
    """Fig. 2: accuracy against the choosing cost (log seconds), one colour and marker per method, hollow for the
    grid and filled for TAS, the two joined by a line."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, method in enumerate(dict.fromkeys(points["method"])):
        g = points[points["method"] == method]
        st = style(i)
        ax.plot(g["choice_seconds"], g["accuracy"], color=st["color"], lw=0.8, alpha=0.6)
        for _, r in g.iterrows():
            tas = r["choice"] == "TAS"
            ax.scatter([r["choice_seconds"]], [r["accuracy"]], s=60, marker=st["marker"], color=st["color"],
                       facecolors=st["color"] if tas else "none", label=f"{method} + {'TAS' if tas else 'grid'}")
    ax.set_xscale("log")
    ax.set_xlabel("seconds spent choosing the hyperparameters (grid: merge + evaluate every point; TAS: its sweep)")
    ax.set_ylabel("mean test accuracy (%) at the choice")
    ax.set_title(f"{title}: accuracy against the cost of choosing", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, Path(out_dir) / "choice_cost_vs_accuracy")
