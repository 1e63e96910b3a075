"""Children die with the process that started them (``wildmerge.lifeline``), on real processes: SIGKILL of the
parent takes the child and the child's own subprocess along, also when the thread that started the child has
ended; ``kill`` from the parent's side takes the child's subprocesses too."""

import os
import signal
import subprocess
import sys

import pytest
from process_tree import kill_marked, marked, marked_env, new_tag, wait_for, wait_gone
from wildmerge import lifeline

CHILD = """
import subprocess, time
from wildmerge.lifeline import hold
assert hold()
subprocess.Popen(["sleep", "600"])  # a grandchild that knows nothing of the lifeline
time.sleep(600)
"""

PARENT = f"""
import sys, threading, time
from wildmerge import lifeline
started = []
thread = threading.Thread(target=lambda: started.append(lifeline.popen([sys.executable, "-c", {CHILD!r}])))
thread.start()
thread.join()  # the thread that started the child has ended (a parent-death signal would fire here)
time.sleep(600)
"""


def test_sigkill_of_the_parent_ends_its_child_and_grandchild():
    tag = new_tag()
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=marked_env(tag))
    try:
        assert wait_for(lambda: len(marked(tag)) == 3, 120, parent), "parent, child and grandchild did not start"
        assert not wait_for(lambda: len(marked(tag)) < 3, 1.5), "the child died with the thread that started it"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert wait_gone(tag, 10) == {}
    finally:
        kill_marked(tag)
        parent.kill()
        parent.wait()


def test_kill_from_the_parent_ends_the_childs_subprocesses_too():
    tag = new_tag()
    child = lifeline.popen([sys.executable, "-c", CHILD], env=marked_env(tag))
    try:
        assert wait_for(lambda: len(marked(tag)) == 2, 120, child), "child and grandchild did not start"
        lifeline.kill(child)
        assert child.returncode == -signal.SIGKILL
        assert wait_gone(tag, 10) == {}
    finally:
        kill_marked(tag)


AUTOGROUP = "/proc/sys/kernel/sched_autogroup_enabled"


@pytest.mark.skipif(not os.path.exists(AUTOGROUP) or open(AUTOGROUP).read().strip() != "1",
                    reason="the kernel's autogroup scheduling is off here: niceness applies without it")
def test_a_niced_command_s_workers_stay_niced_in_their_own_session():
    """``nice -n 7 wildmerge ...``: a worker in its own session is its own autogroup, which the kernel schedules at
    nice 0 whatever the processes' niceness, unless the worker gives the group its niceness."""
    child = "from wildmerge.lifeline import hold\nassert hold()\nprint(open('/proc/self/autogroup').read())"
    parent = (f"import os, sys\nfrom wildmerge import lifeline\nos.nice(7)\n"
              f"proc = lifeline.popen([sys.executable, '-c', {child!r}])\nsys.exit(lifeline.reap(proc))\n")
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["nice", "7"], out.stdout


def test_a_process_started_by_hand_has_no_lifeline():
    code = "from wildmerge.lifeline import hold; print(hold())"
    env = {k: v for k, v in marked_env(new_tag()).items() if k != lifeline.ENV}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout == "False\n"
    env[lifeline.ENV] = "0"  # a descriptor that is not a pipe is not mistaken for one
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL).stdout == "False\n"


def test_a_child_that_ends_leaves_nothing_running_and_keeps_its_exit_code():
    tag = new_tag()
    code = ("import subprocess, sys\nfrom wildmerge.lifeline import hold\nassert hold()\n"
            "subprocess.Popen(['sleep', '600'])\nsys.exit(3)")
    try:
        assert lifeline.run([sys.executable, "-c", code], env=marked_env(tag)) == 3
        assert wait_gone(tag, 10) == {}
    finally:
        kill_marked(tag)
