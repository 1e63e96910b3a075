"""The hyperparameters each run chose, side by side across runs (seeds): per run and method, the grid's choice (the
report's sweep selection: on the validation splits where the suite has them, else on test) and the TAS choice
(``wildmerge sample --tune``, the run's manifest); then, per method and rule, how often each setting was chosen.
A choice that changes from seed to seed is a choice the data do not pin down.
"""

from typing import List, Optional

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.report.sweeps import ON_VALIDATION, selection, sweep_table, sweeps

ROWS = ["run", "method", "rule", "setting", "test_mean"]
COUNTS = ["method", "rule", "setting", "chosen", "runs"]


def run_choices(data, df, label: str) -> List[dict]:
    """One run's choices: one row per sweep (the grid's choice) and per method tuned by TAS."""
    from wildmerge.recipes.labels import method_label

    rows = []
    for rows_of_sweep in sweeps(df).values():
        table = sweep_table(rows_of_sweep, None)
        picked = selection(table)
        if picked is None:
            continue
        rule = "grid, on validation" if picked["rule"] == ON_VALIDATION else "grid, on test"
        rows.append({"run": label, "method": table["method"].iloc[0], "rule": rule,
                     "setting": picked["chosen_setting"], "test_mean": picked["chosen_test_mean"]})
    tuned = data.manifest.tuned if data.manifest else {}
    for name, chosen in tuned.items():
        hp = chosen.get("hparams") or {}
        rule = "AdaMMS*" if chosen.get("rule") == "adamms" else "TAS"
        rows.append({"run": label, "method": method_label(name), "rule": rule,
                     "setting": ", ".join(f"{k}={v}" for k, v in sorted(hp.items())), "test_mean": float("nan")})
    return rows


def choice_tables(per_run: List[List[dict]]):
    """(every run's choices, how often each setting was chosen per method and rule, of how many runs that made that
    choice at all); (None, None) when no run chose anything."""
    import pandas as pd

    rows = [r for run in per_run for r in run]
    if not rows:
        return None, None
    table = pd.DataFrame(rows, columns=ROWS)
    runs = table.groupby(["method", "rule"], sort=False)["run"].nunique().rename("runs")
    counts = (table.groupby(["method", "rule", "setting"], sort=False)["run"].nunique().rename("chosen")
              .reset_index().join(runs, on=["method", "rule"]))
    return table, counts[COUNTS]


def choices_markdown(table, counts) -> Optional[str]:
    runs = list(dict.fromkeys(table["run"]))
    wide = table.pivot_table(index=["method", "rule"], columns="run", values="setting", aggfunc="first", sort=False)
    body = [[m, r, *[wide.loc[(m, r)].get(run, "") if (m, r) in wide.index else "" for run in runs]]
            for m, r in wide.index]
    body = [[c if isinstance(c, str) else "" for c in row] for row in body]
    count_rows = [[r.method, r.rule, r.setting, f"{r.chosen} of {r.runs}"] for r in counts.itertuples()]
    return ("## Hyperparameters chosen across runs\n\nPer method and rule, the setting each run chose (grid: the "
            "report's sweep selection; TAS / AdaMMS*: `sample --tune`), then how often each setting was chosen.\n\n"
            + markdown_table(body, ["Method", "rule", *runs]) + "\n"
            + markdown_table(count_rows, ["Method", "rule", "setting", "chosen (runs)"]))
