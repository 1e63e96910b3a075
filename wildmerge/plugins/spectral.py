"""The four spectral kernels: Iso-C, Iso-CTS, TSV-M and Subspace Boosting, each as its paper writes it.

A kernel maps task vectors (float, base-shaped) to the merged update; its keywords are the recipe's parameter
names, declared once with their defaults and ranges in the method's parameter model (``methods.py``), so a method
hands its checked parameters over as they are and a kernel neither defaults nor re-checks them. The linear algebra
underneath (thin SVDs by Gram + eigh, the effective-rank rule, top-k solvers, polar factors, thread control) is in
``linalg.py``.
"""

from typing import List, Optional, Sequence, Tuple

import torch

from wildmerge.plugins.kernel_pool import on_kernel_threads
from wildmerge.plugins.linalg import (
    batched_randomized_svds,
    out_dtype,
    polar_product,
    projected_svds,
    randomized_svds,
    spectral_map,
    thin_svd,
    working_dtype,
)


def resolve_topk_solver(topk_solver: str, device: torch.device) -> str:
    """``auto``: exact on the CPU; on a GPU the batched randomized route.

    Why: on a GPU the exact route is bound by one cuSOLVER eigensolve per task per matrix (about 2.3-2.8x mergekit's
    task arithmetic at K = 12 on Qwen3-4B shapes), while the batched subspace iteration is GEMMs. Its error is bounded
    (``linalg_randomized``: each task's rank-k approximation is within ``(1 + C^{1/(2q+1)}) s_{k+1}`` of it, the
    exact truncation within ``s_{k+1}``; with a spectral gap at k its directions are the exact ones up to an angle of
    ``C (s_{k+1} / s_k)^{2q+1}``; both tested in ``tests/plugins/test_linalg_batched.py``). On the CPU the exact route stays the default (Table 1 is computed
    there, and a partial LAPACK eigensolve is cheap).
    """
    if topk_solver != "auto":
        return topk_solver
    return "randomized_batched" if device.type == "cuda" else "exact"


def _randomized(topk_solver: str):
    """The per-task loop, or one batched GEMM chain over all tasks (``randomized_batched``, for GPUs)."""
    return batched_randomized_svds if topk_solver == "randomized_batched" else randomized_svds


@on_kernel_threads
def iso_c(deltas: Sequence[torch.Tensor], rank_tol: Optional[float], svd_precision: str) -> torch.Tensor:
    """Iso-C (Marczak et al. 2025): keep the singular vectors of the summed task vectors and set every singular
    value (within the rank) to their mean. The tasks are summed in place, one by one (as ``sum`` adds them, one
    buffer instead of one per task; no stacked copy of all of them)."""
    deltas = list(deltas)
    total = deltas[0].clone()
    for d in deltas[1:]:
        total += d
    return iso_c_of_sum(total, rank_tol, svd_precision)


@on_kernel_threads
def iso_c_of_sum(delta: torch.Tensor, rank_tol: Optional[float], svd_precision: str) -> torch.Tensor:
    """Iso-C of the summed task vectors ``delta`` (the method's kernel: mergekit's template sums them in one buffer,
    ``task_vector_method.summed_task_vectors``)."""
    return spectral_map(delta, lambda s, rank: torch.where(s > 0, s.sum() / rank, 0.0), rank_tol, svd_precision)


@on_kernel_threads
def subspace_boost(delta: torch.Tensor, beta: float, rank_tol: Optional[float], svd_precision: str) -> torch.Tensor:
    """Subspace Boosting (Skorobogat et al. 2025): raise the tail of the spectrum to the cutoff singular value.

    With cumulative energy ``n_j = sum_{i<=j} s_i / sum_i s_i`` (plain singular values, within the numerical
    rank), ``j* = min{j : n_j >= beta}`` and every ``s_j`` with ``j > j*`` becomes ``s_{j*}``.
    Returns the *correction* ``U diag(s' - s) V^T`` to add to ``delta`` (one merged update): exactly zero when
    ``beta = 1``, so boosting with ``beta = 1`` leaves TA/TIES bit-for-bit unchanged.
    """
    return spectral_map(delta, lambda s, rank: _boost_lift(s, rank, beta), rank_tol, svd_precision)


def _boost_lift(s: torch.Tensor, rank: int, beta: float) -> torch.Tensor:
    """``s' - s`` of Subspace Boosting for singular values ``s`` (descending, zeros past the rank)."""
    s_r = s[:rank]
    energy = torch.cumsum(s_r, 0) / s_r.sum()
    reached = (energy >= beta - 1e-12).nonzero()
    j_star = int(reached[0]) if len(reached) else rank - 1
    lift = torch.zeros_like(s)
    lift[j_star + 1 : rank] = s_r[j_star] - s_r[j_star + 1 :]
    return lift


@on_kernel_threads
def tsv_m(deltas: Sequence[torch.Tensor], rank_tol: Optional[float], svd_precision: str,
          topk_solver: str) -> torch.Tensor:
    """TSV-Merge (Gargiulo et al. 2025): each task keeps its top ``floor(r / T)`` singular triplets; the stacked
    U and V blocks are replaced by their orthogonal polar factors; ``delta = U_perp diag(S) V_perp^T``.

    ``r = min(m, n)``; at least one triplet per task is kept even when ``T > r``, so no expert is silently dropped.
    ``topk_solver="randomized"`` finds each task's triplets by randomized subspace iteration (approximate);
    ``"randomized_batched"`` does the same for all tasks in one batched GEMM chain (one (T, m, n) copy more);
    ``"auto"`` (the default) is exact on the CPU and batched on a GPU (``resolve_topk_solver``).
    """
    deltas = list(deltas)
    topk_solver = resolve_topk_solver(topk_solver, deltas[0].device)
    k = max(1, min(deltas[0].shape[-2:]) // len(deltas))
    if topk_solver != "exact":
        u, s, v = _randomized(topk_solver)(deltas, k, rank_tol, working_dtype(svd_precision))
    else:
        u, s, v = thin_svd(deltas, k=k, tol=rank_tol, precision=svd_precision)
    u_cat = torch.cat(list(u), dim=-1)
    v_cat = torch.cat(list(v), dim=-1)
    s_cat = torch.cat(list(s), dim=-1)
    return polar_product(u_cat, s_cat, v_cat).to(out_dtype(deltas[0]))


def iso_cts_sizes(r: int, n_tasks: int, common_space_fraction: float) -> Tuple[int, int]:
    """(common, per task) subspace sizes as in the Iso-CTS authors' code: ``common = int(r * f)``,
    ``per_task = round((r - common) / T)``, and the common subspace takes the rest, ``r - T * per_task``.

    Where rounding up would leave no common direction (``T * per_task >= r``, possible only when ``int(r * f)``
    is 0 or tiny), ``per_task`` is lowered so that at least one common direction remains.
    """
    common = int(r * common_space_fraction)
    per_task = round((r - common) / n_tasks)
    per_task = min(per_task, (r - 1) // n_tasks)
    return r - n_tasks * per_task, per_task


@on_kernel_threads
def iso_cts(
    deltas: Sequence[torch.Tensor],
    common_space_fraction: float,
    rank_tol: Optional[float],
    svd_precision: str,
    topk_solver: str,
) -> torch.Tensor:
    """Iso-CTS (Marczak et al. 2025): isotropic merge in the common subspace plus task-specific subspaces.

    1. Common subspace: the top ``k`` singular directions of the summed task vectors (sizes: ``iso_cts_sizes``).
    2. Each task vector with the common left subspace projected out, ``(I - U_c U_c^T) delta_t``, gives its own
       top ``s`` directions (rank threshold relative to ``||delta_t||_F``, so that what projection leaves of a task
       lying inside the common subspace counts as zero rather than as directions of rounding noise).
    3. The stacked U and V are orthogonalised (polar factor) and every singular value is set to the mean of the
       stacked singular values.
    ``common_space_fraction = 1`` is Iso-C. ``topk_solver="randomized"`` finds step 2's directions by randomized
    subspace iteration on the projected task vectors, which are then never formed (approximate).
    """
    deltas = list(deltas)
    topk_solver = resolve_topk_solver(topk_solver, deltas[0].device)
    dtype = working_dtype(svd_precision)
    k_common, per_task = iso_cts_sizes(min(deltas[0].shape[-2:]), len(deltas), common_space_fraction)
    total = deltas[0].to(dtype).clone()
    for d in deltas[1:]:
        total += d.to(dtype)
    u_c, s_c, v_c = thin_svd(total, k=k_common, tol=rank_tol, precision=svd_precision)
    us: List[torch.Tensor] = [u_c]
    vs: List[torch.Tensor] = [v_c]
    ss: List[torch.Tensor] = [s_c]
    if per_task > 0:
        norms = torch.stack([torch.linalg.matrix_norm(d).to(u_c.dtype) for d in deltas]).unsqueeze(-1)
        if topk_solver != "exact":
            u_t, s_t, v_t = _randomized(topk_solver)(deltas, per_task, rank_tol, u_c.dtype, basis=u_c, scale=norms)
        else:  # one task at a time: no float64 copy of the whole stack
            u_t, s_t, v_t = projected_svds(deltas, u_c, per_task, rank_tol, svd_precision, norms)
        us += list(u_t)
        vs += list(v_t)
        ss += list(s_t)
    s_all = torch.cat(ss)
    rank = int((s_all > 0).sum())
    if rank == 0:
        return torch.zeros_like(deltas[0], dtype=out_dtype(deltas[0]))
    sigma = float(s_all.sum() / rank)
    return polar_product(torch.cat(us, -1), sigma, torch.cat(vs, -1)).to(out_dtype(deltas[0]))
