"""Join metrics and targets, choose the metric set, fit the predictor per method, and summarise (Tables 2, 6-8).

Metrics that are NaN for some pair or constant over the pairs are recorded and left out of the fit, never silently.
With fewer training pairs per fold than metrics the fit is underdetermined: it falls back to the paper's reduced
gradient + subspace set (A.13.4) and says so.
"""

import itertools
from typing import Dict, List

import numpy as np

from wildmerge.analysis.mergeability import predictor as PR
from wildmerge.analysis.mergeability.registry import METRICS, REDUCED
from wildmerge.errors import WildmergeError

MIN_EXPERTS = 4  # each fold needs >= 3 training pairs and >= 2 validation pairs for a correlation


def choose_metrics(metrics_df, n_train_pairs: int, metric_set: str = "auto") -> tuple:
    """(metric columns used, notes)."""
    notes = []
    present = [m for m in METRICS if m in metrics_df.columns]
    usable = []
    for m in present:
        col = metrics_df[m]
        if col.isna().any():
            notes.append(f"{m}: NaN for {int(col.isna().sum())} pair(s); left out of the fit")
        elif col.nunique() <= 1:
            notes.append(f"{m}: constant over the pairs; left out of the fit")
        else:
            usable.append(m)
    if metric_set == "reduced" or (metric_set == "auto" and n_train_pairs < len(usable)):
        if metric_set == "auto":
            notes.append(f"only {n_train_pairs} training pairs per fold for {len(usable)} metrics: falling back to the "
                         f"paper's reduced gradient + subspace set (A.13.4)")
        usable = [m for m in usable if m in REDUCED]
    if not usable:
        raise WildmergeError("no usable metric left for the fit (all NaN or constant; see metrics.json); compute the "
                             "gradient and subspace metrics, or add experts")
    return usable, notes


def fit_methods(metrics_df, targets_df, profile: str = "ref", lam: float = 1.0, seed: int = 0,
                metric_set: str = "auto", objective: str = "pearson") -> dict:
    """Per method: the cross-validated fit. Pairs are matched by their two experts, in either order."""
    experts = _experts(metrics_df)
    n_train = len(experts) * (len(experts) - 1) // 2 - (len(experts) - 1)
    cols, notes = choose_metrics(metrics_df, n_train, metric_set)
    out = {"metrics": cols, "notes": notes, "profile": profile, "lambda": lam, "seed": seed, "objective": objective,
           "profile_settings": PR.PROFILES[profile], "folds": "leave one expert out", "methods": {}}
    for method, data in method_data(metrics_df, targets_df, cols).items():
        if isinstance(data, int):
            out["notes"].append(f"{method}: only {data} pairs with targets; not fitted")
            continue
        X, y, pairs, used = data
        result = PR.loto(X, y, pairs, used, lam=lam, profile=profile, seed=seed, objective=objective)
        result["n_pairs"] = len(y)
        result["single_metric_r"] = {m: PR.pearson(X[:, k], y) for k, m in enumerate(cols)}
        out["methods"][method] = result
    if not out["methods"]:
        raise WildmergeError("no method has enough pairs with targets to fit; see the notes: " + "; ".join(notes))
    out["agreement"] = agreement(out)
    return out


def _experts(metrics_df) -> list:
    experts = list(dict.fromkeys(list(metrics_df["expert_a"]) + list(metrics_df["expert_b"])))
    if len(experts) < MIN_EXPERTS:
        raise WildmergeError(f"the predictor needs at least {MIN_EXPERTS} experts ({MIN_EXPERTS * (MIN_EXPERTS - 1) // 2}"
                             f" pairs) so that every leave-one-expert-out fold has training and validation pairs; "
                             f"got {len(experts)} experts ({len(metrics_df)} pairs)")
    return experts


def method_data(metrics_df, targets_df, cols) -> dict:
    """{method: (X, y, pairs, experts used)} over the metric columns ``cols``; for a method with fewer than
    MIN_EXPERTS experts or 6 pairs with finite targets, its number of such pairs instead."""
    experts = _experts(metrics_df)
    index = {frozenset((a, b)): i for i, (a, b) in enumerate(zip(metrics_df["expert_a"], metrics_df["expert_b"]))}
    out = {}
    for method, group in targets_df.groupby("method", sort=False):
        rows = [(index.get(frozenset((a, b))), t) for a, b, t in zip(group["expert_a"], group["expert_b"],
                                                                         group["target"])]
        rows = [(i, t) for i, t in rows if i is not None and np.isfinite(t)]
        used = sorted({e for i, _ in rows for e in (metrics_df["expert_a"][i], metrics_df["expert_b"][i])},
                      key=experts.index)
        if len(used) < MIN_EXPERTS or len(rows) < 6:
            out[method] = len(rows)
            continue
        X = metrics_df.loc[[i for i, _ in rows], cols].to_numpy(float)
        y = np.array([t for _, t in rows])
        pairs = [(metrics_df["expert_a"][i], metrics_df["expert_b"][i]) for i, _ in rows]
        out[method] = (X, y, pairs, used)
    return out


def agreement(fits: dict, k: int = 5) -> dict:
    """Top-k overlap and sign agreement (raw and with |w| < 1e-3 as zero) for every pair of methods."""
    methods = list(fits["methods"])
    res = {"top_k": k, "top_k_overlap": {}, "sign_agreement": {}, "sign_agreement_thresholded": {}}
    for a, b in itertools.combinations(methods, 2):
        wa, wb = fits["methods"][a]["w_mean"], fits["methods"][b]["w_mean"]
        key = f"{a}__{b}"
        res["top_k_overlap"][key] = PR.top_k_overlap(wa, wb, min(k, len(wa)))
        res["sign_agreement"][key] = PR.sign_agreement(wa, wb)
        res["sign_agreement_thresholded"][key] = PR.sign_agreement(wa, wb, PR.ZERO)
    return res


def tables(fits: dict) -> Dict[str, "object"]:
    """validation.csv (Table 2), coefficients.csv (Table 8: mean, std, non-zero frequency), agreement.csv."""
    import pandas as pd

    val = pd.DataFrame([{"method": m, "pairs": r["n_pairs"], "folds": len(r["folds"]), "train_r": r["train_r"],
                         "train_r_std": r["train_r_std"], "val_r": r["val_r"], "val_r_std": r["val_r_std"],
                         "nan_folds": r["nan_folds"], "mean_nonzero": r["mean_nonzero"]}
                        for m, r in fits["methods"].items()])
    coef = []
    for m, r in fits["methods"].items():
        for k, metric in enumerate(fits["metrics"]):
            coef.append({"method": m, "metric": metric, "w_mean": r["w_mean"][k], "w_std": r["w_std"][k],
                         "nonzero_freq": r["nonzero_freq"][k], "single_metric_r": r["single_metric_r"][metric]})
    ag = fits["agreement"]
    agree = pd.DataFrame([{"methods": key, "top_k_overlap": ag["top_k_overlap"][key],
                           "sign_agreement": ag["sign_agreement"][key],
                           "sign_agreement_thresholded": ag["sign_agreement_thresholded"][key]}
                          for key in ag["top_k_overlap"]])
    return {"validation": val, "coefficients": pd.DataFrame(coef), "agreement": agree}


def plot_coefficients(fits: dict, out) -> List:
    """Heatmap of the mean coefficients, metrics x methods (Figs. 2-3), as PNG and SVG."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    methods, metrics = list(fits["methods"]), fits["metrics"]
    W = np.array([fits["methods"][m]["w_mean"] for m in methods]).T
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2.2 + 1.2 * len(methods), 1.5 + 0.32 * len(metrics)))
    limit = max(float(np.abs(W).max()), 1e-6)
    im = ax.imshow(W, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_yticks(range(len(metrics)), metrics, fontsize=7)
    for i in range(len(metrics)):
        for j in range(len(methods)):
            ax.text(j, i, f"{W[i, j]:+.3f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="mean coefficient over folds")
    ax.set_title(f"Mergeability coefficients (L1 Pearson, {fits['profile']} profile)")
    return list(save_figure(fig, out / "coefficients").values())
