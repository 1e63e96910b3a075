"""The opt-in batched randomized top-k (``topk_solver: randomized_batched``): one GEMM chain for all tasks of a
matrix must give what the per-task loop and, on well-determined spectra, the exact route give."""

import numpy as np
import pytest
import torch

from wildmerge.plugins import linalg, linalg_randomized, spectral
from wildmerge.plugins.methods import IsoCTSParams, TSVMParams

iso_cts = IsoCTSParams.with_defaults(spectral.iso_cts)
tsv_m = TSVMParams.with_defaults(spectral.tsv_m)


def gapped(shape, n, k, seed=0):
    """n task vectors whose spectra drop by 1e4 after the k-th value (top-k subspaces well determined)."""
    r = min(shape)
    s = torch.as_tensor(np.concatenate([np.linspace(1.0, 0.5, k), 1e-4 * np.linspace(1.0, 0.5, r - k)]))
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(seed + i)
        q1, _ = torch.linalg.qr(torch.randn(shape[0], r, generator=g, dtype=torch.float64))
        q2, _ = torch.linalg.qr(torch.randn(shape[1], r, generator=g, dtype=torch.float64))
        out.append((q1 * s) @ q2.T)
    return out


def rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("shape", [(60, 36), (36, 60)])
def test_batched_top_k_is_the_per_task_top_k(shape):
    deltas = gapped(shape, 4, k=9)
    basis, _ = torch.linalg.qr(torch.randn(shape[0], 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7)))
    for kw in ({}, {"basis": basis, "scale": torch.ones(4, 1, dtype=torch.float64)}):
        loop = linalg.randomized_svds(deltas, 9, None, torch.float64, **kw)
        batch = linalg.batched_randomized_svds(deltas, 9, None, torch.float64, **kw)
        for i in range(4):
            assert torch.allclose(batch[1][i], loop[1][i], rtol=1e-10, atol=1e-14)  # singular values
            a = (loop[0][i] * loop[1][i]) @ loop[2][i].T
            assert rel((batch[0][i] * batch[1][i]) @ batch[2][i].T, a) < 1e-10  # rank-k approximations


@pytest.mark.parametrize("shape", [(60, 36), (36, 60)])
def test_batched_kernels_match_the_exact_path(shape):
    deltas = gapped(shape, 3, k=min(shape) // 3)
    exact = tsv_m(deltas)
    assert rel(tsv_m(deltas, topk_solver="randomized_batched"), exact) < 1e-6
    # Iso-CTS: the per-task directions of the projected task vectors (gap kept by the projection on these inputs)
    exact = iso_cts(deltas, 0.8)
    assert rel(iso_cts(deltas, 0.8, topk_solver="randomized_batched"), exact) < 1e-4


def test_batched_route_keeps_the_rank_rule_and_float32_inputs():
    g = torch.Generator().manual_seed(3)
    deltas = [torch.randn(50, 2, generator=g) @ torch.randn(2, 30, generator=g) for _ in range(3)]  # rank 2 < k
    _, s, _ = linalg.batched_randomized_svds(deltas, 10, None, torch.float64)
    assert [int((x > 0).sum()) for x in s] == [2, 2, 2]
    out = tsv_m(deltas, topk_solver="randomized_batched")
    assert out.dtype == torch.float32 and rel(out.double(), tsv_m(deltas).double()) < 1e-5


def spectrum_matrix(shape, s, seed):
    g = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(shape[0], len(s), generator=g, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(shape[1], len(s), generator=g, dtype=torch.float64))
    return (q1 * torch.as_tensor(s, dtype=torch.float64)) @ q2.T


@pytest.mark.parametrize("spectrum", ["flat", "power_law", "gapped"])
def test_randomized_rank_k_error_is_within_the_halko_bound(spectrum):
    """HMT 2011 (Cor. 10.10 with q power iterations): ||A - A_k||_2 <= (1 + C^{1/(2q+1)}) s_{k+1} for the
    randomized rank-k approximation A_k, whatever the spectrum; the exact truncation reaches s_{k+1}."""
    shape, k = (120, 80), 10
    r = min(shape)
    s = {"flat": np.ones(r), "power_law": 1.0 / np.arange(1, r + 1),
         "gapped": np.concatenate([np.ones(k), 0.2 * np.ones(r - k)])}[spectrum]
    deltas = [spectrum_matrix(shape, s, seed) for seed in range(3)]
    u, sv, v = linalg.batched_randomized_svds(deltas, k, 0.0, torch.float64)
    bound = 1 + linalg_randomized.range_error_bound(k, r)
    for i, a in enumerate(deltas):
        err = float(torch.linalg.matrix_norm(a - (u[i] * sv[i]) @ v[i].T, ord=2))
        assert err <= bound * s[k] + 1e-12, (spectrum, i, err, bound * s[k])


@pytest.mark.parametrize("ratio", [0.5, 0.3, 0.1])
def test_randomized_directions_approach_the_exact_ones_with_the_gap(ratio):
    """With a gap s_{k+1} / s_k = ratio, the randomized top-k left subspace is within an angle of
    C ratio^{2q+1} of the exact one (Gu 2015, Thm. 5.8 form; C the HMT constant): the error the default GPU route
    (``topk_solver: auto``) adds is that small on task vectors with a spectral gap."""
    shape, k = (150, 90), 12
    r = min(shape)
    s = np.concatenate([np.linspace(1.0, 0.8, k), ratio * 0.8 * np.linspace(1.0, 0.2, r - k)])
    a = spectrum_matrix(shape, s, seed=5)
    u_exact = torch.linalg.svd(a, full_matrices=False)[0][:, :k]
    u, _, _ = linalg.batched_randomized_svds([a], k, 0.0, torch.float64)
    sin_theta = float(torch.linalg.matrix_norm(u[0] - u_exact @ (u_exact.T @ u[0]), ord=2))
    q = linalg_randomized.POWER_ITERATIONS
    c = linalg_randomized.range_error_bound(k, r) ** (2 * q + 1)
    assert sin_theta <= c * ratio ** (2 * q + 1), (ratio, sin_theta, c * ratio ** (2 * q + 1))


def test_auto_is_exact_on_the_cpu():
    deltas = gapped((60, 36), 3, k=12)
    assert torch.equal(tsv_m(deltas), tsv_m(deltas, topk_solver="exact"))
    assert torch.equal(iso_cts(deltas, 0.8), iso_cts(deltas, 0.8, topk_solver="exact"))
    assert spectral.resolve_topk_solver("auto", torch.device("cuda")) == "randomized_batched"
    assert spectral.resolve_topk_solver("randomized", torch.device("cuda")) == "randomized"
