"""scipy's syrk, syevr and syevd called through ctypes: bit for bit scipy's own results, and the GIL released."""

import threading
import time

import pytest
import torch
from scipy.linalg import blas, eigh
from scipy.linalg import lapack as scipy_lapack

from wildmerge.plugins import lapack, linalg
from wildmerge.threads import blas_threads


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
    with blas_threads(1):
        linalg.eigh_upper(gram)
    with blas_threads(2):
        linalg.eigh_upper(gram)
    assert calls == ["syevd"]


def test_the_gil_is_released_during_the_call():
    x = torch.randn(3000, 1500, dtype=torch.float64)
    gram = lapack.syrk_upper(x)
    for call in (lambda: lapack.syrk_upper(x), lambda: lapack.syevr_top(gram, 300), lambda: lapack.syevd(gram)):
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
