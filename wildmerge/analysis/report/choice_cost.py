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

from typing import Dict

from wildmerge.analysis.markdown import markdown_table
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
