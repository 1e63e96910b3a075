"""How many threads wildmerge's CPU work uses: the one thread policy, and the one place torch's count is set.

Torch-free at import (torch is imported inside the functions that set its count), so the CLI and the start-up hook
can use it before torch loads. The machine's facts (usable cores, the run queue now) are ``resources.py``'s; the
kernel pool that runs matrices side by side is ``plugins/kernel_pool.py``.

- ``torch_threads(n)``: torch's threads at ``n`` inside the block, the caller's count back after (every call that
  changes torch's count goes through it: no process-wide count is left changed when a call returns);
  ``blas_threads(n)`` also limits scipy's BLAS, and is a no-op in a kernel thread (``enter_kernel_thread``);
  ``with_threads_argument``: a function run with torch on its ``threads=`` keyword's count.
- ``cpu_share(threads)``: one worker's share of the cores (torch's count and the kernels' ``WILDMERGE_LAPACK_THREADS``).
- ``thread_share``: a worker among N gets the usable cores // N threads (at least 1); ``worker_thread_env``: the
  OpenMP variables of a worker process given that share.
- ``kernel_threads``, ``pool_threads``: how many matrices the CPU kernels work on side by side, decided per call
  from the instantaneous run queue (``resources.others_running``), not the 1-minute load average, which lags a load
  that starts by a minute. ``WILDMERGE_LAPACK_THREADS`` overrides both (``threads_override``: a whole number from 1
  to the usable cores, else one clear ``ConfigError``). Each matrix itself is always computed on one thread
  (``plugins/kernel_pool.py``): a decomposition or product on several threads rounds otherwise than on one, so a
  merge's bytes would follow the load; and a multi-threaded LAPACK call waits at a barrier for every thread, so a
  thread whose core another process holds stalls all of them (measured on a loaded 2-core machine: four 512 x 512
  float64 eigh took 0.3 s on one thread, 5-40 s on two). Side by side there is no barrier: a busy core delays one
  matrix.
- ``prefer_passive_wait``: in the worker processes wildmerge starts (merge helpers, evaluation workers), OpenMP
  threads sleep at barriers instead of spinning (``OMP_WAIT_POLICY=PASSIVE``); it only works before torch is imported.
"""

import contextlib
import functools
import os
import sys
import threading
from pathlib import Path
from typing import Dict, Optional

from wildmerge import resources
from wildmerge.errors import ConfigError

THREADS_ENV = "WILDMERGE_LAPACK_THREADS"

_kernel = threading.local()  # ``in_pool`` is set in the kernel pool's threads: they stay on one BLAS thread


# ---------------------------------------------------------------- the policy


def threads_override() -> Optional[int]:
    """``WILDMERGE_LAPACK_THREADS`` as a thread count, None when unset; a value that is not a whole number from 1 to
    the usable cores is a ``ConfigError`` (``abc`` was a ValueError traceback, ``99999`` libgomp out of memory)."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    cores = resources.usable_cores()
    try:
        wanted = int(text)
    except ValueError:
        wanted = 0
    if not 1 <= wanted <= cores:
        raise ConfigError(f"{THREADS_ENV}={text!r} is not a thread count for this machine: set a whole number from "
                          f"1 to {cores} (its usable cores; more threads than cores only wait for each other), or "
                          f"unset it to let wildmerge decide")
    return wanted


def thread_share(workers: int, root: Path = resources.CGROUP) -> int:
    """Threads for one of ``workers`` processes that split the usable cores (at least 1)."""
    return max(1, resources.usable_cores(root) // max(1, workers))


def kernel_threads(cap: int = 0) -> int:
    """Threads for a multi-threaded CPU call now: the override, else the usable cores (at most ``cap`` when given)
    that other processes leave free by the run queue now (at least 1)."""
    wanted = threads_override()
    if wanted is not None:
        return wanted
    cores = resources.usable_cores()
    return max(1, min(cap if cap > 0 else cores, cores - resources.others_running()))


def pool_threads() -> int:
    """Python threads that run independent decompositions side by side, each on one BLAS thread: the override,
    else the usable cores that the run queue leaves free now (``kernel_threads``). With no barrier between them,
    a load that starts during the call delays only the matrices on its cores; a load already there keeps one
    thread (measured on 2 busy cores: side by side, Iso-CTS at 256 x 256 was 1.11x one thread's time)."""
    return kernel_threads()


def prefer_passive_wait() -> bool:
    """Let OpenMP threads sleep at barriers (unless the user chose a policy); True if it takes effect here."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules


def worker_thread_env(threads: Optional[int]) -> Dict[str, str]:
    """The OpenMP variables of a worker process: passive waits (unless the user chose a policy) and, on a CPU,
    ``threads`` as its thread count (unless the user set ``OMP_NUM_THREADS``)."""
    env = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(threads))
    return env


# ---------------------------------------------------------------- torch's count, set and given back


@contextlib.contextmanager
def torch_threads(n: Optional[int]):
    """torch's threads (MKL, OpenMP) on ``n`` inside the block, the caller's count back after; None or 0: as it is."""
    if not n:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n != before:
            torch.set_num_threads(before)


@contextlib.contextmanager
def blas_threads(n: int):
    """torch's threads and scipy's BLAS on ``n`` threads inside, as before after. A no-op in a kernel thread: the
    counts are process-wide, and those threads stay on one."""
    if in_kernel_thread():
        yield
        return
    with torch_threads(n), _blas_controller().limit(limits=n, user_api="blas"):  # scipy's own OpenBLAS
        yield


def with_threads_argument(fn):
    """``fn`` run with torch on its ``threads=`` keyword's count (None or 0: as it is), the caller's count back
    after it returns or raises."""

    @functools.wraps(fn)
    def run(*args, threads=None, **kwargs):
        with torch_threads(threads):
            return fn(*args, threads=threads, **kwargs)

    return run


@contextlib.contextmanager
def cpu_share(threads: int):
    """One of several CPU workers: torch and the kernels' pool (``WILDMERGE_LAPACK_THREADS``, unless the user set
    it) on ``threads`` inside the block; the caller's settings back after."""
    override = os.environ.get(THREADS_ENV)
    if not override:
        os.environ[THREADS_ENV] = str(threads)
    try:
        with torch_threads(threads):
            yield
    finally:
        if override is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = override


def enter_kernel_thread() -> None:
    """Mark the calling thread as one of the kernel pool's (its whole life): torch's OpenMP and MKL counts for this
    thread at one, and ``blas_threads`` a no-op in it."""
    import torch

    _kernel.in_pool = True
    torch.set_num_threads(1)  # this thread's OpenMP and MKL counts (the process-wide count is 1 already)


def in_kernel_thread() -> bool:
    return getattr(_kernel, "in_pool", False)


@functools.lru_cache(maxsize=None)
def _blas_controller():
    """threadpoolctl's view of the loaded BLAS libraries, found once (a fresh lookup costs ~1 ms a call)."""
    import scipy.linalg  # noqa: F401  (loads scipy's BLAS, so that the controller sees it)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
