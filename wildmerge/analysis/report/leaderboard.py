"""The paper's tables from ``scores``: Table 1/3 (merges vs the base) and Table 2 (merges vs the best expert).

A cell for (method, n) is ``P / D`` over the k evaluated subsets at that n (Hitit et al., arXiv 2511.21437, §3.3):
  P = percentage of subsets whose mean accuracy is strictly above the reference (rounded to an integer);
  D = mean over the k subsets of (mean accuracy - reference accuracy), in percentage points.
The n = 1 column holds the experts alone (the same for every method). Only models with ``status == ok`` count.

With screening (``wildmerge eval --screen``), a model that stopped on the screening subset enters a cell with its
paired difference to the reference on that subset (the estimate its stop was decided on), and the cell is marked.
"""

from typing import List, Optional

from wildmerge.analysis.markdown import markdown_table
from wildmerge.analysis.report.scores import SCREENING_COLUMNS, VAL_MEAN, validation_columns

OK = "ok"


def _cells(diffs, screened: int = 0):
    k = len(diffs)
    beat = sum(1 for d in diffs if d > 0)
    return {"k": k, "pct_beat": 100.0 * beat / k, "mean_diff_pp": sum(diffs) / k, "screened": screened}


def _diffs(rows, reference: float, paired: Optional[str]):
    """Each model's difference to the reference: the paired screening estimate for a model that stopped early."""
    diffs = rows["mean"] - reference
    if paired and paired in rows and "screened" in rows:
        stopped = rows["screened"].map(lambda v: v is True) & rows[paired].notna()
        diffs = diffs.where(~stopped, rows[paired])
        return diffs.tolist(), int(stopped.sum())
    return diffs.tolist(), 0


def interference_table(df, reference: float, reference_name: str, paired: Optional[str] = None):
    """Long table: one row per (method variant, n) with k, pct_beat and mean_diff_pp against ``reference``.
    ``paired``: the column with screened models' paired differences to this reference (``vs_base_diff``)."""
    import pandas as pd

    ok = df[df["status"] == OK]
    experts = ok[ok["kind"] == "expert"]["mean"].tolist()
    merges = ok[ok["kind"].isin(["merge", "composition"])]  # composition baselines sit next to the merges
    rows = []
    for variant in dict.fromkeys(merges["variant"]):  # keeps the method order of ``scores``
        sub = merges[merges["variant"] == variant]
        if experts:
            rows.append({"method": variant, "n": 1, **_cells([m - reference for m in experts])})
        for n in sorted(sub["n"].dropna().unique()):
            rows.append({"method": variant, "n": int(n), **_cells(*_diffs(sub[sub["n"] == n], reference, paired))})
    out = pd.DataFrame(rows, columns=["method", "n", "k", "pct_beat", "mean_diff_pp", "screened"])
    out.insert(2, "reference", reference_name)
    out.insert(3, "reference_acc", reference)
    return out


def to_markdown(table, reference_label: str, reference: float) -> str:
    """Wide table as in the paper: | Method | Base | n = 1 (12) | n = 2 (15) | ... with ``P / D`` cells."""
    if table.empty:
        return "_no merged model has a score yet_\n"
    ns = sorted(table["n"].unique())
    k_of = {n: int(table[table["n"] == n]["k"].max()) for n in ns}
    head = ["Method", reference_label] + [f"n = {n} ({k_of[n]})" for n in ns]
    rows = []
    for method in dict.fromkeys(table["method"]):
        cells = [method, f"{reference:.1f}"]
        for n in ns:
            hit = table[(table["method"] == method) & (table["n"] == n)]
            if hit.empty:
                cells.append("")
                continue
            r = hit.iloc[0]
            cell = f"{r['pct_beat']:.0f} / {r['mean_diff_pp']:+.2f}" + ("†" if r.get("screened", 0) else "")
            cells.append(cell + (f" (k={int(r['k'])})" if int(r["k"]) != k_of[n] else ""))
        rows.append(cells)
    md = markdown_table(rows, head)
    if "screened" in table and table["screened"].sum():
        md += ("\n† some of the cell's models stopped on the screening subset (`--screen`): their difference is the "
               "paired estimate on that subset; see the screening section\n")
    return md


def screening_markdown(df) -> str:
    """The screening intervals of every merge of a screened evaluation (empty when there was none)."""
    ok = df[(df["status"] == OK) & df["kind"].isin(["merge", "composition"])]
    if "vs_base_low" not in ok or ok["vs_base_low"].isna().all():
        return ""
    stopped = int(ok["screened"].map(lambda v: v is True).sum())
    rows = []
    for _, r in ok.iterrows():
        if r["vs_base_low"] != r["vs_base_low"]:  # NaN: no interval (a reference had no score)
            continue
        rows.append([r["model_id"], "" if r["n"] != r["n"] else int(r["n"]),
                     "screened" if r["screened"] is True else "full",
                     f"{r['vs_base_diff']:+.2f} [{r['vs_base_low']:+.2f}, {r['vs_base_high']:+.2f}]",
                     f"{r['vs_best_diff']:+.2f} [{r['vs_best_low']:+.2f}, {r['vs_best_high']:+.2f}]"])
    return ("## Screening (paired bootstrap, 95 % intervals on the screening subset)\n\n"
            f"{stopped} of {len(ok)} merged model(s) stopped on the screening subset: both intervals excluded zero, so "
            f"whether they beat the base and the best expert was decided; the others were scored on every item. "
            f"Differences in percentage points.\n\n"
            + markdown_table(rows, ["Model", "n", "stage", "vs base: D [low, high]", "vs best expert: D [low, high]"]))


def references(df):
    """(base mean, best expert id, best expert mean); None where that model has no score."""
    ok = df[df["status"] == OK]
    base = ok[ok["kind"] == "base"]["mean"]
    experts = ok[ok["kind"] == "expert"]
    best = experts.loc[experts["mean"].idxmax()] if not experts.empty else None
    return (float(base.iloc[0]) if not base.empty else None,
            best["model_id"] if best is not None else None,
            float(best["mean"]) if best is not None else None)


def paper_tables(protocol) -> dict:
    """{"vs_base": Tables 1 and 3, "vs_best": Table 2} of the main protocol's rows; a table whose reference model has
    no score is left out."""
    base, best_id, best = references(protocol)
    tables = {}
    if base is not None:
        tables["vs_base"] = interference_table(protocol, base, "base", paired="vs_base_diff")
    if best is not None:
        tables["vs_best"] = interference_table(protocol, best, f"best expert {best_id}", paired="vs_best_diff")
    return tables


def scores_table(df, tasks: List[str]):
    cols = ["model_id", "kind", "method", "method_label", "variant", "n", "subset_id", "hparams", "experts",
            "status", "error", "job_id"] + tasks + ["mean"]
    if "vs_base_low" in df and df["vs_base_low"].notna().any():  # a screened evaluation: its intervals too
        cols += [c for c in SCREENING_COLUMNS if c in df]
    if VAL_MEAN in df and df[VAL_MEAN].notna().any():  # validation splits: their scores and mean too
        cols += validation_columns(df) + [VAL_MEAN]
    return df[cols]


def summary_markdown(df, tasks: List[str], digits: int = 1, columns: Optional[List[str]] = None) -> str:
    """Per method variant and n: mean and std of each task and of the mean (the numbers behind the plots)."""
    ok = df[df["status"] == OK]
    columns = columns or tasks + ["mean"]
    rows = []
    for variant in dict.fromkeys(ok["variant"]):
        sub = ok[ok["variant"] == variant]
        for n in sorted(sub["n"].dropna().unique()):
            g = sub[sub["n"] == n]
            rows.append([variant, int(n), len(g)] + [f"{g[c].mean():.{digits}f}" + (
                f" ± {g[c].std(ddof=0):.{digits}f}" if len(g) > 1 else "") for c in columns])
    return markdown_table(rows, ["Model", "n", "k"] + columns)


def task_change_table(df, tasks: List[str]):
    """Per method variant and n: mean over the k subsets of (task accuracy - the base's), in percentage points,
    for every task. n = 1 rows are the experts alone. The numbers behind the per-task claims of the paper's §4."""
    import pandas as pd

    ok = df[df["status"] == OK]
    base = ok[ok["kind"] == "base"]
    if base.empty:
        return pd.DataFrame(columns=["method", "n", "k"] + tasks + ["mean"])
    ref = base.iloc[0]
    rows = []
    experts = ok[ok["kind"] == "expert"]
    merges = ok[ok["kind"] == "merge"]
    groups = ([("experts alone", 1, experts)] if len(experts) else [])
    for variant in dict.fromkeys(merges["variant"]):
        sub = merges[merges["variant"] == variant]
        groups += [(variant, int(n), sub[sub["n"] == n]) for n in sorted(sub["n"].dropna().unique())]
    for name, n, g in groups:
        rows.append({"method": name, "n": n, "k": len(g),
                     **{t: float((g[t] - ref[t]).mean()) for t in tasks + ["mean"]}})
    return pd.DataFrame(rows, columns=["method", "n", "k"] + tasks + ["mean"])


def change_markdown(table, tasks: List[str]) -> str:
    if table.empty:
        return "_the base model has no score_\n"
    rows = [[r["method"], r["n"], r["k"]] + [f"{r[t]:+.2f}" for t in tasks + ["mean"]] for _, r in table.iterrows()]
    return markdown_table(rows, ["Method", "n", "k"] + tasks + ["mean"])


def expert_tasks(run) -> dict:
    """{expert: its declared suite tasks} from the run's pool file (the experts' ``tasks:`` field); empty when the
    pool declares none or its file is gone."""
    from wildmerge.errors import WildmergeError
    from wildmerge.pools import load_pool

    manifest = run.read_manifest()
    if manifest is None or not manifest.pool_file:
        return {}
    try:
        pool = load_pool(manifest.pool_file)
    except (WildmergeError, OSError):
        return {}
    return {e.label: list(e.tasks) for e in pool.experts if e.tasks}


def _name(row) -> str:
    """An expert row's expert name: its ``experts`` cell, else its model id."""
    cell = row.get("experts")
    return str(cell) if isinstance(cell, str) and cell else str(row["model_id"])


def add_normalized(df, tasks_of: dict, lower_is_better=()) -> None:
    """Column ``normalized``: the reality-check paper's normalized performance (Zhou et al. 2026, Sec. 4:
    1/T sum_t rho_t(merged) / rho_t(theta_t), with rho = 1 / metric where lower is better): for each of a model's
    experts that declares tasks, the mean over its own tasks of the model's score over the expert's (the expert's
    over the model's for a task in ``lower_is_better``), averaged over those experts. An expert scores 1; the base,
    models without a declaring expert and tasks where a score is not positive stay out."""
    ok = df[df["status"] == OK]
    # an expert's row by the expert's name (its ``experts`` cell: the run names it ``expert__<name>``)
    alone = {_name(r): r for _, r in ok[ok["kind"] == "expert"].iterrows()}
    lower = set(lower_is_better)
    values = []
    for _, row in df.iterrows():
        members = [_name(row)] if row["kind"] == "expert" else [e for e in str(row["experts"]).split(";") if e]
        per_expert = []
        for expert in members:
            own = [t for t in tasks_of.get(expert, []) if t in df.columns]
            if row["status"] != OK or expert not in alone or not own:
                continue
            ref = alone[expert]
            pairs = [(ref[t], row[t]) if t in lower else (row[t], ref[t]) for t in own]
            ratios = [top / bottom for top, bottom in pairs if bottom > 0 and top >= 0]
            if ratios:
                per_expert.append(sum(ratios) / len(ratios))
        values.append(sum(per_expert) / len(per_expert) if per_expert else float("nan"))
    df["normalized"] = values
