"""What each data-based merge cost: FLOPs and memory counted from the model config (``analysis/flops``,
the Chain of Merges paper's Fig. 5 comparison extended to every data-based method), beside the seconds and peak
RSS the merge recorded (its ``merge_info.json`` seconds, else the engine's wall seconds; ``layerwise_diagnostics.json``
peak RSS). One row per merge whose folder holds the layer-wise engine's record; a table per method and a figure.
"""

from pathlib import Path
from typing import Dict, Optional

from wildmerge.analysis.markdown import markdown_table

CAPTION = ("Compute and memory of the data-based merges (the Chain of Merges paper's Fig. 5, every data-based "
           "method): FLOPs and memory counted from the config, seconds and peak RSS measured")
COLUMNS = ["model_id", "method", "experts", "tokens", "flops", "memory_bytes", "seconds", "peak_rss_mib"]


def compute_rows(data):
    """One row per data-based merge with its engine's record; None when the run has none."""
    import pandas as pd
    from transformers import AutoConfig

    from wildmerge.analysis.flops import DATA_METHODS, count
    from wildmerge.analysis.report.layerwise_plots import read_diagnostics
    from wildmerge.recipes.labels import method_label
    from wildmerge.run import read_merge_info

    config, rows = None, []
    for e in data.plan.entries:
        diag = read_diagnostics(e.path) if e.kind == "merge" else None
        if not diag or diag.get("method") not in DATA_METHODS or not diag.get("calibration"):
            continue
        if config is None:
            base = next(b for b in data.plan.entries if b.kind == "base")
            config = AutoConfig.from_pretrained(base.path)
        counted = count(diag["method"], config, diag["calibration"], diag.get("parameters") or {})
        info = read_merge_info(e.path)
        seconds = info.seconds if info is not None and info.seconds is not None else diag.get("wall_seconds")
        rows.append({"model_id": e.model_id, "method": method_label(e.method) if e.method else diag["method"],
                     "experts": len(diag["calibration"]),
                     "tokens": sum(int(c["tokens"]) for c in diag["calibration"]), **counted,
                     "seconds": float("nan") if seconds is None else float(seconds),
                     "peak_rss_mib": float(diag.get("peak_rss_mib") or float("nan"))})
    return pd.DataFrame(rows, columns=COLUMNS) if rows else None


def per_method(rows):
    """Means per method (and how many merges)."""
    g = rows.groupby("method", sort=False)
    out = g[["experts", "tokens", "flops", "memory_bytes", "seconds", "peak_rss_mib"]].mean()
    return out.assign(merges=g.size()).reset_index()


def compute_markdown(rows) -> str:
    table = per_method(rows)
    body = [[r.method, r.merges, f"{r.experts:.1f}", f"{r.tokens:.0f}", f"{r.flops / 1e9:.4g}",
             f"{r.memory_bytes / 2**20:.4g}", f"{r.seconds:.2f}", f"{r.peak_rss_mib:.0f}"]
            for r in table.itertuples()]
    return (f"## {CAPTION}\n\nPer method, the mean over its merges (every merge in `merge_compute.csv`). Counted: "
            "linear projections (and the output head for whole-model passes), a backward pass as two forwards, "
            "float32 buffers; the rules per method are in `analysis/flops.py`. Measured: the merge's "
            "wall seconds and the merging process's peak RSS on this run's host.\n\n"
            + markdown_table(body, ["Method", "merges", "experts", "tokens", "GFLOPs (counted)",
                                    "memory MiB (counted)", "seconds", "peak RSS MiB"]))


def draw_compute(rows, out_dir, title: str) -> Optional[Dict[str, Path]]:
    """Counted GFLOPs against measured seconds, and counted memory against measured peak RSS, per merge."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, method in enumerate(dict.fromkeys(rows["method"])):
        g, st = rows[rows["method"] == method], style(i)
        axes[0].scatter(g["flops"] / 1e9, g["seconds"], color=st["color"], marker=st["marker"], label=method)
        axes[1].scatter(g["memory_bytes"] / 2**20, g["peak_rss_mib"], color=st["color"], marker=st["marker"],
                        label=method)
    for ax, x, y in ((axes[0], "GFLOPs (counted from the config)", "merge seconds (measured)"),
                     (axes[1], "memory MiB (counted: Grams, buffers)", "peak RSS MiB (measured)")):
        ax.set_xscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(f"{title}: compute and memory of the data-based merges", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "merge_compute")
