"""The closed-form maths of RegMean and Chain of Merges, independent of any model.

Jin et al., RegMean, ICLR 2023 (arXiv 2212.09849); Buzzega et al., Chain of Merges, arXiv 2508.21421 (Eqs. 2, 6, 7).

Every linear layer W (``[d_out, d_in]``) is merged as the least-squares fit of all models' outputs on their own
inputs: ``W_M = (Σ ω_i W_i G_i)(Σ ω_i G_i)^-1`` with ``G_i`` the (optionally normalised) input Gram of model i.
The CoM paper adds Tikhonov regularisation without saying how much or towards what; three readings are kept:
``delta`` shrinks unseen directions to the base (default), ``per_task`` to the ω-weighted mean of the W_i,
``zero`` to 0 (paper-literal). λ is relative to the mean diagonal of A so that ω's scale never matters.
"""

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F


class GramAccumulator:
    """Input Gram of one (model, layer group), accumulated in float32 from token rows ``[tokens, d_in]``."""

    def __init__(self, d: int, norm: str, device=None):
        self.G = torch.zeros(d, d, dtype=torch.float32, device=device)
        self.n = 0
        self.norm = norm

    def add(self, rows: torch.Tensor) -> None:
        x = rows.float()
        if self.norm == "token":  # CoM's Norm: unit-norm each token's feature vector
            x = F.normalize(x, dim=1)
        self.G.addmm_(x.T, x)
        self.n += x.shape[0]

    def result(self) -> torch.Tensor:
        """Mean over tokens (so the number of calibration tokens does not scale G), or the exact cosine matrix for
        ``feature`` normalisation."""
        if self.norm == "feature":
            inv = self.G.diagonal().clamp_min(1e-12).rsqrt()
            return self.G * inv[:, None] * inv[None, :]
        return self.G / max(self.n, 1)


def omega(G: torch.Tensor) -> float:
    """Eq. 6: the sum of absolute off-diagonal entries of the strict upper triangle of G."""
    return float(0.5 * (G.abs().sum() - G.diagonal().abs().sum()))


def _solve_right(B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """``B @ A^-1`` for symmetric A: Cholesky-free ``solve`` in the given precision, pinv if singular."""
    try:
        X = torch.linalg.solve(A, B.T).T
        if torch.isfinite(X).all():
            return X
    except RuntimeError:
        pass
    return B @ torch.linalg.pinv(A, hermitian=True)


def closed_form_merge(
    weights: Sequence[torch.Tensor],
    grams: Sequence[torch.Tensor],
    omegas: Optional[Sequence[float]] = None,
    *,
    lam_rel: float,
    ridge: str,
    base: Optional[torch.Tensor] = None,
    precision: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Eq. 7 with relative Tikhonov regularisation; returns the merged ``[d_out, d_in]`` weight in ``precision``.

    ``weights`` and ``grams`` are per model; ``omegas`` default to 1 (plain RegMean). ``base`` is required for
    ``ridge='delta'``.
    """
    if ridge == "delta" and base is None:
        raise ValueError("ridge='delta' shrinks towards the base weight: pass base=")
    n = len(weights)
    w = torch.tensor([1.0] * n if omegas is None else list(omegas), dtype=precision)
    if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"importance weights must be finite, >= 0 and not all 0, got {w.tolist()}")
    w = w / w.mean()  # scale-free; with a relative λ this changes nothing (property 2)
    dev = grams[0].device
    A = sum(wi * G.to(precision) for wi, G in zip(w.to(dev), grams))
    d = A.shape[0]
    lam = float(lam_rel) * float(A.diagonal().mean())
    eye = torch.eye(d, dtype=precision, device=dev)
    Ws = [W.to(device=dev, dtype=precision) for W in weights]
    if ridge == "zero":
        B = sum(wi * W @ G.to(precision) for wi, W, G in zip(w, Ws, grams))
        return B @ torch.linalg.pinv(A + lam * eye, hermitian=True)
    if ridge == "delta":
        W0 = base.to(device=dev, dtype=precision)
        B = sum(wi * (W - W0) @ G.to(precision) for wi, W, G in zip(w, Ws, grams))
        if lam == 0.0:
            return W0 + B @ torch.linalg.pinv(A, hermitian=True)
        return W0 + _solve_right(B, A + lam * eye)
    # per_task: G_i <- G_i + λI in both factors
    B = sum(wi * W @ (G.to(precision) + lam * eye) for wi, W, G in zip(w, Ws, grams))
    if lam == 0.0:
        return B @ torch.linalg.pinv(A, hermitian=True)
    return _solve_right(B, A + lam * float(w.sum()) * eye)


def solve_precision(d_in: int) -> torch.dtype:
    """float32, float64 for very wide inputs (d_in >= 8192), where float32 conditioning gets fragile."""
    return torch.float64 if d_in >= 8192 else torch.float32


def all_equal(tensors: List[torch.Tensor]) -> bool:
    return all(torch.equal(tensors[0], t) for t in tensors[1:])
