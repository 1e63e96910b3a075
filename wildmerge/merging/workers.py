"""Merge a plan on every device at once: one worker process per GPU, or several CPU workers where memory allows.

The calling process is worker 0; ``count - 1`` helpers are started with multiprocessing's ``spawn`` (a fresh
interpreter: no CUDA state or thread pool inherited) and each runs ``run_plan`` on the same entries. The run
folder's merge claims (``wildmerge.locks``) split the work, so nothing is merged twice, and worker 0 still sees
every entry (it evaluates and prunes in its own order, waiting for merges a helper holds). Each merge is the same
whoever runs it: mergekit is seeded and reads nothing of the process.

GPU helper ``i`` sees only the ``i``-th visible GPU (``CUDA_VISIBLE_DEVICES``); CPU helpers split the usable cores
(``torch.set_num_threads``) and wait passively at OpenMP barriers.
"""

import os
from pathlib import Path
from typing import List, Optional, Union

from wildmerge.errors import ConfigError
from wildmerge.resources import (THREADS_ENV, free_memory, prefer_passive_wait, thread_share, usable_cores,
                                 visible_gpus)


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda") or device == "auto"


def merge_peak(base_path, max_experts: int) -> int:
    """A merge's peak memory, estimated high: the base's weights times (experts + 2) (inputs, the base, output)."""
    size = sum(f.stat().st_size for f in Path(base_path).glob("*.safetensors")) \
        or sum(f.stat().st_size for f in Path(base_path).glob("*.bin"))
    return size * (max_experts + 2)


def worker_count(requested: Union[int, str, None], device: str, base_path, max_experts: int) -> int:
    """How many workers merge: ``None`` one per visible GPU on cuda, else 1; ``auto`` the same on cuda, and on the
    CPU as many as cores and memory allow. An explicit count that the memory estimate refuses is an error."""
    gpus = len(visible_gpus()) if _on_gpu(device) else 0
    if requested is None:
        return max(1, gpus)
    if requested != "auto" and (not isinstance(requested, int) or requested < 1):
        raise ConfigError(f"--merge-workers must be a positive number or 'auto', got {requested!r}")
    if gpus:
        if requested != "auto" and requested > gpus:
            raise ConfigError(f"--merge-workers {requested}: {gpus} GPU(s) visible; one worker per GPU at most")
        return gpus if requested == "auto" else requested
    peak, free = merge_peak(base_path, max_experts), free_memory()
    free = 1 << 62 if free is None else free  # unknown: no limit to check against
    fits = max(1, free // max(peak, 1))
    if requested == "auto":
        return int(min(usable_cores(), fits))
    if requested > fits:
        raise ConfigError(f"--merge-workers {requested}: a merge may need about {peak / 2**30:.1f} GiB (the base's "
                          f"size x {max_experts + 2}) and {free / 2**30:.1f} GiB is free: at most {fits} worker(s)")
    return requested


def start_helpers(count: int, device: str, run, args: tuple, kwargs: dict) -> list:
    """Start workers 1..count-1, each running ``run(*args, **kwargs)`` (``run_plan``, a module-level function:
    spawn pickles it by name); returns (process, result queue) pairs."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    gpus = visible_gpus() if _on_gpu(device) else []
    threads = thread_share(count)
    started = []
    for i in range(1, count):
        queue = ctx.Queue()
        gpu = gpus[i] if gpus else None
        proc = ctx.Process(target=_helper, args=(gpu, threads, queue, run, args, kwargs), name=f"wildmerge-merge-{i}")
        proc.start()
        started.append((proc, queue))
    for proc, queue in started:  # all start merging together (importing torch and mergekit takes seconds)
        _next(proc, queue)
    return started


def _next(proc, queue):
    """The helper's next message, or None once it has died."""
    from queue import Empty

    while True:
        try:
            return queue.get(timeout=1)
        except Empty:
            if not proc.is_alive():
                return None


def join_helpers(started: list) -> List[Optional[dict]]:
    """Each helper's stats (None for a helper that died: worker 0 has merged what it left)."""
    out = []
    for proc, queue in started:
        out.append(_next(proc, queue))
        proc.join()
    return out


def _helper(gpu: Optional[str], threads: int, queue, run, args: tuple, kwargs: dict) -> None:
    """One helper process: its own GPU or its share of the cores, then the plan (claims decide what it merges)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    prefer_passive_wait()
    import torch

    torch.set_num_threads(threads)
    if not os.environ.get(THREADS_ENV):
        os.environ[THREADS_ENV] = str(threads)
    options = args[3]
    if gpu is not None and str(options.device).startswith("cuda:"):
        args = args[:3] + (options.model_copy(update={"device": "cuda"}),) + args[4:]
    import mergekit.merge  # noqa: F401  (the slow imports, before saying ready)

    queue.put("ready")
    queue.put(run(*args, **kwargs))
