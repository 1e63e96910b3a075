"""The machine's resources, one rule each: cores from affinity and cgroup quotas (and a worker's thread share of
them), the run queue, free memory under a cgroup limit, peak RSS, visible GPUs, and the one checked device. The
thread policy: tests/core/test_threads.py."""

import json
import os

import pytest

from helpers import python_output
from wildmerge import resources, threads
from wildmerge.errors import ConfigError

GPU = pytest.mark.skipif(not resources.cuda_available(), reason="needs a CUDA GPU")
NO_GPU = pytest.mark.skipif(resources.cuda_available(), reason="a CUDA GPU is present")


def test_importing_it_does_not_import_torch():
    assert python_output("import sys, wildmerge.resources; print('torch' in sys.modules)") == "False"


# ---------------------------------------------------------------- cores and the run queue


def test_cgroup_quotas_cap_the_usable_cores(tmp_path):
    assert resources._cgroup_quota(tmp_path) is None  # no cgroup files: unlimited
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert resources._cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2: 1.5 cores
    assert resources._cgroup_quota(tmp_path) == 1.5
    assert resources.usable_cores(tmp_path) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")  # v1 unlimited
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert resources._cgroup_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")  # v1: half a core still gets one thread
    assert resources._cgroup_quota(tmp_path) == 0.5 and resources.usable_cores(tmp_path) == 1
    assert threads.thread_share(1, tmp_path) == threads.thread_share(4, tmp_path) == 1


def test_the_affinity_mask_caps_the_usable_cores_and_the_shares(tmp_path):
    (tmp_path / "cpu.max").write_text("6400000 100000\n")  # a quota of 64 cores: the mask decides
    code = ("import os, json; from wildmerge import resources as r, threads as t; from pathlib import Path\n"
            "root = Path({root!r})\n"
            "all = len(os.sched_getaffinity(0)); before = [r.usable_cores(root), t.thread_share(1, root), "
            "t.thread_share(2, root), t.thread_share(all + 3, root)]\n"
            "os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})\n"
            "after = [r.usable_cores(root), t.thread_share(1, root), t.thread_share(2, root)]\n"
            "print(json.dumps([all, before, after]))")
    cores, before, pinned = json.loads(python_output(code.format(root=str(tmp_path))))
    assert before == [cores, cores, max(1, cores // 2), 1]
    assert pinned == [1, 1, 1]


def test_a_worker_share_of_a_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert resources.usable_cores(tmp_path) == 1 and threads.thread_share(3, tmp_path) == 1


def test_the_run_queue_less_this_process(tmp_path, monkeypatch):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.52 0.58 0.59 7/467 12345\n")  # the 1-minute average says little; 7 threads run now
    monkeypatch.setattr(resources, "_own_running_threads", lambda: 2)
    assert resources.others_running(loadavg) == 5
    loadavg.write_text("9.0 9.0 9.0 1/467 12345\n")  # a load that has just ended: nothing runs now
    assert resources.others_running(loadavg) == 0
    assert resources.others_running(tmp_path / "missing") == 0
    monkeypatch.undo()
    assert resources._own_running_threads() >= 1  # the thread that reads runs
    assert resources.others_running() >= 0


# ---------------------------------------------------------------- memory


def _meminfo(tmp_path, available_kib=2048):
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       4096 kB\nMemFree:         100 kB\nMemAvailable:   {available_kib} kB\n")
    return path


def test_free_memory_is_mem_available_without_a_cgroup_limit(tmp_path):
    meminfo, root = _meminfo(tmp_path), tmp_path / "cgroup"
    root.mkdir()
    assert resources.free_memory(root, meminfo) == 2048 * 1024  # MemAvailable, not MemFree
    (root / "memory.max").write_text("max\n")  # v2 unlimited
    (root / "memory.current").write_text("123\n")
    assert resources.free_memory(root, meminfo) == 2048 * 1024
    assert resources.free_memory(root, tmp_path / "absent") is None  # nothing known


def test_a_cgroup_v2_limit_caps_free_memory(tmp_path):
    meminfo, root = _meminfo(tmp_path), tmp_path / "cgroup"
    root.mkdir()
    (root / "memory.max").write_text("1048576\n")
    (root / "memory.current").write_text("917504\n")
    assert resources.free_memory(root, meminfo) == 1048576 - 917504
    (root / "memory.stat").write_text("anon 1000\nactive_file 7\ninactive_file 131072\n")  # droppable cache
    assert resources.free_memory(root, meminfo) == 1048576 - (917504 - 131072)
    (root / "memory.current").write_text("2000000\n")  # over the limit
    assert resources.free_memory(root, meminfo) == 0
    assert resources.free_memory(root, tmp_path / "absent") == 0  # the limit alone is known


def test_a_cgroup_v1_limit_caps_free_memory(tmp_path):
    meminfo, root = _meminfo(tmp_path), tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1 unlimited
    (root / "memory" / "memory.usage_in_bytes").write_text("400000\n")
    assert resources.free_memory(root, meminfo) == 2048 * 1024
    (root / "memory" / "memory.limit_in_bytes").write_text("1000000\n")
    (root / "memory" / "memory.stat").write_text("inactive_file 5\ntotal_inactive_file 100000\n")  # hierarchy
    assert resources.free_memory(root, meminfo) == 1000000 - (400000 - 100000)


def test_free_memory_of_this_machine():
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 0 < resources.free_memory() <= total
    assert 0 < resources.free_device_memory("cpu") <= total


def test_peak_rss_is_this_process_own():
    """A child of a big process reports its own peak, not the parent's (what ``ru_maxrss`` would carry over)."""
    code = ("import subprocess, sys; from wildmerge.resources import peak_rss_mib\n"
            "big = bytearray(256 << 20); big[::4096] = b'x' * len(big[::4096])\n"
            "child = subprocess.run([sys.executable, '-c', 'from wildmerge.resources import peak_rss_mib; "
            "print(peak_rss_mib())'], capture_output=True, text=True, check=True).stdout\n"
            "del big; print(peak_rss_mib(), float(child))")
    parent, child = map(float, python_output(code).split())
    assert parent >= 256 and child < 200


# ---------------------------------------------------------------- GPUs and devices


@pytest.mark.parametrize("listed,names", [("0,2", ["0", "2"]), (" GPU-aa1 , GPU-bb2", ["GPU-aa1", "GPU-bb2"]),
                                          ("", []), ("-1", []), ("1,-1,0", ["1"]), ("3,,4", ["3"])])
def test_visible_gpus_are_the_names_cuda_visible_devices_gives(monkeypatch, listed, names):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert resources.visible_gpus() == names


def test_reading_the_visible_gpus_starts_neither_torch_nor_cuda():
    code = "import sys; from wildmerge.resources import visible_gpus as v; print(v(), 'torch' in sys.modules)"
    assert python_output(code, CUDA_VISIBLE_DEVICES="0,1") == "['0', '1'] False"


def test_without_the_variable_torch_counts_the_gpus(monkeypatch):
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert resources.visible_gpus() == [str(i) for i in range(torch.cuda.device_count())]


def test_merge_and_evaluation_workers_see_the_same_gpus(monkeypatch):
    from wildmerge.eval.local import worker_envs
    from wildmerge.merging.workers import worker_count

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert worker_count(None, "cuda", "unused", 2) == 2
    assert [env["CUDA_VISIBLE_DEVICES"] for env in worker_envs(None)] == ["3", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU: CPU workers, each with its share of the cores
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_count(None, "cuda", "unused", 2) == 1
    assert [env["OMP_NUM_THREADS"] for env in worker_envs(2)] == [str(threads.thread_share(2))] * 2


def test_cpu_and_other_devices_pass_and_auto_is_the_gpu_when_there_is_one():
    assert resources.checked_device("cpu") == "cpu" and resources.checked_device("mps") == "mps"
    expected = "cuda" if resources.cuda_available() else "cpu"
    assert resources.checked_device("auto") == resources.checked_device(None) == expected


def test_a_missing_gpu_is_one_clear_error():
    code = ("from wildmerge.resources import checked_device, free_device_memory\n"
            "for ask in (lambda: checked_device('cuda:1', 'evaluation device'), lambda: free_device_memory('cuda')):\n"
            "    try:\n        ask()\n    except Exception as exc:\n        print(type(exc).__name__, exc)\n"
            "print(checked_device('auto'))")
    lines = python_output(code, CUDA_VISIBLE_DEVICES="").splitlines()  # hides any GPU from torch
    assert lines[0] == ("ConfigError evaluation device 'cuda:1' asked for, but this machine has no CUDA GPU that "
                        "torch can use; ask for cpu instead, or run on a GPU machine")
    assert lines[1].startswith("ConfigError device 'cuda' asked for, but this machine has no CUDA GPU")
    assert lines[2] == "cpu"


@NO_GPU
def test_no_gpu_here():
    with pytest.raises(ConfigError, match="--device 'cuda' asked for, but this machine has no CUDA GPU"):
        resources.checked_device("cuda", "--device")


@GPU
def test_a_gpu_that_is_there_and_one_that_is_not():
    import torch

    count = torch.cuda.device_count()
    assert resources.checked_device("cuda") == "cuda" and resources.checked_device(f"cuda:{count - 1}")
    with pytest.raises(ConfigError, match=f"only {count} CUDA GPU"):
        resources.checked_device(f"cuda:{count}")
    assert 0 < resources.free_device_memory("cuda:0") <= torch.cuda.get_device_properties(0).total_memory


def _write(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)


def test_a_limit_on_the_process_own_cgroup_binds_not_only_the_top(tmp_path):
    """A Slurm job step or a systemd unit carries its limits on its own cgroup, below the mount's top."""
    root, me = tmp_path / "cgroup", tmp_path / "self_cgroup"
    me.write_text("0::/slurm/uid_0/job_7/step_0\n")  # v2
    job = root / "slurm" / "uid_0" / "job_7"
    _write(root, memory__max="max\n", memory__current="1\n")
    _write(job, memory__max="1000000\n", memory__current="250000\n", cpu__max="150000 100000\n")
    _write(job / "step_0", memory__max="max\n", memory__current="250000\n", cpu__max="max 100000\n")
    assert resources._cgroup_free(root, me) == 750000  # the job's limit, two levels up from the step
    assert resources._cgroup_quota(root, me) == 1.5
    _write(job / "step_0", memory__max="600000\n", memory__current="250000\n")  # a tighter step: the minimum
    assert resources._cgroup_free(root, me) == 350000
    assert resources._cgroup_free(root, tmp_path / "absent") is None  # no /proc/self/cgroup: the top only


def test_cgroup_v1_controllers_mounted_together_are_found(tmp_path):
    root, me = tmp_path / "cgroup", tmp_path / "self_cgroup"
    me.write_text("4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n0::/\n")
    _write(root / "memory", memory__limit_in_bytes="9223372036854771712\n", memory__usage_in_bytes="5\n")
    _write(root / "memory" / "docker" / "abc", memory__limit_in_bytes="2000000\n",
           memory__usage_in_bytes="500000\n", memory__stat="total_inactive_file 100000\n")
    _write(root / "cpu,cpuacct" / "docker" / "abc", cpu__cfs_quota_us="300000\n", cpu__cfs_period_us="100000\n")
    assert resources._cgroup_free(root, me) == 2000000 - (500000 - 100000)
    assert resources._cgroup_quota(root, me) == 3.0
