"""The kernel pool: independent CPU matrices side by side, each on ONE BLAS thread, as many at once as the cores free
now and free memory allow.

Every matrix's maths runs on one thread, so a merge's bytes never depend on the cores, the load or
``WILDMERGE_LAPACK_THREADS``; independent decompositions (TSV-M's and Iso-CTS's per-task SVDs, the two polar
factors, ``linalg.py``) and whole tensors (``tensors_side_by_side.py``, ``task_vector_method.groups_side_by_side``)
run side by side (``each_matrix``, ``side_by_side``) on as many Python threads as ``wildmerge.threads.pool_threads``
gives: a width that changes no byte. The memory rule: at most as many matrices at once as free memory holds four
float64 copies of (``_fit_in_memory``).
"""

import contextlib
import functools
import itertools
import math
import os
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from wildmerge.resources import free_memory
from wildmerge.threads import blas_threads, enter_kernel_thread, in_kernel_thread, pool_threads, threads_override

# Below this side a matrix's LAPACK work (well under a millisecond) is about its Python overhead, which holds the
# GIL: side by side, the threads would mostly wait for each other.
POOL_MIN_SIDE = 128


@contextlib.contextmanager
def lapack_threads(device: torch.device, side: int = 0):
    """One CPU decomposition (and the products around it) on ONE thread, whatever the cores, the load or
    ``WILDMERGE_LAPACK_THREADS``: a LAPACK call on several threads rounds otherwise than on one (Iso-C's merged file
    differed in one byte between 2 threads and 1 on an AVX-512 Xeon), so a merge's bytes would depend on the host's
    momentary load. Threads pay across matrices instead (``each_matrix``, the planner's tensors side by side), which
    changes no byte. ``side`` is kept for the callers' records."""
    if device.type != "cpu" or in_kernel_thread():
        yield
        return
    with blas_threads(1):
        yield


@contextlib.contextmanager
def gemm_threads(device: torch.device, muls: int, rows: int):
    """CPU matrix products (and the cast after them) on one thread, for the same reason as ``lapack_threads``."""
    if device.type != "cpu" or in_kernel_thread():
        yield
        return
    with blas_threads(1):
        yield


def on_kernel_threads(kernel):
    """Run a whole CPU kernel on one thread, so its bytes never depend on the thread count; ``each_matrix`` runs
    independent matrices side by side. (On a busy 2-core machine even a small two-thread GEMM waits for the other
    core: a 512 x 192 x 16 float64 product took 8 ms on two threads, 0.3 ms on one.)"""

    @functools.wraps(kernel)
    def run(matrices, *args, **kwargs):
        first = matrices if isinstance(matrices, torch.Tensor) else matrices[0]
        if first.device.type != "cpu":
            return kernel(matrices, *args, **kwargs)
        threads_override()  # a bad WILDMERGE_LAPACK_THREADS is one clear error, pool or not
        with blas_threads(1):
            return kernel(matrices, *args, **kwargs)

    return run


def each_matrix(fn: Callable[[int, torch.Tensor], Any], matrices: Iterable[torch.Tensor]) -> List[Any]:
    """``[fn(i, m) for i, m in enumerate(matrices)]`` for independent decompositions, side by side on the CPU.

    On the CPU the calls run on ``threads.pool_threads()`` Python threads at once (the usable cores free now,
    or ``WILDMERGE_LAPACK_THREADS``), each on ONE BLAS thread: torch's kernels and ``lapack.py``'s calls release the
    GIL, and with no barrier between the matrices a core that another process takes, even from the middle of the
    call, delays the matrix on it, never all of them (one thread alone would run all of them at that pace). At most
    that many matrices are worked on at once (fewer when free memory would not hold four float64 copies of one per
    thread), and an iterable is read once, a matrix when a thread is free for it. Each matrix's bytes are those of
    one thread, whatever the pool's width. On a GPU, below ``POOL_MIN_SIDE`` and inside a pool thread, one after
    another on the caller's threads.
    """
    items = enumerate(matrices)
    first = next(items, None)
    if first is None:
        return []
    items = itertools.chain([first], items)
    side = min(first[1].shape[-2:])
    if first[1].device.type != "cpu" or side < POOL_MIN_SIDE or in_kernel_thread():
        return [fn(i, m) for i, m in items]
    count = len(matrices) if hasattr(matrices, "__len__") else None
    return _on_pool(fn, items, count, _fit_in_memory(first[1]))


def side_by_side(fn: Callable[[int], Any], count: int, largest: torch.Tensor) -> List[Any]:
    """``[fn(i) for i in range(count)]`` for independent pieces of CPU work on matrices no larger than ``largest``
    (e.g. whole tensors of a merge), side by side on ``each_matrix``'s pool: each on one BLAS thread, at most as
    many at once as the cores free now and free memory allow (``each_matrix``'s rule); one after another on the
    caller's threads when only one fits, and inside a pool thread. Torch's grad mode, which is per thread, is the
    caller's in every piece."""
    if in_kernel_thread():
        return [fn(i) for i in range(count)]
    grad = torch.is_grad_enabled()

    def piece(i: int, _):
        with torch.set_grad_enabled(grad):
            return fn(i)

    return _on_pool(piece, ((i, None) for i in range(count)), count, _fit_in_memory(largest))


def large_ones_side_by_side(fn: Callable[[int], Any], tensors: Sequence[Optional[torch.Tensor]]) -> List[Any]:
    """``[fn(i) for i in range(len(tensors))]`` for pieces of work on matrices like ``tensors[i]`` (e.g. whole
    tensors of a merge): the large CPU matrices (``worth_a_thread``) side by side (``side_by_side``), then the rest
    one after another on the caller's thread; results in order."""
    large = [i for i, t in enumerate(tensors) if t is not None and worth_a_thread(t)]
    if len(large) < 2:
        return [fn(i) for i in range(len(tensors))]
    largest = max((tensors[i] for i in large), key=torch.Tensor.numel)
    done = dict(zip(large, side_by_side(lambda j: fn(large[j]), len(large), largest)))
    return [done[i] if i in done else fn(i) for i in range(len(tensors))]


def worth_a_thread(t: torch.Tensor) -> bool:
    """A CPU float matrix of at least ``POOL_MIN_SIDE`` on each side (below it Python's share of the work, which
    holds the GIL, is as large as the maths)."""
    return t.device.type == "cpu" and t.is_floating_point() and t.ndim == 2 and min(t.shape) >= POOL_MIN_SIDE


def _on_pool(fn: Callable[[int, Any], Any], items: Iterator[Tuple[int, Any]], count: Optional[int],
             fit: Union[int, float]) -> List[Any]:
    """``[fn(i, x) for i, x in items]`` on ``pool_threads()`` threads of one BLAS thread each, at most ``fit`` (and
    ``count``) at once, an item read when a thread is free for it; on the caller's thread, on one BLAS thread, when
    that is one."""
    workers = pool_threads()
    width = min(workers, count or math.inf, fit)
    if width <= 1:
        with blas_threads(1):
            return [fn(i, x) for i, x in items]
    futures, running = [], set()
    with blas_threads(1):
        pool = _threads(workers)
        while True:
            if len(running) >= width:  # the next item is read when a thread is free for it
                _, running = wait(running, return_when=FIRST_COMPLETED)
            item = next(items, None)
            if item is None:
                return [f.result() for f in futures]
            futures.append(pool.submit(fn, *item))
            running.add(futures[-1])


_executor = {"pool": None, "width": 0}


def _threads(width: int) -> ThreadPoolExecutor:
    """The process's pool of kernel threads, kept between calls (starting threads costs ~0.7 ms a call)."""
    if _executor["width"] != width:
        if _executor["pool"] is not None:
            _executor["pool"].shutdown(wait=False)
        _executor.update(pool=ThreadPoolExecutor(width, thread_name_prefix="wildmerge-kernel",
                                                 initializer=enter_kernel_thread), width=width)
    return _executor["pool"]


os.register_at_fork(after_in_child=lambda: _executor.update(pool=None, width=0))  # a fork has none of the threads


def _fit_in_memory(m: torch.Tensor) -> int:
    """How many matrices like ``m`` may be worked on at once: about four float64 copies each (the matrix, its Gram
    matrix, U and a product) must fit in free memory."""
    free = free_memory()
    return math.inf if free is None else max(1, free // (4 * 8 * m.shape[-2] * m.shape[-1] + 1))
