"""What this machine lends this process, one rule each: cores, free memory, peak memory, GPUs, CUDA, threads.

Torch-free at import (torch is imported inside the two functions that ask it), so the CLI and the start-up hook
can use it before torch loads.

- ``usable_cores``: the CPU affinity mask (``taskset``, Slurm's ``--cpus-per-task``) capped by a cgroup CPU quota
  (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``: Docker's ``--cpus``, Kubernetes' limits); ``os.cpu_count()`` sees
  neither.
- ``free_memory``: ``MemAvailable`` capped by a cgroup memory limit (v2 ``memory.max``, v1
  ``memory.limit_in_bytes``) less what the cgroup uses that the kernel cannot simply drop (its usage less its
  inactive file cache, as ``MemAvailable`` counts the cache as free).
- ``peak_rss_mib``: this process's own peak resident memory.
- ``visible_gpus``: the GPUs as ``CUDA_VISIBLE_DEVICES`` names them (without starting CUDA, so a helper process
  can be given one of them), else torch's device count.
- ``cuda_available`` and ``checked_device``: a requested device (``auto``, ``cpu``, ``cuda``, ``cuda:N``) made
  concrete, with one message when the GPU asked for is not there; ``free_device_memory``: free bytes on it.
- ``thread_share``: a worker among N gets the usable cores // N threads (at least 1).
- ``kernel_threads``: the threads a CPU kernel should use now: ``WILDMERGE_LAPACK_THREADS`` when set (the
  override), else the usable cores not busy with other processes (the 1-minute load average less this process's
  own CPU use). Why not always every core: a multi-threaded LAPACK call waits at a barrier for every thread, and a
  thread whose core another process holds stalls all of them (measured on a loaded 2-core machine: four 512 x 512
  float64 eigh took 0.3 s on one thread, 5-40 s on two with OpenMP's default spinning wait, 0.4-0.5 s on two with
  a passive wait).
- ``prefer_passive_wait``: where wildmerge owns the process (the CLI, its worker processes), OpenMP threads sleep
  at barriers instead of spinning (``OMP_WAIT_POLICY=PASSIVE``); it only works before torch is imported.
"""

import math
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import List, Optional

from wildmerge.errors import ConfigError

THREADS_ENV = "WILDMERGE_LAPACK_THREADS"
CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
_own = {"wall": None, "cpu": None, "rate": 0.0}


# ---------------------------------------------------------------- cores


def _cgroup_quota(root: Path = CGROUP) -> Optional[float]:
    """Cores allowed by a cgroup CPU quota (fractional), or None when unlimited or unknown."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "200000 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())  # v1: -1 when unlimited
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores(root: Path = CGROUP) -> int:
    """Cores this process may run on: affinity mask, capped by the cgroup quota (rounded up), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def thread_share(workers: int, root: Path = CGROUP) -> int:
    """Threads for one of ``workers`` processes that split the usable cores (at least 1)."""
    return max(1, usable_cores(root) // max(1, workers))


def _own_cpu_rate() -> float:
    """This process's CPU use (cores) since the last call, smoothed; it is part of the load average."""
    now, cpu = time.monotonic(), time.process_time()
    if _own["wall"] is not None and now - _own["wall"] > 0.5:
        rate = (cpu - _own["cpu"]) / (now - _own["wall"])
        _own["rate"] = 0.5 * _own["rate"] + 0.5 * rate
        _own["wall"], _own["cpu"] = now, cpu
    elif _own["wall"] is None:
        _own["wall"], _own["cpu"] = now, cpu
    return _own["rate"]


def others_load() -> float:
    """Runnable work of other processes, in cores: the 1-minute load average less this process's own use."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 0.0
    return max(0.0, load - _own_cpu_rate())


def free_threads(cores: int, load: float) -> int:
    """Of ``cores``, those that ``load`` cores of other work leave free (rounded to the nearest, at least 1)."""
    return max(1, min(cores, math.floor(cores - load + 0.5)))


def kernel_threads(cap: int = 0) -> int:
    """Threads for a CPU kernel now: the override, else the usable cores (at most ``cap`` when given) that other
    processes leave free (at least 1)."""
    wanted = os.environ.get(THREADS_ENV)
    if wanted:
        return max(1, int(wanted))
    cores = min(usable_cores(), cap) if cap > 0 else usable_cores()
    return free_threads(cores, others_load())


def prefer_passive_wait() -> bool:
    """Let OpenMP threads sleep at barriers (unless the user chose a policy); True if it takes effect here."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules


# ---------------------------------------------------------------- memory


def _read_int(path: Path) -> Optional[int]:
    """The number in a cgroup file, None when absent or unlimited (``max``)."""
    try:
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def _stat(path: Path, key: str) -> int:
    try:
        match = re.search(rf"^{key} (\d+)$", path.read_text(), re.MULTILINE)
        return int(match.group(1)) if match else 0
    except OSError:
        return 0


def _cgroup_free(root: Path) -> Optional[int]:
    """Bytes the cgroup memory limit still allows (v2, else v1), None when unlimited or unknown."""
    for limit_file, usage_file, stat_file, inactive in (
            (root / "memory.max", root / "memory.current", root / "memory.stat", "inactive_file"),
            (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes",
             root / "memory" / "memory.stat", "total_inactive_file")):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None:
            return max(0, limit - max(0, usage - _stat(stat_file, inactive)))
    return None


def free_memory(root: Path = CGROUP, meminfo: Path = MEMINFO) -> Optional[int]:
    """Bytes this process may still allocate: ``MemAvailable`` capped by the cgroup limit; None when unknown."""
    try:
        match = re.search(r"^MemAvailable:\s+(\d+) kB$", meminfo.read_text(), re.MULTILINE)
        available = int(match.group(1)) * 1024 if match else None
    except OSError:
        available = None
    allowed = _cgroup_free(root)
    known = [v for v in (available, allowed) if v is not None]
    return min(known) if known else None


def peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM). ``ru_maxrss`` is not used: Linux carries the parent's high-water mark
    into a child across fork + exec, so a child of a big parent would report the parent's peak."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- GPUs


def visible_gpus() -> List[str]:
    """The visible GPUs as ``CUDA_VISIBLE_DEVICES`` names them (indices or UUIDs; CUDA ignores every entry from a
    ``-1`` on), else ``0..n-1`` for torch's device count. Reading the variable starts neither torch nor CUDA."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = []
        for name in (d.strip() for d in listed.split(",")):
            if not name or name == "-1":
                break
            names.append(name)
        return names
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def cuda_available() -> bool:
    """Whether torch can use a CUDA GPU here."""
    import torch

    return torch.cuda.is_available()


def checked_device(requested: Optional[str], what: str = "device") -> str:
    """``requested`` made concrete: ``auto`` (or None) is ``cuda`` when a GPU is there, else ``cpu``; a CUDA device
    that is not there is a ``ConfigError`` (``what`` names the setting in it); anything else is returned as is."""
    if requested in (None, "auto"):
        return "cuda" if cuda_available() else "cpu"
    if not requested.startswith("cuda"):
        return requested
    if not cuda_available():
        raise ConfigError(f"{what} {requested!r} asked for, but this machine has no CUDA GPU that torch can use; "
                          f"ask for cpu instead, or run on a GPU machine")
    import torch

    try:
        index, count = torch.device(requested).index, torch.cuda.device_count()
    except RuntimeError:
        raise ConfigError(f"{what} {requested!r} is not a device; use cpu, cuda, cuda:N or auto") from None
    if index is not None and index >= count:
        raise ConfigError(f"{what} {requested!r} asked for, but only {count} CUDA GPU(s) are visible "
                          f"(cuda:0 to cuda:{count - 1}); ask for one of those")
    return requested


def free_device_memory(device: str, what: str = "device") -> Optional[int]:
    """Bytes free where ``device`` holds tensors: a CUDA device's own free memory (the device checked first), else
    ``free_memory()``; None when unknown."""
    if not device.startswith("cuda"):
        return free_memory()
    device = checked_device(device, what)
    import torch

    return int(torch.cuda.mem_get_info(torch.device(device))[0])
