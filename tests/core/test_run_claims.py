"""Run folders shared safely: two commands on one run split the merges, a killed holder leaves nothing stuck, and an
in-progress merge's temporary folder is never removed by the other command."""

import subprocess
import sys
import threading
import time

import pytest

from helpers import assert_same_models, leftovers, sample, write_pool
from wildmerge.locks import holder, split_work, try_claim
from wildmerge.run import merge_claim_file


def test_a_claim_excludes_others_until_released(tmp_path):
    lock = tmp_path / "claims" / "x.lock"
    first = try_claim(lock)
    assert first is not None and try_claim(lock) is None  # a second open file description is refused
    assert "pid" in holder(lock)
    first.release()
    again = try_claim(lock)
    assert again is not None
    again.release()


def test_a_killed_holder_leaves_no_stuck_claim(tmp_path):
    lock = tmp_path / "x.lock"
    code = ("import sys, time; from wildmerge.locks import try_claim; c = try_claim(sys.argv[1]); "
            "print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert try_claim(lock) is None
    finally:
        proc.kill()  # SIGKILL, as the out-of-memory killer would
        proc.wait()
    claim = try_claim(lock)
    assert claim is not None, "a claim outlived its killed holder"
    claim.release()


def test_split_work_waits_for_items_held_elsewhere_and_redoes_abandoned_ones(tmp_path):
    done, order = set(), []
    path = lambda i: tmp_path / f"{i}.lock"  # noqa: E731
    held = try_claim(path(1))

    def release_later():
        time.sleep(0.3)
        held.release()  # "the other process" dies without doing item 1

    threading.Thread(target=release_later).start()
    mine = split_work(range(3), path, lambda i: i in done, lambda i: (done.add(i), order.append(i)))
    assert mine == [0, 2, 1] and order == [0, 2, 1]  # item 1 last: put aside, then taken over
    assert split_work(range(3), path, lambda i: i in done, lambda i: order.append(i)) == []  # all done: nothing


@pytest.fixture(scope="module")
def pool(tiny_family, tmp_path_factory):
    return write_pool(tmp_path_factory.mktemp("claims_pool"), tiny_family)


@pytest.fixture(scope="module")
def reference(pool, tmp_path_factory):
    run = tmp_path_factory.mktemp("claims_ref") / "run"
    assert sample(pool, run) == 0
    return run


def _run_in_thread(pool, run):
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("rc", sample(pool, run)))
    thread.start()
    return thread, result


def test_two_samplers_split_the_merges(pool, reference, tmp_path, monkeypatch):
    """Two `wildmerge sample` on one run folder at once: every merge is done once, both succeed, same models."""
    import wildmerge.merging.runner as runner

    real, calls, lock = runner.merge_one, [], threading.Lock()

    def slow_merge(entry, *args):
        with lock:
            calls.append(entry.model_id)
        time.sleep(0.2)  # long enough for the two commands to overlap
        return real(entry, *args)

    monkeypatch.setattr(runner, "merge_one", slow_merge)
    run = tmp_path / "run"
    threads = [_run_in_thread(pool, run) for _ in range(2)]
    for thread, _ in threads:
        thread.join(300)
    assert [r.get("rc") for _, r in threads] == [0, 0]
    assert len(calls) == 12 and len(set(calls)) == 12, f"merges doubled or missing: {sorted(calls)}"
    assert leftovers(run) == []
    assert_same_models(run, reference)


def test_a_merge_in_progress_elsewhere_is_not_deleted_but_waited_for(pool, reference, tmp_path, capsys):
    run = tmp_path / "run"
    model_dir = run / "models" / "ta__n03_full"
    in_progress = model_dir.parent / ".ta__n03_full.tmp-other"
    in_progress.mkdir(parents=True)
    (in_progress / "model.safetensors").write_bytes(b"being written")
    claim = try_claim(merge_claim_file(model_dir))  # "another process" is writing this merge
    thread, result = _run_in_thread(pool, run)
    deadline = time.time() + 240
    while time.time() < deadline and len(list(run.glob("models/*/merge_info.json"))) < 11:
        time.sleep(0.1)
    time.sleep(0.5)
    assert in_progress.exists(), "another command's in-progress merge was deleted"
    assert not model_dir.exists() and thread.is_alive()  # waiting for the holder
    claim.release()  # the holder dies without finishing: the waiting command merges it
    thread.join(240)
    assert result.get("rc") == 0
    printed = capsys.readouterr()
    assert "claimed by pid" in printed.out + printed.err
    assert leftovers(run) == []
    assert_same_models(run, reference)


def test_nested_temporary_folder_of_a_running_layerwise_merge_is_kept(tmp_path):
    """CoM / RegMean write atomically inside the runner's temporary folder: `..ID.tmp-a.tmp-b` belongs to ID."""
    from wildmerge.merging.runner import clean_leftovers

    models = tmp_path / "run" / "models"
    nested, outer = models / "..com__n12_full.tmp-a.tmp-b", models / ".com__n12_full.tmp-a"
    for d in (nested, outer):
        d.mkdir(parents=True)
    claim = try_claim(merge_claim_file(models / "com__n12_full"))
    assert clean_leftovers(models) == 0 and nested.exists() and outer.exists()
    claim.release()
    assert clean_leftovers(models) == 2 and not nested.exists() and not outer.exists()
