"""Two evaluations of one run at once split its jobs (each job runs once) and both see every result."""

import threading

from helpers import lm_family, write_plan  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.options import EvalOptions


def test_two_concurrent_evaluations_run_each_job_once(lm_family, tmp_path, monkeypatch):  # noqa: F811
    import wildmerge.eval.executors as executors

    real, ran, lock = executors.run_job, [], threading.Lock()

    def counting(job):
        with lock:
            ran.append(job["job_id"])
        return real(job)

    monkeypatch.setattr(executors, "run_job", counting)
    run = write_plan(tmp_path / "run", [
        {"model_id": "base", "kind": "base", "path": lm_family["base"]},
        {"model_id": "e0", "kind": "expert", "path": lm_family["experts"][0], "n": 1, "experts": ["e0"]},
    ])
    summaries = [None, None]

    def evaluate(i):
        summaries[i] = evaluate_run(run, lm_family["suite"], EvalOptions(executor="serial"))  # run_job is counted

    threads = [threading.Thread(target=evaluate, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert len(ran) == 2 and len(set(ran)) == 2, f"jobs doubled: {sorted(ran)}"
    for s in summaries:
        assert s is not None and s["ok"] == 2 and not s["failed"]


def test_two_eval_commands_on_one_run_split_its_jobs(tmp_path):
    """Two real ``wildmerge eval`` processes started together on one run folder of the quick demo family: each
    claims a job only as one of its workers takes it, so both score some jobs (each record names the command that
    claimed it), every job is scored once, and the scores are those of one command evaluating alone."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from wildmerge.eval.store import ResultStore
    from wildmerge.run import RunFolder

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WILDMERGE_DEMO_QUICK": "1",
           "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}

    def wildmerge(*argv, **kw):
        return subprocess.Popen([sys.executable, "-m", "wildmerge.cli", *map(str, argv)], env=env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)

    def finished(proc):
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out
        return out

    run, alone = tmp_path / "run", tmp_path / "alone"
    finished(wildmerge("sample", "--base", "demo", "--methods", "ta", "--sizes", "2", "--k", "1", "--no-evaluate",
                       "--out", run))
    eval_args = ("--suite", "demo", "--workers", "1")
    both = [wildmerge("eval", run, *eval_args), wildmerge("eval", run, *eval_args)]
    logs = [finished(p) for p in both]
    pids = {str(p.pid) for p in both}

    def records_of(run_dir):
        store = ResultStore(RunFolder(run_dir).eval_dir("demo"))
        return {r["job_id"]: r for r in (json.loads(store.result_path(p.stem).read_text())
                                         for p in (store.root / "results").glob("*.json"))}

    records = list(records_of(run).values())
    assert len(records) >= 4 and all(r["status"] == "ok" for r in records), records
    by = {r["job_id"]: r["command"].split()[1] for r in records}
    assert set(by.values()) == pids, (by, pids, logs)  # both commands scored some jobs
    assert all(r.get("attempts", 1) == 1 for r in records)  # none run twice

    import shutil

    shutil.copytree(run, alone, ignore=shutil.ignore_patterns("eval"))  # the same models, one command alone
    finished(wildmerge("eval", alone, *eval_args))
    again = records_of(alone)
    assert set(again) == set(by)
    for r in records:
        assert r["scores"] == again[r["job_id"]]["scores"], r["job_id"]
