"""How many CPU cores this process may use, and how many of them it should use now (torch-free).

``usable_cores``: the CPU affinity mask (``taskset``, Slurm's ``--cpus-per-task``) capped by a cgroup CPU quota
(cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``; Docker's ``--cpus``, Kubernetes' limits). ``os.cpu_count()``
sees neither.

``kernel_threads``: the threads a CPU kernel should use now: ``WILDMERGE_LAPACK_THREADS`` when set (the override),
else the usable cores not busy with other processes (the 1-minute load average less this process's own CPU use).
Why not always every core: a multi-threaded LAPACK call waits at a barrier for every thread, and a thread whose
core another process holds stalls all of them (measured on a loaded 2-core machine: four 512 x 512 float64 eigh
took 0.3 s on one thread, 5-40 s on two with OpenMP's default spinning wait, 0.4-0.5 s on two with a passive wait).

``prefer_passive_wait``: where wildmerge owns the process (the CLI, its worker processes), OpenMP threads sleep at
barriers instead of spinning (``OMP_WAIT_POLICY=PASSIVE``); it only works before torch is imported.
"""

import math
import os
import sys
import time
from pathlib import Path

ENV = "WILDMERGE_LAPACK_THREADS"
_CGROUP = Path("/sys/fs/cgroup")
_own = {"wall": None, "cpu": None, "rate": 0.0}


def _cgroup_quota(root: Path = _CGROUP):
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


def usable_cores(root: Path = _CGROUP) -> int:
    """Cores this process may run on: affinity mask, capped by the cgroup quota (rounded up), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


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


def kernel_threads(cap: int = 0) -> int:
    """Threads for a CPU kernel now: the override, else the usable cores (at most ``cap`` when given) that other
    processes leave free (at least 1)."""
    wanted = os.environ.get(ENV)
    if wanted:
        return max(1, int(wanted))
    cores = min(usable_cores(), cap) if cap > 0 else usable_cores()
    return max(1, min(cores, math.floor(cores - others_load() + 0.5)))


def prefer_passive_wait() -> bool:
    """Let OpenMP threads sleep at barriers (unless the user chose a policy); True if it takes effect here."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return "torch" not in sys.modules
