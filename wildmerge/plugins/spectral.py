"""Spectral kernels shared by Iso-C, Iso-CTS, TSV-M and Subspace Boosting.

Everything here is plain torch on one matrix (or a batch of same-shape matrices) and knows nothing of mergekit.

Two routes to a thin SVD (``thin_svd``):
- ``precision="float32"`` (the methods' default, as in the papers' code): LAPACK/cuSOLVER SVD in float32, retried in
  float64 when it fails to converge (it does on some nearly low-rank matrices, seed 002 spec §6);
- ``precision="float64"``: the eigendecomposition of the float64 Gram matrix of the smaller side,
  ``A^T A = V diag(s^2) V^T`` and ``U = A V / s``: one GEMM and one symmetric eigensolve, no slower than a float64
  SVD and accurate to ~1e-9 relative within the numerical rank.
On the CPU, when only the top ``k <= r / 4`` triplets are needed (TSV-M and Iso-CTS per task), a partial float64
eigensolver computes just those. Orthogonal polar factors (TSV-M, Iso-CTS) come from a small float64 eigensolve of
``M^T M`` rather than an SVD of M. Everything runs on the input's device (mergekit's ``--cuda`` puts it on the GPU).

Effective rank (seed 002, spec §6): singular values at or below ``tol * s_1`` are treated as zero and their
directions dropped; the default ``tol`` is ``max(m, n) * eps(float32)``, the usual numerical-rank threshold for
float32 data. Without this rule, Iso-C and Subspace Boosting would inflate arbitrary null-space directions of
low-rank (LoRA-style) task vectors, and float32 and float64 runs would disagree.
"""

import contextlib
import os
from typing import List, Optional, Sequence, Tuple

import torch

_F32_EPS = torch.finfo(torch.float32).eps


@contextlib.contextmanager
def lapack_threads(device: torch.device):
    """Run CPU eigensolvers and SVDs with ``WILDMERGE_LAPACK_THREADS`` threads (default 1).

    Measured on a shared 2-core machine: a 1024 x 1024 float32 SVD took 0.47 s on one thread and 15.8 s on two
    (LAPACK's OpenMP threads spin at every barrier when another process holds a core); GEMMs are unaffected.
    On a quiet many-core node, set the variable to the number of cores.
    """
    if device.type != "cpu":
        yield
        return
    wanted = int(os.environ.get("WILDMERGE_LAPACK_THREADS", "1"))
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, wanted))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def default_tol(shape) -> float:
    return max(shape[-2:]) * _F32_EPS


def _dtype(precision: str) -> torch.dtype:
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    return torch.float64 if precision == "float64" else torch.float32


def thin_svd(
    a: torch.Tensor,
    k: Optional[int] = None,
    tol: Optional[float] = None,
    precision: str = "float32",
    scale: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD ``a ~= U diag(S) V^T`` limited to the numerical rank (and to the top ``k`` if given).

    Works on a batch ``[..., m, n]``: every matrix keeps the same number of columns, and singular values at or
    below the rank threshold come back as exact zeros with zero U/V columns, so they contribute nothing.
    ``precision="float64"`` uses the Gram route (see the module docstring); ``"float32"`` calls LAPACK's SVD in
    float32 and retries in float64 if it fails to converge (it does on some nearly low-rank matrices).
    When only the top ``k <= min(m, n) / 4`` triplets are wanted on the CPU (TSV-M, Iso-CTS's task subspaces),
    both precisions take the float64 Gram route with a partial eigensolver that computes just those ``k``
    eigenpairs: 2-4x cheaper than a float32 SVD. (A float32 Gram would blur the rank: its noise floor is
    ``sqrt(eps32) * s_1``.)
    The rank threshold is ``tol * s_1``, or ``tol * scale`` when a reference scale is given (shape ``[..., 1]``).
    """
    partial = k is not None and 4 * k <= min(a.shape[-2:]) and a.device.type == "cpu"
    if precision == "float32" and not partial:
        with lapack_threads(a.device):
            try:
                u, s, vh = torch.linalg.svd(a.to(torch.float32), full_matrices=False)
            except RuntimeError:  # LAPACK convergence failure: float64 handles these
                u, s, vh = torch.linalg.svd(a.to(torch.float64), full_matrices=False)
        v = vh.transpose(-2, -1)
    else:
        x = a.to(torch.float64 if partial else _dtype(precision))
        transpose = x.shape[-2] < x.shape[-1]
        if transpose:
            x = x.transpose(-2, -1)  # now tall: the Gram of the smaller side is x^T x
        gram = x.transpose(-2, -1) @ x
        with lapack_threads(a.device):
            evals, v = _top_eigh(gram, k) if partial else torch.linalg.eigh(gram)  # ascending
        s, v = evals.flip(-1).clamp_min(0).sqrt(), v.flip(-1)
        u = None
    if k is not None:
        s, v = s[..., :k], v[..., :k]
        u = None if u is None else u[..., :k]
    threshold = (default_tol(a.shape) if tol is None else tol) * (s[..., :1] if scale is None else scale.to(s))
    keep = s > threshold
    s = torch.where(keep, s, torch.zeros_like(s))
    v = v * keep.to(v.dtype).unsqueeze(-2)
    if u is None:
        u = (x @ v) / torch.where(keep, s, torch.ones_like(s)).unsqueeze(-2)
        if transpose:
            u, v = v, u
    else:
        u = u * keep.to(u.dtype).unsqueeze(-2)
    return u, s, v


def _top_eigh(gram: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest eigenpairs (ascending, like ``torch.linalg.eigh``) of symmetric CPU matrices, batched,
    with LAPACK's ``syevr`` (through scipy), which computes only the requested eigenvectors."""
    import numpy as np
    from scipy.linalg import eigh

    n = gram.shape[-1]
    flat = gram.reshape(-1, n, n).numpy()
    pairs = [eigh(g, subset_by_index=[n - k, n - 1], driver="evr") for g in flat]
    evals = torch.from_numpy(np.stack([w for w, _ in pairs])).reshape(*gram.shape[:-2], k)
    evecs = torch.from_numpy(np.stack([v for _, v in pairs])).reshape(*gram.shape[:-2], n, k)
    return evals, evecs


def polar(m: torch.Tensor, tol: float = 1e-10) -> torch.Tensor:
    """Closest matrix with orthonormal columns (the orthogonal polar factor ``P Q^T`` of ``m = P D Q^T``).

    Computed as ``m (m^T m)^{-1/2}`` from a small eigensolve; rank-deficient ``m`` gives the partial isometry on
    its range (directions with ``d <= tol * d_max`` are dropped) instead of an arbitrary completion.
    """
    x = m.to(torch.float64)
    gram = x.transpose(-2, -1) @ x
    with lapack_threads(m.device):
        evals, q = torch.linalg.eigh(gram)
    d = evals.clamp_min(0).sqrt()
    keep = d > tol * d.max()
    inv = torch.where(keep, 1.0 / torch.where(keep, d, torch.ones_like(d)), torch.zeros_like(d))
    return ((x @ q) * inv) @ q.transpose(-2, -1)


def isotropic(delta: torch.Tensor, tol: Optional[float] = None, precision: str = "float32") -> torch.Tensor:
    """Iso-C's spectral step: keep the singular vectors, set every singular value (within the rank) to their mean."""
    u, s, v = thin_svd(delta, tol=tol, precision=precision)
    rank = int((s > 0).sum())
    if rank == 0:
        return torch.zeros_like(delta, dtype=u.dtype)
    return (s.sum() / rank) * (u @ v.transpose(-2, -1))


def subspace_boost(
    delta: torch.Tensor, beta: float, tol: Optional[float] = None, precision: str = "float32"
) -> torch.Tensor:
    """Subspace Boosting (Skorobogat et al. 2025): raise the tail of the spectrum to the cutoff singular value.

    With cumulative energy ``n_j = sum_{i<=j} s_i / sum_i s_i`` (plain singular values, within the numerical
    rank), ``j* = min{j : n_j >= beta}`` and every ``s_j`` with ``j > j*`` becomes ``s_{j*}``.
    Returns the *correction* ``U diag(s' - s) V^T`` to add to ``delta``: exactly zero when ``beta = 1``, so
    boosting with ``beta = 1`` leaves TA/TIES bit-for-bit unchanged.
    """
    u, s, v = thin_svd(delta, tol=tol, precision=precision)
    rank = int((s > 0).sum())
    if rank == 0:
        return torch.zeros_like(delta, dtype=u.dtype)
    s_r = s[:rank]
    energy = torch.cumsum(s_r, 0) / s_r.sum()
    reached = (energy >= beta - 1e-12).nonzero()
    j_star = int(reached[0]) if len(reached) else rank - 1
    lift = torch.zeros_like(s)
    lift[j_star + 1 : rank] = s_r[j_star] - s_r[j_star + 1 :]
    return (u * lift) @ v.transpose(-2, -1)


def tsv_merge(deltas: Sequence[torch.Tensor], tol: Optional[float] = None, precision: str = "float32") -> torch.Tensor:
    """TSV-Merge (Gargiulo et al. 2025): each task keeps its top ``floor(r / T)`` singular triplets; the stacked
    U and V blocks are replaced by their orthogonal polar factors; ``delta = U_perp diag(S) V_perp^T``.

    ``r = min(m, n)``; at least one triplet per task is kept even when ``T > r``, so no expert is silently dropped.
    """
    stacked = torch.stack(list(deltas))
    k = max(1, min(stacked.shape[-2:]) // len(deltas))
    u, s, v = thin_svd(stacked, k=k, tol=tol, precision=precision)  # batched over tasks
    u_cat = torch.cat(list(u), dim=-1)
    v_cat = torch.cat(list(v), dim=-1)
    s_cat = torch.cat(list(s), dim=-1)
    return (polar(u_cat) * s_cat.to(torch.float64)) @ polar(v_cat).transpose(-2, -1)


def iso_cts(
    deltas: Sequence[torch.Tensor],
    common_fraction: float = 0.8,
    tol: Optional[float] = None,
    precision: str = "float32",
) -> torch.Tensor:
    """Iso-CTS (Marczak et al. 2025): isotropic merge in the common subspace plus task-specific subspaces.

    1. Common subspace: the top ``k`` singular directions of the summed task vectors, ``k = round(fraction * r)``
       adjusted so that ``r - k`` splits evenly into ``s = (r - k) // T`` directions per task (``r = min(m, n)``).
    2. Each task vector with the common left subspace projected out, ``(I - U_c U_c^T) delta_t``, gives its own
       top ``s`` directions (rank threshold relative to ``||delta_t||_F``, so that what projection leaves of a task
       lying inside the common subspace counts as zero rather than as directions of rounding noise).
    3. The stacked U and V are orthogonalised (polar factor) and every singular value is set to the mean of the
       stacked singular values.
    ``fraction = 1`` is Iso-C.
    """
    if not 0.0 < common_fraction <= 1.0:
        raise ValueError(f"common_fraction must be in (0, 1], got {common_fraction}")
    n_tasks = len(deltas)
    r = min(deltas[0].shape[-2:])
    per_task = (r - int(round(common_fraction * r))) // n_tasks
    k_common = r - per_task * n_tasks
    total = torch.stack(list(deltas)).to(_dtype(precision)).sum(0)
    u_c, s_c, v_c = thin_svd(total, k=k_common, tol=tol, precision=precision)
    us: List[torch.Tensor] = [u_c]
    vs: List[torch.Tensor] = [v_c]
    ss: List[torch.Tensor] = [s_c]
    if per_task > 0:
        stacked = torch.stack(list(deltas)).to(u_c.dtype)
        projected = stacked - u_c @ (u_c.transpose(-2, -1) @ stacked)
        norms = torch.linalg.matrix_norm(stacked).unsqueeze(-1)
        u_t, s_t, v_t = thin_svd(projected, k=per_task, tol=tol, precision=precision, scale=norms)
        us += list(u_t)
        vs += list(v_t)
        ss += list(s_t)
    s_all = torch.cat(ss)
    rank = int((s_all > 0).sum())
    if rank == 0:
        return torch.zeros_like(total)
    sigma = s_all.sum() / rank
    return sigma * (polar(torch.cat(us, -1)) @ polar(torch.cat(vs, -1)).transpose(-2, -1))
