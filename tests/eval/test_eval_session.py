"""`wildmerge sample --evaluate` scores beside its merges (eval/session.py): an evaluation result is written while
a merge is still to come; the job ids, scores and report CSVs are those of the merges first, then `wildmerge eval`;
`--keep-models none` still scores each merge before its weights go; a run SIGKILLed while a worker scores and a
merge runs leaves no process behind and its rerun finishes with the same results. Real merges, real lm-eval,
tiny models."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import lm_family, write_pool  # noqa: F401  (fixture)
from process_tree import children, cmdline, kill_marked, marked_env, new_tag, wait_for, wait_gone
from wildmerge.cli import main
from wildmerge.eval.store import OK, ResultStore

SAMPLE = ["--sizes", "1", "--k", "1", "--methods", "ta,ties", "--seed", "7"]  # two merges: ta and ties of both
MERGES = 2


def _sample(pool, run, suite, *extra) -> int:
    return main(["sample", "--base", pool, "--out", str(run), *SAMPLE, "--evaluate", "--suite", suite, *extra])


def _merges_then_eval(pool, run, suite) -> None:
    """Today's order for the other executors: every merge, then the evaluation."""
    assert main(["sample", "--base", pool, "--out", str(run), *SAMPLE, "--no-evaluate"]) == 0
    assert main(["eval", str(run), "--suite", suite]) == 0


def _scores(run, suite_name="mini"):
    """model id -> (job id, scores) of a run's evaluation."""
    store = ResultStore(Path(run) / "eval" / suite_name)
    out = {}
    for model, job in store.index().models.items():
        record = store.load(job)
        assert record["status"] == OK, (model, record.get("error"))
        out[model] = (job, record["scores"])
    return out


def _worker_nices():
    """The CPU priority of each evaluation worker this process started."""
    return [os.getpriority(os.PRIO_PROCESS, p) for p in children(os.getpid()) if "wildmerge.eval.serve" in cmdline(p)]


def _reports(run):
    """The report's CSVs, the run's own folder written as RUN (a report names where it was made)."""
    return {p.relative_to(run).as_posix(): p.read_text().replace(str(Path(run).resolve()), "RUN")
            for p in sorted(Path(run, "report").rglob("*.csv"))}


@pytest.fixture(scope="module")
def pool(lm_family, tmp_path_factory):  # noqa: F811
    return write_pool(tmp_path_factory.mktemp("pool"), {"base": lm_family["base"], "experts": lm_family["experts"]})


@pytest.fixture(scope="module")
def reference(pool, lm_family, tmp_path_factory):  # noqa: F811
    run = tmp_path_factory.mktemp("reference") / "run"
    _merges_then_eval(pool, run, lm_family["suite"])
    return run


def test_a_result_is_written_before_the_last_merge_and_the_run_equals_merges_then_eval(
        pool, reference, lm_family, tmp_path, monkeypatch):  # noqa: F811
    """The last merge waits for the first evaluation result: if the evaluation waited for the merges, it never
    comes (the wait gives up and the run fails). The workers that score beside the merges yield the cores to them
    (nice 19); those that score after them run at this process's priority."""
    import mergekit.merge

    from wildmerge.eval.local import MERGES_FIRST_NICE, close_idle_workers

    close_idle_workers()  # workers of earlier tests
    run, real, calls, nices = tmp_path / "run", mergekit.merge.run_merge, [], []
    results = run / "eval" / "mini" / "results"

    def last_waits(config, out_path, options, config_source=None):
        calls.append(out_path)
        if len(calls) == MERGES:
            deadline = time.time() + 300
            while not list(results.glob("*.json")):
                assert time.time() < deadline, "no evaluation result while a merge was still to come"
                time.sleep(0.05)
            nices.extend(_worker_nices())
        real(config, out_path, options, config_source=config_source)
    monkeypatch.setattr(mergekit.merge, "run_merge", last_waits)
    assert _sample(pool, run, lm_family["suite"]) == 0
    assert len(calls) == MERGES
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert nices and set(nices) == {max(ours, MERGES_FIRST_NICE)}
    assert set(_worker_nices()) <= {ours}  # those beside the merges were retired
    first_result = min(p.stat().st_mtime_ns for p in results.glob("*.json"))
    last_merge = max(p.stat().st_mtime_ns for p in run.glob("models/*/merge_info.json"))
    assert first_result < last_merge
    assert _scores(run) == _scores(reference) and len(_scores(run)) == 3 + MERGES  # same job ids, same scores
    assert _reports(run) == _reports(reference) and _reports(run)
    assert main(["sample", "--base", pool, "--out", str(run), *SAMPLE, "--evaluate", "--suite",
                 lm_family["suite"]]) == 0  # a rerun: nothing merged or scored again
    assert _scores(run) == _scores(reference)


def test_keep_models_none_scores_each_merge_before_its_weights_go(
        pool, reference, lm_family, tmp_path, capsys):  # noqa: F811
    run = tmp_path / "run"
    assert _sample(pool, run, lm_family["suite"], "--keep-models", "none") == 0
    merged = [d for d in (run / "models").iterdir() if (d / "merge_info.json").is_file()]
    assert len(merged) == MERGES and not [f for d in merged for f in d.glob("*.safetensors")]
    assert _scores(run) == _scores(reference)
    capsys.readouterr()
    assert _sample(pool, run, lm_family["suite"], "--keep-models", "none") == 0  # pruned merges keep their scores
    out = capsys.readouterr().out
    assert re.findall(r"(\d+) to run", out) and set(re.findall(r"(\d+) to run", out)) == {"0"}, out
    assert _scores(run) == _scores(reference)


HOLD_TASK = """task: mini_hold
dataset_path: json
dataset_kwargs: {data_files: {test: DATA}}
test_split: test
process_docs: !function hold.process_docs
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: answer
metric_list: [{metric: acc}]
"""
HOLD = """import time
from pathlib import Path

HERE = Path(__file__).parent


def process_docs(docs):
    (HERE / "scoring").touch()  # a worker is inside a job
    while (HERE / "hold").exists():
        time.sleep(0.05)
    return docs
"""
# `wildmerge sample` whose first merge, once written, waits while a flag file exists
SAMPLE_HELD = """import sys, time
from pathlib import Path
import mergekit.merge
from wildmerge.cli import main

real, flag, entered = mergekit.merge.run_merge, Path(sys.argv[1]), Path(sys.argv[2])


def held(config, out_path, options, config_source=None):
    real(config, out_path, options, config_source=config_source)
    entered.touch()
    while flag.exists():
        time.sleep(0.05)


mergekit.merge.run_merge = held
sys.exit(main(sys.argv[3:]))
"""


def test_sigkill_while_scoring_beside_a_merge_leaves_nothing_and_the_rerun_finishes(
        pool, lm_family, tmp_path):  # noqa: F811
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "hold.py").write_text(HOLD)
    (tasks / "mini_hold.yaml").write_text(HOLD_TASK.replace("DATA", str(Path(lm_family["tasks"]) / "mini_mc.jsonl")))
    suite = tmp_path / "hold.yml"
    suite.write_text(yaml.safe_dump({
        "name": "mini", "include_path": str(tasks), "tasks": [{"task": "mini_hold", "num_fewshot": 0,
                                                                "metric": "acc,none"}],
        "settings": {"dtype": "float32", "batch_size": 4, "device": "cpu", "include_defaults": False}}))
    run, merge_flag, merged = tmp_path / "run", tmp_path / "merge_hold", tmp_path / "merged"
    (tasks / "hold").touch(), merge_flag.touch()
    tag = new_tag()
    cmd = [sys.executable, "-c", SAMPLE_HELD, str(merge_flag), str(merged), "sample", "--base", pool, "--out", str(run),
           *SAMPLE, "--evaluate", "--suite", str(suite)]
    proc = subprocess.Popen(cmd, env=marked_env(tag, TQDM_DISABLE="1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:  # a worker scores the base or an expert while the main process is inside its first merge
        assert wait_for(lambda: (tasks / "scoring").exists() and merged.exists(), 300, proc), \
            "the evaluation and the merges did not run side by side"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert wait_gone(tag, 10) == {}, "processes of the killed run are still running"
    finally:
        kill_marked(tag)
        proc.kill()
        proc.wait()
        (tasks / "hold").unlink(), merge_flag.unlink()
    assert not list((run / "eval" / "mini" / "results").glob("*.json"))  # killed inside the first job
    assert len(list(run.glob("models/*/merge_info.json"))) < MERGES
    assert _sample(pool, run, str(suite)) == 0
    reference = tmp_path / "reference"
    _merges_then_eval(pool, reference, str(suite))
    assert _scores(run) == _scores(reference) and len(_scores(run)) == 3 + MERGES
    assert not [p.name for p in (run / "models").iterdir() if ".tmp-" in p.name]
