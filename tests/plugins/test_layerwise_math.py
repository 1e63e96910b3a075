"""The closed-form maths of RegMean / Chain of Merges against independent float64 least squares."""

import numpy as np
import pytest
import scipy.linalg
import torch

from wildmerge.plugins.layerwise.covariate_shift import MomentAccumulator, frechet_distance
from wildmerge.plugins.layerwise.regmean import GramAccumulator, closed_form_merge, omega

D_OUT, D_IN, N = 5, 8, 3


def _task(seed, n_tokens=40, d=D_IN):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n_tokens, d, generator=g, dtype=torch.float64) @ torch.randn(d, d, generator=g, dtype=torch.float64)
    W = torch.randn(D_OUT, d, generator=g, dtype=torch.float64)
    return X, W


def _lstsq_reference(Xs, Ws, omegas, lam, ridge, W0):
    """argmin_W Σ_i w_i ||(W - W_i) X_i^T||² / n_i + ridge term, by stacked float64 lstsq (no normal equations)."""
    w = np.asarray(omegas, dtype=np.float64)
    w = w / w.mean()
    rows, targets = [], []
    for wi, X, W in zip(w, Xs, Ws):
        X, W = X.numpy(), W.numpy()
        scale = np.sqrt(wi / X.shape[0])
        rows.append(scale * X)
        targets.append(scale * X @ W.T)
        if ridge == "per_task":  # + λ w_i ||W - W_i||²
            rows.append(np.sqrt(wi * lam) * np.eye(X.shape[1]))
            targets.append(np.sqrt(wi * lam) * W.T)
    if ridge in ("delta", "zero") and lam > 0:
        anchor = W0.numpy() if ridge == "delta" else np.zeros((D_OUT, Xs[0].shape[1]))
        rows.append(np.sqrt(lam) * np.eye(Xs[0].shape[1]))
        targets.append(np.sqrt(lam) * anchor.T)
    sol, *_ = np.linalg.lstsq(np.vstack(rows), np.vstack(targets), rcond=None)
    return torch.from_numpy(sol.T)


def _grams(Xs):
    return [X.T @ X / X.shape[0] for X in Xs]


@pytest.mark.parametrize("ridge", ["delta", "per_task", "zero"])
@pytest.mark.parametrize("lam_rel", [0.0, 0.05])
def test_closed_form_matches_float64_lstsq(ridge, lam_rel):
    tasks = [_task(s) for s in range(N)]
    Xs, Ws = [t[0] for t in tasks], [t[1] for t in tasks]
    W0 = _task(99)[1]
    omegas = [0.5, 2.0, 1.3]
    got = closed_form_merge(Ws, _grams(Xs), omegas, lam_rel=lam_rel, ridge=ridge, base=W0, precision=torch.float64)
    w = np.array(omegas) / np.mean(omegas)
    A = sum(wi * G for wi, G in zip(w, _grams(Xs)))
    lam = lam_rel * float(torch.diagonal(A).mean())
    expected = _lstsq_reference(Xs, Ws, omegas, lam, ridge, W0)
    torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-8)


def test_omega_scale_invariance():
    """Property 2: multiplying every ω by c > 0 changes nothing (λ is relative)."""
    tasks = [_task(s) for s in range(N)]
    Xs, Ws = [t[0] for t in tasks], [t[1] for t in tasks]
    W0 = _task(7)[1]
    a = closed_form_merge(Ws, _grams(Xs), [1.0, 2.0, 3.0], lam_rel=0.01, ridge="delta", base=W0,
                          precision=torch.float64)
    b = closed_form_merge(Ws, _grams(Xs), [10.0, 20.0, 30.0], lam_rel=0.01, ridge="delta", base=W0,
                          precision=torch.float64)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_fixed_point_when_all_weights_equal():
    """Property 3: identical W_i give W back (per_task for any λ; delta when W is the base)."""
    Xs = [_task(s)[0] for s in range(N)]
    W = _task(5)[1]
    got = closed_form_merge([W] * N, _grams(Xs), [1.0, 3.0, 0.2], lam_rel=0.1, ridge="per_task",
                            precision=torch.float64)
    torch.testing.assert_close(got, W, rtol=1e-10, atol=1e-10)
    got = closed_form_merge([W] * N, _grams(Xs), None, lam_rel=0.1, ridge="delta", base=W, precision=torch.float64)
    torch.testing.assert_close(got, W, rtol=1e-10, atol=1e-10)


def test_shared_data_collapses_to_the_mean():
    """Property 4: one Gram for every model gives the plain average (per_task, any λ)."""
    X = _task(0)[0]
    Ws = [_task(s)[1] for s in range(N)]
    G = X.T @ X / X.shape[0]
    got = closed_form_merge(Ws, [G] * N, [omega(G)] * N, lam_rel=0.3, ridge="per_task", precision=torch.float64)
    torch.testing.assert_close(got, sum(Ws) / N, rtol=1e-10, atol=1e-10)


def test_exact_recovery_on_a_linear_toy_problem():
    """Each model differs from W* only in directions its own data never excites: the merge finds W* exactly."""
    g = torch.Generator().manual_seed(3)
    d, W_star = 6, torch.randn(D_OUT, 6, generator=g, dtype=torch.float64)
    Xs, Ws = [], []
    for i in range(3):  # model i sees only input coordinates 2i, 2i+1; its weight is wrong everywhere else
        X = torch.zeros(30, d, dtype=torch.float64)
        X[:, 2 * i : 2 * i + 2] = torch.randn(30, 2, generator=g, dtype=torch.float64)
        noise = torch.randn(D_OUT, d, generator=g, dtype=torch.float64)
        noise[:, 2 * i : 2 * i + 2] = 0
        Xs.append(X)
        Ws.append(W_star + noise)
    for ridge in ("delta", "per_task", "zero"):
        got = closed_form_merge(Ws, _grams(Xs), None, lam_rel=0.0, ridge=ridge, base=torch.zeros_like(W_star),
                                precision=torch.float64)
        torch.testing.assert_close(got, W_star, rtol=1e-9, atol=1e-9)
    naive = sum(Ws) / 3
    assert (naive - W_star).abs().max() > 0.1  # the toy problem is not trivial


def test_rank_deficient_gram_null_space_goes_where_each_ridge_says():
    """An input direction no calibration token reaches maps to 0 (zero), to W0 (delta), to the ω-mean (per_task)."""
    g = torch.Generator().manual_seed(4)
    Xs = []
    for _ in range(2):
        X = torch.randn(20, D_IN, generator=g, dtype=torch.float64)
        X[:, -1] = 0  # nobody ever sees the last input feature
        Xs.append(X)
    Ws = [torch.randn(D_OUT, D_IN, generator=g, dtype=torch.float64) for _ in range(2)]
    W0 = torch.randn(D_OUT, D_IN, generator=g, dtype=torch.float64)
    col = lambda ridge: closed_form_merge(Ws, _grams(Xs), [1.0, 3.0], lam_rel=1e-3, ridge=ridge, base=W0,  # noqa
                                          precision=torch.float64)[:, -1]
    torch.testing.assert_close(col("zero"), torch.zeros(D_OUT, dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(col("delta"), W0[:, -1], atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(col("per_task"), (Ws[0][:, -1] + 3 * Ws[1][:, -1]) / 4, atol=1e-9, rtol=1e-9)


def test_omega_is_the_upper_triangle_abs_sum():
    G = torch.randn(6, 6, dtype=torch.float64)
    G = G + G.T
    expected = sum(abs(float(G[p, q])) for p in range(6) for q in range(p + 1, 6))
    assert omega(G) == pytest.approx(expected, rel=1e-12)


def test_gram_accumulator_normalisations():
    X = torch.randn(50, D_IN, dtype=torch.float64) * torch.linspace(0.1, 5, D_IN, dtype=torch.float64)
    acc = {n: GramAccumulator(D_IN, n) for n in ("token", "feature", "none")}
    for n, a in acc.items():
        a.add(X[:20])
        a.add(X[20:])
    Xt = X / X.norm(dim=1, keepdim=True)
    torch.testing.assert_close(acc["token"].result().double(), Xt.T @ Xt / 50, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(acc["none"].result().double(), X.T @ X / 50, rtol=1e-5, atol=1e-5)
    Xf = X / X.norm(dim=0, keepdim=True)
    cos = Xf.T @ Xf
    torch.testing.assert_close(acc["feature"].result().double(), cos, rtol=1e-5, atol=1e-6)
    assert torch.allclose(acc["feature"].result().diagonal(), torch.ones(D_IN), atol=1e-5)
    assert float(acc["token"].result().trace()) == pytest.approx(1.0, rel=1e-5)


def test_frechet_distance_matches_scipy_sqrtm():
    g = torch.Generator().manual_seed(8)
    a = torch.randn(300, 5, generator=g, dtype=torch.float64) @ torch.randn(5, 5, generator=g, dtype=torch.float64)
    b = 0.7 * a + 0.3 * torch.randn(300, 5, generator=g, dtype=torch.float64) + 0.5
    ma, mb = MomentAccumulator(5), MomentAccumulator(5)
    ma.add(a[:100])
    ma.add(a[100:])
    mb.add(b)
    A, B = a.numpy(), b.numpy()
    mu1, mu2 = A.mean(0), B.mean(0)
    c1, c2 = np.cov(A, rowvar=False, bias=True), np.cov(B, rowvar=False, bias=True)
    expected = ((mu1 - mu2) ** 2).sum() + np.trace(c1 + c2 - 2 * np.real(scipy.linalg.sqrtm(c1 @ c2)))
    assert frechet_distance(*ma.moments(), *mb.moments()) == pytest.approx(expected, rel=1e-8)
    assert frechet_distance(*ma.moments(), *ma.moments()) == pytest.approx(0.0, abs=1e-8)


def test_bad_solver_arguments_are_refused():
    """What the data or the caller gets wrong; a bad ``ridge`` or ``norm`` value is the parameter model's to refuse
    (``LayerwiseParams``: test_method_params.py)."""
    X, W = _task(0)
    with pytest.raises(ValueError, match="base"):
        closed_form_merge([W], _grams([X]), lam_rel=0.01, ridge="delta")
    with pytest.raises(ValueError, match="importance"):
        closed_form_merge([W, W], _grams([X, X]), [0.0, 0.0], lam_rel=0.01, ridge="delta", base=W)
