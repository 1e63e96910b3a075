"""Threads in the kernels (the policy itself: tests/core/test_resources.py): independent decompositions side by side
on one BLAS thread each give what one thread gives; a large one gets threads only when the policy says so."""

import threading

import pytest
import torch

from wildmerge import resources
from wildmerge.errors import ConfigError
from wildmerge.plugins import baselines, linalg, spectral
from wildmerge.plugins.baselines import TSVLosslessParams
from wildmerge.plugins.methods import IsoCParams, IsoCTSParams, TaskArithmeticSBParams, TSVMParams


@pytest.fixture
def four_cores(monkeypatch):
    """The policy's view of a quiet 4-core machine (the kernels then run up to four matrices at once, small ones
    included)."""
    monkeypatch.delenv(resources.THREADS_ENV, raising=False)
    monkeypatch.setattr(linalg, "POOL_MIN_SIDE", 1)
    monkeypatch.setattr(resources, "usable_cores", lambda root=resources.CGROUP: 4)
    monkeypatch.setattr(resources, "others_running", lambda: 0)


def deltas(shape, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(n)]


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def test_lapack_threads_sets_and_restores_torch_threads(monkeypatch):
    monkeypatch.setenv(resources.THREADS_ENV, "1")
    before = torch.get_num_threads()
    with linalg.lapack_threads(torch.device("cpu"), 4096):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_large_decomposition_gets_threads_only_when_the_policy_gives_them(four_cores, monkeypatch):
    cpu = torch.device("cpu")
    with linalg.lapack_threads(cpu, resources.THREADS_MIN_SIDE - 1):
        assert torch.get_num_threads() == 1  # small: one thread
    with linalg.lapack_threads(cpu, 4096):
        assert torch.get_num_threads() == 4  # large, cores free
    monkeypatch.setattr(resources, "others_running", lambda: 3)
    with linalg.lapack_threads(cpu, 4096):
        assert torch.get_num_threads() == 1  # large, but the other cores are busy now


def test_iso_c_products_take_the_free_cores_and_give_the_one_thread_result(four_cores, monkeypatch):
    """The eigensolve of a small Gram matrix stays on one thread; the two products after it, when large, do not."""
    monkeypatch.setattr(resources, "PRODUCT_MIN_MULS", 1)
    seen = []
    real_product = torch.Tensor.__matmul__

    def product(a, b):
        seen.append(torch.get_num_threads())
        return real_product(a, b)

    ds = [d.float() for d in deltas((1100, 60), 3)]  # 1100 rows: four threads of 256 rows or more
    iso_c = IsoCParams.with_defaults(spectral.iso_c)
    monkeypatch.setattr(torch.Tensor, "__matmul__", product)
    threaded = iso_c(ds)
    assert seen == [4, 4]  # V diag(f) V^T, then x times it
    monkeypatch.setenv(resources.THREADS_ENV, "1")
    assert rel(threaded, iso_c(ds)) <= 1e-6 and seen[2:] == [1, 1]  # MKL here: the same bytes


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
    monkeypatch.setenv(resources.THREADS_ENV, "1")  # the one-thread path: one matrix after another
    for name, run in kernels.items():
        assert rel(side_by_side[name], run()) <= 1e-12, name


def test_matrices_run_on_pool_threads_of_one_blas_thread_each_in_order(four_cores):
    seen = []

    def one(i, m):
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return i

    assert linalg.each_matrix(one, deltas((8, 8), 9)) == list(range(9))
    assert all(name.startswith("wildmerge-kernel") and threads == 1 for name, threads in seen)
    before = torch.get_num_threads()
    linalg.each_matrix(one, deltas((8, 8), 2))
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

    linalg.each_matrix(one, lazily())
    assert state["read"] == 12 and state["ahead"] <= 4


def test_few_large_matrices_run_one_after_another_on_the_threads(four_cores, monkeypatch):
    seen = []
    monkeypatch.setattr(linalg, "decomposition_threads", lambda side: 4)  # e.g. two 4096-wide polar factors
    linalg.each_matrix(lambda i, m: seen.append((threading.current_thread().name, torch.get_num_threads())),
                       deltas((8, 8), 2))
    assert seen == [(threading.current_thread().name, 4)] * 2


def test_small_matrices_stay_on_the_calling_thread(four_cores, monkeypatch):
    monkeypatch.setattr(linalg, "POOL_MIN_SIDE", 9)
    names = linalg.each_matrix(lambda i, m: threading.current_thread().name, deltas((8, 20), 3))
    assert names == [threading.current_thread().name] * 3


def test_a_bad_override_is_a_clear_error_from_a_kernel(monkeypatch):
    monkeypatch.setenv(resources.THREADS_ENV, "abc")
    with pytest.raises(ConfigError, match=resources.THREADS_ENV):
        spectral.iso_c(deltas((8, 6), 2))
