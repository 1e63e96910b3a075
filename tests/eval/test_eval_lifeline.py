"""No process left behind: `wildmerge eval` killed with SIGKILL while a worker scores a model takes the worker and
the worker's own subprocess along within seconds (long-lived workers and a fresh process per job), and the rerun
finishes with the scores of an uninterrupted evaluation. A worker count the machine cannot hold is refused before
any worker starts. Real processes, real lm-eval, tiny models."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import lm_family, write_plan  # noqa: F401  (fixture)
from process_tree import children, cmdline, kill_marked, marked_env, new_tag, wait_for, wait_gone
from wildmerge.cli import main as cli
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.local import WORKER_MEMORY, measure_worker_memory
from wildmerge.eval.store import OK, ResultStore

BLOCK_TASK = """task: mini_block
dataset_path: json
dataset_kwargs: {data_files: {test: DATA}}
test_split: test
process_docs: !function block.process_docs
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: answer
metric_list: [{metric: acc}]
"""
BLOCK = """import subprocess, time
from pathlib import Path

FLAG = Path(__file__).with_name("block")


def process_docs(docs):
    if FLAG.exists():  # the test is about to kill the command: the worker starts a subprocess of its own and waits
        subprocess.Popen(["sleep", "3600"])
        while FLAG.exists():
            time.sleep(0.1)
    return docs
"""


@pytest.fixture()
def blocking(lm_family, tmp_path):  # noqa: F811
    """A suite whose task blocks its worker while ``flag`` exists; a run of three models."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "block.py").write_text(BLOCK)
    (tasks / "mini_block.yaml").write_text(BLOCK_TASK.replace("DATA", str(Path(lm_family["tasks"]) / "mini_mc.jsonl")))
    suite = tmp_path / "mini.yml"
    suite.write_text(yaml.safe_dump({
        "name": "mini", "include_path": str(tasks), "tasks": [{"task": "mini_block", "num_fewshot": 0,
                                                                "metric": "acc,none"}],
        "settings": {"dtype": "float32", "batch_size": 4, "device": "cpu", "include_defaults": False}}))
    entries = [{"model_id": "base", "kind": "base", "path": lm_family["base"]}] + [
        {"model_id": f"e{i}", "kind": "expert", "path": p, "n": 1, "experts": [f"e{i}"]}
        for i, p in enumerate(lm_family["experts"])]
    return {"suite": str(suite), "flag": tasks / "block", "run": write_plan(tmp_path / "run", entries),
            "reference": write_plan(tmp_path / "reference", entries)}


def children_of_workers(pid: int, worker: str):
    return [c for w in children(pid) if worker in cmdline(w) for c in children(w)]


@pytest.mark.parametrize("executor, worker", [("local", "wildmerge.eval.serve"), ("serial", "wildmerge.eval.worker")])
def test_sigkill_of_eval_ends_its_workers_and_the_rerun_finishes(blocking, executor, worker):
    run, flag = blocking["run"], blocking["flag"]
    flag.touch()
    tag = new_tag()
    cmd = [sys.executable, "-m", "wildmerge.cli", "eval", str(run), "--suite", blocking["suite"], "--no-report",
           "--executor", executor, *(["--workers", "1"] if executor == "local" else [])]
    main = subprocess.Popen(cmd, env=marked_env(tag), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def sleeping():  # the worker's own subprocess: the worker is inside the job
            return [p for p in children_of_workers(main.pid, worker) if cmdline(p).startswith("sleep")]

        assert wait_for(sleeping, 300, main), "the worker did not reach the job"
        os.kill(main.pid, signal.SIGKILL)
        main.wait()
        assert wait_gone(tag, 10) == {}, "processes of the killed command are still running"
    finally:
        kill_marked(tag)
        main.kill()
        main.wait()
        flag.unlink()
    store = ResultStore(run / "eval" / "mini")
    assert not [j for j in store.index().jobs if store.load(j)["status"] == OK]  # killed inside the first job
    if executor == "serial":
        return  # the rerun is the same for both executors
    again = evaluate_run(run, blocking["suite"], EvalOptions(executor="local", workers=1))
    reference = evaluate_run(blocking["reference"], blocking["suite"], EvalOptions(executor="local", workers=1))
    assert again["ok"] == reference["ok"] == 3 and again["index"] == reference["index"]
    ours, theirs = ResultStore(again["store"]), ResultStore(reference["store"])
    assert {j: ours.load(j)["scores"] for j in again["index"].values()} == \
           {j: theirs.load(j)["scores"] for j in reference["index"].values()}


def test_more_workers_than_the_machine_holds_are_refused_before_any_starts(blocking, capsys):
    before = children(os.getpid())
    assert cli(["eval", str(blocking["run"]), "--suite", blocking["suite"], "--workers", "1000"]) != 0
    message = capsys.readouterr().err
    for part in ("--workers 1000", "evaluation worker(s)", "usable core", "free memory",
                 f"{WORKER_MEMORY >> 20} MiB for Python with torch and lm-eval", "use --workers"):
        assert part in message, (part, message)
    assert children(os.getpid()) == before and not (blocking["run"] / "eval").exists()


def test_the_worker_memory_constant_covers_a_real_worker():
    """WORKER_MEMORY was measured; a worker that has outgrown it (newer torch or lm-eval) fails here: re-measure."""
    measured = measure_worker_memory()
    assert WORKER_MEMORY / 2 < measured <= WORKER_MEMORY, f"a worker now holds {measured >> 20} MiB: update WORKER_MEMORY"
