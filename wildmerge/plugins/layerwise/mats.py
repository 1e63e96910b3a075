"""MaTS on RegMean's Grams: the merge as a linear system solved by conjugate gradient, independent of any model.

Tam, Bansal, Raffel, "Merging by Matching Models in Task Parameter Subspaces" (TMLR 2024, arXiv 2312.04339): each
model i gives a positive semi-definite C_i; the merge solves ``(Σ_i C_i) θ = Σ_i C_i θ_i`` with conjugate gradient,
started from task arithmetic (or the average) and stopped after a few iterations. For a linear layer with RegMean's
C_i = G_i ⊗ I (block-diagonal: one block per layer) the system reads ``W A = B`` with ``A = Σ ω_i G_i`` and
``B = Σ ω_i W_i G_i``; CG runs on that block with the Frobenius inner product. Run to convergence it reaches
RegMean's closed form (the same ``ridge`` / ``lam_rel`` readings as ``regmean.closed_form_merge``); stopped early,
it stays near its start in the directions the data barely constrains, which is what the paper relies on.
"""

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch


def conjugate_gradient(apply: Callable[[torch.Tensor], torch.Tensor], B: torch.Tensor, X0: torch.Tensor,
                       iterations: int, tol: float) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Solve ``apply(X) = B`` (``apply`` symmetric positive semi-definite) from ``X0``; returns X and
    ``{iterations, residual}`` (the true ``||B - apply(X)|| / ||B||`` at the end)."""
    X = X0.clone()
    R = B - apply(X)
    P = R.clone()
    rs = float((R * R).sum())
    scale = float(B.norm()) or 1.0
    done = 0
    for _ in range(iterations):
        if rs ** 0.5 <= tol * scale:
            break
        AP = apply(P)
        curvature = float((P * AP).sum())
        if curvature <= 0.0:  # P lies in A's null space: nothing left to fit in the range of the data
            break
        alpha = rs / curvature
        X.add_(P, alpha=alpha)
        R.sub_(AP, alpha=alpha)
        rs_new = float((R * R).sum())
        P = R + (rs_new / rs) * P
        rs = rs_new
        done += 1
    residual = float((B - apply(X)).norm()) / scale
    return X, {"iterations": done, "residual": residual}


def mats_merge(
    weights: Sequence[torch.Tensor],
    grams: Sequence[torch.Tensor],
    omegas: Optional[Sequence[float]],
    *,
    lam_rel: float,
    ridge: str,
    base: Optional[torch.Tensor],
    init: str,
    init_lambda: float,
    iterations: int,
    tol: float,
    precision: torch.dtype,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """The MaTS merge of one linear layer (``[d_out, d_in]`` weights, ``[d_in, d_in]`` Grams) and CG's report.

    ``init``: ``task_arithmetic`` (``base + init_lambda * Σ (W_i - base)``) or ``average``; ``ridge`` and
    ``lam_rel`` define the system exactly as for RegMean's closed form."""
    if (ridge == "delta" or init == "task_arithmetic") and base is None:
        raise ValueError("ridge='delta' and init='task_arithmetic' need the base weight: pass base=")
    n = len(weights)
    w = torch.tensor([1.0] * n if omegas is None else list(omegas), dtype=precision)
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"importance weights must be finite, >= 0 and not all 0, got {w.tolist()}")
    w = w / w.mean()
    dev = grams[0].device
    Gs = [G.to(precision) for G in grams]
    Ws = [W.to(device=dev, dtype=precision) for W in weights]
    W0 = base.to(device=dev, dtype=precision) if base is not None else None
    A = sum(wi * G for wi, G in zip(w.tolist(), Gs))
    lam = float(lam_rel) * float(A.diagonal().mean())
    if ridge == "per_task":
        B = sum(wi * (W @ G + lam * W) for wi, W, G in zip(w.tolist(), Ws, Gs))
        lam = lam * float(w.sum())
    else:
        B = sum(wi * W @ G for wi, W, G in zip(w.tolist(), Ws, Gs))
    if init == "task_arithmetic":
        X0 = W0 + init_lambda * sum(W - W0 for W in Ws)
    else:
        X0 = sum(Ws) / n

    def apply(X):
        return X @ A + lam * X if lam else X @ A

    if ridge == "delta":  # solve for the step from the base: (W - W0)(A + λI) = Σ ω_i (W_i - W0) G_i
        D, info = conjugate_gradient(apply, B - W0 @ A, X0 - W0, iterations, tol)
        return W0 + D, info
    return conjugate_gradient(apply, B, X0, iterations, tol)
