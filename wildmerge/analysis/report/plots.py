"""The paper's figures as PNG and SVG (matplotlib, Agg backend): accuracy vs n per method with a one-standard-
deviation band (Fig. 3/6), the same per task (Figs. 7-10), and the task-vector norm vs n (Fig. 4).

n = 1 is the experts alone, drawn as the first point of every method's curve; the base (dashed) and the best expert
(dotted) are horizontal lines. The band is the standard deviation over subsets (ddof = 0, none where k = 1).
"""

import math
from pathlib import Path
from typing import Dict, List, Optional

from wildmerge.analysis.plotting import pyplot, save_figure, style

OK = "ok"


NORM_LABEL = "task-vector norm ‖θ_merged − θ_base‖₂ (L2, weight units)"  # plain text: stays text in the SVG


def curves(df, column: str):
    """{variant: (ns, means, stds)} with n = 1 taken from the experts."""
    ok = df[(df["status"] == OK) & df[column].notna()]
    experts = ok[ok["kind"] == "expert"][column]
    curves = {}
    for variant in dict.fromkeys(ok[ok["kind"] == "merge"]["variant"]):
        sub = ok[(ok["kind"] == "merge") & (ok["variant"] == variant)]
        ns, means, stds = [], [], []
        if len(experts):
            ns.append(1), means.append(experts.mean()), stds.append(experts.std(ddof=0))
        for n in sorted(sub["n"].dropna().unique()):
            g = sub[sub["n"] == n][column]
            ns.append(int(n)), means.append(g.mean()), stds.append(g.std(ddof=0) if len(g) > 1 else 0.0)
        curves[variant] = (ns, means, stds)
    return curves


def draw_curves(ax, df, column: str, ylabel: str, refs: bool = True, order: Optional[List[str]] = None) -> None:
    """One curve per method; ``order``: the methods in style order, so a method keeps its look across panels."""
    import numpy as np

    for i, (variant, (ns, means, stds)) in enumerate(curves(df, column).items()):
        st = style(order.index(variant) if order and variant in order else i)
        ax.plot(ns, means, ms=4, lw=1.8, label=variant, **st)
        ax.fill_between(ns, np.subtract(means, stds), np.add(means, stds), color=st["color"], alpha=0.12, lw=0)
    ok = df[df["status"] == OK]
    if refs:
        base = ok[ok["kind"] == "base"][column]
        experts = ok[ok["kind"] == "expert"][column]
        if len(base):
            ax.axhline(base.iloc[0], color="black", ls="--", lw=1.2, label="base")
        if len(experts):  # the best expert by mean accuracy (Table 2's reference), in this panel's metric
            best = ok[ok["kind"] == "expert"].sort_values("mean", kind="stable").iloc[-1][column]
            ax.axhline(best, color="grey", ls=":", lw=1.2, label="best expert")
    ax.set_xlabel("number of merged experts n")
    ax.set_ylabel(ylabel)
    ns = sorted(ok["n"].dropna().unique())
    ax.set_xticks([int(n) for n in ns if n >= 1])
    ax.grid(alpha=0.3)


def accuracy_vs_n(df, out_dir, title: str) -> Dict[str, Path]:
    """Fig. 3/6: mean accuracy over the suite vs n."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    draw_curves(ax, df, "mean", "mean accuracy (%)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best", ncol=2)
    return save_figure(fig, Path(out_dir) / "accuracy_vs_n")


def per_task_vs_n(df, tasks: List[str], out_dir, title: str) -> Dict[str, Path]:
    """Figs. 7-10: one panel per task, one shared legend."""
    plt = pyplot()
    cols = min(4, len(tasks))
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        draw_curves(ax, df, task, "accuracy (%)")
        ax.set_title(task, fontsize=11)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=max(1, min(6, len(labels))), fontsize=9,
               bbox_to_anchor=(0.5, 1.0 + 0.04 / rows))
    fig.suptitle(title, y=1.0 + 0.1 / rows)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "accuracy_vs_n_per_task")


def with_norm(df):
    """The rows a norm curve reads: a model counts where it has a norm (the base and compositions have none)."""
    return df.assign(status=df["task_vector_norm"].notna().map({True: OK, False: "no norm"}))


def norm_vs_n(df, out_dir, title: str) -> Optional[Dict[str, Path]]:
    """Fig. 4: ||theta_merged - theta_base||_2 vs n (mean and std over subsets)."""
    if "task_vector_norm" not in df or df["task_vector_norm"].notna().sum() == 0:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    draw_curves(ax, with_norm(df), "task_vector_norm", NORM_LABEL, refs=False)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="best", ncol=2)
    return save_figure(fig, Path(out_dir) / "norm_vs_n")


def cost_vs_performance(points, out_dir, title: str) -> Optional[Dict[str, Path]]:
    """Each method's mean suite accuracy against its mean merge seconds and its mean merge + evaluation seconds per
    model (log scale: costs span orders of magnitude): what one model costs. The cost of choosing its
    hyperparameters (the reality-check paper's Fig. 2) is ``choice_cost.draw_choice``."""
    if points is None or points.empty or points["merge_seconds"].isna().all():
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    total = points["merge_seconds"] + points["eval_seconds"].fillna(0)
    for ax, xs, label in ((axes[0], points["merge_seconds"], "merge seconds per model"),
                          (axes[1], total, "merge + evaluation seconds per model")):
        for i, (x, (_, r)) in enumerate(zip(xs, points.iterrows())):
            if x == x:
                st = style(i)
                ax.scatter([x], [r["mean"]], color=st["color"], marker=st["marker"], s=50, label=r["variant"])
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean accuracy (%) of its merges")
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: cost against performance")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "cost_vs_performance")
