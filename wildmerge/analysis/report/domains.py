"""Homogeneous vs heterogeneous merging (Hitit et al., arXiv 2511.21437, Appendix E, Figs. 27-28).

A ``--homogeneous`` run merges each domain's experts on their own ("Math only", "Medical only") and all experts
together. Those merges have the same n in two domains, so pooling them by n (Table 1) would mix them: they are
reported per domain configuration instead, as mean accuracy per method with its difference to the base.
"""

from pathlib import Path
from typing import Dict, Optional

from wildmerge.analysis.markdown import markdown_table

OK = "ok"


def domain_merges(df):
    from wildmerge.analysis.report.scores import MAIN

    return df[(df["kind"] == "merge") & (df["group"] == MAIN) & (df["domain"].fillna("") != "")]


def domain_label(domain: str) -> str:
    return "All experts" if domain == "all" else f"{domain.capitalize()} only"


def domain_table(df, base: Optional[float]):
    """Long table: method, domain configuration, n, k, mean accuracy, difference to the base (pp)."""
    import pandas as pd

    merges = domain_merges(df)
    rows = []
    for variant in dict.fromkeys(merges["variant"]):
        for domain in dict.fromkeys(merges["domain"]):
            g = merges[(merges["variant"] == variant) & (merges["domain"] == domain)]
            ok = g[g["status"] == OK]["mean"]
            if g.empty:
                continue
            mean = float(ok.mean()) if len(ok) else float("nan")
            rows.append({"method": variant, "domain": domain, "configuration": domain_label(domain),
                         "n": int(g["n"].iloc[0]), "k": int(len(ok)), "mean": mean,
                         "diff_vs_base_pp": mean - base if base is not None else float("nan")})
    return pd.DataFrame(rows, columns=["method", "domain", "configuration", "n", "k", "mean", "diff_vs_base_pp"])


def to_markdown(table, base: Optional[float]) -> str:
    """Wide: | Method | Base | Math only (n = 3) | ... | with ``mean (diff)`` cells."""
    if table.empty:
        return "_no homogeneous merge has a score yet_\n"
    configs = list(dict.fromkeys(zip(table["configuration"], table["n"])))
    rows = []
    for method in dict.fromkeys(table["method"]):
        cells = [method, f"{base:.1f}" if base is not None else ""]
        for c, _ in configs:
            hit = table[(table["method"] == method) & (table["configuration"] == c)]
            r = hit.iloc[0] if len(hit) else None
            cells.append("" if r is None or r["mean"] != r["mean"] else
                         f"{r['mean']:.1f} ({r['diff_vs_base_pp']:+.2f})" if base is not None else f"{r['mean']:.1f}")
        rows.append(cells)
    return markdown_table(rows, ["Method", "Base"] + [f"{c} (n = {n})" for c, n in configs])


def plot_domains(table, base: Optional[float], out_dir, title: str) -> Dict[str, Path]:
    """Grouped bars: one group per method, one hatched bar per domain configuration; the base as a dashed line."""
    import numpy as np

    from wildmerge.analysis.plotting import HATCHES, pyplot, save_figure

    plt = pyplot()
    methods = list(dict.fromkeys(table["method"]))
    configs = list(dict.fromkeys(table["configuration"]))
    width = 0.8 / len(configs)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(methods) * len(configs) / 2 + 3), 4.5))
    greys = plt.get_cmap("Greys")
    for j, config in enumerate(configs):
        values = [table[(table["method"] == m) & (table["configuration"] == config)]["mean"].mean() for m in methods]
        x = np.arange(len(methods)) + (j - (len(configs) - 1) / 2) * width
        ax.bar(x, values, width, label=config, color=greys(0.25 + 0.5 * j / max(1, len(configs) - 1)),
               edgecolor="black", hatch=HATCHES[j % len(HATCHES)])
    if base is not None:
        ax.axhline(base, color="black", ls="--", lw=1.2, label="base")
    ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_xlabel("merge method")
    ax.set_ylabel("mean accuracy (%)")
    ax.set_title(f"{title}: homogeneous vs heterogeneous merging")
    ax.legend(fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    lows = table["mean"].dropna().tolist() + ([base] if base is not None else [])
    if lows:
        ax.set_ylim(max(0.0, min(lows) - 5), min(100.0, max(lows) + 5))
    return save_figure(fig, Path(out_dir) / "homogeneous_bars")
