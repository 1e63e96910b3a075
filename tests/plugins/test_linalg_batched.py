"""The opt-in batched randomized top-k (``topk_solver: randomized_batched``): one GEMM chain for all tasks of a
matrix must give what the per-task loop and, on well-determined spectra, the exact route give."""

import numpy as np
import pytest
import torch

from wildmerge.plugins import linalg, spectral
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
