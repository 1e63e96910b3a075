"""The predictor's robustness studies (Zhou et al., "Demystifying Mergeability", arXiv 2601.22285, §6.2, §7 and
A.5-A.13) in one run, each over the metric set of the main fit so that the rows compare:

- metric-category ablation: one category left out at a time (Tables 4 / 20);
- Pearson + L1 against MSE (Eq. 8, lambda = 0) as the objective (Tables 11-12);
- MLP against the linear predictor (Table 13; Table 24's MLP, trained the full 300 epochs with no early stopping,
  since stopping on the validation loss would leak the held-out expert, A24);
- several seeds of the coefficient initialisation (Tables 14-15);
- L1 (lambda as given) against lambda = 0 (Table 19);
- the fraction of folds x seeds in which each metric's coefficient is non-zero (Figs. 3 / 6 bottom);
- stable metrics: a mean coefficient (over folds, then seeds) of one sign, never 0, for every method (Table 3;
  the paper also asks it across two backbones, a run has one).
"""

from typing import Dict, List, Sequence

import numpy as np

from wildmerge.analysis.mergeability import predictor as PR
from wildmerge.analysis.mergeability.fitting import fit_methods, method_data
from wildmerge.analysis.mergeability.registry import CATEGORIES, CATEGORY_OF
from wildmerge.errors import WildmergeError

KEYS = ["expert_a", "expert_b"]
MLP = dict(hidden=8, dropout=0.4, lr=1e-3, weight_decay=1e-3, epochs=300)  # Table 24


def mlp_loto(X: np.ndarray, y: np.ndarray, pairs, experts, seed: int = 0) -> dict:
    """Leave-one-expert-out validation r of Table 24's MLP (input -> 8 ReLU -> 1, dropout 0.4, Adam 1e-3, weight
    decay 1e-3, full batch, MSE) on min-max scaled metrics, with the linear predictor's folds and scaling."""
    import torch

    rv, rt = [], []
    for f in PR.expert_folds(pairs, experts):
        tr, va = f["train"], f["val"]
        lo, rng = PR.minmax_fit(X[tr])
        Xtr = torch.as_tensor(PR.minmax_apply(X[tr], lo, rng), dtype=torch.float64)
        Xva = torch.as_tensor(PR.minmax_apply(X[va], lo, rng), dtype=torch.float64)
        ytr = torch.as_tensor(y[tr], dtype=torch.float64)
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Linear(X.shape[1], MLP["hidden"]), torch.nn.ReLU(),
                                  torch.nn.Dropout(MLP["dropout"]), torch.nn.Linear(MLP["hidden"], 1)).double()
        opt = torch.optim.Adam(net.parameters(), lr=MLP["lr"], weight_decay=MLP["weight_decay"])
        for _ in range(MLP["epochs"]):
            opt.zero_grad()
            ((net(Xtr).squeeze(1) - ytr) ** 2).mean().backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            rt.append(PR.pearson(net(Xtr).squeeze(1).numpy(), y[tr]))
            rv.append(PR.pearson(net(Xva).squeeze(1).numpy(), y[va]))
    rv, rt = np.array(rv), np.array(rt)
    return {"val_r": PR._nanmean(rv), "val_r_std": PR._nanstd(rv), "train_r": PR._nanmean(rt),
            "nan_folds": int(np.isnan(rv).sum()), "folds_val_r": rv.tolist()}


def run_study(metrics_df, targets_df, profile: str = "ref", lam: float = 1.0, seeds: Sequence[int] = (0, 1, 2),
              metric_set: str = "auto", progress: bool = True) -> dict:
    """Every study as plain numbers (see the module docstring); the first seed's fit is the main fit."""
    from tqdm.auto import tqdm

    seeds = list(seeds)
    if not seeds:
        raise WildmergeError("the study needs at least one seed (--seeds N with N >= 1)")
    bar = tqdm(total=len(seeds) + len(CATEGORIES) + 3, desc="predictor study", unit="fit", disable=not progress)

    def tick(what):  # one step per fit started
        bar.set_postfix_str(what)
        bar.update()

    tick(f"main fit, seed {seeds[0]}")
    main = fit_methods(metrics_df, targets_df, profile, lam, seeds[0], metric_set)
    cols = main["metrics"]
    df = metrics_df[KEYS + cols]
    runs = [main]
    for s in seeds[1:]:
        tick(f"seed {s}")
        runs.append(fit_methods(df, targets_df, profile, lam, s, "all"))
    methods = list(main["methods"])
    out = {"metrics": cols, "methods": methods, "profile": profile, "lambda": lam, "seeds": seeds,
           "notes": list(main["notes"]), "main": main}
    out["seeds_study"] = _seeds(runs, cols)
    out["ablation"] = {"full": {m: main["methods"][m]["val_r"] for m in methods}, "removed": {}}
    for cat, names in CATEGORIES.items():
        tick(f"without the {cat} metrics")
        keep = [c for c in cols if CATEGORY_OF[c] != cat]
        if len(keep) == len(cols):
            out["notes"].append(f"ablation: no {cat} metric in the fitted set; nothing to remove")
        elif not keep:
            out["notes"].append(f"ablation: every fitted metric is a {cat} metric; nothing left without them")
        else:
            fits = fit_methods(metrics_df[KEYS + keep], targets_df, profile, lam, seeds[0], "all")
            out["ablation"]["removed"][cat] = {"n_removed": len(cols) - len(keep),
                                               "val_r": {m: fits["methods"][m]["val_r"] for m in methods}}
    tick("lambda = 0")
    out["lambda0"] = _summary(fit_methods(df, targets_df, profile, 0.0, seeds[0], "all"))
    out["l1"] = _summary(main)
    tick("MSE objective")
    out["mse"] = _summary(fit_methods(df, targets_df, profile, 0.0, seeds[0], "all", objective="mse"))
    tick("MLP")
    data = method_data(df, targets_df, cols)
    out["mlp"] = {m: mlp_loto(*data[m], seed=seeds[0]) for m in methods}
    out["stable"] = stable_metrics(out["seeds_study"]["w_mean"], cols)
    bar.close()
    return out


def _summary(fits: dict) -> Dict[str, dict]:
    keep = ("train_r", "train_r_std", "val_r", "val_r_std", "mean_nonzero", "nan_folds")
    return {m: {k: r[k] for k in keep} for m, r in fits["methods"].items()}


def _seeds(runs: List[dict], cols: List[str]) -> dict:
    """Per method: val r per seed; per metric the fold-mean coefficient per seed and the non-zero frequency over
    every fold of every seed."""
    out = {"val_r": {}, "features": {}, "w_by_seed": {}, "w_mean": {}, "nonzero_freq": {}}
    for m in runs[0]["methods"]:
        rs = [run["methods"][m] for run in runs]
        out["val_r"][m] = [r["val_r"] for r in rs]
        out["features"][m] = [r["mean_nonzero"] for r in rs]
        out["w_by_seed"][m] = [r["w_mean"] for r in rs]
        out["w_mean"][m] = np.mean([r["w_mean"] for r in rs], axis=0).tolist()
        W = np.array([f["w"] for r in rs for f in r["folds"]])
        out["nonzero_freq"][m] = (W != 0).mean(0).tolist()
    return out


def stable_metrics(w_mean: Dict[str, list], cols: List[str]) -> List[dict]:
    """Metrics whose mean coefficient is non-zero with one sign for every method (Table 3), in x 1e-3."""
    W = np.array([w_mean[m] for m in w_mean])
    rows = []
    for k, metric in enumerate(cols):
        s = np.sign(W[:, k])
        if (s != 0).all() and (s == s[0]).all():
            rows.append({"metric": metric, **{m: 1e3 * w_mean[m][k] for m in w_mean}, "avg": 1e3 * W[:, k].mean()})
    return sorted(rows, key=lambda r: -abs(r["avg"]))


def tables(study: dict) -> Dict[str, "object"]:
    """One DataFrame per study, named by its file; the ``caption`` of each is in CAPTIONS."""
    import pandas as pd

    methods, s = study["methods"], study["seeds_study"]
    full = study["ablation"]["full"]
    abl = [{"method": m, "full": full[m], **{f"no_{c}": a["val_r"][m] for c, a in study["ablation"]["removed"].items()},
            **{f"delta_no_{c}": a["val_r"][m] - full[m] for c, a in study["ablation"]["removed"].items()}}
           for m in methods]
    obj = [{"method": m, "pearson_l1_val_r": study["l1"][m]["val_r"], "mse_val_r": study["mse"][m]["val_r"],
            "difference": study["l1"][m]["val_r"] - study["mse"][m]["val_r"]} for m in methods]
    mlp = [{"method": m, "mlp_val_r": study["mlp"][m]["val_r"], "mlp_val_r_std": study["mlp"][m]["val_r_std"],
            "l1_linear_val_r": study["l1"][m]["val_r"]} for m in methods]
    seeds = [{"method": m, "val_r_mean": np.nanmean(s["val_r"][m]), "val_r_std": np.nanstd(s["val_r"][m]),
              "val_r_min": np.nanmin(s["val_r"][m]), "val_r_max": np.nanmax(s["val_r"][m]),
              "features": float(np.mean(s["features"][m])), "seeds": len(s["val_r"][m])} for m in methods]
    sel = []
    for m in methods:
        Wm = np.array(s["w_by_seed"][m])
        for k, metric in enumerate(study["metrics"]):
            sel.append({"method": m, "metric": metric, "selection_freq": float((Wm[:, k] != 0).mean()),
                        "coef_mean": float(Wm[:, k].mean()), "coef_std": float(Wm[:, k].std()),
                        "nonzero_freq_folds": s["nonzero_freq"][m][k]})
    reg = [{"method": m, **{f"l1_{k}": v for k, v in study["l1"][m].items()},
            **{f"lam0_{k}": v for k, v in study["lambda0"][m].items()}} for m in methods]
    out = {"ablation": pd.DataFrame(abl), "objective": pd.DataFrame(obj), "mlp": pd.DataFrame(mlp),
           "seeds": pd.DataFrame(seeds), "seed_selection": pd.DataFrame(sel), "regularization": pd.DataFrame(reg),
           "stable_metrics": pd.DataFrame(study["stable"], columns=["metric", *methods, "avg"])}
    for name in ("ablation", "objective", "mlp", "seeds"):  # the paper's "Average" rows
        frame = out[name]
        if len(frame):
            out[name] = pd.concat([frame, pd.DataFrame([{"method": "average", **frame.drop(columns="method").mean()}])],
                                  ignore_index=True)
    return out


CAPTIONS = {
    "ablation": "Metric-category ablation (Zhou et al. 2026, Table 4 / Table 20): validation r, mean over "
                "leave-one-expert-out folds, with each category removed; delta = change from the full set.",
    "objective": "Pearson + L1 against MSE (Eq. 8, no penalty) as the objective (Tables 11-12): validation r.",
    "mlp": "MLP (Table 24: 8 hidden ReLU units, dropout 0.4, 300 epochs, MSE) against the L1 linear predictor "
           "(Table 13): validation r.",
    "seeds": "Robustness to the initialisation seed (Table 14): validation r over seeds, mean, std, range, and the "
             "mean number of non-zero coefficients.",
    "seed_selection": "Selection frequency and coefficient stability per metric across seeds (Table 15, for every "
                      "metric): the fraction of seeds whose fold-mean coefficient is non-zero, its mean and std, "
                      "and the non-zero frequency over all folds of all seeds.",
    "regularization": "L1 (lambda as fitted) against lambda = 0 (Table 19): train and validation r, mean and std "
                      "over folds, and the mean number of non-zero coefficients.",
    "stable_metrics": "Stable metrics (Table 3): mean coefficient (x 1e-3, over folds then seeds) of one sign for "
                      "every method; the paper also requires it on both backbones.",
    "nonzero_frequency": "Fraction of folds (all seeds) in which each metric's coefficient is non-zero "
                         "(Fig. 3, Fig. 6 bottom); lines delimit metric categories.",
}


def plot_nonzero_frequency(study: dict, out) -> List:
    """Heatmap metrics x methods of the non-zero frequency over folds x seeds (Figs. 3 / 6 bottom)."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    methods, metrics = study["methods"], study["metrics"]
    F = np.array([study["seeds_study"]["nonzero_freq"][m] for m in methods]).T
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2.2 + 1.2 * len(methods), 1.5 + 0.32 * len(metrics)))
    im = ax.imshow(F, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_yticks(range(len(metrics)), metrics, fontsize=7)
    for i in range(len(metrics)):
        for j in range(len(methods)):
            ax.text(j, i, f"{F[i, j]:.2f}", ha="center", va="center", fontsize=6,
                    color="black" if F[i, j] > 0.5 else "white")
    cats = [CATEGORY_OF[m] for m in metrics]
    for i in range(1, len(cats)):
        if cats[i] != cats[i - 1]:
            ax.axhline(i - 0.5, color="white", lw=1.5)
    fig.colorbar(im, ax=ax, label="fraction of folds x seeds with a non-zero coefficient")
    ax.set_title(f"Non-zero frequency ({len(study['seeds'])} seed(s); Zhou et al. 2026, Fig. 3 / 6)")
    return list(save_figure(fig, out / "nonzero_frequency").values())


def readme(study: dict, frames: Dict[str, "object"]) -> str:
    """The study folder's page: every table under its caption, then the figure and the notes."""
    from wildmerge.analysis.markdown import markdown_table

    parts = [f"# Robustness studies of the mergeability predictor\n\nProfile {study['profile']}, lambda "
             f"{study['lambda']}, seeds {study['seeds']}, {len(study['metrics'])} metrics, leave-one-expert-out "
             f"folds.\n"]
    for name, frame in frames.items():
        rows = [[v if isinstance(v, str) else f"{v:.3f}" for v in row] for row in frame.itertuples(index=False)]
        parts.append(f"## {name}\n\n{CAPTIONS[name]}\n\n" + (markdown_table(rows, list(frame.columns)) if rows
                                                             else "(none)\n"))
    parts.append(f"## nonzero_frequency\n\n{CAPTIONS['nonzero_frequency']}\n\n![](nonzero_frequency.png)\n")
    if study["notes"]:
        parts.append("## notes\n\n" + "".join(f"- {n}\n" for n in study["notes"]))
    return "\n".join(parts)
