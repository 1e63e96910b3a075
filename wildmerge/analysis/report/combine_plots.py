"""Figs. 3, 4 and 6 of Hitit et al. (arXiv 2511.21437) across the bases as one figure: one column per base model,
mean accuracy against n on top (Figs. 3 / 6) and the task-vector norm against n below (Fig. 4).

Each panel is the run's own report figure (``plots.draw_curves``: n = 1 is the experts alone, bands are one standard
deviation over subsets); ``curve_table`` holds every point drawn, for ``combined_curves.csv``.
"""

from pathlib import Path
from typing import Dict

from wildmerge.analysis.plotting import pyplot, save_figure
from wildmerge.analysis.report.plots import curves, draw_curves, with_norm

PANELS = (("mean", "mean accuracy (%)", "Figs. 3 / 6"),
          ("task_vector_norm", "task-vector norm ‖θ_merged − θ_base‖₂ (L2)", "Fig. 4"))


def _panel_rows(protocol, column: str):
    return with_norm(protocol) if column == "task_vector_norm" else protocol


def curve_table(protocols: Dict[str, object]):
    """One row per base model, quantity (``mean`` or ``task_vector_norm``), method and n: the mean and std drawn."""
    import pandas as pd

    rows = []
    for base_model, protocol in protocols.items():
        for column, _, _ in PANELS:
            for variant, (ns, means, stds) in curves(_panel_rows(protocol, column), column).items():
                rows += [{"base_model": base_model, "quantity": column, "method": variant, "n": n, "mean": m,
                          "std": s} for n, m, s in zip(ns, means, stds)]
    return pd.DataFrame(rows, columns=["base_model", "quantity", "method", "n", "mean", "std"])


def draw_combined(protocols: Dict[str, object], out_dir) -> Dict[str, Path]:
    """``combined_vs_n.png`` / ``.svg``: columns = base models, rows = accuracy vs n and norm vs n; one legend, a
    method drawn alike in every panel."""
    plt = pyplot()
    cols = len(protocols)
    fig, axes = plt.subplots(len(PANELS), cols, figsize=(4.2 * cols, 3.4 * len(PANELS)), squeeze=False)
    order = list(dict.fromkeys(v for p in protocols.values() for v in p[p["kind"] == "merge"]["variant"]))
    for j, (base_model, protocol) in enumerate(protocols.items()):
        for i, (column, label, figure) in enumerate(PANELS):
            ax = axes[i][j]
            draw_curves(ax, _panel_rows(protocol, column), column, label, refs=column == "mean", order=order)
            ax.set_title(f"{base_model} ({figure})", fontsize=10)
    handles = {}
    for ax in axes.flat:  # every method of every base, once
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.legend(list(handles.values()), list(handles), loc="upper center", ncol=max(1, min(6, len(handles))),
               fontsize=9, bbox_to_anchor=(0.5, 1.06))
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "combined_vs_n")
