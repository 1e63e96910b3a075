"""No process left behind: `wildmerge sample --merge-workers 2` killed with SIGKILL mid-merge takes its merge helper
along within seconds, and the rerun finishes with the models of an uninterrupted run (real processes)."""

import os
import signal
import subprocess
import sys

import pytest

from helpers import ARGS, assert_same_models, leftovers, sample, write_pool
from process_tree import children, cmdline, kill_marked, marked, marked_env, new_tag, wait_for, wait_gone
from wildmerge.resources import usable_cores


@pytest.mark.skipif(usable_cores() < 2, reason="two merge workers need two usable cores")
def test_sigkill_of_sample_ends_its_merge_helpers_and_the_rerun_finishes(tiny_family, tmp_path):
    pool = write_pool(tmp_path, tiny_family)
    reference, run = tmp_path / "reference", tmp_path / "run"
    assert sample(pool, reference) == 0
    tag = new_tag()
    cmd = [sys.executable, "-m", "wildmerge.cli", "sample", "--base", pool, "--out", str(run), *ARGS,
           "--merge-workers", "2"]
    main = subprocess.Popen(cmd, env=marked_env(tag, HF_HUB_OFFLINE="1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        def helpers():
            return [p for p in children(main.pid) if "spawn_main" in cmdline(p)]

        assert wait_for(helpers, 300, main), "the merge helper did not start"
        assert wait_for(lambda: list(run.glob("models/*/merge_info.json")), 300, main), "no merge finished"
        assert helpers(), "the helper ended before the kill"
        done = len(list(run.glob("models/*/merge_info.json")))
        os.kill(main.pid, signal.SIGKILL)
        main.wait()
        assert main.returncode == -signal.SIGKILL, "the run finished before it could be killed"
        assert wait_gone(tag, 10) == {}, "processes of the killed command are still running"
    finally:
        kill_marked(tag)
        main.kill()
        main.wait()
    # an orphaned helper would have gone on merging the rest of the plan (up to 12 merges); at most the merges
    # that were finishing at the kill may have landed
    assert len(list(run.glob("models/*/merge_info.json"))) <= done + 2 < len(list(reference.glob("models/*")))
    assert sample(pool, run, "--merge-workers", "2") == 0
    assert leftovers(run) == [] and not marked(tag)
    assert_same_models(run, reference)


@pytest.mark.skipif(usable_cores() < 2, reason="two merge workers need two usable cores")
def test_a_merge_helper_killed_while_it_starts_costs_no_merge(tiny_family, tmp_path):
    """SIGKILL the helper as soon as it exists (before its imports are done): the command itself merges the whole
    plan, exits 0, and its models are those of a run with one worker."""
    pool = write_pool(tmp_path, tiny_family)
    reference, run = tmp_path / "reference", tmp_path / "run"
    assert sample(pool, reference) == 0
    tag = new_tag()
    cmd = [sys.executable, "-m", "wildmerge.cli", "sample", "--base", pool, "--out", str(run), *ARGS,
           "--merge-workers", "2"]
    main = subprocess.Popen(cmd, env=marked_env(tag, HF_HUB_OFFLINE="1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        def helpers():
            return [p for p in children(main.pid) if "spawn_main" in cmdline(p)]

        assert wait_for(helpers, 300, main), "the merge helper did not start"
        for pid in helpers():
            os.kill(pid, signal.SIGKILL)
        _, err = main.communicate(timeout=600)
    finally:
        kill_marked(tag)
        main.kill()
        main.wait()
    assert main.returncode == 0, err
    assert not list(run.glob("models/*/merge_info.json")) or leftovers(run) == []
    assert_same_models(run, reference)
    assert sample(pool, run, "--merge-workers", "2") == 0  # and the rerun has nothing to do
