"""Merge a plan on every device at once: one worker process per GPU, or several CPU workers where memory allows.

The calling process is worker 0; ``count - 1`` helpers are started with multiprocessing's ``spawn`` (a fresh
interpreter: no CUDA state or thread pool inherited) and each runs ``run_plan`` on the same entries. The run
folder's merge claims (``wildmerge.locks``) split the work, so nothing is merged twice, and worker 0 still sees
every entry (it evaluates and prunes in its own order, waiting for merges a helper holds). Each merge is the same
whoever runs it: mergekit is seeded and reads nothing of the process.

GPU helper ``i`` sees only the ``i``-th visible GPU (``CUDA_VISIBLE_DEVICES``); CPU helpers split the usable cores
(``threads.cpu_share``) and wait passively at OpenMP barriers. A helper dies with the process that started it
(``wildmerge.lifeline``), ``kill -9`` included; the run folder's claims let the next run finish its merges.
"""

import os
from typing import List, Optional, Union

from wildmerge import lifeline
from wildmerge.checkpoints import cpu_merge_peak_bytes, weights_bytes
from wildmerge.errors import ConfigError
from wildmerge.resources import free_memory, peak_rss_mib, usable_cores, visible_gpus
from wildmerge.threads import cpu_share, prefer_passive_wait, thread_share

# What one helper process holds before it merges anything: the interpreter with torch, transformers and mergekit
# imported. Measured as the resident memory (VmHWM) of a spawned helper once its imports are done
# (``measure_helper_memory``): 416 MiB on Linux x86-64, Python 3.11, torch 2.13 (CPU build), transformers 5.24,
# mergekit 0.1.5 (309 MiB of it private, the rest shared libraries); rounded up to leave room for other versions.
# Re-measure: python -c "from wildmerge.merging.workers import measure_helper_memory as m; print(m() >> 20, 'MiB')"
# (tests/merging/test_merge_workers.py fails when a real helper outgrows it.)
HELPER_MEMORY = 512 << 20


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda") or device == "auto"


def merge_peak(base_path, max_experts: int) -> int:
    """A merge's peak memory on the CPU, estimated high (``checkpoints.cpu_merge_peak_bytes``, at the base's size)."""
    return cpu_merge_peak_bytes(weights_bytes(base_path), max_experts)


def worker_count(requested: Union[int, str, None], device: str, base_path, max_experts: int) -> int:
    """How many workers merge: ``None`` one per visible GPU on cuda, else 1; ``auto`` the same on cuda, and on the
    CPU as many as the usable cores and free memory allow (``HELPER_MEMORY`` + ``merge_peak`` a worker). An explicit
    count above that is an error with the numbers, before any helper starts. ``base_path`` None: no model share."""
    gpus = len(visible_gpus()) if _on_gpu(device) else 0
    if requested is None:
        return max(1, gpus)
    if requested != "auto" and (not isinstance(requested, int) or requested < 1):
        raise ConfigError(f"--merge-workers must be a positive number or 'auto', got {requested!r}")
    if gpus:
        if requested != "auto" and requested > gpus:
            raise ConfigError(f"--merge-workers {requested}: {gpus} GPU(s) visible; one worker per GPU at most")
        return gpus if requested == "auto" else requested
    cores, free = usable_cores(), free_memory()
    peak = merge_peak(base_path, max_experts) if base_path is not None else 0
    each = HELPER_MEMORY + peak
    fits = cores if free is None else max(1, min(cores, free // each))  # free memory unknown: the cores only
    if requested == "auto" or requested <= fits:
        return fits if requested == "auto" else requested
    memory = "unknown free memory" if free is None else f"{free / 2**30:.1f} GiB free memory"
    merge = (f" + {peak / 2**30:.2f} GiB for the merge: the base's size x {max_experts + 2}" if base_path is not None
             else "; the merge's own memory comes on top")
    raise ConfigError(f"--merge-workers {requested}: this machine holds at most {fits} merge worker(s): {cores} usable "
                      f"core(s), {memory}, about {each / 2**30:.2f} GiB a worker ({HELPER_MEMORY >> 20} MiB for Python "
                      f"with torch and mergekit{merge}); use --merge-workers {fits} or --merge-workers auto")


def measure_helper_memory() -> int:
    """Bytes of resident memory a fresh helper holds once its imports are done (the source of ``HELPER_MEMORY``)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_imports_memory, args=(queue,), name="wildmerge-merge-measure", daemon=True)
    proc.start()
    try:
        return _next(proc, queue)
    finally:
        lifeline.kill(proc)


def _imports_memory(queue) -> None:
    lifeline.hold(_parent_sentinel())
    _import_merging()
    queue.put(int(peak_rss_mib() * 2**20))


def _import_merging() -> None:
    """What a helper imports before merging (the slow imports; the plan runner came with the pickled ``run``)."""
    import mergekit.merge  # noqa: F401
    import torch  # noqa: F401


def _parent_sentinel() -> int:
    """In a multiprocessing child: the pipe its parent holds open while it lives (end-of-file when it is gone)."""
    import multiprocessing as mp

    return mp.parent_process().sentinel


def start_helpers(count: int, device: str, run, args: tuple, kwargs: dict) -> list:
    """Start workers 1..count-1, each running ``run(*args, **kwargs)`` (``run_plan``, a module-level function:
    spawn pickles it by name); returns (process, result queue) pairs. Daemon processes: if this process stops
    early (Ctrl-C, an error), multiprocessing ends them at exit instead of waiting for their merges."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    gpus = visible_gpus() if _on_gpu(device) else []
    threads = thread_share(count)
    started = []
    for i in range(1, count):
        queue = ctx.Queue()
        gpu = gpus[i] if gpus else None
        proc = ctx.Process(target=_helper, args=(gpu, threads, queue, run, args, kwargs), name=f"wildmerge-merge-{i}",
                           daemon=True)
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
    lifeline.hold(_parent_sentinel())  # first: dies with the process that started it
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    prefer_passive_wait()
    with cpu_share(threads):
        options = args[3]
        if gpu is not None and str(options.device).startswith("cuda:"):
            args = args[:3] + (options.model_copy(update={"device": "cuda"}),) + args[4:]
        _import_merging()  # the slow imports, before saying ready

        queue.put("ready")
        queue.put(run(*args, **kwargs))
