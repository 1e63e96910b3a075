"""scipy's syrk, symm, gemm, syevr, syevd and syevd's steps (sytrd, stedc, orgtr) called through ctypes: bit for bit scipy's own results, and the GIL released."""

import threading
import time

import pytest
import torch
from scipy.linalg import blas, eigh
from scipy.linalg import lapack as scipy_lapack

from wildmerge.plugins import lapack, linalg


def layouts(dtype):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(70, 30, generator=g, dtype=dtype),  # row-major
            torch.randn(30, 70, generator=g, dtype=dtype).T,  # column-major
            torch.randn(70, 60, generator=g, dtype=dtype)[:, ::2]]  # neither: copied


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_syrk_is_scipys(dtype):
    syrk = blas.dsyrk if dtype == torch.float64 else blas.ssyrk
    for x in layouts(dtype):
        c = x.contiguous() if not x.T.is_contiguous() else x
        ref = syrk(1.0, c.numpy().T, trans=0) if c.is_contiguous() else syrk(1.0, c.numpy(), trans=1)
        assert torch.equal(lapack.syrk_upper(x), torch.from_numpy(ref))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_symm_reads_one_triangle_and_is_scipys(dtype):
    """``x @ sym`` from the upper triangle alone (the lower one holds junk here), in either layout of ``x`` and of
    ``sym``; for a column-major ``x`` (the layout scipy's wrapper passes) bit for bit scipy's ``symm``."""
    g = torch.Generator().manual_seed(3)
    full = lapack.syrk_upper(torch.randn(40, 30, generator=g, dtype=dtype))
    full = full.triu() + full.triu(1).T
    junk = full.triu() + 7 * torch.ones_like(full).tril(-1)  # row-major, upper triangle valid
    symm = blas.dsymm if dtype == torch.float64 else blas.ssymm
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for x in layouts(dtype):
        for sym in (junk, junk.T.contiguous().T):
            out = lapack.symm_right(x, sym)
            assert out.shape == x.shape and rel(out, x @ full) < tol
        if x.T.is_contiguous():
            ref = symm(1.0, full.numpy(), x.numpy(), side=1, lower=0)
            assert torch.equal(lapack.symm_right(x, junk.T.contiguous().T), torch.from_numpy(ref))


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_syevr_is_scipys_and_leaves_its_input_alone():
    x = torch.randn(200, 90, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gram = lapack.syrk_upper(x)
    kept = gram.clone()
    for k in (1, 10, 90):
        w, v = lapack.syevr_top(gram, k)
        rw, rv = eigh(gram.numpy(), subset_by_index=[90 - k, 89], driver="evr", lower=False, check_finite=False)
        assert torch.equal(w, torch.from_numpy(rw)) and torch.equal(v, torch.from_numpy(rv))
        assert torch.equal(gram, kept)
    true = torch.linalg.svdvals(x).flip(0)[-10:] ** 2
    assert torch.allclose(lapack.syevr_top(gram, 10)[0], true, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_syevd_is_scipys_and_torchs_eigh_up_to_rounding(dtype):
    x = torch.randn(200, 90, dtype=dtype, generator=torch.Generator().manual_seed(2))
    gram = lapack.syrk_upper(x)  # the lower triangle is zeros: only the upper one may be read
    kept = gram.clone()
    w, v = lapack.syevd(gram)
    syevd = scipy_lapack.dsyevd if dtype == torch.float64 else scipy_lapack.ssyevd
    rw, rv, info = syevd(gram.numpy(), compute_v=1, lower=0)
    assert info == 0 and torch.equal(w, torch.from_numpy(rw)) and torch.equal(v, torch.from_numpy(rv))
    assert torch.equal(gram, kept)
    full = x.T.to(torch.float64) @ x.to(torch.float64)
    tw = torch.linalg.eigvalsh(full)
    eps = torch.finfo(dtype).eps
    assert torch.allclose(w.double(), tw, rtol=0, atol=100 * eps * float(tw[-1]))  # ascending, as torch's
    assert torch.allclose(v.T.double() @ full @ v.double(), torch.diag(w.double()), atol=100 * eps * float(tw[-1]))


def test_eigh_upper_takes_syevd_on_one_thread_and_torchs_on_several(monkeypatch):
    gram = lapack.syrk_upper(torch.randn(60, 20, dtype=torch.float64))
    calls = []
    monkeypatch.setattr(lapack, "syevd", lambda g: calls.append("syevd") or torch.linalg.eigh(g, UPLO="U"))
    with linalg.blas_threads(1):
        linalg.eigh_upper(gram)
    with linalg.blas_threads(2):
        linalg.eigh_upper(gram)
    assert calls == ["syevd"]


def test_the_gil_is_released_during_the_call():
    x = torch.randn(3000, 1500, dtype=torch.float64)
    gram = lapack.syrk_upper(x)
    for call in (lambda: lapack.syrk_upper(x), lambda: lapack.symm_right(x, gram), lambda: lapack.syevr_top(gram, 300),
                 lambda: lapack.syevd(gram)):
        gap, stop = [0.0], threading.Event()

        def watch():
            last = time.perf_counter()
            while not stop.is_set():
                now = time.perf_counter()
                gap[0], last = max(gap[0], now - last), now

        thread = threading.Thread(target=watch)
        thread.start()
        time.sleep(0.02)
        gap[0], seconds = 0.0, time.perf_counter()
        call()
        seconds = time.perf_counter() - seconds
        stop.set()
        thread.join()
        # with the GIL held (scipy's f2py wrappers) the watcher stands still for the whole call
        assert gap[0] < seconds / 2, (gap[0], seconds)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_syevds_steps_one_by_one_give_its_eigenpairs(dtype):
    """``sytrd``, ``stedc`` and ``orgtr``, then ``V = Q Z`` in blocks of rows: ``?syevd``'s eigenvalues bit for bit
    (the same tridiagonal, the same divide and conquer) and an orthonormal V with ``V^T G V = diag(w)``."""
    x = torch.randn(300, 200, dtype=dtype, generator=torch.Generator().manual_seed(4))
    gram = lapack.syrk_upper(x)
    kept = gram.clone()
    reflectors, diagonal, off_diagonal, tau = lapack.sytrd(gram)
    steps = diagonal.clone(), off_diagonal.clone()
    w, z = lapack.stedc(diagonal, off_diagonal)
    assert torch.equal(diagonal, steps[0]) and torch.equal(off_diagonal, steps[1]) and torch.equal(gram, kept)
    q = lapack.orgtr(reflectors, tau)
    v = lapack.empty_column_major(200, 200, dtype)
    for rows in (slice(0, 128), slice(128, 200)):
        lapack.gemm_rows(q, z, v, rows)
    syevd_w, _ = lapack.syevd(gram)
    assert torch.equal(w, syevd_w)
    full = (gram.triu() + gram.triu(1).T).double()
    eps = torch.finfo(dtype).eps
    assert torch.allclose(v.double().T @ v.double(), torch.eye(200, dtype=torch.float64), atol=50 * eps)
    assert torch.allclose(v.double().T @ full @ v.double(), torch.diag(w.double()), atol=100 * eps * float(w[-1]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tiles_and_blocks_of_rows_make_the_whole_products(dtype):
    """``gram_tile`` over the upper triangle's tiles, ``symm_rows`` and ``gemm_rows`` over blocks of rows: the whole
    ``syrk`` / ``symm`` / product up to round-off (OpenBLAS rounds by where a call's edges fall), in both layouts."""
    g = torch.Generator().manual_seed(5)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for x in (torch.randn(300, 130, generator=g, dtype=dtype), torch.randn(130, 300, generator=g, dtype=dtype).T):
        whole = lapack.syrk_upper(x)
        tiled = lapack.empty_column_major(130, 130, dtype, zero=True)
        cuts = [0, 64, 128, 130]
        for a in range(3):
            for b in range(a, 3):
                lapack.gram_tile(x, tiled, slice(cuts[a], cuts[a + 1]), slice(cuts[b], cuts[b + 1]))
        assert rel(tiled.triu(), whole.triu()) < tol and not tiled.tril(-1).any()
        rows = torch.empty_like(x) if x.is_contiguous() else lapack.empty_column_major(300, 130, dtype)
        for block in (slice(0, 128), slice(128, 256), slice(256, 300)):
            lapack.symm_rows(x, whole, rows, block)
        assert rel(rows, lapack.symm_right(x, whole)) < tol
        assert rows.is_contiguous() == x.is_contiguous()
    a, b = (lapack.empty_column_major(*shape, dtype) for shape in ((300, 130), (130, 70)))
    a.copy_(torch.randn(300, 130, generator=g, dtype=dtype))
    b.copy_(torch.randn(130, 70, generator=g, dtype=dtype))
    out = lapack.empty_column_major(300, 70, dtype)
    for block in (slice(0, 200), slice(200, 300)):
        lapack.gemm_rows(a, b, out, block)
    assert rel(out, a @ b) < tol
