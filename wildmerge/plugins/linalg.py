"""The linear algebra under the spectral kernels: thin SVDs, top-k solvers, polar factors.

Everything here is plain torch on one matrix (or a list of same-shape matrices) and knows nothing of mergekit or
of the papers (their kernels are in ``spectral.py``). Everything runs on the input's device (mergekit's ``--cuda``
puts it on the GPU).

One route to a thin SVD, on every device: the eigendecomposition of the Gram matrix of the smaller side,
``A^T A = V diag(s^2) V^T`` and ``U = A V / s``: one GEMM and one symmetric eigensolve. No general SVD is called:
cuSOLVER's default SVD is about 10x slower than a Gram + eigh on a GPU, and a float64 Gram + eigh costs about what a
float32 LAPACK SVD costs on a CPU (measured; see benchmarks/).
- ``precision="float64"`` (the default): Gram and eigensolve in float64. Accurate to ~1e-9 relative within the
  numerical rank, so every kernel matches its float64 reference.
- ``precision="float32"`` (opt-in, approximate): Gram and eigensolve in float32, about 2x faster. A float32 Gram
  squares the condition number: singular values below its noise floor ``(max(m, n)^(1/4) * sqrt(eps32)) * s_1``
  (0.2-0.7 % of ``s_1`` for LLM widths) cannot be told from zero and are dropped, and the kept directions move by
  about ``eps32 * s_1^2 / (s_i * gap)``. Measured errors are in the README ("Benchmarks").
On the CPU the Gram matrix comes from BLAS ``syrk`` (one triangle: half a GEMM's flops), and when only the top
``k <= r / 4`` triplets are needed (TSV-M and Iso-CTS per task), a partial float64 eigensolver (LAPACK ``syevr``)
computes just those; both are scipy's, called without the GIL (``lapack.py``). Orthogonal polar factors (TSV-M,
Iso-CTS) come from a small eigensolve of ``M^T M`` and are never formed: ``polar(U) S polar(V)^T = U (W_U S W_V)
V^T`` with small ``W = (M^T M)^{-1/2}``.

The per-task top-k can instead come from randomized subspace iteration (``randomized_svds``, opt-in, approximate;
the algorithm is in ``linalg_randomized.py``): a few passes over each matrix with ``k + 10`` vectors instead of a
Gram matrix and an eigensolve per task.

Threads on the CPU: every matrix's maths runs on one thread, so a merge's bytes never depend on the cores, the
load or ``WILDMERGE_LAPACK_THREADS``; independent decompositions (TSV-M's and Iso-CTS's per-task SVDs, the two polar
factors) run side by side, one BLAS thread each, on the kernel pool (``kernel_pool.each_matrix``).

Effective rank (Hitit et al. 2025, spec §6): singular values at or below ``tol * s_1`` are treated as zero and their
directions dropped; the default ``tol`` is ``max(m, n) * eps(float32)``, the usual numerical-rank threshold for
float32 data. Without this rule, Iso-C and Subspace Boosting would inflate arbitrary null-space directions of
low-rank (LoRA-style) task vectors, and float32 and float64 runs would disagree.
"""

import math
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch

from wildmerge.plugins import lapack, linalg_randomized
from wildmerge.plugins.kernel_pool import each_matrix, gemm_threads, lapack_threads

_F32_EPS = torch.finfo(torch.float32).eps
Matrices = Union[torch.Tensor, Sequence[torch.Tensor]]


def _unzip(results: List[Tuple]) -> Tuple[List, List, List]:
    return tuple(list(x) for x in zip(*results)) if results else ([], [], [])


# ---------------------------------------------------------------- precision and the effective-rank rule


def default_tol(shape) -> float:
    return max(shape[-2:]) * _F32_EPS


def float32_gram_floor(shape) -> float:
    """Relative singular value below which a float32 Gram matrix cannot tell a direction from rounding noise."""
    return max(shape[-2:]) ** 0.25 * math.sqrt(_F32_EPS)


def working_dtype(precision: str) -> torch.dtype:
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be 'float32' or 'float64', got {precision!r}")
    return torch.float64 if precision == "float64" else torch.float32


def out_dtype(t: torch.Tensor) -> torch.dtype:
    """Results come back in the input's dtype, float32 at least: the caller's arithmetic stays in float32 for
    float32 task vectors (rounding ~1e-7, far inside the 1e-4 the kernels are held to)."""
    return torch.promote_types(t.dtype, torch.float32)


def _above_rank_threshold(s: torch.Tensor, shape, tol: Optional[float], scale: Optional[torch.Tensor]) -> torch.Tensor:
    """Which singular values count (the effective-rank rule): ``s > tol * s_1``, or ``tol * scale`` when given;
    in float32 the threshold is at least the float32 Gram's noise floor."""
    rel = default_tol(shape) if tol is None else tol
    if s.dtype == torch.float32:
        rel = max(rel, float32_gram_floor(shape))
    return s > rel * (s[..., :1] if scale is None else scale.to(s))


def _inverse(s: torch.Tensor) -> torch.Tensor:
    """1 / s where s > 0, else 0."""
    keep = s > 0
    return torch.where(keep, 1.0 / torch.where(keep, s, torch.ones_like(s)), torch.zeros_like(s))


# ---------------------------------------------------------------- thin SVD by Gram + eigh


def thin_svd(
    a: Matrices,
    k: Optional[int] = None,
    tol: Optional[float] = None,
    precision: str = "float64",
    scale: Optional[torch.Tensor] = None,
    with_u: bool = True,
) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Thin SVD ``a ~= U diag(S) V^T`` limited to the numerical rank (and to the top ``k`` if given).

    ``a`` is one matrix ``[m, n]`` or several of one shape (any iterable, read once, or a tensor ``[B, m, n]``):
    then every output has a leading batch axis. Several matrices are solved independently (``each_matrix``: side
    by side on the CPU, one thread each; one at a time on a GPU, where torch's batched ``eigh`` loops over the batch
    anyway: measured on an H200, 12 batched solves cost 12 single ones), so only a few float64 Gram matrices (and
    matrices of an iterable) are alive at once. Singular values at or below the rank threshold come back as exact
    zeros with zero U/V columns, so they contribute nothing. The threshold is ``tol * s_1``, or ``tol * scale`` when
    a reference scale is given (one per matrix, shape ``[B, 1]``); with ``precision="float32"`` it is at least the
    float32 Gram's noise floor. U, S, V come back in the working dtype. ``with_u=False`` (tall matrices only) skips
    U and returns ``None`` for it.
    """
    dtype = working_dtype(precision)
    if isinstance(a, torch.Tensor) and a.ndim == 2:
        with lapack_threads(a.device, min(a.shape)):
            return _one_svd(a, k, tol, dtype, scale, with_u)
    us, ss, vs = _unzip(each_matrix(
        lambda i, m: _one_svd(m, k, tol, dtype, None if scale is None else scale[i], with_u), a))
    return (torch.stack(us) if with_u else None), torch.stack(ss), torch.stack(vs)


def _one_svd(m: torch.Tensor, k: Optional[int], tol: Optional[float], dtype: torch.dtype,
             scale: Optional[torch.Tensor], with_u: bool = True) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One matrix, on the threads the caller set."""
    transpose = m.shape[0] < m.shape[1]  # work on the tall orientation: the Gram of the smaller side
    if transpose and not with_u:
        raise ValueError("with_u=False needs a tall matrix")
    partial = _partial(m, k)
    work = torch.float64 if partial else dtype  # a partial float32 solve would blur the rank (noise floor)
    x = _oriented(m, work, transpose)
    s, v = _svd_from_gram(upper_gram(x), k, partial, m.shape, tol, scale)
    if not with_u:
        return None, s, v
    u = x @ (v * _inverse(s))
    return (v, s, u) if transpose else (u, s, v)


def _partial(m: torch.Tensor, k: Optional[int]) -> bool:
    """Whether only the top ``k`` eigenpairs are computed (a partial LAPACK solve pays on the CPU for k <= r / 4)."""
    return k is not None and 4 * k <= min(m.shape) and m.device.type == "cpu"


def _svd_from_gram(gram: torch.Tensor, k: Optional[int], partial: bool, shape, tol: Optional[float],
                   scale: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Singular values (descending) and right singular vectors from a Gram matrix (upper triangle), with the
    effective-rank rule: values at or below the threshold become exact zeros, their vectors zero columns."""
    if partial:  # LAPACK syevr: only the k largest eigenpairs
        evals, v = lapack.syevr_top(gram, k)
        v = v.contiguous()
    else:
        evals, v = eigh_upper(gram)  # ascending
    s, v = evals.flip(-1).clamp_min(0).sqrt(), v.flip(-1)
    if k is not None:
        s, v = s[..., :k], v[..., :k]
    keep = _above_rank_threshold(s, shape, tol, scale)
    return torch.where(keep, s, torch.zeros_like(s)), v * keep.to(v.dtype)


def _oriented(m: torch.Tensor, dtype: torch.dtype, transpose: bool) -> torch.Tensor:
    x = m.to(dtype)
    return x.transpose(-2, -1) if transpose else x


def upper_gram(x: torch.Tensor) -> torch.Tensor:
    """``x^T x`` with a valid upper triangle (the lower one may be zeros): the eigensolvers read only the upper.

    On the CPU, BLAS ``syrk`` computes just that triangle, half a GEMM's flops (measured 1.7x faster than
    ``x.T @ x`` on one thread for a 1728 x 640 float64 matrix); elsewhere a plain product.
    """
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return x.transpose(-2, -1) @ x
    return lapack.syrk_upper(x)


def eigh_upper(gram: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh(gram, UPLO="U")``: eigenvalues ascending, eigenvectors as columns. On the CPU on one
    thread (every decomposition, on the caller's thread or in ``each_matrix``'s pool) the same LAPACK
    routine, ``?syevd``, from scipy's OpenBLAS (``lapack.syevd``): the anchor's 70 float64 eigensolves took 2.38 s
    against torch's 3.00 s on one core of the development machine (``bench_merge_methods.py --floor``; Iso-C's
    merge 0.89x). A call on several threads keeps torch's, whose threads the policy was measured with on many
    cores."""
    if gram.device.type == "cpu" and gram.dtype in (torch.float32, torch.float64) and torch.get_num_threads() == 1:
        return lapack.syevd(gram)
    return torch.linalg.eigh(gram, UPLO="U")


# ---------------------------------------------------------------- per-task top-k


def projected_svds(deltas: Sequence[torch.Tensor], basis: torch.Tensor, k: int, tol: Optional[float],
                   precision: str, scale: torch.Tensor):
    """Per-task top-k of ``(I - basis basis^T) delta``, with the rank rule relative to ``scale`` (one per task);
    the tasks side by side (``each_matrix``).

    For a tall float64 ``delta`` (the basis on its long side) the projection is never formed: its Gram matrix is
    ``delta^T delta - B^T B`` with ``B = basis^T delta``, one GEMM per task less, and ``U = (delta V - basis B V) / S``.
    The subtraction's rounding (~1e-8 of ``||delta||`` on a singular value) lies far under the rank threshold
    (``max(m, n) eps32 ||delta||``); in float32 it would not, so there and for wide matrices the projection is formed.
    """
    dtype = working_dtype(precision)

    def one(i: int, d: torch.Tensor):
        x = d.to(basis.dtype)
        if x.shape[0] < x.shape[1] or basis.dtype != torch.float64:
            projected = x - basis @ (basis.transpose(-2, -1) @ x)
            return _one_svd(projected, k, tol, dtype, scale[i])
        b = basis.transpose(-2, -1) @ x
        s, v = _svd_from_gram(upper_gram(x) - upper_gram(b), k, _partial(x, k), x.shape, tol, scale[i])
        return (x @ v - basis @ (b @ v)) * _inverse(s), s, v

    return _unzip(each_matrix(one, deltas))


def randomized_svds(deltas: Sequence[torch.Tensor], k: int, tol: Optional[float], dtype: torch.dtype,
                    basis: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None):
    """Per-task top-k by randomized subspace iteration, with ``thin_svd``'s effective-rank rule; the tasks side by
    side (``each_matrix``).

    With ``basis`` (orthonormal columns), each task is ``(I - basis basis^T) delta``, applied and never formed.
    """

    def one(i: int, d: torch.Tensor):
        x = d.to(dtype)
        if basis is None:
            apply, apply_t = (lambda y: x @ y), (lambda y: x.transpose(-2, -1) @ y)
        else:
            off = lambda y: y - basis @ (basis.transpose(-2, -1) @ y)  # noqa: E731
            apply, apply_t = (lambda y: off(x @ y)), (lambda y: x.transpose(-2, -1) @ off(y))
        u, s, v = linalg_randomized.top_triplets(apply, apply_t, tuple(d.shape), k, dtype, d.device)
        keep = _above_rank_threshold(s, d.shape, tol, None if scale is None else scale[i])
        return u * keep, torch.where(keep, s, torch.zeros_like(s)), v * keep

    return _unzip(each_matrix(one, deltas))


def batched_randomized_svds(deltas: Sequence[torch.Tensor], k: int, tol: Optional[float], dtype: torch.dtype,
                            basis: Optional[torch.Tensor] = None, scale: Optional[torch.Tensor] = None):
    """``randomized_svds`` for all T tasks at once: one ``(T, m, n)`` stack, one batched GEMM / QR chain.

    Why: on a GPU the per-task loop launches T small GEMM chains one after another; batched, the device sees T
    times larger products. The same seeded test matrix serves every task, so the result is the per-task one up to
    the rounding of batched products. Costs one ``(T, m, n)`` copy in ``dtype`` (opt-in:
    ``topk_solver: randomized_batched``).
    """
    x = torch.stack([d.to(dtype) for d in deltas])
    if basis is None:
        apply, apply_t = (lambda y: x @ y), (lambda y: x.transpose(-2, -1) @ y)
    else:
        off = lambda y: y - basis @ (basis.transpose(-2, -1) @ y)  # noqa: E731
        apply, apply_t = (lambda y: off(x @ y)), (lambda y: x.transpose(-2, -1) @ off(y))
    with lapack_threads(x.device, min(x.shape[-2:])):
        u, s, v = linalg_randomized.top_triplets(apply, apply_t, tuple(x.shape[-2:]), k, dtype, x.device)
    keep = torch.stack([_above_rank_threshold(s[i], x.shape[-2:], tol, None if scale is None else scale[i])
                        for i in range(len(x))])
    return u * keep.unsqueeze(-2), torch.where(keep, s, torch.zeros_like(s)), v * keep.unsqueeze(-2)


# ---------------------------------------------------------------- maps of the spectrum and polar factors


def spectral_map(delta: torch.Tensor, new_s: Callable[[torch.Tensor, int], torch.Tensor], tol: Optional[float],
                 precision: str) -> torch.Tensor:
    """``U diag(new_s(s, rank)) V^T`` as ``x V diag(new_s(s) / s) V^T`` on the tall orientation: U is never formed
    (one m x n float64 matrix less alive) and the work is one n x n product and one m x n x n product. ``x`` is
    cast to the working dtype once, for the Gram matrix and the product."""
    wide = delta.shape[0] < delta.shape[1]
    x = (delta.transpose(-2, -1) if wide else delta).to(working_dtype(precision))
    with lapack_threads(delta.device, min(delta.shape)):
        _, s, v = _one_svd(x, None, tol, x.dtype, None, with_u=False)
    rank = int((s > 0).sum())
    if rank == 0:
        return torch.zeros_like(delta, dtype=out_dtype(delta))
    m, n = x.shape
    with gemm_threads(delta.device, n * n * (n + m), m):
        inner = (v * (new_s(s, rank) * _inverse(s))) @ v.transpose(-2, -1)
        out = (x @ inner).to(out_dtype(delta))
    return out.transpose(-2, -1) if wide else out


def polar_weights(m: torch.Tensor, tol: Optional[float] = None) -> torch.Tensor:
    """``W = (m^T m)^{-1/2}`` (pseudo-inverse on the range), so that ``m W`` is m's orthogonal polar factor.

    Computed from a small eigensolve in ``m``'s dtype; rank-deficient ``m`` gives the partial isometry on its range
    (directions with ``d <= tol * d_max`` are dropped) instead of an arbitrary completion. Default ``tol``: 1e-10
    in float64, the float32 Gram noise floor in float32. Callers multiply ``W`` into a small matrix instead of
    forming ``m W`` (one m x c product less per factor).
    """
    x = m if m.dtype == torch.float64 else m.to(torch.float32)
    if tol is None:
        tol = 1e-10 if x.dtype == torch.float64 else float32_gram_floor(m.shape)
    with lapack_threads(m.device, m.shape[-1]):
        evals, q = eigh_upper(upper_gram(x))
    d = evals.clamp_min(0).sqrt()
    keep = d > tol * d.max()
    inv = torch.where(keep, 1.0 / torch.where(keep, d, torch.ones_like(d)), torch.zeros_like(d))
    return (q * inv) @ q.transpose(-2, -1)


def polar(m: torch.Tensor, tol: Optional[float] = None) -> torch.Tensor:
    """Closest matrix with orthonormal columns (the orthogonal polar factor ``P Q^T`` of ``m = P D Q^T``)."""
    x = m if m.dtype == torch.float64 else m.to(torch.float32)
    return x @ polar_weights(m, tol)


def polar_product(u: torch.Tensor, scales: Union[torch.Tensor, float], v: torch.Tensor) -> torch.Tensor:
    """``polar(u) diag(scales) polar(v)^T`` as ``u (W_u diag(scales) W_v) v^T``: one small product instead of two
    m x c ones. The two weights are independent eigensolves: side by side (``each_matrix``). The small ``c x c``
    middle is multiplied into the shorter side first (``2 c^2 min(m, n) + 2 m c n`` flops instead of
    ``2 c^2 m + 2 m c n``: a third less for a 1728 x 640 matrix)."""
    scales = scales.to(u.dtype) if isinstance(scales, torch.Tensor) else scales
    w_u, w_v = each_matrix(lambda i, m: polar_weights(m), [u, v])
    with lapack_threads(u.device, u.shape[-1]):
        middle = (w_u * scales) @ w_v
        if u.shape[0] > v.shape[0]:  # tall: middle into v^T first
            return u @ (middle @ v.transpose(-2, -1))
        return (u @ middle) @ v.transpose(-2, -1)
