"""Hyperparameter sweeps (Hitit et al., arXiv 2511.21437, Appendix C, Figs. 11-18): accuracy against the swept value.

Every sweep merges the full pool once per point. Its table lists each point's settings, mean accuracy, the
difference to the base in percentage points and the task-vector norm; its figure plots mean accuracy against the
first swept parameter (one curve per value of the others, as in the TIES density x lambda grid) and, beside it,
against the merged task vector's L2 norm (Figs. 13-16). The sweep point at the recipe's settings is included.

Each sweep also reports one chosen point. Where the suite names validation splits (``eval/splits.py``) the point is
chosen on the validation mean and reported on the test mean, next to the best point on test (the oracle), as in the
fresh-head probe paper's Tables 3-4; without them the best point on test is all there is, and the table says so.

The parts of a preset (``com_components:regmean`` and ``com_components``) make one table. A sweep over layer-wise
merges also shows Chain of Merges' components as its Table 3 does: MCS (the chain: CoM, not RegMean), Norm, Sim.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

from wildmerge.analysis.markdown import markdown_table
from wildmerge.recipes.sweeps import preset_of

OK = "ok"
COMPONENTS = ("MCS", "Norm", "Sim")  # Chain of Merges' Table 3 columns (shown, not plotted)
VAL_MEAN = "val_mean"
VALUES = ("method", "model_id", "status", "mean", VAL_MEAN, "selected", "diff_vs_base_pp", "task_vector_norm")
ON_VALIDATION = "chosen on validation (best mean over the validation splits), reported on test"
ON_TEST = "chosen on test (no validation split)"


def sweeps(df) -> Dict[str, object]:
    """{sweep name: its merged models (rows of ``df``)}, in the order the sweeps were planned; the parts of a
    preset (``name:part``) are one sweep. A model's sweeps are its ``ablations`` (the run folder's name for them)."""
    names = [preset_of(a) for cell in df["ablations"].fillna("") for a in cell.split(";") if a]
    return {name: df[df["ablations"].fillna("").str.split(";").map(
                lambda cell, n=name: any(a and preset_of(a) == n for a in cell))]
            for name in dict.fromkeys(names)}


def _components(method: str, hp: dict) -> Dict[str, str]:
    """Chain of Merges' Table 3 columns for a layer-wise merge (empty for any other method)."""
    if "norm" not in hp or "sim" not in hp:
        return {}
    from wildmerge.errors import ConfigError
    from wildmerge.recipes.method import load_method_recipe

    try:
        chained = load_method_recipe(method).recipe.get("merge_method") == "chain_of_merges"
    except ConfigError:
        return {}
    mark = {True: "yes", False: "no"}
    return dict(zip(COMPONENTS, (mark[chained], mark[hp["norm"] != "none"], mark[bool(hp["sim"])])))


def swept_keys(rows) -> List[str]:
    """The hyperparameters that take more than one value in a sweep, in a stable order."""
    points = [json.loads(h) for h in rows["hparams"]]
    keys = sorted({k for p in points for k in p})
    return [k for k in keys if len({json.dumps(p.get(k)) for p in points}) > 1] or keys[:1]


def sweep_table(rows, base: Optional[float]):
    """One row per point: method, swept values, status, mean, diff vs base (pp), task-vector norm; with
    validation splits also the validation mean and which point is chosen (on validation) and which is the oracle."""
    import pandas as pd

    keys = swept_keys(rows)
    validated = VAL_MEAN in rows and rows[VAL_MEAN].notna().any()
    out = []
    for _, r in rows.iterrows():
        hp = json.loads(r["hparams"])
        mean = r["mean"] if r["status"] == OK else float("nan")
        val = {VAL_MEAN: r[VAL_MEAN] if r["status"] == OK else float("nan")} if validated else {}
        out.append({"method": r["method_label"], **_components(r["method"], hp), **{k: hp.get(k) for k in keys},
                    "model_id": r["model_id"],
                    "status": r["status"], "mean": mean, **val,
                    "diff_vs_base_pp": mean - base if base is not None else float("nan"),
                    "task_vector_norm": r.get("task_vector_norm", float("nan"))})
    table = pd.DataFrame(out).sort_values(keys, kind="stable").reset_index(drop=True)
    if validated:
        picked = selection(table)
        marks = {m: [] for m in table["model_id"]}
        for what, model in (("chosen", picked and picked["chosen_model_id"]),
                            ("oracle", picked and picked["oracle_model_id"])):
            if model:
                marks[model].append(what)
        table.insert(table.columns.get_loc(VAL_MEAN) + 1, "selected",
                     table["model_id"].map(lambda m: ", ".join(marks[m])))
    return table


def settings(table):
    """Each point's settings as one string (``lambda=0.5``; CoM's components too)."""
    keys = [c for c in table.columns if c not in VALUES]
    return table[keys].astype(str).apply(lambda r: ", ".join(f"{k}={v}" for k, v in r.items()), axis=1)


def selection(table) -> Optional[Dict[str, object]]:
    """The point a sweep reports and how it was chosen: the best validation mean where the sweep has validation
    scores, else the best test mean; beside it the best on test (the oracle, an optimistic number). Ties go to the
    first point in table order. None when no point has a score."""
    ok = table[(table["status"] == OK) & table["mean"].notna()]
    if ok.empty:
        return None
    oracle = ok.loc[ok["mean"].idxmax()]
    on_validation = VAL_MEAN in ok and ok[VAL_MEAN].notna().any()
    chosen = ok.loc[ok[VAL_MEAN].idxmax()] if on_validation else oracle
    text = settings(table)
    return {"rule": ON_VALIDATION if on_validation else ON_TEST,
            "chosen_model_id": chosen["model_id"], "chosen_setting": text[chosen.name],
            "chosen_val_mean": chosen[VAL_MEAN] if on_validation else float("nan"),
            "chosen_test_mean": chosen["mean"],
            "oracle_model_id": oracle["model_id"], "oracle_setting": text[oracle.name],
            "oracle_test_mean": oracle["mean"], "oracle_gap_pp": oracle["mean"] - chosen["mean"]}


def selection_markdown(picked: Optional[Dict[str, object]]) -> str:
    """One paragraph under a sweep's table: the rule, the chosen point, the oracle."""
    if picked is None:
        return "Selection: no point has a score.\n"
    chosen = f"`{picked['chosen_setting']}`"
    if picked["rule"] == ON_TEST:
        return (f"Selection: {ON_TEST}: {chosen}, test mean {picked['chosen_test_mean']:.2f} (the best on test: "
                f"an optimistic number, chosen on the items it is reported on).\n")
    return (f"Selection: {picked['rule']}: {chosen}, validation mean {picked['chosen_val_mean']:.2f}, "
            f"**test mean {picked['chosen_test_mean']:.2f}**; best on test (oracle): "
            f"`{picked['oracle_setting']}`, test mean {picked['oracle_test_mean']:.2f} "
            f"({picked['oracle_gap_pp']:.2f} pp above the chosen point).\n")


def plot_sweep(name: str, table, base: Optional[float], out_dir, title: str) -> Dict[str, Path]:
    """Accuracy vs the first swept value (curves per other values) and accuracy vs task-vector norm."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style
    from wildmerge.analysis.report.plots import NORM_LABEL

    plt = pyplot()
    keys = [c for c in table.columns if c not in (*VALUES, *COMPONENTS)]
    x, others = keys[0], keys[1:]
    ok = table[table["status"] == OK]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups = ok.groupby(others, sort=True) if others else [((), ok)]
    for i, (values, g) in enumerate(groups):
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"{k}={v}" for k, v in zip(others, values)) or table["method"].iloc[0]
        st = style(i)
        xs = g[x].map(_number)
        left.plot(xs, g["mean"], ms=5, lw=1.6, label=label, **st)
        right.plot(g["task_vector_norm"], g["mean"], ms=5, lw=0, label=label,
                   **{k: v for k, v in st.items() if k != "ls"})
    numeric = table[x].map(_number)
    if len(numeric) and (numeric > 0).all() and numeric.max() / numeric.min() >= 20:
        left.set_xscale("log")  # TA's lambda grid ends at 10 (Fig. 11)
    for ax in (left, right):
        if base is not None:
            ax.axhline(base, color="black", ls="--", lw=1.2, label="base")
        ax.set_ylabel("mean accuracy (%)")
        ax.grid(alpha=0.3)
    left.set_xlabel(f"{x} (swept hyperparameter, unitless)")
    right.set_xlabel(NORM_LABEL)
    left.legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: sweep {name} ({table['method'].iloc[0]})")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / f"sweep_{name}")


def _number(value):
    """Booleans and numbers as floats for the x axis."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def to_markdown(table, digits: int = 2) -> str:
    rows = [[f"{v:.{digits}f}" if isinstance(v, float) else v for v in r] for r in table.itertuples(index=False)]
    return markdown_table(rows, list(table.columns))
