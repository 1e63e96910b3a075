"""The thread policy, one module: the override, the run queue, a worker's share, passive waits; and torch's thread
count set only here, through ``torch_threads``, and given back when a call returns or raises."""

import ast
import os
import re
from pathlib import Path

import pytest
import torch

from helpers import python_output
from wildmerge import resources, threads
from wildmerge.errors import ConfigError

PACKAGE = Path(threads.__file__).parent


def _other_count() -> int:
    return 1 if torch.get_num_threads() != 1 else 2


def test_importing_it_does_not_import_torch():
    assert python_output("import sys, wildmerge.threads; print('torch' in sys.modules)") == "False"


def test_torch_threads_is_the_only_place_torchs_count_is_set():
    """Every ``set_num_threads`` call in the package is in threads.py (a call elsewhere would leave a process-wide
    count changed, or write "set, then restore" once more)."""
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("set_num_threads", "set_num_interop_threads"):
                calls.append(str(path.relative_to(PACKAGE)))
    assert calls and set(calls) == {"threads.py"}, calls


def test_torch_threads_gives_the_count_back_after_a_return_or_a_raise():
    before, other = torch.get_num_threads(), _other_count()
    with threads.torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        with threads.torch_threads(other):
            raise ValueError("inside")
    assert torch.get_num_threads() == before
    for unchanged in (None, 0):
        with threads.torch_threads(unchanged):
            assert torch.get_num_threads() == before


def test_a_threads_argument_holds_for_its_call_only():
    seen = []

    @threads.with_threads_argument
    def job(x, *, threads=None):
        seen.append(torch.get_num_threads())
        if x < 0:
            raise ValueError(x)
        return x

    before, other = torch.get_num_threads(), _other_count()
    assert job(3, threads=other) == 3 and job(4) == 4
    with pytest.raises(ValueError):
        job(-1, threads=other)
    assert seen == [other, before, other] and torch.get_num_threads() == before


@pytest.mark.parametrize("users", [None, "1"])
def test_a_cpu_share_sets_torch_and_the_kernels_then_gives_both_back(monkeypatch, users):
    if users is None:
        monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(threads.THREADS_ENV, users)
    before, other = torch.get_num_threads(), _other_count()
    with threads.cpu_share(other):
        assert torch.get_num_threads() == other
        assert os.environ[threads.THREADS_ENV] == (users or str(other))  # the user's override wins
    assert torch.get_num_threads() == before and os.environ.get(threads.THREADS_ENV) == users


def test_a_serving_workers_job_gives_the_count_back(monkeypatch):
    from wildmerge.eval.serve import job_threads

    monkeypatch.setenv(threads.THREADS_ENV, "1")
    before = torch.get_num_threads()
    with job_threads(4):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_worker_process_gets_its_share_and_passive_waits(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert threads.worker_thread_env(3) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "3"}
    assert threads.worker_thread_env(None) == {"OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # the user's choices win
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert threads.worker_thread_env(3) == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "7"}


def test_the_override_wins_and_a_bad_one_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(resources, "usable_cores", lambda root=resources.CGROUP: 4)
    monkeypatch.setenv(threads.THREADS_ENV, " 3 ")
    assert threads.threads_override() == 3
    assert threads.kernel_threads() == threads.kernel_threads(cap=1) == 3
    assert threads.pool_threads() == 3
    for bad in ("abc", "0", "-1", "1.5", "99999", "5"):  # 5: more than the 4 usable cores
        monkeypatch.setenv(threads.THREADS_ENV, bad)
        with pytest.raises(ConfigError, match=rf"{threads.THREADS_ENV}='{re.escape(bad)}' .* from 1 to 4"):
            threads.kernel_threads()
    monkeypatch.setenv(threads.THREADS_ENV, "")
    assert threads.threads_override() is None


def test_threads_follow_the_run_queue_now(monkeypatch):
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    monkeypatch.setattr(resources, "usable_cores", lambda root=resources.CGROUP: 32)
    others = {"now": 0}
    monkeypatch.setattr(resources, "others_running", lambda: others["now"])
    assert threads.kernel_threads() == 32 and threads.kernel_threads(cap=4) == 4  # quiet: every core
    others["now"] = 29
    assert threads.kernel_threads() == 3 and threads.kernel_threads(cap=2) == 2  # what the others leave
    others["now"] = 40
    assert threads.kernel_threads() == 1
    others["now"] = 31
    assert threads.pool_threads() == 1  # side by side only on the cores free now: a new load counts at once
    others["now"] = 0
    assert threads.pool_threads() == 32


def test_passive_wait_only_before_torch_and_never_over_the_users_choice():
    code = ("import os; from wildmerge.threads import prefer_passive_wait as p; "
            "{before}print(p(), os.environ['OMP_WAIT_POLICY'])")
    assert python_output(code.format(before=""), OMP_WAIT_POLICY=None) == "True PASSIVE"
    assert python_output(code.format(before="import torch; "), OMP_WAIT_POLICY=None) == "False PASSIVE"
    assert python_output(code.format(before=""), OMP_WAIT_POLICY="ACTIVE") == "True ACTIVE"
