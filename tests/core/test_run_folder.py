"""The run folder as a typed contract: records round-trip, bad ones are named, and a folder written before records
had a schema version (tests/fixtures/run_v0, written by wildmerge 0.1.0's `sample_and_merge.py` on the quick demo
family) still loads and reports."""

import json
import shutil
from pathlib import Path

import pytest

from wildmerge.errors import WildmergeError
from wildmerge.run import (SCHEMA_VERSION, EvalIndex, Plan, RunFolder, Search, WeightChecks,
                           generated_calibration_dir, merge_claim_file, read_eval_index, read_merge_info, read_record,
                           weights_pruned, write_merge_info)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_v0"
SEARCH_V0 = FIXTURE.parent / "search_v0" / "search.json"


@pytest.fixture
def old_run(tmp_path):
    return RunFolder(shutil.copytree(FIXTURE, tmp_path / "run_v0"))


def test_a_version_0_run_folder_loads(old_run):
    plan = old_run.read_plan()
    assert plan.schema_version == 0
    assert [e.kind for e in plan.entries[:4]] == ["base", "expert", "expert", "expert"]
    assert {e.model_id for e in plan.merges} == {"ta__n02_s00", "ta__n03_full", "iso_c__n02_s00", "iso_c__n03_full"}
    manifest = old_run.read_manifest()
    assert manifest.schema_version == 0 and [e.name for e in manifest.models.experts] == [
        "expert_01", "expert_02", "expert_03"]
    assert {s.subset_id for s in manifest.subsets} >= {"n02_s00", "n03_full"}
    info = read_merge_info(old_run.model_dir("ta__n03_full"))
    assert info.method == "ta" and len(info.recipe_sha256) == 64 and not info.weights_pruned
    index = old_run.read_eval_index("demo")
    assert old_run.evaluated_suites() == ["demo"] and set(index.models) == {e.model_id for e in plan.entries}


def test_a_version_0_run_folder_reports(old_run):
    from wildmerge.analysis.report.scores import collect_scores

    df, tasks, notes = collect_scores(old_run.root)
    assert not notes and len(df) == 8 and (df["status"] == "ok").all()
    assert tasks == ["add", "compare", "reverse", "count", "facts", "add_gen"]
    assert df["mean"].between(0, 100).all()


def test_records_round_trip_with_the_current_version(old_run, tmp_path):
    plan = old_run.read_plan()
    new = RunFolder(tmp_path / "new")
    new.root.mkdir()
    new.write_plan(plan.model_copy(update={"schema_version": SCHEMA_VERSION}))
    again = new.read_plan()
    assert again.schema_version == SCHEMA_VERSION and again.entries == plan.entries


def test_records_made_now_carry_the_current_version(tmp_path):
    run = RunFolder(tmp_path)
    run.write_plan(Plan(entries=[{"model_id": "base", "kind": "base", "path": "/b"}]))
    assert json.loads(run.plan_path.read_text())["schema_version"] == SCHEMA_VERSION == run.read_plan().schema_version
    run.write_eval_index("demo", EvalIndex())
    assert run.read_eval_index("demo").schema_version == SCHEMA_VERSION


def test_a_version_0_search_record_loads(tmp_path):
    """``search.json`` as ``wildmerge search`` wrote it before it had a typed record (tests/fixtures/search_v0: the
    quick demo family, ``--methods ta --budget 3 --limit 8``), and as its first version did (``settings.proxy``
    where ``settings.ranking`` is now), load with nothing lost; a record written now has the current version."""
    run = RunFolder(tmp_path / "run")
    run.root.mkdir()
    shutil.copy(SEARCH_V0, run.search_json)
    record = run.read_search()
    assert record.schema_version == 0 and record.settings.methods == ["ta"] and record.settings.limit == 8
    assert [c.id for c in record.candidates] == ["ta__e01_e02", "ta__e01_e02_e03"]
    assert record.result.winner == "ta__e01_e02_e03" and record.result.items_spent == 120
    written = json.loads(SEARCH_V0.read_text())
    assert record.model_dump(mode="json", exclude={"schema_version"}) == written  # every key, as written

    first = {"settings": {**{k: v for k, v in written["settings"].items() if k != "ranking"}, "proxy": "minus ..."},
             "candidates": written["candidates"]}  # written when the candidates were chosen: no result yet
    run.search_json.write_text(json.dumps(first))
    old = run.read_search()
    assert old.result is None and old.settings.ranking == "" and old.settings.model_extra == {"proxy": "minus ..."}

    run.write_search(Search(settings=record.settings, candidates=record.candidates, result=record.result))
    again = run.read_search()
    assert again.schema_version == SCHEMA_VERSION and again.model_dump(exclude={"schema_version"}) == \
        record.model_dump(exclude={"schema_version"})
    run.search_json.write_text('{"settings": {}}')
    with pytest.raises(WildmergeError, match=r"search.json is damaged .*rerun the same `wildmerge search` command"):
        run.read_search()


def test_damaged_and_future_records_are_named(old_run):
    data = json.loads(old_run.plan_path.read_text())
    data["entries"].append(dict(data["entries"][0]))  # a second base
    old_run.plan_path.write_text(json.dumps(data))
    with pytest.raises(WildmergeError, match=r"plan.json is damaged \(model_id 'base' appears twice\)"):
        old_run.read_plan()
    old_run.plan_path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "entries": []}))
    with pytest.raises(WildmergeError, match="newer than this wildmerge understands"):
        old_run.read_plan()
    old_run.plan_path.write_text("{not json")
    with pytest.raises(WildmergeError, match="plan.json is damaged"):
        old_run.read_plan()
    with pytest.raises(WildmergeError, match="not a run folder: plan.json is missing"):
        RunFolder(old_run.root / "models").read_plan()
    assert Plan.model_validate({"entries": [{"model_id": "b", "kind": "base", "path": "/b"}]}).entries[0].n == 0


def test_one_reader_damaged_records_raise_or_fall_back_to_their_default(old_run):
    """A plan or manifest holds what cannot be rebuilt: damaged, it is an error naming the file and the fix. An eval
    index, a merge info and the weight checks are rebuilt by the next command: damaged, they read as absent."""
    old_run.plan_path.write_text('{"entries": [')
    with pytest.raises(WildmergeError) as err:
        old_run.read_plan()
    assert str(old_run.plan_path) in str(err.value) and "rerun `wildmerge sample`" in str(err.value)
    old_run.manifest_path.write_text("[]")
    with pytest.raises(WildmergeError, match=r"manifest.json is damaged .*restore it, or start a new run"):
        old_run.read_manifest()
    with pytest.raises(WildmergeError, match=r"nothing.json cannot be read .*; do this"):
        read_record(old_run.root / "nothing.json", Plan, "do this")

    model = old_run.model_dir("ta__n03_full")
    info = read_merge_info(model)
    assert info.method == "ta" and not weights_pruned(model)
    (model / "merge_info.json").write_text('{"model_id": ')
    assert read_merge_info(model) is None and not weights_pruned(model)  # merged again
    write_merge_info(model, info.model_copy(update={"weights_pruned": True}))
    assert weights_pruned(model)

    assert set(old_run.read_eval_index("demo").models)
    (old_run.eval_dir("demo") / "index.json").write_text('{"models": ["not", "a", "dict"]}')
    assert old_run.read_eval_index("demo") == EvalIndex() == read_eval_index(old_run.root / "no_store")

    assert old_run.read_weight_checks() == WeightChecks()  # absent
    old_run.write_weight_checks(WeightChecks(finite={"/w.safetensors": "1:2"}))
    assert old_run.read_weight_checks().finite == {"/w.safetensors": "1:2"}
    old_run.weight_checks_path.write_text("{")
    assert old_run.read_weight_checks() == WeightChecks()


def test_every_path_of_a_run_comes_from_the_run_folder(old_run):
    root = old_run.root
    model = old_run.model_dir("ta__n03_full")
    assert RunFolder.of_model(model).root == root
    assert merge_claim_file(model) == old_run.merge_claim("ta__n03_full") == root / "claims" / "merge-ta__n03_full.lock"
    assert generated_calibration_dir(model) == old_run.calibration_dir == root / "calibration"
    assert old_run.report_claim.parent == old_run.claims_dir and old_run.report_dir() == root / "report"
    assert old_run.norms_cache.parent == root / "eval" and "norms.json" not in old_run.evaluated_suites()
    assert {old_run.tune_dir.name, old_run.weight_checks_path.name, old_run.demo_report_json.name} == {
        "tune", "weight_checks.json", "report.json"}
    # the places the commands used to build by hand: the same folders and files on disk
    assert old_run.probe_dir("demo_probe") == root / "probe" / "demo_probe"
    assert old_run.mergeability_dir == root / "mergeability"
    assert (old_run.search_json, old_run.search_log) == (root / "search.json", root / "search_log.jsonl")
    assert old_run.search_model_dir("ta__a_b") == root / "search" / "models" / "ta__a_b"
    assert old_run.search_eval_dir("demo") == root / "search" / "eval" / "demo"
    assert old_run.search_geometry == root / "search" / "geometry.json"


def test_the_manifest_records_resolved_models_as_the_resolver_returns_them(old_run, tmp_path):
    """One type for a resolved model: the resolver's answer is the manifest's record, with the same field names."""
    from wildmerge import hub
    from wildmerge.hub import resolve_all
    from wildmerge.run import ResolvedModel

    assert ResolvedModel is hub.ResolvedModel
    written = json.loads(old_run.manifest_path.read_text())["models"]["base"]
    base = old_run.read_manifest().models.base
    assert isinstance(base, ResolvedModel) and base.model_dump(include=set(written)) == written
    (tmp_path / "m").mkdir()
    (resolved,) = resolve_all([("x0", str(tmp_path / "m"), None)])
    assert isinstance(resolved, ResolvedModel) and (resolved.name, resolved.kind) == ("x0", "local")
    assert list(resolved.model_dump()) == ["name", "model", "kind", "path", "revision", "domain", "calibration"]


def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path):
    # tempfile makes private 0600 files / 0700 folders: a report or a model written atomically must not be
    import os

    from wildmerge import atomic

    old = os.umask(0o022)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
        atomic.write_text(tmp_path / "atomic.txt", "x")
        with atomic.atomic_dir(tmp_path / "folder") as d:
            (d / "f").write_text("x")
        (tmp_path / "made").mkdir()
    finally:
        os.umask(old)
    assert (tmp_path / "atomic.txt").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "folder").stat().st_mode & 0o777 == (tmp_path / "made").stat().st_mode & 0o777 == 0o755
