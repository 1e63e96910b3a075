"""How close Task Arithmetic's merge is to each expert as lambda grows (the reality-check paper, Fig. 5 right: "increasing
lambda pulls the merged model closer to Bedlam but pushes it further from other tasks").

The paper gives no formula; ours: ``sim_t(lambda) = 1 - ||theta(lambda) - theta_t|| / ||tau_t||`` with
``theta(lambda) = theta_0 + lambda * sum_s tau_s``: 1 at the expert itself, 0 at the base. No merge is needed:
``||lambda S - tau_t||^2 = lambda^2 1'G1 - 2 lambda (G1)_t + G_tt`` from the Gram matrix ``G`` of the task vectors
(``imbalance.layer_grams``, key ``model``).
"""

from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

LAMBDAS = tuple(np.round(np.arange(0.0, 1.0001, 0.05), 4))


def similarity_curves(gram: np.ndarray, names: List[str], lambdas: Sequence[float] = LAMBDAS) -> List[dict]:
    """One row per (lambda, expert): ``sim_t(lambda)`` and ``cos(theta(lambda) - theta_0, tau_t)`` (the latter does
    not change with lambda for TA: the reason the paper's figure cannot be a cosine)."""
    gram = np.asarray(gram, dtype=np.float64)
    row_sums, total = gram.sum(1), gram.sum()
    rows = []
    for lam in lambdas:
        for i, name in enumerate(names):
            norm = np.sqrt(gram[i, i])
            dist = np.sqrt(max(lam * lam * total - 2 * lam * row_sums[i] + gram[i, i], 0.0))
            rows.append({"lambda": float(lam), "expert": name,
                         "similarity": float(1 - dist / norm) if norm > 0 else float("nan"),
                         "cos_with_merge": float(row_sums[i] / (norm * np.sqrt(total))) if norm > 0 and total > 0
                         else float("nan")})
    return rows


def best_lambda(rows: List[dict]) -> Dict[str, float]:
    """Per expert, the lambda at which the merge is closest to it (where no single lambda suits every task)."""
    out: Dict[str, tuple] = {}
    for r in rows:
        if r["expert"] not in out or r["similarity"] > out[r["expert"]][1]:
            out[r["expert"]] = (r["lambda"], r["similarity"])
    return {k: v[0] for k, v in out.items()}


def plot_similarity(rows: List[dict], out_dir, title: str = "") -> Dict[str, Path]:
    """Similarity to each expert against lambda (PNG and SVG)."""
    from wildmerge.analysis.plotting import pyplot, save_figure, style

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, name in enumerate(dict.fromkeys(r["expert"] for r in rows)):
        mine = [r for r in rows if r["expert"] == name]
        ax.plot([r["lambda"] for r in mine], [r["similarity"] for r in mine], label=name, ms=3, **style(i))
    ax.set_xlabel("TA lambda (scale of the summed task vectors, unitless)")
    ax.set_ylabel("1 - ||theta(lambda) - theta_t|| / ||tau_t||")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "similarity of the TA merge to each expert (our definition)")
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "similarity_vs_lambda")
