"""The CPU thread policy: usable cores from affinity and cgroup quotas, the override, and the load rule."""

import os

import torch

from wildmerge import cores
from wildmerge.plugins import linalg


def test_cgroup_quotas_cap_the_usable_cores(tmp_path):
    assert cores._cgroup_quota(tmp_path) is None  # no cgroup files: unlimited
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cores._cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2: 1.5 cores
    assert cores._cgroup_quota(tmp_path) == 1.5
    assert cores.usable_cores(tmp_path) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")  # v1: half a core still gets one thread
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cores._cgroup_quota(tmp_path) == 0.5 and cores.usable_cores(tmp_path) == 1


def test_override_and_load_rule(monkeypatch):
    monkeypatch.setenv(cores.ENV, "3")
    assert cores.kernel_threads() == 3
    monkeypatch.delenv(cores.ENV)
    monkeypatch.setattr(cores, "usable_cores", lambda: 8)
    monkeypatch.setattr(cores, "others_load", lambda: 0.2)
    assert cores.kernel_threads() == 8  # quiet: every core
    monkeypatch.setattr(cores, "others_load", lambda: 5.7)
    assert cores.kernel_threads() == 2  # what the other processes leave
    monkeypatch.setattr(cores, "others_load", lambda: 30.0)
    assert cores.kernel_threads() == 1


def test_lapack_threads_sets_and_restores_torch_threads(monkeypatch):
    monkeypatch.setenv(cores.ENV, "1")
    before = torch.get_num_threads()
    with linalg.lapack_threads(torch.device("cpu")):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
