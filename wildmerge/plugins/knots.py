"""KnOTS-TIES (Stoica et al. 2025, "Model merging with SVD to tie the KnOTS"), as the mergekit method ``knots_ties``.

Per weight matrix the experts' updates are concatenated along the column axis and decomposed once,
``[dW_1 ... dW_K] = U S [V_1^T ... V_K^T]``, so every expert is written in one shared basis ``U S``; the per-expert
blocks ``V_i`` (``n x r``, ``r`` the numerical rank of the concatenation) are merged with TIES (trim each to its
top ``density`` share by magnitude, elect each entry's sign by the sum, average the agreeing entries) and the update
is rebuilt, ``theta = theta_0 + lambda * U S V_merged^T``. For LoRA experts ``r <= sum_i rank(B_i A_i)``, so the merged
update stays in the span of the adapters. Trimming is per tensor (as mergekit's ``ties``), not over the whole model.

Tensors outside the SVD step (vectors, vocabulary matrices, ``exclude``) get the same TIES on the task vectors
themselves: KnOTS-TIES in the identity basis.
"""

import dataclasses
from typing import Optional, Sequence

import torch
from mergekit import sparsify
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from mergekit.merge_methods.generalized_task_arithmetic import get_mask
from pydantic import Field

from wildmerge.plugins.kernel_pool import on_kernel_threads
from wildmerge.plugins.linalg import out_dtype, thin_svd
from wildmerge.plugins.methods import ScaledTaskVectors, SpectralOptions, spectral_eligible
from wildmerge.plugins.task_vector_method import TaskVectorMethod, all_zero

KNOTS_URL = "https://arxiv.org/abs/2410.19735"


class KnotsTiesParams(SpectralOptions, ScaledTaskVectors):
    """KnOTS-TIES: TIES on the experts' blocks of one joint SVD."""

    density: float = Field(0.1, gt=0.0, le=1.0,
                           description="share of each expert's V block (or task vector) TIES keeps, by magnitude")


def ties_mean(stack: torch.Tensor, density: float) -> torch.Tensor:
    """TIES over the first axis of ``stack``: each slice trimmed to its top ``density`` share by magnitude
    (mergekit's ``magnitude``, looked up per call: inside wildmerge's merges TIES' linear-time trim, plugins/trim.py),
    each entry's sign elected by the sum of the trimmed values, the agreeing non-zero entries averaged (an entry no
    slice keeps is zero)."""
    trimmed = torch.stack([sparsify.magnitude(x, density) for x in stack])
    agree = get_mask(trimmed, "sum") & (trimmed != 0)
    count = agree.sum(0).clamp(min=1)
    return (trimmed * agree).sum(0) / count


@on_kernel_threads
def knots_ties(deltas: Sequence[torch.Tensor], density: float, rank_tol: Optional[float],
               svd_precision: str) -> torch.Tensor:
    """``U S ties_mean(V_1 .. V_K)^T`` from one thin SVD of the column-concatenated task vectors (within its
    numerical rank: directions with a zero singular value carry nothing and are not trimmed over)."""
    deltas = list(deltas)
    n = deltas[0].shape[-1]
    u, s, v = thin_svd(torch.cat(deltas, dim=-1), tol=rank_tol, precision=svd_precision)
    rank = int((s > 0).sum())
    if rank == 0:
        return torch.zeros_like(deltas[0], dtype=out_dtype(deltas[0]))
    u, s, v = u[:, :rank], s[:rank], v[:, :rank]
    v_merged = ties_mean(torch.stack(v.split(n, dim=0)), density)
    return ((u * s) @ v_merged.transpose(-2, -1)).to(out_dtype(deltas[0]))


@dataclasses.dataclass(frozen=True)
class KnotsTies(TaskVectorMethod, GroupMergeMethod):
    """``theta_0 + lambda * knots_ties(w_1 tau_1, ..., w_K tau_K)`` on eligible matrices, TIES elsewhere."""

    method_name: str = "knots_ties"
    method_pretty_name: str = "KnOTS-TIES"
    method_reference_url: str = KNOTS_URL
    params: type = KnotsTiesParams

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> Optional[torch.Tensor]:
        if all_zero(deltas):
            return None
        if spectral_eligible(group, parameters["spectral_vocab"], parameters["exclude"]):
            update = knots_ties(deltas, density=parameters["density"], rank_tol=parameters["rank_tol"],
                                svd_precision=parameters["svd_precision"])
        else:
            update = ties_mean(torch.stack(deltas), parameters["density"])
        return parameters["lambda"] * update


KNOTS_TIES = KnotsTies()
METHODS = (KNOTS_TIES,)  # registered by registration.py
