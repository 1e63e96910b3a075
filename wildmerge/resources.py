"""What this machine lends this process, one rule each: cores, the run queue, free memory, peak memory, GPUs, CUDA.

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
- ``others_running``: threads of other processes running or waiting for a core right now (the run queue);
  ``running_threads``: one process's.

How many threads wildmerge uses of these is ``threads.py``'s policy.
"""

import functools
import math
import os
import re
import resource
from pathlib import Path
from typing import List, Optional

from wildmerge.errors import ConfigError

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")
SELF_CGROUP = Path("/proc/self/cgroup")


@functools.lru_cache(maxsize=None)
def _cgroup_levels(root: Path, controller: str, self_cgroup: Path = SELF_CGROUP) -> List[Path]:
    """The folders whose limits bind this process, its own cgroup first, then each parent up to ``root``.

    A limit is set on the cgroup a process was placed in, not only at the mount's top: a Slurm job step
    (``/slurm/uid_U/job_J/step_S``), a systemd unit, a container without its own cgroup namespace. Read from
    ``/proc/self/cgroup``: v2 is the line ``0::/path``; v1 names its controllers (``4:memory:/path``,
    ``2:cpu,cpuacct:/path``), mounted at ``root/<controllers>``. Returned as v2 folders then v1 folders (each
    holding its controller's files), ``root`` and ``root/<controller>`` always last. Kept per process (a process
    does not move between cgroups while it merges); the limits themselves are read at every call."""
    v2, v1 = [], []
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        ids, names, path = parts
        rel = Path(path.lstrip("/"))
        if ids == "0" and names == "":
            v2 += [root / up for up in [rel, *rel.parents] if up != Path(".")]
        elif controller in names.split(","):
            mount = root / names if (root / names).is_dir() else root / controller
            v1 += [mount / up for up in [rel, *rel.parents] if up != Path(".")]
    return v2 + [root] + v1 + [root / controller]


# ---------------------------------------------------------------- cores


def _quota_in(folder: Path) -> Optional[float]:
    """The CPU quota set in one cgroup folder (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``), None if none."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]  # v2: "max 100000" or "200000 100000"
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())  # v1: -1 when unlimited
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def _cgroup_quota(root: Path = CGROUP, self_cgroup: Path = SELF_CGROUP) -> Optional[float]:
    """Cores allowed by the tightest CPU quota on this process's cgroup or a parent (fractional), or None when
    unlimited or unknown."""
    quotas = [q for q in map(_quota_in, _cgroup_levels(root, "cpu", self_cgroup)) if q is not None]
    return min(quotas) if quotas else None


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


LOADAVG = Path("/proc/loadavg")


def running_threads(pid="self") -> int:
    """Threads of process ``pid`` that are running or runnable now (state R in ``/proc/<pid>/task/*/stat``); 0 when
    unreadable."""
    count = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                count += f.read().rpartition(")")[2].split()[0] == "R"
        except (OSError, IndexError):
            pass
    return count


def _own_running_threads() -> int:
    """This process's running threads (at least 1: the reading thread runs)."""
    return max(1, running_threads())


def others_running(loadavg: Path = LOADAVG) -> int:
    """Threads of other processes running or waiting for a core right now: the kernel's run queue (the first
    number of ``/proc/loadavg``'s fourth field, the count ``/proc/stat`` calls ``procs_running``) less this
    process's own running threads. Instantaneous, so a load that has just started counts; 0 when unknown. On a
    host whose cores are shared by a container's quota the queue counts the whole host: fewer threads, never more."""
    try:
        running = int(loadavg.read_text().split()[3].partition("/")[0])
    except (OSError, IndexError, ValueError):
        return 0
    return max(0, running - _own_running_threads())


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


def _free_in(folder: Path) -> Optional[int]:
    """Bytes one cgroup folder's memory limit still allows (v2 files, else v1), None when it sets none."""
    for limit_file, usage_file, stat_file, inactive in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file")):
        limit, usage = _read_int(folder / limit_file), _read_int(folder / usage_file)
        if limit is not None and usage is not None:
            return max(0, limit - max(0, usage - _stat(folder / stat_file, inactive)))
    return None


def _cgroup_free(root: Path, self_cgroup: Path = SELF_CGROUP) -> Optional[int]:
    """Bytes the tightest memory limit on this process's cgroup or a parent still allows, None when unlimited or
    unknown. (v1 reports an unlimited limit as a huge number: it never binds.)"""
    free = [f for f in map(_free_in, _cgroup_levels(root, "memory", self_cgroup)) if f is not None]
    return min(free) if free else None


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


DEVICE_KINDS = ("auto", "cpu", "mps", "cuda")  # every device a setting may name (suite files, options, recipes)


def device_problem(requested: Optional[str], kinds=DEVICE_KINDS) -> Optional[str]:
    """Why ``requested`` names no device of ``kinds`` (``gpu``, ``CPU``, an empty string), or None; None itself
    means auto. The one rule for a device's name: a kind, and ``cuda`` with an index (``cuda:1``)."""
    if requested is None or requested in kinds or ("cuda" in kinds and re.fullmatch(r"cuda:\d+", requested)):
        return None
    words = [k for k in ("cpu", "cuda") if k in kinds] + (["cuda:N"] if "cuda" in kinds else [])
    words += [k for k in ("mps", "auto") if k in kinds]
    return f"{requested!r} is not a device; use {', '.join(words[:-1])} or {words[-1]}"


def checked_device(requested: Optional[str], what: str = "device") -> str:
    """``requested`` made concrete: ``auto`` (or None) is ``cuda`` when a GPU is there, else ``cpu``; a name that is
    no device (``device_problem``), or a CUDA device that is not there, is a ``ConfigError`` (``what`` names the
    setting in it); anything else is returned as is."""
    problem = device_problem(requested)
    if problem:
        raise ConfigError(f"{what} {problem}")
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
