"""The spectral kernels against independent float64 implementations written from the papers' equations.

The references below use a full float64 LAPACK SVD (numpy), not the Gram route of the code under test.
The kernels run on the CPU here; benchmarks/bench_spectral_gpu.py runs the same comparisons on a GPU.
"""

import math

import numpy as np
import pytest
import torch

from wildmerge.plugins import linalg, linalg_randomized, spectral
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TaskArithmeticSBParams, TSVMParams

F32_EPS = np.finfo(np.float32).eps
# the kernels as their methods call them (the parameter models' declared defaults unless a test gives a value)
iso_c = IsoCParams.with_defaults(spectral.iso_c)
iso_cts = IsoCTSParams.with_defaults(spectral.iso_cts)
tsv_m = TSVMParams.with_defaults(spectral.tsv_m)
subspace_boost = TaskArithmeticSBParams.with_defaults(spectral.subspace_boost)


# ---------------------------------------------------------------- references (float64, from the papers)


def ref_svd(a, scale=None):
    """Thin SVD truncated to the numerical rank s_i > max(m, n) * eps32 * s_1 (or * scale)."""
    u, s, vh = np.linalg.svd(np.asarray(a, dtype=np.float64), full_matrices=False)
    r = int((s > max(a.shape) * F32_EPS * (s[0] if scale is None else scale)).sum()) if s[0] > 0 else 0
    return u[:, :r], s[:r], vh[:r].T


def ref_polar(m):
    """Orthogonal polar factor P Q^T of m = P D Q^T, on the range of m."""
    p, d, qh = np.linalg.svd(m, full_matrices=False)
    keep = d > 1e-10 * d.max()
    return p[:, keep] @ qh[keep]


def ref_iso_c(deltas):
    """Iso-C (Marczak et al. 2025, Eq. 4): mean singular value times U V^T of the summed task vectors."""
    u, s, v = ref_svd(sum(deltas))
    return s.mean() * u @ v.T


def ref_tsv(deltas):
    """TSV-M (Gargiulo et al. 2025, Alg. 1): top floor(r/T) triplets per task, orthogonalised U and V."""
    k = max(1, min(deltas[0].shape) // len(deltas))
    us, ss, vs = [], [], []
    for d in deltas:
        u, s, v = ref_svd(d)
        us.append(u[:, :k]), ss.append(s[:k]), vs.append(v[:, :k])
    u, s, v = np.concatenate(us, 1), np.concatenate(ss), np.concatenate(vs, 1)
    return ref_polar(u) @ np.diag(s) @ ref_polar(v).T


def ref_boost(delta, beta):
    """Subspace Boosting (Skorobogat et al. 2025): s_j <- s_{j*} for j > j*, j* = min{j : cumsum(s)/sum(s) >= beta}."""
    u, s, v = ref_svd(delta)
    energy = np.cumsum(s) / s.sum()
    j_star = int(np.argmax(energy >= beta - 1e-12))
    s2 = s.copy()
    s2[j_star + 1 :] = s[j_star]
    return u @ np.diag(s2) @ v.T


def ref_iso_cts(deltas, fraction):
    """Iso-CTS (Marczak et al. 2025, Alg. 2): common top-k of the sum + per-task directions off the common space."""
    t, r = len(deltas), min(deltas[0].shape)
    # subspace sizes as in the authors' code: common int(r f), per task round((r - common) / T), common takes the rest
    per_task = round((r - int(r * fraction)) / t)
    k = r - per_task * t
    u_c, s_c, v_c = (x[..., :k] if x.ndim == 2 else x[:k] for x in ref_svd(sum(deltas)))
    us, ss, vs = [u_c], [s_c], [v_c]
    for d in deltas:
        if per_task == 0:
            break
        u, s, v = ref_svd(d - u_c @ (u_c.T @ d), scale=np.linalg.norm(d))
        us.append(u[:, :per_task]), ss.append(s[:per_task]), vs.append(v[:, :per_task])
    s = np.concatenate(ss)
    return s.mean() * ref_polar(np.concatenate(us, 1)) @ ref_polar(np.concatenate(vs, 1)).T


# ---------------------------------------------------------------- inputs

SHAPES = {"tall": (48, 20), "wide": (20, 48), "square": (32, 32)}


def make_deltas(shape, n, rank=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    if rank is None:
        return [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(n)]
    return [torch.randn(shape[0], rank, generator=g, dtype=torch.float64)
            @ torch.randn(rank, shape[1], generator=g, dtype=torch.float64) for _ in range(n)]


def close(a, b, rtol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return np.abs(a - b).max() <= rtol * max(np.abs(b).max(), 1e-30)


CASES = [(name, shape, rank) for name, shape in SHAPES.items() for rank in (None, 3)]
IDS = [f"{n}-{'full' if r is None else f'rank{r}'}" for n, _, r in CASES]
# the default (float64 Gram route) must match to far better than the required 1e-4; the opt-in float32 route is
# tested separately below (it drops directions under its noise floor, so it only matches on well-conditioned input)
PRECISIONS = pytest.mark.parametrize("precision,rtol", [("float64", 1e-7)])


# ---------------------------------------------------------------- equations


@pytest.mark.parametrize("name,shape,rank", CASES, ids=IDS)
@PRECISIONS
def test_thin_svd_matches_lapack(name, shape, rank, precision, rtol):
    a = make_deltas(shape, 1, rank)[0]
    u, s, v = linalg.thin_svd(a, precision=precision)
    ru, rs, rv = ref_svd(a.numpy())
    r = len(rs)
    assert int((s > 0).sum()) == r
    assert close(s[:r], rs, rtol)
    assert close((u * s) @ v.T, a.numpy(), rtol)


@pytest.mark.parametrize("name,shape,rank", CASES, ids=IDS)
@pytest.mark.parametrize("n_tasks", [1, 3])
@PRECISIONS
def test_iso_c_matches_reference(name, shape, rank, n_tasks, precision, rtol):
    deltas = make_deltas(shape, n_tasks, rank)
    ours = iso_c(deltas, svd_precision=precision)
    assert close(ours, ref_iso_c([d.numpy() for d in deltas]), rtol)


@pytest.mark.parametrize("name,shape,rank", CASES, ids=IDS)
@pytest.mark.parametrize("n_tasks", [1, 3, 7])
@PRECISIONS
def test_tsv_matches_reference(name, shape, rank, n_tasks, precision, rtol):
    deltas = make_deltas(shape, n_tasks, rank)
    ours = tsv_m(deltas, svd_precision=precision)
    assert close(ours, ref_tsv([d.numpy() for d in deltas]), rtol)


@pytest.mark.parametrize("name,shape,rank", CASES, ids=IDS)
@pytest.mark.parametrize("beta", [0.0, 0.2, 0.5, 0.9])
@PRECISIONS
def test_subspace_boost_matches_reference(name, shape, rank, beta, precision, rtol):
    delta = make_deltas(shape, 1, rank)[0]
    ours = delta + subspace_boost(delta, beta, svd_precision=precision)
    assert close(ours, ref_boost(delta.numpy(), beta), rtol)


@pytest.mark.parametrize("name,shape,rank", CASES, ids=IDS)
@pytest.mark.parametrize("fraction", [0.5, 0.8])
@PRECISIONS
def test_iso_cts_matches_reference(name, shape, rank, fraction, precision, rtol):
    deltas = make_deltas(shape, 3, rank)
    ours = iso_cts(deltas, common_space_fraction=fraction, svd_precision=precision)
    assert close(ours, ref_iso_cts([d.numpy() for d in deltas], fraction), rtol)


# ---------------------------------------------------------------- invariants


@pytest.mark.parametrize("rank", [None, 4])
def test_iso_c_spectrum_is_flat_and_rank_is_kept(rank):
    delta = make_deltas((40, 24), 1, rank)[0]
    s = torch.linalg.svdvals(iso_c([delta], svd_precision="float64"))
    r = 24 if rank is None else rank
    assert torch.allclose(s[:r], s[:r].mean().expand(r), rtol=1e-9)
    assert float(torch.cat([s[r:], s.new_zeros(1)]).max()) < 1e-9 * float(s[0])
    # Iso-C keeps the nuclear norm's mean: s_bar = mean of the input's singular values
    assert torch.isclose(s[0], torch.linalg.svdvals(delta)[:r].mean(), rtol=1e-9)


def test_boost_beta_one_is_identity_and_beta_zero_raises_all_to_s1():
    delta = make_deltas((30, 18), 1)[0]
    assert not bool(subspace_boost(delta, 1.0).any())
    s = torch.linalg.svdvals(delta + subspace_boost(delta, 0.0, svd_precision="float64"))
    assert torch.allclose(s, s[0].expand_as(s), rtol=1e-9)


def test_boost_keeps_rank_of_low_rank_update():
    delta = make_deltas((30, 18), 1, rank=3)[0]
    assert torch.linalg.matrix_rank(delta + subspace_boost(delta, 0.0, svd_precision="float64")) == 3


def test_polar_factor_has_orthonormal_columns():
    m = torch.randn(40, 12, dtype=torch.float64)
    p = linalg.polar(m)
    assert torch.allclose(p.T @ p, torch.eye(12, dtype=torch.float64), atol=1e-10)
    # it is the closest such matrix: same column space, and p^T m is symmetric positive definite
    sym = p.T @ m
    assert torch.allclose(sym, sym.T, atol=1e-10) and bool((torch.linalg.eigvalsh(sym) > 0).all())


def test_tsv_single_task_is_identity_and_bases_are_orthogonal():
    delta = make_deltas((36, 20), 1)[0]
    assert close(tsv_m([delta], svd_precision="float64"), delta.numpy(), 1e-9)
    deltas = make_deltas((36, 20), 4)
    merged = tsv_m(deltas, svd_precision="float64")
    # the merged update has orthonormal singular vectors whose singular values are exactly the kept sigmas
    kept = torch.cat([torch.linalg.svdvals(d)[: 20 // 4] for d in deltas]).sort(descending=True).values
    assert torch.allclose(torch.linalg.svdvals(merged)[: len(kept)], kept, rtol=1e-9)


def test_iso_cts_with_full_common_space_is_iso_c():
    deltas = make_deltas((32, 24), 3)
    assert close(iso_cts(deltas, common_space_fraction=1.0, svd_precision="float64"),
                 iso_c(deltas, svd_precision="float64").numpy(), 1e-9)


def test_zero_matrix_gives_zero():
    zero = torch.zeros(10, 6, dtype=torch.float64)
    assert not bool(iso_c([zero]).any())
    assert not bool(subspace_boost(zero, 0.2).any())
    assert not bool(tsv_m([zero, zero]).any())


# ---------------------------------------------------------------- Iso-CTS subspace sizes


def test_iso_cts_sizes_follow_the_authors_rule():
    # common = int(r f), per task = round((r - common) / T), common takes the rest
    assert spectral.iso_cts_sizes(2560, 12, 0.8) == (2560 - 12 * 43, 43)
    assert spectral.iso_cts_sizes(20, 3, 0.6) == (11, 3)
    for r, t, f in [(20, 3, 0.6), (32, 7, 0.8), (4096, 12, 0.8), (1024, 6, 0.5), (7, 5, 0.05)]:
        common, per_task = spectral.iso_cts_sizes(r, t, f)
        assert common + t * per_task == r and common >= 1 and per_task >= 0


def test_iso_cts_on_a_shape_where_the_old_size_rule_differs():
    # r = 20, T = 3, f = 0.6: the authors' rule gives 11 common + 3 per task; (r - round(f r)) // T gave 14 + 2
    r, t, f = 20, 3, 0.6
    assert (r - int(round(f * r))) // t != spectral.iso_cts_sizes(r, t, f)[1]
    deltas = make_deltas((48, 20), t)
    ours = iso_cts(deltas, common_space_fraction=f)
    assert close(ours, ref_iso_cts([d.numpy() for d in deltas], f), 1e-7)
    # the merged update has rank 11 + 3 * 3 = 20 with a flat spectrum
    s = torch.linalg.svdvals(ours)
    assert torch.allclose(s, s.mean().expand_as(s), rtol=1e-9)


# ---------------------------------------------------------------- inputs given as lists, fp32 data


def test_float32_inputs_match_float64_reference_to_1e4():
    # the methods pass float32 task vectors: the default route still matches the float64 reference to 1e-4
    deltas = [d.to(torch.float32) for d in make_deltas((64, 40), 4, seed=3)]
    ref = [d.double().numpy() for d in deltas]
    assert close(iso_c(deltas), ref_iso_c(ref), 1e-4)
    assert close(tsv_m(deltas), ref_tsv(ref), 1e-4)
    assert close(iso_cts(deltas, 0.8), ref_iso_cts(ref, 0.8), 1e-4)
    boosted = deltas[0].double() + subspace_boost(deltas[0], 0.3)
    assert close(boosted, ref_boost(ref[0], 0.3), 1e-4)


# ---------------------------------------------------------------- the opt-in float32 route


def decaying(shape, n, cond=30.0, seed=0):
    """Task vectors with singular values spread over [1/cond, 1]: the well-conditioned case."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        q1, _ = torch.linalg.qr(torch.randn(shape[0], min(shape), generator=g, dtype=torch.float64))
        q2, _ = torch.linalg.qr(torch.randn(shape[1], min(shape), generator=g, dtype=torch.float64))
        s = torch.logspace(0, -math.log10(cond), min(shape), dtype=torch.float64)
        out.append((q1 * s) @ q2.T)
    return out


@pytest.mark.parametrize("shape", [(96, 40), (40, 96)])
def test_float32_route_error_on_well_conditioned_input(shape):
    # measured: ~1e-5 relative on these inputs (condition number 30); bound asserted with margin
    deltas = decaying(shape, 3)
    ref = [d.numpy() for d in deltas]
    assert close(iso_c(deltas, svd_precision="float32"), ref_iso_c(ref), 1e-3)
    assert close(tsv_m(deltas, svd_precision="float32"), ref_tsv(ref), 1e-3)
    boosted = deltas[0] + subspace_boost(deltas[0], 0.3, svd_precision="float32")
    assert close(boosted, ref_boost(ref[0], 0.3), 1e-3)


def test_float32_route_keeps_the_rank_of_low_rank_updates():
    delta = make_deltas((60, 30), 1, rank=3)[0]
    for precision in ("float32", "float64"):
        assert int((linalg.thin_svd(delta, precision=precision)[1] > 0).sum()) == 3
        merged = iso_c([delta], svd_precision=precision)
        assert torch.linalg.matrix_rank(merged.double(), rtol=1e-4) == 3


def test_no_general_svd_on_any_route(monkeypatch):
    # the kernels use Gram + eigh everywhere (cuSOLVER's default SVD is ~10x slower on a GPU): guard against a
    # general SVD creeping back in
    def refuse(*args, **kwargs):
        raise AssertionError("a general SVD was called")

    monkeypatch.setattr(torch.linalg, "svd", refuse)
    deltas = make_deltas((40, 24), 3)
    for precision in ("float32", "float64"):
        iso_c(deltas, svd_precision=precision)
        subspace_boost(deltas[0], 0.2, svd_precision=precision)
        tsv_m(deltas, svd_precision=precision)
        iso_cts(deltas, 0.8, svd_precision=precision)


# ---------------------------------------------------------------- the opt-in randomized top-k (TSV-M, Iso-CTS)


def with_spectrum(shape, s, seed=0):
    """A matrix with singular values ``s`` and random singular vectors."""
    g = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(shape[0], len(s), generator=g, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(shape[1], len(s), generator=g, dtype=torch.float64))
    return (q1 * torch.as_tensor(s, dtype=torch.float64)) @ q2.T


@pytest.mark.parametrize("shape,k", [((200, 120), 10), ((120, 200), 30)])
def test_randomized_range_error_is_within_the_halko_martinsson_tropp_bound(shape, k):
    # a slowly decaying spectrum (s_j = 1 / sqrt(j)): no gap at k, the case the power iterations are there for
    s = 1.0 / np.sqrt(np.arange(1, min(shape) + 1))
    a = with_spectrum(shape, s)
    q = linalg_randomized.sketch_basis(lambda y: a @ y, lambda y: a.T @ y, shape[1], k + linalg_randomized.OVERSAMPLE,
                                    torch.float64, torch.device("cpu"))
    residual = np.linalg.norm((a - q @ (q.T @ a)).numpy(), 2)
    assert residual <= linalg_randomized.range_error_bound(k, min(shape)) * s[k]
    assert residual >= s[k + linalg_randomized.OVERSAMPLE] * (1 - 1e-9)  # Eckart-Young: no basis of k + p beats this
    # and the kept rank-k approximation captures nearly the optimal energy (and never more: Eckart-Young)
    u, sk, v = linalg_randomized.top_triplets(lambda y: a @ y, lambda y: a.T @ y, shape, k, torch.float64,
                                           torch.device("cpu"))
    captured = np.linalg.norm(((u * sk) @ v.T).numpy()) ** 2 / float((s[:k] ** 2).sum())
    assert 0.99 <= captured <= 1 + 1e-9  # measured 0.996 and 0.994 on these two cases


def gapped(shape, n, k, seed=0):
    """Task vectors whose spectra drop by 1e4 after the k-th value: their top-k subspaces are well determined."""
    r = min(shape)
    s = np.concatenate([np.linspace(1.0, 0.5, k), 1e-4 * np.linspace(1.0, 0.5, r - k)])
    return [with_spectrum(shape, s, seed=seed + i) for i in range(n)]


@pytest.mark.parametrize("shape", [(60, 36), (36, 60)])
def test_randomized_tsv_matches_the_reference_when_the_top_k_is_well_determined(shape):
    deltas = gapped(shape, 3, k=min(shape) // 3)
    ours = tsv_m(deltas, topk_solver="randomized")
    assert close(ours, ref_tsv([d.numpy() for d in deltas]), 1e-6)


def test_randomized_projected_top_k_matches_an_svd_of_the_formed_projection():
    # Iso-CTS applies (I - U_c U_c^T) delta without forming it: compare with an SVD of the formed matrix
    g = torch.Generator().manual_seed(1)
    basis, _ = torch.linalg.qr(torch.randn(50, 12, generator=g, dtype=torch.float64))
    d = gapped((50, 30), 1, k=4)[0]
    u, s, v = (x[0] for x in linalg.randomized_svds([d], 4, None, torch.float64, basis=basis))
    ru, rs, rv = ref_svd((d - basis @ (basis.T @ d)).numpy())
    assert close(s, rs[:4], 1e-8)
    assert close((u * s) @ v.T, (ru[:, :4] * rs[:4]) @ rv[:, :4].T, 1e-6)
    assert float((basis.T @ u).abs().max()) < 1e-10  # the directions lie off the common subspace


def test_randomized_route_keeps_the_rank_rule_and_is_deterministic():
    deltas = make_deltas((60, 40), 3, rank=2)  # rank 2 < k = 13: the rest must come back as exact zeros
    _, s, _ = linalg.randomized_svds(deltas, 13, None, torch.float64)
    assert all(int((x > 0).sum()) == 2 for x in s)
    a = tsv_m(deltas, topk_solver="randomized")
    assert torch.equal(a, tsv_m(deltas, topk_solver="randomized"))
    assert close(a, ref_tsv([d.numpy() for d in deltas]), 1e-7)  # rank <= k: nothing to approximate
    b = iso_cts(deltas, 0.8, topk_solver="randomized")
    assert close(b, ref_iso_cts([d.numpy() for d in deltas], 0.8), 1e-7)


def test_cpu_gram_from_syrk_matches_a_product():
    for x in (torch.randn(30, 7, dtype=torch.float64), torch.randn(7, 30).T, torch.randn(30, 14)[:, ::2]):
        assert torch.allclose(torch.triu(linalg.upper_gram(x)), torch.triu(x.T @ x), atol=1e-5)
