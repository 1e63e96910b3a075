"""The sparse linear predictor of Zhou et al. (arXiv 2601.22285, §4, Eqs. 1-3): per merge method, a score
s = sum_k w_k m~_k that maximises the Pearson correlation with the post-merge target, with an L1 penalty.

- metrics are min-max scaled to [-1, 1] with the *training* fold's range (a constant metric gets range 1);
- loss = -r(Xw, y) + lambda |w|_1, lambda = 1, Adam (lr 0.01), w ~ N(0, 0.1^2), early stopping;
- the objective is scale-degenerate (r(cw) = r(w)): coefficient sizes are optimiser artefacts, only signs,
  sparsity and relative sizes under one profile compare (so the profile is logged with every result);
- folds: leave one task out; for pools, leave one expert out (every pair with that expert is validation).

Objectives: ``pearson`` (the paper's, Eq. 7) and ``mse`` (mean squared error of Xw against y, Eq. 8; the
robustness study's comparison, Tables 11-12).

Profiles: ``paper`` (1000 iterations, patience 50, tol 1e-4, stop on the training correlation, as Table 23) and
``ref`` (2000 / 100 / 1e-5, stop on the loss, as the authors' released script). Both zero |w| < 1e-3 afterwards.
"""

from typing import List, Optional, Sequence, Tuple

import numpy as np

PROFILES = {"paper": dict(iters=1000, patience=50, tol=1e-4, stop="correlation"),
            "ref": dict(iters=2000, patience=100, tol=1e-5, stop="loss")}
ZERO = 1e-3


def minmax_fit(X: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    lo, hi = X.min(0), X.max(0)
    return lo, np.where(hi - lo == 0, 1.0, hi - lo)


def minmax_apply(X: np.ndarray, lo: np.ndarray, rng: np.ndarray) -> np.ndarray:
    return 2 * (X - lo) / rng - 1


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson r; NaN when either side is constant (recorded, never dropped)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def fit(X: np.ndarray, y: np.ndarray, lam: float = 1.0, profile: str = "ref", lr: float = 0.01,
        init_std: float = 0.1, seed: int = 0, objective: str = "pearson") -> Tuple[np.ndarray, int]:
    """(thresholded w, iterations run) minimising -r(Xw, y) + lam |w|_1 (or mean (Xw - y)^2 + lam |w|_1 with
    ``objective="mse"``) with Adam from a seeded N(0, 0.1^2) start."""
    import torch

    p = PROFILES[profile]
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(X.shape[1], generator=g, dtype=torch.float64) * init_std).requires_grad_(True)
    opt = torch.optim.Adam([w], lr=lr)
    Xt, yt = torch.as_tensor(X, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
    yc = yt - yt.mean()
    best, bad, it = float("inf"), 0, 0
    for it in range(1, p["iters"] + 1):
        opt.zero_grad()
        pc = Xt @ w
        pc = pc - pc.mean()
        r = (pc * yc).sum() / (torch.sqrt((pc ** 2).sum() * (yc ** 2).sum()) + 1e-8)
        fit_term = -r if objective == "pearson" else ((Xt @ w - yt) ** 2).mean()
        loss = fit_term + lam * w.abs().sum()
        loss.backward()
        opt.step()
        watched = loss.item() if p["stop"] == "loss" else -r.item()
        if watched < best - p["tol"]:
            best, bad = watched, 0
        else:
            bad += 1
            if bad >= p["patience"]:
                break
    out = w.detach().numpy().copy()
    out[np.abs(out) < ZERO] = 0.0
    return out, it


def expert_folds(pairs: Sequence[Tuple[str, str]], experts: Sequence[str]) -> List[dict]:
    """Leave one expert out: validation = the pairs with that expert, training = the pairs without it."""
    folds = []
    for e in experts:
        va = [i for i, p in enumerate(pairs) if e in p]
        tr = [i for i, p in enumerate(pairs) if e not in p]
        folds.append({"held_out": e, "train": tr, "val": va})
    return folds


def loto(X: np.ndarray, y: np.ndarray, pairs, experts, lam: float = 1.0, profile: str = "ref",
         seed: int = 0, objective: str = "pearson") -> dict:
    """Cross-validated fit: per fold, scale on the training pairs, fit, and score train and validation r."""
    from scipy.stats import spearmanr

    folds = []
    for f in expert_folds(pairs, experts):
        tr, va = f["train"], f["val"]
        lo, rng = minmax_fit(X[tr])
        Xtr, Xva = minmax_apply(X[tr], lo, rng), minmax_apply(X[va], lo, rng)
        w, iters = fit(Xtr, y[tr], lam, profile, seed=seed, objective=objective)
        pva = Xva @ w
        rho = spearmanr(pva, y[va])[0] if np.std(pva) > 0 and len(va) > 1 else float("nan")
        folds.append({"held_out": f["held_out"], "n_train": len(tr), "n_val": len(va), "iters": iters,
                      "r_train": pearson(Xtr @ w, y[tr]), "r_val": pearson(pva, y[va]), "rho_val": float(rho),
                      "n_nonzero": int((w != 0).sum()), "w": w.tolist()})
    W = np.array([f["w"] for f in folds])
    rv, rt = np.array([f["r_val"] for f in folds]), np.array([f["r_train"] for f in folds])
    lo, rng = minmax_fit(X)
    w_all, _ = fit(minmax_apply(X, lo, rng), y, lam, profile, seed=seed, objective=objective)  # all pairs: used to score subsets
    return {"val_r": _nanmean(rv), "val_r_std": _nanstd(rv), "train_r": _nanmean(rt), "train_r_std": _nanstd(rt),
            "nan_folds": int(np.isnan(rv).sum()), "w_mean": W.mean(0).tolist(), "w_std": W.std(0).tolist(),
            "nonzero_freq": (W != 0).mean(0).tolist(), "mean_nonzero": float((W != 0).sum(1).mean()),
            "folds": folds, "final": {"w": w_all.tolist(), "lo": lo.tolist(), "range": rng.tolist()}}


def _nanmean(x):
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def _nanstd(x):
    return float(np.nanstd(x)) if np.isfinite(x).any() else float("nan")


def top_k_overlap(w_a: Sequence[float], w_b: Sequence[float], k: int = 5) -> float:
    """|top-k(a) ∩ top-k(b)| / k by |mean coefficient| (Table 6)."""
    ta = set(np.argsort(-np.abs(np.asarray(w_a)), kind="stable")[:k])
    tb = set(np.argsort(-np.abs(np.asarray(w_b)), kind="stable")[:k])
    return len(ta & tb) / k


def sign_agreement(w_a, w_b, threshold: Optional[float] = None) -> float:
    """Fraction of metrics whose mean coefficients share a sign (Table 7); with ``threshold``, |w| below it is 0."""
    a, b = np.asarray(w_a, float), np.asarray(w_b, float)
    if threshold is not None:
        a, b = np.where(np.abs(a) < threshold, 0.0, a), np.where(np.abs(b) < threshold, 0.0, b)
    return float((np.sign(a) == np.sign(b)).mean())
