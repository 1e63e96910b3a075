"""The kernel pool (the policy itself: tests/core/test_threads.py): every matrix on one thread whatever the
cores, the load or the override, so a merge's bytes never depend on them; independent decompositions side by side on
one BLAS thread each give what one thread gives."""

import threading

import pytest
import torch

from wildmerge import resources, threads
from wildmerge.errors import ConfigError
from wildmerge.plugins import baselines, kernel_pool, linalg, spectral
from wildmerge.plugins.baselines import TSVLosslessParams
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TaskArithmeticSBParams, TSVMParams


@pytest.fixture
def four_cores(monkeypatch):
    """The policy's view of a quiet 4-core machine (the kernels then run up to four matrices at once, small ones
    included)."""
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    monkeypatch.setattr(kernel_pool, "POOL_MIN_SIDE", 1)
    monkeypatch.setattr(resources, "usable_cores", lambda root=resources.CGROUP: 4)
    monkeypatch.setattr(resources, "others_running", lambda: 0)


def deltas(shape, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(n)]


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_lapack_threads_sets_and_restores_torch_threads(monkeypatch):
    monkeypatch.setenv(threads.THREADS_ENV, "1")
    before = torch.get_num_threads()
    with kernel_pool.lapack_threads(torch.device("cpu"), 4096):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("override", [None, "4"])
def test_every_decomposition_and_product_stays_on_one_thread(four_cores, monkeypatch, override):
    """Large or small, quiet cores or an override: one thread (a call on several rounds otherwise)."""
    if override:
        monkeypatch.setenv(threads.THREADS_ENV, override)
    cpu = torch.device("cpu")
    for side in (16, 4096, 100000):
        with kernel_pool.lapack_threads(cpu, side):
            assert torch.get_num_threads() == 1
    with kernel_pool.gemm_threads(cpu, 10 ** 12, 10 ** 6):
        assert torch.get_num_threads() == 1


def test_iso_c_products_run_on_one_thread_whatever_the_free_cores(four_cores, monkeypatch):
    seen = []
    real_product = torch.Tensor.__matmul__

    def product(a, b):
        seen.append(torch.get_num_threads())
        return real_product(a, b)

    ds = [d.float() for d in deltas((1100, 60), 3)]
    iso_c = IsoCParams.with_defaults(spectral.iso_c)
    monkeypatch.setattr(torch.Tensor, "__matmul__", product)
    quiet = iso_c(ds)
    monkeypatch.setenv(threads.THREADS_ENV, "4")
    assert torch.equal(quiet, iso_c(ds)) and seen == [1, 1, 1, 1]  # V diag(f) V^T, then x times it, twice


@pytest.mark.parametrize("shape", [(48, 20), (20, 48), (32, 32)])
def test_kernels_side_by_side_give_the_one_thread_results(shape, four_cores, monkeypatch):
    ds = deltas(shape, 7)
    tsv_m, iso_cts = TSVMParams.with_defaults(spectral.tsv_m), IsoCTSParams.with_defaults(spectral.iso_cts)
    iso_c, boost = IsoCParams.with_defaults(spectral.iso_c), TaskArithmeticSBParams.with_defaults(spectral.subspace_boost)
    kernels = {
        "tsv_m": lambda: tsv_m(ds),
        "iso_cts": lambda: iso_cts(ds, 0.8),
        "iso_c": lambda: iso_c(ds),
        "boost": lambda: boost(ds[0], 0.3),
        "tsv_m randomized": lambda: tsv_m(ds, topk_solver="randomized"),
        "iso_cts randomized": lambda: iso_cts(ds, 0.8, topk_solver="randomized"),
        "tsv_lossless": lambda: TSVLosslessParams.with_defaults(baselines.tsv_lossless)(ds),
        "thin_svd of an iterable": lambda: torch.cat([x.flatten() for x in linalg.thin_svd(iter(ds), k=4)]),
    }
    side_by_side = {name: run() for name, run in kernels.items()}
    monkeypatch.setenv(threads.THREADS_ENV, "1")  # the one-thread path: one matrix after another
    for name, run in kernels.items():
        assert rel(side_by_side[name], run()) <= 1e-12, name


def test_matrices_run_on_pool_threads_of_one_blas_thread_each_in_order(four_cores):
    seen = []

    def one(i, m):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return i

    assert kernel_pool.each_matrix(one, deltas((8, 8), 9)) == list(range(9))
    assert all(name.startswith("wildmerge-kernel") and threads == 1 for name, threads in seen)
    before = torch.get_num_threads()
    kernel_pool.each_matrix(one, deltas((8, 8), 2))
    assert torch.get_num_threads() == before


def test_an_iterable_is_read_as_threads_free_up(four_cores):
    state = {"read": 0, "done": 0, "ahead": 0}
    lock = threading.Lock()

    def lazily():
        for m in deltas((8, 8), 12):
            with lock:
                state["read"] += 1
                state["ahead"] = max(state["ahead"], state["read"] - state["done"])
            yield m

    def one(i, m):
        with lock:
            state["done"] += 1

    kernel_pool.each_matrix(one, lazily())
    assert state["read"] == 12 and state["ahead"] <= 4


def test_small_matrices_stay_on_the_calling_thread(four_cores, monkeypatch):
    monkeypatch.setattr(kernel_pool, "POOL_MIN_SIDE", 9)
    names = kernel_pool.each_matrix(lambda i, m: threading.current_thread().name, deltas((8, 20), 3))
    assert names == [threading.current_thread().name] * 3


def test_a_bad_override_is_a_clear_error_from_a_kernel(monkeypatch):
    monkeypatch.setenv(threads.THREADS_ENV, "abc")
    with pytest.raises(ConfigError, match=threads.THREADS_ENV):
        spectral.iso_c(deltas((8, 6), 2))
