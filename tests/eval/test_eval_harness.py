"""The evaluation harness through the real lm-eval on tiny models: dedupe, kill + resume, failure isolation,
--retry-failed, corrupt results, and scores equal to a bare ``simple_evaluate``."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import lm_family, write_plan  # noqa: F401  (fixture)
from wildmerge.eval.evaluate import evaluate_run
from wildmerge.eval.options import EvalOptions
from wildmerge.eval.store import ResultStore, read_result


def _entry(model_id, kind, path, **kw):
    return {"model_id": model_id, "kind": kind, "path": str(path), **kw}


def _crash_model(path, like):
    """A folder that passes the file checks but is not a loadable model: the worker must fail, not the run."""
    path.mkdir()
    for f in Path(like).iterdir():
        if f.suffix != ".safetensors":
            (path / f.name).write_bytes(f.read_bytes())
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    return path


@pytest.fixture(scope="module")
def killed_then_resumed(lm_family, tmp_path_factory):  # noqa: F811
    """Start `wildmerge eval`, kill it once the first real job has finished, then rerun to completion."""
    root = tmp_path_factory.mktemp("run")
    crash = _crash_model(root / "crash_model", lm_family["base"])
    run = write_plan(root / "run", [
        _entry("base", "base", lm_family["base"]),
        _entry("e0", "expert", lm_family["experts"][0], n=1, experts=["e0"]),
        _entry("ta_n2_s0", "merge", lm_family["copy"], method="ta", n=2, subset_id="s0", hparams={"lambda": 1.0}),
        _entry("ties_n2_s0", "merge", root / "never_merged", method="ties", n=2, subset_id="s0"),
        _entry("iso_c_n2_s0", "merge", crash, method="iso_c", n=2, subset_id="s0"),
    ])
    results = run / "eval" / "mini" / "results"
    # one worker, so that jobs finish one at a time and a fast look sees the first before the next one ends (two
    # workers finished all three between two looks 0.2 s apart on a slow host)
    cmd = [sys.executable, "-m", "wildmerge.cli", "eval", str(run), "--suite", lm_family["suite"], "--no-report",
           "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            done = [p for p in results.glob("mini-*.json") if "invalid" not in p.name] if results.is_dir() else []
            if done or proc.poll() is not None:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, mid-run
        proc.wait()
    # a job may finish between the last look and the kill (jobs take well under a second now): count after it
    done = [p for p in results.glob("mini-*.json") if "invalid" not in p.name] if results.is_dir() else []
    assert 1 <= len(done) <= 2, "the first run should have been killed with a real job still to run"
    first = {p.name: p.stat().st_mtime_ns for p in done}
    summary = evaluate_run(run, lm_family["suite"])
    return {"run": run, "first": first, "summary": summary, "store": ResultStore(run / "eval" / "mini")}


def test_kill_then_rerun_finishes_without_redoing(killed_then_resumed):
    k = killed_then_resumed
    # 5 models -> 3 real jobs (e0 and its copy are one) + the missing model; what was done before the kill is kept
    done = len(k["first"])
    assert k["summary"]["jobs"] == 3 and k["summary"]["skipped"] == done and k["summary"]["ran"] == 3 - done
    for name, mtime in k["first"].items():
        assert (k["store"].root / "results" / name).stat().st_mtime_ns == mtime
    assert not list((k["store"].root / "results").glob(".*tmp-*"))


def test_identical_models_are_evaluated_once(killed_then_resumed):
    index = killed_then_resumed["store"].index().models
    assert index["e0"] == index["ta_n2_s0"]
    assert len({index["base"], index["e0"], index["iso_c_n2_s0"], index["ties_n2_s0"]}) == 4
    assert len(list((killed_then_resumed["store"].root / "results").glob("*.json"))) == 4


def test_results_record_scores_and_provenance(killed_then_resumed):
    store, index = killed_then_resumed["store"], killed_then_resumed["store"].index().models
    for model in ("base", "e0"):
        r = store.load(index[model])
        assert r["status"] == "ok", r.get("error")
        assert set(r["scores"]) == {"mc", "gen"} and all(0 <= v <= 1 for v in r["scores"].values())
        assert r["fingerprint"].startswith("sha256:") and r["versions"]["lm_eval"] == "0.4.13"
        assert r["settings"]["dtype"] == "float32"
        # both 0-shot tasks ran in one simple_evaluate call; its output is kept whole
        assert r["lm_eval"]["mini_mc,mini_gen"]["n-samples"]["mini_mc"]["effective"] == 6
        assert r["lm_eval"]["mini_mc,mini_gen"]["results"]["mini_gen"]["exact_match,strict"] == r["scores"]["gen"]


def test_failing_jobs_are_recorded_and_isolated(killed_then_resumed):
    store, index = killed_then_resumed["store"], killed_then_resumed["store"].index().models
    missing = store.load(index["ties_n2_s0"])
    assert missing["status"] == "failed" and "does not exist" in missing["error"]
    crash = store.load(index["iso_c_n2_s0"])
    assert crash["status"] == "failed" and crash["error"]
    assert set(killed_then_resumed["summary"]["failed"]) == {"ties_n2_s0", "iso_c_n2_s0"}


def test_rerun_after_success_does_nothing_and_retry_failed_reruns_only_failures(killed_then_resumed, lm_family):  # noqa: F811
    k = killed_then_resumed
    before = {p.name: p.stat().st_mtime_ns for p in (k["store"].root / "results").glob("*.json")}
    assert evaluate_run(k["run"], lm_family["suite"])["ran"] == 0
    again = evaluate_run(k["run"], lm_family["suite"], EvalOptions(retry_failed=True))
    assert again["ran"] == 1  # the crashing model; the missing one is re-checked, not run
    after = {p.name: p.stat().st_mtime_ns for p in (k["store"].root / "results").glob("*.json")}
    index = k["store"].index().models
    for model in ("base", "e0"):
        assert after[f"{index[model]}.json"] == before[f"{index[model]}.json"]
    assert after[f"{index['iso_c_n2_s0']}.json"] != before[f"{index['iso_c_n2_s0']}.json"]


def test_corrupt_result_is_detected_and_recomputed(killed_then_resumed, lm_family):  # noqa: F811
    k = killed_then_resumed
    path = k["store"].result_path(k["store"].index().models["e0"])
    good = json.loads(path.read_text())
    tampered = dict(good, scores={"mc": 1.0, "gen": 1.0})
    path.write_text(json.dumps(tampered))
    assert read_result(path)["status"] == "corrupt"
    path.write_text(path.read_text()[:100])
    assert read_result(path)["status"] == "corrupt"
    summary = evaluate_run(k["run"], lm_family["suite"])
    assert summary["ran"] == 1
    redone = read_result(path)
    assert redone["status"] == "ok" and redone["scores"] == good["scores"]


def test_scores_equal_a_bare_simple_evaluate(killed_then_resumed, lm_family):  # noqa: F811
    import lm_eval
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(lm_family["tasks"]), include_defaults=False)
    bare = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": lm_family["base"], "dtype": "float32"},
                                   device="cpu", tasks=["mini_mc", "mini_gen"], task_manager=tm, num_fewshot=0,
                                   batch_size=4, bootstrap_iters=0, log_samples=False)
    k = killed_then_resumed
    ours = k["store"].load(k["store"].index().models["base"])["scores"]
    assert ours["mc"] == pytest.approx(bare["results"]["mini_mc"]["acc,none"])
    assert ours["gen"] == pytest.approx(bare["results"]["mini_gen"]["exact_match,strict"])


def test_partial_evaluation_and_pruned_weights_keep_their_scores(lm_family, tmp_path):  # noqa: F811
    """``model_ids`` scores one model without dropping the others from the index; a merge whose weights were
    deleted after scoring (``--keep-models none``) keeps its score instead of turning into a failure."""
    import shutil

    merged = tmp_path / "merged"
    shutil.copytree(lm_family["experts"][1], merged)
    run = write_plan(tmp_path / "run", [_entry("base", "base", lm_family["base"]),
                                        _entry("m", "merge", merged, method="ta", n=2, subset_id="s0")])
    first = evaluate_run(run, lm_family["suite"], model_ids=["m"])
    assert set(first["index"]) == {"m"} and first["ran"] == 1 and not first["failed"]
    with pytest.raises(Exception, match="not in"):
        evaluate_run(run, lm_family["suite"], model_ids=["nope"])
    (merged / "model.safetensors").unlink()
    (merged / "merge_info.json").write_text(json.dumps({"weights_pruned": True}))
    second = evaluate_run(run, lm_family["suite"])
    assert not second["failed"] and set(second["index"]) == {"base", "m"}
    assert second["index"]["m"] == first["index"]["m"]
