"""The task-vector norm in the report: the ``task_vector_norm`` column of every model, and what is drawn from it.

``add_norms`` fills the column (``||theta - theta_base||_2`` of every merge and expert, streamed, cached in
``RUN/eval/norms.json``); the rest only reads it: each expert's whole-model norm as bars (the reality-check paper,
Fig. 5 left and Fig. 12), mean accuracy against the norm for the main protocol's merges (Hitit et al., Figs. 3 and 4
read together: do larger merges score lower?), and the norm-balanced against norm-unbalanced subsets table (the
reality-check paper, Fig. 6; ``pool.balance.balance_table``). The report writes each figure's numbers beside it
as a CSV.
"""

from pathlib import Path
from typing import Dict, List

from wildmerge.analysis.plotting import pyplot, save_figure, style
from wildmerge.analysis.pool.norms import NormCache
from wildmerge.analysis.report.plots import NORM_LABEL, OK

BALANCE_CAPTION = "Norm-balanced against norm-unbalanced subsets (the reality-check paper, Fig. 6)"


def add_norms(data, df, notes: List[str]) -> None:
    """Task-vector norm of every merge and expert against the base (one streaming pass over the base for all of
    them; cached in RUN/eval/norms.json)."""
    entries = data.entries
    base = next(e.path for e in entries.values() if e.kind == "base")
    cache = NormCache(data.run.norms_cache)
    # a composition keeps its experts: it has no weights of its own
    wanted = {m: entries[m].path for m, kind in zip(df["model_id"], df["kind"]) if kind not in ("base", "composition")}
    found = cache.norms(wanted, base)
    values = []
    for model_id in df["model_id"]:
        value = found.get(model_id, float("nan"))
        if isinstance(value, Exception):
            notes.append(f"{model_id}: no task-vector norm ({value})")
            value = float("nan")
        values.append(value)
    cache.save()
    df["task_vector_norm"] = values


def expert_norms(df) -> Dict[str, float]:
    """{expert name: its whole-model task-vector norm}, read from the experts' rows (name: its ``experts`` cell)."""
    rows = df[(df["kind"] == "expert") & df["task_vector_norm"].notna()]
    return {(e or m): float(v) for m, e, v in zip(rows["model_id"], rows["experts"].fillna(""), rows["task_vector_norm"])}


def norm_per_task_table(df):
    """One row per expert (its task) with its whole-model task-vector norm; None when no expert has one."""
    import pandas as pd

    norms = expert_norms(df)
    return pd.DataFrame({"expert": list(norms), "task_vector_norm": list(norms.values())}) if norms else None


def draw_norm_per_task(table, out_dir, title: str) -> Dict[str, Path]:
    """Bars: each expert's (task's) whole-model task-vector norm, in the order of ``table``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 0.6 * len(table) + 2), 4))
    ax.bar(range(len(table)), table["task_vector_norm"], color="C0")
    ax.set_xticks(range(len(table)), table["expert"], rotation=45, ha="right")
    ax.set_ylabel("task-vector norm ‖θ_t − θ_base‖₂ (L2, weight units)")
    ax.set_xlabel("expert (its task)")
    ax.set_title(f"{title}: whole-model task-vector norm per task", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    return save_figure(fig, Path(out_dir) / "norm_per_task")


def accuracy_vs_norm_points(protocol):
    """Every scored main-protocol merge and expert with a norm: series (method, or "experts alone"), model id, n,
    norm and mean accuracy; None without a merge."""
    ok = protocol[(protocol["status"] == OK) & protocol["task_vector_norm"].notna()
                  & protocol["kind"].isin(["expert", "merge"])]
    if not (ok["kind"] == "merge").any():
        return None
    ok = ok.assign(series=ok["variant"].where(ok["kind"] == "merge", "experts alone"))
    return ok[["series", "model_id", "n", "task_vector_norm", "mean"]].reset_index(drop=True)


def draw_accuracy_vs_norm(points, out_dir, title: str) -> Dict[str, Path]:
    """Scatter: mean accuracy against task-vector norm, one colour and marker per series."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, series in enumerate(dict.fromkeys(points["series"])):
        g = points[points["series"] == series]
        st = style(i)
        ax.scatter(g["task_vector_norm"], g["mean"], color=st["color"], marker=st["marker"], s=30, label=series)
    ax.set_xlabel(NORM_LABEL)
    ax.set_ylabel("mean accuracy (%)")
    ax.set_title(f"{title}: accuracy against task-vector norm")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, Path(out_dir) / "accuracy_vs_norm")


def balance_frame(protocol):
    """The main protocol's merges of each method and size, split at the median max/min norm ratio of their experts
    (``pool.balance.balance_table``); None when no size has two merges of different balance."""
    import pandas as pd

    from wildmerge.analysis.pool.balance import balance_table

    norms = expert_norms(protocol)
    merges = protocol[protocol["kind"] == "merge"]
    usable = merges["experts"].fillna("").map(lambda e: bool(e) and all(x in norms for x in e.split(";")))
    rows = balance_table(merges[usable.astype(bool)], norms) if norms and len(merges) else []
    return pd.DataFrame(rows) if rows else None


def balance_markdown(table) -> str:
    from wildmerge.analysis.markdown import markdown_table

    rows = [[r.method, str(r.n), str(r.merges), f"{r.balanced_ratio:.3f}", f"{r.balanced_mean:.2f}",
             f"{r.unbalanced_ratio:.3f}", f"{r.unbalanced_mean:.2f}", f"{r.diff_pp:+.2f}"]
            for r in table.itertuples()]
    return markdown_table(rows, ["Method", "n", "merges", "balanced max/min", "balanced mean (%)",
                                 "unbalanced max/min", "unbalanced mean (%)", "balanced − unbalanced (pp)"])


def draw_balance(table, out_dir, title: str) -> Dict[str, Path]:
    """Fig. 6: per method and n, the mean accuracy of the balanced merges beside the unbalanced ones (one pair of
    bars each, the numbers of ``table_balance.csv``), each bar labelled with its mean max/min norm ratio."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 1.1 * len(table) + 2), 4.2))
    xs = range(len(table))
    for offset, side, colour in ((-0.2, "balanced", "C0"), (0.2, "unbalanced", "C3")):
        bars = ax.bar([x + offset for x in xs], table[f"{side}_mean"], width=0.4, color=colour,
                      label=f"{side} (max/min norm ≤ median)" if side == "balanced" else f"{side} (above the median)")
        for bar, ratio in zip(bars, table[f"{side}_ratio"]):
            ax.annotate(f"{ratio:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [f"{m}\nn = {n}" for m, n in zip(table["method"], table["n"])], fontsize=8)
    ax.set_xlabel("method and number of merged experts n")
    ax.set_ylabel("mean accuracy (%) of the merges")
    ax.set_title(f"{title}: norm-balanced against norm-unbalanced subsets (bar label: mean max/min norm)",
                 fontsize=10)
    low = min(table["balanced_mean"].min(), table["unbalanced_mean"].min())
    high = max(table["balanced_mean"].max(), table["unbalanced_mean"].max())
    ax.set_ylim(max(0.0, low - 0.1 * (high - low + 1)), high + 0.15 * (high - low + 1))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="best")
    return save_figure(fig, Path(out_dir) / "balance")
