"""The paper's tables from ``scores``: Table 1/3 (merges vs the base) and Table 2 (merges vs the best expert).

A cell for (method, n) is ``P / D`` over the k evaluated subsets at that n (Hitit et al., arXiv 2511.21437, §3.3):
  P = percentage of subsets whose mean accuracy is strictly above the reference (rounded to an integer);
  D = mean over the k subsets of (mean accuracy - reference accuracy), in percentage points.
The n = 1 column holds the experts alone (the same for every method). Only models with ``status == ok`` count.
"""

from typing import List, Optional

OK = "ok"


def _cells(means, reference: float):
    k = len(means)
    beat = sum(1 for m in means if m > reference)
    return {"k": k, "pct_beat": 100.0 * beat / k, "mean_diff_pp": sum(m - reference for m in means) / k}


def interference_table(df, reference: float, reference_name: str):
    """Long table: one row per (method variant, n) with k, pct_beat and mean_diff_pp against ``reference``."""
    import pandas as pd

    ok = df[df["status"] == OK]
    experts = ok[ok["kind"] == "expert"]["mean"].tolist()
    merges = ok[ok["kind"].isin(["merge", "composition"])]  # composition baselines sit next to the merges
    rows = []
    for variant in dict.fromkeys(merges["variant"]):  # keeps the method order of ``scores``
        sub = merges[merges["variant"] == variant]
        if experts:
            rows.append({"method": variant, "n": 1, **_cells(experts, reference)})
        for n in sorted(sub["n"].dropna().unique()):
            rows.append({"method": variant, "n": int(n), **_cells(sub[sub["n"] == n]["mean"].tolist(), reference)})
    out = pd.DataFrame(rows, columns=["method", "n", "k", "pct_beat", "mean_diff_pp"])
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
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method in dict.fromkeys(table["method"]):
        cells = [method, f"{reference:.1f}"]
        for n in ns:
            hit = table[(table["method"] == method) & (table["n"] == n)]
            if hit.empty:
                cells.append("")
                continue
            r = hit.iloc[0]
            cell = f"{r['pct_beat']:.0f} / {r['mean_diff_pp']:+.2f}"
            cells.append(cell + (f" (k={int(r['k'])})" if int(r["k"]) != k_of[n] else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def references(df):
    """(base mean, best expert id, best expert mean); None where that model has no score."""
    ok = df[df["status"] == OK]
    base = ok[ok["kind"] == "base"]["mean"]
    experts = ok[ok["kind"] == "expert"]
    best = experts.loc[experts["mean"].idxmax()] if not experts.empty else None
    return (float(base.iloc[0]) if not base.empty else None,
            best["model_id"] if best is not None else None,
            float(best["mean"]) if best is not None else None)


def scores_table(df, tasks: List[str]):
    cols = ["model_id", "kind", "method", "method_label", "variant", "n", "subset_id", "hparams", "experts",
            "status", "error", "job_id"] + tasks + ["mean"]
    return df[cols]


def summary_markdown(df, tasks: List[str], digits: int = 1, columns: Optional[List[str]] = None) -> str:
    """Per method variant and n: mean and std of each task and of the mean (the numbers behind the plots)."""
    ok = df[df["status"] == OK]
    columns = columns or tasks + ["mean"]
    head = ["Model", "n", "k"] + columns
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant in dict.fromkeys(ok["variant"]):
        sub = ok[ok["variant"] == variant]
        for n in sorted(sub["n"].dropna().unique()):
            g = sub[sub["n"] == n]
            cells = [f"{g[c].mean():.{digits}f}" + (f" ± {g[c].std(ddof=0):.{digits}f}" if len(g) > 1 else "")
                     for c in columns]
            lines.append("| " + " | ".join([variant, str(int(n)), str(len(g))] + cells) + " |")
    return "\n".join(lines) + "\n"


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
    head = ["Method", "n", "k"] + tasks + ["mean"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in table.iterrows():
        lines.append("| " + " | ".join([str(r["method"]), str(r["n"]), str(r["k"])]
                                       + [f"{r[t]:+.2f}" for t in tasks + ["mean"]]) + " |")
    return "\n".join(lines) + "\n"
