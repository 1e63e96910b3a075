"""RegMean / Chain of Merges diagnostics per layer, from each merged model's ``layerwise_diagnostics.json``.

Left: the merging covariate shift (Buzzega et al., arXiv 2508.21421, Eq. 8) per decoder layer, summed over the
linear groups, mean over the subsets of each n. Right (CoM / RegMean with importance weights, Eq. 6): each expert's
share of the importance weight per layer, omega_i / sum_j omega_j averaged over groups, for the largest merge.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np


def read_diagnostics(model_dir) -> Optional[dict]:
    from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE

    try:
        return json.loads((Path(model_dir) / DIAGNOSTICS_FILE).read_text())
    except (OSError, ValueError):
        return None


def shift_per_layer(diag: dict) -> Dict[int, float]:
    out: Dict[int, float] = defaultdict(float)
    for e in diag.get("layers", []):
        if e.get("mcs") is not None:
            out[int(e["layer"])] += float(e["mcs"])
    return dict(sorted(out.items()))


def weight_shares(diag: dict) -> Dict[int, List[float]]:
    """layer -> each expert's mean share of the importance weight (None when the merge had none)."""
    per_layer: Dict[int, List[np.ndarray]] = defaultdict(list)
    for e in diag.get("layers", []):
        if e.get("omega"):
            w = np.asarray(e["omega"], dtype=float)
            if w.sum() > 0:
                per_layer[int(e["layer"])].append(w / w.sum())
    return {k: np.mean(v, axis=0).tolist() for k, v in sorted(per_layer.items())}


def plot_variant(variant: str, by_n: Dict[int, List[dict]], experts: List[str], out_dir, stem: str):
    """One figure per method variant; None when no merge of it wrote diagnostics."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style

    if not by_n:
        return None
    plt = pyplot()
    largest = by_n[max(by_n)][0]
    shares = weight_shares(largest)
    fig, axes = plt.subplots(1, 2 if shares else 1, figsize=(11 if shares else 6, 4.2), squeeze=False)
    ax = axes[0][0]
    for i, (n, diags) in enumerate(sorted(by_n.items())):
        curves = [shift_per_layer(d) for d in diags]
        layers = sorted(set().union(*curves))
        if layers:
            mean = [np.mean([c[k] for c in curves if k in c]) for k in layers]
            ax.plot(layers, mean, ms=4, lw=1.6, label=f"n = {n} ({len(diags)})", **style(i))
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("merging covariate shift (Eq. 8, summed over groups)")
    ax.set_title("covariate shift per layer")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if shares:
        ax = axes[0][1]
        layers = list(shares)
        names = largest.get("expert_names") or experts or [f"expert {j + 1}" for j in range(len(shares[layers[0]]))]
        for j in range(len(shares[layers[0]])):
            ax.plot(layers, [shares[k][j] for k in layers], ms=4, lw=1.4,
                    label=names[j] if j < len(names) else f"expert {j + 1}", **style(j))
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.set_xlabel("decoder layer")
        ax.set_ylabel("importance weight share (omega_i / sum omega)")
        ax.set_title(f"importance weights, n = {max(by_n)}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(f"{variant}: layer-wise diagnostics")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / stem)


def layerwise_figures(df, model_dirs: Dict[str, Path], out_dir) -> Dict[str, Dict[str, Path]]:
    """{variant: {png, svg}} for every method variant whose merges wrote layer-wise diagnostics (RegMean, CoM)."""
    merges = df[df["kind"] == "merge"]
    found: Dict[str, Dict[int, List[dict]]] = {}
    experts: Dict[str, List[str]] = {}
    methods: Dict[str, str] = {}
    for _, r in merges.sort_values("n", kind="stable").iterrows():
        diag = read_diagnostics(model_dirs[r["model_id"]]) if r["model_id"] in model_dirs else None
        if diag is None or not diag.get("layers") or r["n"] != r["n"]:  # Fisher merging reports per expert
            continue
        found.setdefault(r["variant"], defaultdict(list))[int(r["n"])].append(diag)
        experts[r["variant"]], methods[r["variant"]] = r["experts"].split(";"), r["method"]
    out = {}
    for i, (variant, by_n) in enumerate(found.items()):
        saved = plot_variant(variant, dict(by_n), experts[variant], out_dir, f"layerwise_{i}_{methods[variant]}")
        if saved:
            out[variant] = saved
    return out
