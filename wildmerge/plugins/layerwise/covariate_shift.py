"""Merging covariate shift (Buzzega et al., arXiv 2508.21421, Eq. 8): how far a merged model's layer inputs drift
from each expert's own.

Fit a Gaussian to the inputs that layer l receives inside fine-tuned model i (X_i) and inside the merged model
on the same data (X̂_i), and sum the Fréchet (squared 2-Wasserstein) distances over models. Computed in float64
(covariances of hidden states are close to singular: float32 square roots lose the small eigenvalues), pooling all
valid tokens.
"""

import torch


class MomentAccumulator:
    """Running mean and covariance of token rows ``[tokens, d]`` in float64."""

    def __init__(self, d: int, device=None):
        self.s = torch.zeros(d, dtype=torch.float64, device=device)
        self.ss = torch.zeros(d, d, dtype=torch.float64, device=device)
        self.n = 0

    def add(self, rows: torch.Tensor) -> None:
        x = rows.double()
        self.s += x.sum(0)
        self.ss.addmm_(x.T, x)
        self.n += x.shape[0]

    def moments(self):
        mu = self.s / max(self.n, 1)
        cov = self.ss / max(self.n, 1) - torch.outer(mu, mu)
        return mu, 0.5 * (cov + cov.T)


def _psd_sqrt(S: torch.Tensor) -> torch.Tensor:
    vals, vecs = torch.linalg.eigh(S)
    return (vecs * vals.clamp_min(0).sqrt()) @ vecs.T


def frechet_distance(mu1, cov1, mu2, cov2) -> float:
    """``||μ1-μ2||² + Tr(Σ1 + Σ2 - 2 (Σ2^½ Σ1 Σ2^½)^½)`` in float64."""
    mu1, cov1, mu2, cov2 = (t.double().cpu() for t in (mu1, cov1, mu2, cov2))
    r = _psd_sqrt(cov2)
    inner = r @ cov1 @ r
    tr_sqrt = torch.linalg.eigvalsh(0.5 * (inner + inner.T)).clamp_min(0).sqrt().sum()
    value = (mu1 - mu2).pow(2).sum() + torch.trace(cov1) + torch.trace(cov2) - 2 * tr_sqrt
    return float(value.clamp_min(0))


def mcs(own: MomentAccumulator, merged: MomentAccumulator) -> float:
    """One model's term of Eq. 8 for one layer."""
    return frechet_distance(*own.moments(), *merged.moments())
