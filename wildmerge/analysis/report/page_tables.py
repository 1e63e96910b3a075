"""What the leaderboard page shows: the report's tables as page tables, one row per model with its links."""

from typing import Dict, List

from wildmerge.analysis.report.page import Column, Figure, render_page, table_from_frame


def _summary(protocol, tables) -> "object":
    """Methods x n: k, mean ± std of the mean accuracy, P / D against the base and against the best expert."""
    import pandas as pd

    ok = protocol[protocol["status"] == "ok"]
    experts = ok[ok["kind"] == "expert"]
    merges = ok[ok["kind"] == "merge"]
    rows = []
    for variant in dict.fromkeys(merges["variant"]):
        sub = merges[merges["variant"] == variant]
        groups = ([(1, experts)] if len(experts) else []) + [(int(n), sub[sub["n"] == n])
                                                             for n in sorted(sub["n"].dropna().unique())]
        for n, g in groups:
            rows.append({"method": variant, "n": n, "k": len(g), "mean": g["mean"].mean(),
                         "std": g["mean"].std(ddof=0), "norm": g["task_vector_norm"].mean(),
                         "normalized": g["normalized"].mean() if "normalized" in g else float("nan")})
    out = pd.DataFrame(rows, columns=["method", "n", "k", "mean", "std", "norm", "normalized"])
    for key, suffix in (("vs_base", "base"), ("vs_best", "best")):
        t = tables.get(key)
        if t is not None and len(t):
            t = t[["method", "n", "pct_beat", "mean_diff_pp"]].rename(
                columns={"pct_beat": f"p_{suffix}", "mean_diff_pp": f"d_{suffix}"})
            out = out.merge(t, on=["method", "n"], how="left")
    return out


def _models_table(df, tasks: List[str], links: Dict[str, str]):
    """Every model of the run: its experts, its recipe and model card (merged models) and its job's status."""
    models = df.assign(folder=df["model_id"].map(links), recipe=df["model_id"].map(
        lambda m: f"{links[m]}/recipe.yml" if m in links else None), card=df["model_id"].map(
        lambda m: f"{links[m]}/README.md" if m in links else None),
        recipe_label=df["model_id"].map(lambda m: "recipe.yml" if m in links else None),
        card_label=df["model_id"].map(lambda m: "README.md" if m in links else None))
    return table_from_frame("models", "Every model", models, [
        Column(key="model_id", label="model", link="folder"), Column(key="kind", filter=True),
        Column(key="variant", label="method", filter=True), Column(key="group", filter=True),
        Column(key="n", filter=True), Column(key="subset_id", label="subset"),
        Column(key="domain", filter=True), Column(key="experts"), Column(key="status", filter=True),
        Column(key="mean", label="mean (%)", digits=2)] + [Column(key=t, label=f"{t} (%)", digits=2) for t in tasks]
        + [Column(key="normalized", label="normalized acc.", digits=3)]
        + [Column(key="task_vector_norm", label="‖τ‖₂", digits=3), Column(key="recipe_label", label="recipe",
                                                                           link="recipe"),
           Column(key="card_label", label="model card", link="card"), Column(key="job_id", label="job"),
           Column(key="error")],
        "One row per model of the run: its experts, its recipe and model card (merged models), and the status of its "
        "evaluation job.")


def build_page(run: str, suite: str, df, tasks: List[str], tables: Dict[str, object], figures, links: Dict[str, str],
               notes: List[str]) -> str:
    from wildmerge.analysis.report.scores import protocol_rows

    protocol = protocol_rows(df)
    summary = _summary(protocol, tables)
    page_tables = [table_from_frame("methods", "Methods × n", summary, [
        Column(key="method", label="method", filter=True), Column(key="n", label="n", filter=True),
        Column(key="k", label="k"), Column(key="mean", label="mean acc. (%)", digits=2),
        Column(key="std", label="std", digits=2), Column(key="p_base", label="% > base", digits=0),
        Column(key="d_base", label="Δ base (pp)", digits=2), Column(key="p_best", label="% > best expert", digits=0),
        Column(key="d_best", label="Δ best expert (pp)", digits=2),
        Column(key="normalized", label="normalized acc.", digits=3), Column(key="norm", label="‖τ‖₂", digits=3)],
        "The main protocol (Tables 1-3): each method at its recipe's settings on random subsets; n = 1 is the "
        "experts alone; normalized acc.: the reality-check paper's normalized performance (its Tables 1 and 4): each "
        "expert's own tasks (pool `tasks:`), model over expert, inverted for a lower-is-better metric. "
        "Click a header to sort, type to filter.")]
    change = tables.get("task_change")
    if change is not None and len(change):
        page_tables.append(table_from_frame(
            "tasks", "Per-task change vs the base", change,
            [Column(key="method", filter=True), Column(key="n", filter=True), Column(key="k")]
            + [Column(key=t, label=f"{t} (pp)", digits=2) for t in tasks] + [Column(key="mean", label="mean (pp)",
                                                                                   digits=2)],
            "Mean over subsets of (task accuracy − the base's), in percentage points."))
    sweeps = tables.get("sweeps")
    if sweeps is not None:
        validated = "selected" in sweeps
        page_tables.append(table_from_frame("sweeps", "Hyperparameter sweeps (Appendix C)", sweeps, [
            Column(key="sweep", filter=True), Column(key="method", filter=True), Column(key="setting"),
            Column(key="model_id"), Column(key="status", filter=True), Column(key="mean", label="mean (%)", digits=2)]
            + ([Column(key="val_mean", label="validation mean (%)", digits=2), Column(key="selected", filter=True)]
               if validated else []) + [
            Column(key="diff_vs_base_pp", label="Δ base (pp)", digits=2),
            Column(key="task_vector_norm", label="‖τ‖₂", digits=3)],
            "chosen: the point with the best validation mean, whose test mean is the number to report; oracle: the "
            "best test mean (optimistic)." if validated else
            "Points are chosen on test (no validation split): the best mean is an optimistic number."))
    balance = tables.get("balance")
    if balance is not None:
        page_tables.append(table_from_frame("balance", "Norm-balanced against norm-unbalanced subsets (the "
                                            "reality-check paper, Fig. 6)", balance, [
            Column(key="method", filter=True), Column(key="n", filter=True), Column(key="merges"),
            Column(key="balanced_ratio", label="balanced max/min", digits=3),
            Column(key="balanced_mean", label="balanced mean (%)", digits=2),
            Column(key="unbalanced_ratio", label="unbalanced max/min", digits=3),
            Column(key="unbalanced_mean", label="unbalanced mean (%)", digits=2),
            Column(key="diff_pp", label="balanced − unbalanced (pp)", digits=2)],
            "Split at the median max/min whole-model task-vector norm of each size's merges."))
    homogeneous = tables.get("homogeneous")
    if homogeneous is not None:
        page_tables.append(table_from_frame("homogeneous", "Homogeneous vs heterogeneous merges", homogeneous, [
            Column(key="method", filter=True), Column(key="configuration", filter=True), Column(key="n"),
            Column(key="k"), Column(key="mean", label="mean (%)", digits=2),
            Column(key="diff_vs_base_pp", label="Δ base (pp)", digits=2)]))
    choice = tables.get("choice_cost")
    if choice is not None:
        from wildmerge.analysis.report.choice_cost import CAPTION

        page_tables.append(table_from_frame("choice_cost", "Cost of choosing hyperparameters", choice, [
            Column(key="method", filter=True), Column(key="grid_points", label="grid points"),
            Column(key="grid_merge_seconds", label="grid merges (s)", digits=1),
            Column(key="grid_evaluations", label="grid evaluations"),
            Column(key="grid_eval_seconds", label="grid evaluations (s)", digits=1),
            Column(key="grid_seconds", label="grid (s)", digits=1), Column(key="tas_candidates", label="TAS candidates"),
            Column(key="tas_seconds", label="TAS (s)", digits=1), Column(key="grid_over_tas", label="grid / TAS",
                                                                        digits=1)], CAPTION + "."))
    page_tables.append(_models_table(df, tasks, links))
    figs = [Figure(caption=c, png=png, svg_href=svg) for c, png, svg in figures]
    return render_page(f"wildmerge leaderboard: {run} / {suite}",
                       f"{len(df)} models; accuracies in percent over {len(tasks)} task(s): {', '.join(tasks)}.",
                       page_tables, figs, notes)
