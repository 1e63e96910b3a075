"""Baselines of the reality-check paper's comparison tables, as mergekit methods: Consensus TA, STAR, TSV lossless.

- ``consensus_ta`` (Wang et al. 2024, "Localizing Task Information for Improved Model Merging and Compression"):
  TALL masks ``m_t = |tau_t| > tall_lambda * |tau_MTL - tau_t|`` with ``tau_MTL = sum_t tau_t``; an entry is kept
  when at least ``k`` tasks claim it; ``theta = theta_0 + lambda * (m_cons * tau_MTL)``. Elementwise, so every
  floating-point tensor gets it. ``k = 2`` drops "selfish" (one task) and "catastrophic" (no task) weights.
- ``star`` (Lee et al. 2025, "STAR: Spectral Truncation and Rescale for Model Merging"): each task's matrix keeps
  its top ``r`` singular directions, ``r`` the fewest whose singular values sum to ``eta`` of the nuclear norm,
  rescaled to keep the nuclear norm: ``s'_i = s_i * sum(s) / sum_{i<=r} s_i``; ``theta = theta_0 + lambda *
  mean_t STAR(tau_t)``. Tensors outside the spectral rule (vectors, vocabulary matrices) take the plain mean.
- ``tsv_lossless`` (Gargiulo et al. 2025, "Task Singular Vectors"): TSV-M without the rank-``r/T`` truncation:
  every task keeps all its singular triplets, the stacked U and V are replaced by their orthogonal polar factors.
  When ``T * r`` exceeds a side, that polar factor has orthonormal rows instead of columns (as the authors' code).

The reality-check paper (App. B, Table 4) tunes ``lambda`` for Consensus and TSV, and ``(eta, lambda)`` for STAR.
"""

import dataclasses
from typing import Optional, Sequence

import torch
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from pydantic import Field

from wildmerge.plugins.kernel_pool import on_kernel_threads
from wildmerge.plugins.linalg import out_dtype, polar_weights, spectral_map, thin_svd
from wildmerge.plugins.method_params import MethodParams
from wildmerge.plugins.methods import TSV_URL, ScaledTaskVectors, SpectralMerge, SpectralOptions
from wildmerge.plugins.task_vector_method import TaskVectorMethod

CONSENSUS_URL = "https://arxiv.org/abs/2405.07813"
STAR_URL = "https://arxiv.org/abs/2502.10339"


class ConsensusOptions(MethodParams):
    """The consensus mask (Wang et al. 2024): which entries of the summed task vector survive."""

    tall_lambda: float = Field(0.4, ge=0.0, allow_inf_nan=False,
                               description="TALL-mask threshold: task t claims an entry when |tau_t| > tall_lambda * "
                                           "|tau_MTL - tau_t|")
    k: int = Field(2, ge=0, description="an entry is kept when at least k tasks claim it (0 keeps all: TA)")


class ConsensusTAParams(ConsensusOptions, ScaledTaskVectors):
    """Consensus TA: ``theta_0 + lambda * consensus_mask * sum_t w_t tau_t``."""


class StarParams(SpectralOptions, ScaledTaskVectors):
    """STAR (Lee et al. 2025)."""

    eta: float = Field(0.9, gt=0.0, le=1.0,
                       description="share of each task matrix's nuclear norm its kept singular values must reach")


class TSVLosslessParams(SpectralOptions, ScaledTaskVectors):
    """TSV lossless (Gargiulo et al. 2025): TSV-M keeping every singular triplet of every task."""


def consensus_mask(deltas: Sequence[torch.Tensor], tall_lambda: float, k: int) -> torch.Tensor:
    """Boolean mask of the entries at least ``k`` tasks claim (TALL masks against the sum of the task vectors)."""
    total = sum(deltas)
    votes = torch.zeros_like(total, dtype=torch.int32)
    for d in deltas:
        votes += (d.abs() > tall_lambda * (total - d).abs()).to(torch.int32)
    return votes >= k


def consensus_sum(deltas: Sequence[torch.Tensor], tall_lambda: float, k: int) -> torch.Tensor:
    """``consensus_mask * sum_t tau_t``."""
    total = sum(deltas)
    return total * consensus_mask(deltas, tall_lambda, k).to(total.dtype)


def _star_values(s: torch.Tensor, rank: int, eta: float) -> torch.Tensor:
    """STAR's new singular values: the top ``r`` (fewest reaching ``eta`` of the nuclear norm), rescaled to it."""
    s_r = s[:rank]
    total = s_r.sum()
    reached = (torch.cumsum(s_r, 0) >= eta * total).nonzero()
    keep = int(reached[0]) + 1 if len(reached) else rank
    out = torch.zeros_like(s)
    out[:keep] = s_r[:keep] * (total / s_r[:keep].sum())
    return out


@on_kernel_threads
def star(deltas: Sequence[torch.Tensor], eta: float, rank_tol: Optional[float], svd_precision: str) -> torch.Tensor:
    """Mean over tasks of STAR(tau_t): spectral truncation to ``eta`` of the nuclear norm, then rescaling."""
    deltas = list(deltas)
    total = None
    for d in deltas:
        one = spectral_map(d, lambda s, rank: _star_values(s, rank, eta), rank_tol, svd_precision)
        total = one if total is None else total + one
    return total / len(deltas)


# Relative singular value of a stacked factor below which a float64 Gram cannot tell it from zero (its eigenvalues
# carry ~eps64 * d_max^2 of noise, i.e. ~1.5e-8 * d_max on the singular values).
_POLAR_TOL64 = 1e-6


def _polar(m: torch.Tensor) -> torch.Tensor:
    """Orthogonal polar factor of ``m`` from the Gram matrix of its smaller side: a wide stack (more columns than
    rows, as lossless TSV's ``T * r`` columns) has independent rows, so ``(m m^T)^{-1/2} m`` is well conditioned
    where ``m (m^T m)^{-1/2}`` would invert the noise of a rank-deficient Gram."""
    tol = _POLAR_TOL64 if m.dtype == torch.float64 else None
    if m.shape[0] < m.shape[1]:
        return polar_weights(m.transpose(-2, -1), tol) @ m
    return m @ polar_weights(m, tol)


@on_kernel_threads
def tsv_lossless(deltas: Sequence[torch.Tensor], rank_tol: Optional[float], svd_precision: str) -> torch.Tensor:
    """TSV without truncation: every task's full thin SVD, stacked, U and V orthogonalised (polar factors)."""
    deltas = list(deltas)
    u, s, v = thin_svd(deltas, tol=rank_tol, precision=svd_precision)
    u_perp = _polar(torch.cat(list(u), -1))
    v_perp = _polar(torch.cat(list(v), -1))
    return ((u_perp * torch.cat(list(s), -1)) @ v_perp.transpose(-2, -1)).to(out_dtype(deltas[0]))


@dataclasses.dataclass(frozen=True)
class ConsensusTA(TaskVectorMethod, GroupMergeMethod):
    """``theta_0 + lambda * consensus_mask * sum_t w_t tau_t`` on every floating-point tensor."""

    method_name: str = "consensus_ta"
    method_pretty_name: str = "Consensus TA"
    method_reference_url: str = CONSENSUS_URL
    params: type = ConsensusTAParams

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> torch.Tensor:
        return parameters["lambda"] * consensus_sum(deltas, parameters["tall_lambda"], parameters["k"])


CONSENSUS_TA = ConsensusTA()
STAR = SpectralMerge("star", "STAR", STAR_URL, star, StarParams)
TSV_LOSSLESS = SpectralMerge("tsv_lossless", "TSV lossless", TSV_URL, tsv_lossless, TSVLosslessParams)
METHODS = (CONSENSUS_TA, STAR, TSV_LOSSLESS)  # registered by registration.py
