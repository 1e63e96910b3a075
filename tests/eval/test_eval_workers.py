"""Long-lived workers through the real lm-eval on tiny models: the same numbers as a fresh process per job, a
hanging model times out and a killed worker fails only its own job (both replaced), a killed job is redone once
on the next run and reported as failed when it is killed again."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from helpers import lm_family, write_plan  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_models, evaluate_run
from wildmerge.eval.jobs import make_job
from wildmerge.eval.local import close_idle_workers, default_workers, run_local
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import FAILED, OK, ResultStore, read_result
from wildmerge.eval.suites import load_suite
from wildmerge.eval.worker import lost_record


@pytest.fixture(scope="module")
def both_modes(lm_family, tmp_path_factory):  # noqa: F811
    models = [lm_family["base"], *lm_family["experts"]]
    root = tmp_path_factory.mktemp("modes")
    per_process = evaluate_models(models, lm_family["suite"], root / "process", EvalOptions(executor="serial"))
    long_lived = evaluate_models(models, lm_family["suite"], root / "long", EvalOptions(workers=1))
    return per_process, long_lived


def test_long_lived_worker_scores_equal_per_process_mode(both_modes):
    per_process, long_lived = both_modes
    assert per_process["ok"] == long_lived["ok"] == 3 and per_process["index"] == long_lived["index"]
    a, b = ResultStore(per_process["store"]), ResultStore(long_lived["store"])
    for job_id in per_process["index"].values():
        ra, rb = a.load(job_id), b.load(job_id)
        assert (ra["worker"], rb["worker"]) == ("process", "long-lived")
        assert ra["scores"] == rb["scores"]
        for batch, out in ra["lm_eval"].items():
            assert out["results"] == rb["lm_eval"][batch]["results"], batch
    # the three models differ, so equal scores are not an accident of identical models
    assert len({tuple(a.load(j)["scores"].values()) for j in per_process["index"].values()}) > 1


def test_results_record_cost_and_device(both_modes):
    for summary in both_modes:
        store = ResultStore(summary["store"])
        for job_id in summary["index"].values():
            record = store.load(job_id)
            assert record["device"] == "cpu" and 0 < record["seconds"] < 600 and record["attempts"] == 1


HANG_TASK = """task: mini_hang
dataset_path: json
dataset_kwargs: {data_files: {test: DATA}}
test_split: test
process_docs: !function hang.process_docs
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: answer
metric_list: [{metric: acc}]
"""


def _hanging_job(lm_family, root: Path, name: str):  # noqa: F811
    """A job that blocks its worker: its lm-eval task's document processing never returns."""
    folder = root / f"{name}_tasks"
    folder.mkdir()
    (folder / "hang.py").write_text("import time\n\ndef process_docs(docs):\n    time.sleep(3600)\n")
    data = Path(lm_family["tasks"]) / "mini_mc.jsonl"
    (folder / "mini_hang.yaml").write_text(HANG_TASK.replace("DATA", str(data)))
    job = _job(lm_family, root, Path(lm_family["base"]), name)
    job.update(include_path=str(folder), tasks=[{"task": "mini_hang", "num_fewshot": 0, "metric": "acc,none",
                                                 "label": None}], job_id=f"mini-{name}")
    job["result_path"], job["log_path"] = str(root / "results" / f"mini-{name}.json"), str(
        root / "logs" / f"mini-{name}.log")
    return job


def _job(lm_family, root: Path, model: Path, fingerprint: str):  # noqa: F811
    suite = load_suite(lm_family["suite"])
    job = make_job(str(model), fingerprint, suite, suite.resolved_include_path(), False).to_dict()
    job["result_path"], job["log_path"] = str(root / "results" / f"{job['job_id']}.json"), str(
        root / "logs" / f"{job['job_id']}.log")
    return job


def _serve_pids():
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if b"wildmerge.eval.serve" in cmd and int(stat[1]) == os.getpid():  # our own children only
            pids.append(int(proc.name))
    return pids


def test_killed_or_hanging_worker_fails_only_its_job_and_is_replaced(lm_family, tmp_path):  # noqa: F811
    """Killed during the first job, hung on the second: both fail with their cause, the third job is scored."""
    killed, hung = _hanging_job(lm_family, tmp_path, "killed"), _hanging_job(lm_family, tmp_path, "hung")
    good = _job(lm_family, tmp_path, Path(lm_family["base"]), "good")
    out = {}
    thread = threading.Thread(target=lambda: out.update(records=run_local([killed, hung, good],
                                                                          EvalOptions(workers=1, job_timeout=60))))
    thread.start()
    deadline = time.time() + 300
    while not (_serve_pids() and Path(killed["log_path"]).exists()) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    for pid in _serve_pids():
        os.kill(pid, signal.SIGKILL)  # as the out-of-memory killer would
    thread.join(timeout=600)
    records = {r["job_id"]: r for r in out["records"]}
    first = records[killed["job_id"]]
    assert first["status"] == FAILED and first["killed"] == signal.SIGKILL and first["attempts"] == 1
    assert "SIGKILL" in first["error"] and "redoes this job once" in first["error"]
    second = records[hung["job_id"]]
    assert second["status"] == FAILED and "timed out after 60 s" in second["error"] and second["killed"] is None
    assert records[good["job_id"]]["status"] == OK


def test_a_worker_killed_while_it_starts_costs_no_score(lm_family, tmp_path):  # noqa: F811
    """SIGKILL as soon as the worker exists (long before it is ready): its job is recorded as killed, not failed,
    and the same command run again scores it."""
    close_idle_workers()  # a parked worker would take the job without starting
    run = write_plan(tmp_path / "run", [{"model_id": "base", "kind": "base", "path": lm_family["base"]}])
    out = {}
    thread = threading.Thread(target=lambda: out.update(first=evaluate_run(run, lm_family["suite"],
                                                                           EvalOptions(workers=1))))
    thread.start()
    deadline = time.time() + 300
    while not _serve_pids() and time.time() < deadline:
        time.sleep(0.01)
    for pid in _serve_pids():
        os.kill(pid, signal.SIGKILL)
    thread.join(timeout=600)
    first = out["first"]
    store = ResultStore(first["store"])
    record = store.load(first["index"]["base"])
    assert record["status"] == FAILED and record["killed"] == signal.SIGKILL and record["attempts"] == 1
    assert "while it started" in record["error"] and "redoes this job once" in record["error"]
    again = evaluate_run(run, lm_family["suite"], EvalOptions(workers=1))  # the same command, no --retry-failed
    assert again["ran"] == 1 and again["failed"] == {} and again["ok"] == 1
    assert store.load(first["index"]["base"])["attempts"] == 2


def test_killed_job_is_redone_once_then_reported(lm_family, tmp_path):  # noqa: F811
    run = write_plan(tmp_path / "run", [{"model_id": "base", "kind": "base", "path": lm_family["base"]}])
    first = evaluate_run(run, lm_family["suite"])
    job_id = first["index"]["base"]
    store = ResultStore(first["store"])
    job = {**store.index().jobs[job_id], "tasks": [], "result_path": str(store.result_path(job_id))}
    lost_record(job, time.time(), "", killed=signal.SIGKILL)  # what the executor writes for a killed worker
    again = evaluate_run(run, lm_family["suite"])
    assert again["ran"] == 1 and again["failed"] == {} and store.load(job_id)["status"] == OK
    assert store.load(job_id)["attempts"] == 2
    lost_record({**job, "attempt": 2}, time.time(), "", killed=signal.SIGKILL)  # killed a second time
    third = evaluate_run(run, lm_family["suite"])
    assert third["ran"] == 0 and "killed by SIGKILL" in third["failed"]["base"]
    assert "2 times: reported as failed" in third["failed"]["base"]
    assert read_result(store.result_path(job_id))["status"] == FAILED


def test_default_worker_count_on_a_cpu():
    assert [default_workers(c) for c in (1, 2, 3, 4, 8, 64)] == [1, 2, 3, 4, 4, 4]


def test_workers_are_reused_across_calls(lm_family, tmp_path):  # noqa: F811
    """``--keep-models none`` evaluates one model per call: the second call must not start another worker."""
    first = _job(lm_family, tmp_path, Path(lm_family["base"]), "one")
    second = _job(lm_family, tmp_path, Path(lm_family["experts"][0]), "two")
    run_local([first], EvalOptions(workers=1))
    before = set(_serve_pids())
    assert run_local([second], EvalOptions(workers=1))[0]["status"] == OK
    assert before and set(_serve_pids()) == before


def test_a_parked_worker_no_call_can_take_is_closed(lm_family, tmp_path, monkeypatch):  # noqa: F811
    """A variable set between two calls (as torch sets TORCHINDUCTOR_CACHE_DIR when it loads) makes the first call's
    worker one that no later call takes: the second call closes it instead of leaving it parked until exit."""
    first = _job(lm_family, tmp_path, Path(lm_family["base"]), "one")
    second = _job(lm_family, tmp_path, Path(lm_family["experts"][0]), "two")
    run_local([first], EvalOptions(workers=1))
    before = set(_serve_pids())
    monkeypatch.setenv("WILDMERGE_TEST_SET_BY_A_LIBRARY", "1")
    assert run_local([second], EvalOptions(workers=1))[0]["status"] == OK
    after = set(_serve_pids())
    assert before and after and not before & after  # the first worker is gone, one worker runs
    assert len(after) == 1
