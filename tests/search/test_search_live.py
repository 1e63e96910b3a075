"""The guided search end to end on the quick demo family (real merges, real lm-eval): it spends no more than its
budget, reports a full evaluation of its winner, records every rung, and a search killed mid-way and rerun ends
exactly where an uninterrupted one does."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wildmerge.families.demo.family import ensure_family
from wildmerge.errors import ConfigError
from wildmerge.run import RunFolder
from wildmerge.search.guided import search_pool

ARGS = dict(suite_name="demo", methods=["ta"], first=0.25, eta=2.0, tune=False, limit=8)
BUDGET = 3.0


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory):
    family = ensure_family(tmp_path_factory.mktemp("demo_cache"), seed=0, quick=True, progress=False)
    return str(Path(family["root"]) / "pool.yml")


@pytest.fixture(scope="module")
def finished(pool_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("search") / "run"
    return out, search_pool(pool_file, BUDGET, out=out, **ARGS)


def test_search_reports_a_full_evaluation_within_budget(finished):
    out, summary = finished
    folder = RunFolder(out)
    record = json.loads(folder.search_json.read_text())
    assert record["result"] == json.loads(json.dumps(summary))
    assert summary["full_evaluations_spent"] <= BUDGET
    assert summary["winner"] in {c["id"] for c in record["candidates"]}
    assert all(c["first_score"][1] is not None for c in record["candidates"])  # every one drawn was scored
    lines = [json.loads(x) for x in folder.search_log.read_text().splitlines()]
    last = lines[-1]
    assert last["fraction"] == 1.0 and last["leader"] == summary["winner"]
    assert last["decisions"][summary["winner"]]["score"] == summary["suite_mean"]
    lo, hi = summary["vs_base_points"][1:]
    assert lo <= summary["vs_base_points"][0] <= hi
    assert 100 * (summary["suite_mean"] - summary["base_suite_mean"]) == pytest.approx(summary["vs_base_points"][0])
    assert (Path(summary["model"]) / "config.json").is_file()


def test_a_killed_search_resumes_to_the_same_result(finished, pool_file, tmp_path):
    _, expected = finished
    out = tmp_path / "run"
    _killed_after_the_first_rung(pool_file, BUDGET, out, ARGS)
    again = search_pool(pool_file, BUDGET, out=out, **ARGS)
    assert {k: v for k, v in again.items() if k != "model"} == {k: v for k, v in expected.items() if k != "model"}


DEFAULT_ARMS = dict(suite_name="demo", methods=None, first=0.25, eta=2.0, tune=False, limit=8, experts=False)
DEFAULT_BUDGET = 5.0  # a first bracket of four: one candidate of every method


def _killed_after_the_first_rung(pool_file: str, budget: float, out: Path, args: dict) -> None:
    code = (f"from wildmerge.search.guided import search_pool; search_pool({pool_file!r}, {budget}, out={str(out)!r}, "
            f"**{args!r})")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = RunFolder(out).search_log
    deadline = time.time() + 900
    while not log.is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.kill()  # after the first rung is logged: the rest of the search is lost
    proc.wait()
    assert log.is_file() and len(log.read_text().splitlines()) < 3


def test_a_killed_search_with_the_default_arms_resumes_to_the_same_result(tmp_path, monkeypatch):
    """The shipped demo pool (the quick family) gives every expert its text, so the default arms are TA, TIES,
    RegMean and CoM; the first bracket holds one candidate of each (RegMean and CoM merged through mergekit with the
    experts' data). A search killed after that rung and rerun ends where an uninterrupted one does."""
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")  # the killed search's process inherits it
    pool_file = "demo"
    expected = search_pool(pool_file, DEFAULT_BUDGET, out=tmp_path / "whole", **DEFAULT_ARMS)
    record = json.loads(RunFolder(tmp_path / "whole").search_json.read_text())
    assert record["settings"]["methods"] == ["ta", "ties", "regmean", "com"]
    drawn = {c["method"] for c in record["candidates"]}
    assert {"regmean", "com"} <= drawn
    for c in record["candidates"]:
        if c["method"] in ("regmean", "com"):
            info = json.loads((RunFolder(tmp_path / "whole").search_model_dir(c["id"]) / "merge_info.json").read_text())
            assert info["method"] == c["method"] and info["experts"] == c["experts"]
    out = tmp_path / "run"
    _killed_after_the_first_rung(pool_file, DEFAULT_BUDGET, out, DEFAULT_ARMS)
    again = search_pool(pool_file, DEFAULT_BUDGET, out=out, **DEFAULT_ARMS)
    assert {k: v for k, v in again.items() if k != "model"} == {k: v for k, v in expected.items() if k != "model"}
    assert json.loads(RunFolder(out).search_json.read_text())["candidates"] == record["candidates"]


def test_bad_settings_fail_before_any_model_is_loaded(pool_file, tmp_path):
    with pytest.raises(ConfigError, match="--budget"):
        search_pool(pool_file, 0.5, out=tmp_path / "a", **ARGS)
    with pytest.raises(ConfigError, match="eta"):
        search_pool(pool_file, 3, out=tmp_path / "b", **{**ARGS, "eta": 1.0})
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_regmean_is_a_candidate_merged_through_mergekit_once(tmp_path, monkeypatch):
    """RegMean reads each expert's data layer by layer: the search merges it through the runs' mergekit path into
    its run folder (merge_info.json, recipe.yml), scores it, and a rerun reuses the merge. The shipped demo pool
    (quick family) gives each expert its unlabelled text."""
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    args = {**ARGS, "methods": ["regmean"], "experts": False}
    out = tmp_path / "run"
    summary = search_pool("demo", BUDGET, out=out, **args)
    assert summary["method"] == "regmean"
    model = Path(summary["model"])
    assert model.parent == RunFolder(out).search_models_dir
    info = json.loads((model / "merge_info.json").read_text())
    assert info["method"] == "regmean" and info["experts"] == summary["experts"]
    assert "regmean" in (model / "recipe.yml").read_text() and "calibration" in (model / "recipe.yml").read_text()
    stamp = (model / "merge_info.json").stat().st_mtime_ns
    again = search_pool("demo", BUDGET, out=out, **args)
    assert again == summary and (model / "merge_info.json").stat().st_mtime_ns == stamp


def test_a_per_block_method_is_searched_without_tuning(pool_file, tmp_path):
    """``wildmerge search --no-tune`` with NormAvg per block: no TAS sweep ran to say where the experts are, and the
    in-memory merger names each input with its folder itself, so the per-block norms find the checkpoints (this
    failed with "scope 'block' needs the checkpoints on disk")."""
    from wildmerge.cli import main

    out = tmp_path / "run"
    assert main(["search", "--base", pool_file, "--budget", "2", "--methods", "norm_avg_block", "--no-tune",
                 "--no-experts", "--suite", "demo", "--limit", "4", "--out", str(out)]) == 0
    result = json.loads(RunFolder(out).search_json.read_text())["result"]
    assert result["method"] == "norm_avg_block" and result["hparams"]["scope"] == "block"
    assert (Path(result["model"]) / "config.json").is_file()
