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
