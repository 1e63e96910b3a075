"""Top-k singular triplets by randomized subspace iteration (Halko, Martinsson & Tropp 2011, SIAM Review 53(2),
Algorithm 4.4), for TSV-M's and Iso-CTS's per-task subspaces (opt-in: ``topk_solver: randomized``).

Why: the exact route builds a Gram matrix (``m n^2`` flops) and solves an ``n x n`` eigenproblem for every task,
although each task keeps only ``k = r / T`` directions. Subspace iteration touches each task vector with ``k + p``
vectors at a time: ``2 (2q + 2) m n (k + p)`` flops, no eigensolve larger than ``(k + p) x (k + p)``.

The operator is given as two products (``A X`` and ``A^T Y``), so Iso-CTS's projected task vectors
``(I - U_c U_c^T) delta`` are never formed.

Error bound (HMT 2011, Corollary 10.10, with ``sum_{j>k} s_j^{2(2q+1)} <= (r - k) s_{k+1}^{2(2q+1)}``): the basis
``Q`` of the sketch satisfies, in expectation over the Gaussian test matrix,
``||A - Q Q^T A||_2 <= C^{1/(2q+1)} s_{k+1}``,  ``C = 1 + sqrt(k / (p - 1)) + e sqrt(k + p) / p * sqrt(r - k)``,
and the returned rank-k approximation is within ``s_{k+1} + ||A - Q Q^T A||_2`` of ``A`` (HMT §9.4). With the
defaults ``p = 10``, ``q = 2`` and TSV-M's ``k = 53`` of ``r = 640`` (12 tasks), ``C^{1/5} = 2.2``. The directions
themselves are only as well determined as the spectral gap at ``k`` allows: on flat (noise-like) spectra they
differ from the exact ones; the benchmark reports the error of the merged update on such inputs and on the demo
family's task vectors.
"""

import math
from typing import Callable, Tuple

import torch

OVERSAMPLE = 10
POWER_ITERATIONS = 2
SEED = 0

Product = Callable[[torch.Tensor], torch.Tensor]


def range_error_bound(k: int, r: int, oversample: int = OVERSAMPLE, power_iterations: int = POWER_ITERATIONS) -> float:
    """The factor ``C^{1/(2q+1)}`` above: expected ``||A - Q Q^T A||_2 / s_{k+1}`` is at most this."""
    p = oversample
    c = 1 + math.sqrt(k / (p - 1)) + math.e * math.sqrt(k + p) / p * math.sqrt(max(r - k, 0))
    return c ** (1.0 / (2 * power_iterations + 1))


def sketch_basis(apply: Product, apply_t: Product, n: int, width: int, dtype: torch.dtype,
                 device: torch.device, power_iterations: int = POWER_ITERATIONS) -> torch.Tensor:
    """Orthonormal ``m x width`` basis ``Q`` of ``(A A^T)^q A G`` for a seeded Gaussian ``G`` (n x width).

    Re-orthonormalised after every product (HMT Algorithm 4.4) so that small singular values are not lost to
    rounding. The test matrix is drawn on the CPU with a fixed seed: the same inputs give the same result on
    every device and every run.
    """
    gen = torch.Generator().manual_seed(SEED)
    test = torch.randn(n, width, generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)
    q = _orthonormal(apply(test))
    for _ in range(power_iterations):
        q = _orthonormal(apply(_orthonormal(apply_t(q))))
    return q


def top_triplets(apply: Product, apply_t: Product, shape: Tuple[int, int], k: int, dtype: torch.dtype,
                 device: torch.device, oversample: int = OVERSAMPLE) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(U, S, V)`` with the ``k`` leading singular triplets of ``A`` (``shape = (m, n)``), descending, approximately.

    ``B = Q^T A`` is small (``width x n``); its SVD comes from the eigensolve of ``B B^T``. ``A`` may be a batch
    ``(T, m, n)`` (the products then return batches): every matrix sees the same seeded test matrix, so a batch
    gives what one matrix at a time gives, in one GEMM chain.
    """
    width = min(min(shape), k + oversample)
    q = sketch_basis(apply, apply_t, shape[1], width, dtype, device)
    b_t = apply_t(q)  # (Q^T A)^T, n x width
    evals, w = torch.linalg.eigh(b_t.transpose(-2, -1) @ b_t)
    s = evals.flip(-1)[..., :k].clamp_min(0).sqrt()
    w = w.flip(-1)[..., :k]  # [..., :k]: the operator may act on a batch of matrices (T, m, n)
    keep = s > 0
    inv = torch.where(keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))
    return q @ w, s, (b_t @ w) * inv.unsqueeze(-2)


def _orthonormal(y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(y).Q
