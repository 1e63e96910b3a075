"""Every report records what its numbers were made with (``environment.json``): the installed versions against the
lock, and for a pool from an embedded family that family's folder key and one digest over its files' checksums.

The run is report_fixtures' small one; the family run lays conftest's tiny models out as an embedded family (base,
experts/<name>) completed by the families' own ``finish`` (``family.json`` with every file's SHA-256), with a
manifest of ``demo:`` references, as ``wildmerge sample --base demo`` records them.
"""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from report_fixtures import fabricate_run
from wildmerge import versions
from wildmerge.analysis.report.environment import environment, family_record, lock_note
from wildmerge.analysis.report.run_data import RunData
from wildmerge.analysis.report.write import write_report
from wildmerge.families.cache import checksums, finish
from wildmerge.hub import ResolvedModel
from wildmerge.run import Manifest, PoolModels, RunFolder

KERNELS = {"aten": "AVX2", "pinned": "avx2", "mkl_cbwr": None}


def _demo_family_run(tiny_family, root: Path) -> Path:
    family = root / "cache" / "v9-seed0-quick"
    shutil.copytree(tiny_family["base"], family / "base")
    for i, expert in enumerate(tiny_family["experts"]):
        shutil.copytree(expert, family / "experts" / f"e{i}")
    finish(family, {"builder_version": 9, "seed": 0, "quick": True, "kernels": KERNELS})
    experts = [str(family / "experts" / f"e{i}") for i in range(3)]
    run = fabricate_run(root / "run", {"base": str(family / "base"), "experts": experts})
    models = PoolModels(base=ResolvedModel(name="base", model="demo:base", kind="demo", path=str(family / "base")),
                        experts=[ResolvedModel(name=f"e{i}", model=f"demo:e{i}", kind="demo", path=p)
                                 for i, p in enumerate(experts)])
    RunFolder(run).write_manifest(Manifest(pool="demo", seed=0, sizes=[2, 3], k=3, subsets=[], models=models,
                                           sampling={}))
    return run


@pytest.fixture(scope="module")
def report(tiny_family, tmp_path_factory):
    root = tmp_path_factory.mktemp("family_run")
    return root, write_report(_demo_family_run(tiny_family, root))


def test_a_report_records_versions_against_the_lock(report):
    _, written = report
    env = json.loads(Path(written["environment_json"]).read_text())
    have = versions.installed()
    assert env["lock"] == str(versions.lock_file()) and env["locked"] > 100
    for name in ("torch", "transformers", "lm-eval", "mergekit", "numpy"):
        assert env["packages"][name] == have[name]
    assert env["differ"] == {} and env["python"] and env["machine"]
    md = Path(written["leaderboard_md"]).read_text()
    assert f"torch {have['torch']}" in md and "locked packages at their constraints.txt versions" in md
    assert "environment.json" in Path(written["index_html"]).read_text()


def test_a_lock_that_says_otherwise_is_named(tiny_family, tmp_path):
    data = RunData.read(fabricate_run(tmp_path / "run", tiny_family))  # no family here
    env = environment(data, lock_text="transformers==0.0.1\n")
    assert env["differ"] == {"transformers": {"installed": versions.installed()["transformers"], "lock": "0.0.1"}}
    assert env["families"] == []
    assert "transformers" in lock_note(env) and "`make setup` installs the locked ones" in lock_note(env)


def test_a_demo_family_run_records_the_familys_digest(report):
    tmp_path, written = report
    [family] = json.loads(Path(written["environment_json"]).read_text())["families"]
    root = tmp_path / "cache" / "v9-seed0-quick"
    files = checksums(root)  # every data file's SHA-256, computed again
    assert family["family"] == "demo" and family["key"] == "v9-seed0-quick" and family["path"] == str(root)
    assert family["models"] == ["base", "e0", "e1", "e2"] and family["files"] == len(files) > 4
    assert family["files_sha256"] == hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":"))
                                                    .encode()).hexdigest()
    assert family["kernels"] == KERNELS and family["seed"] == 0 and family["quick"] is True
    md = Path(written["leaderboard_md"]).read_text()
    assert f"demo family `v9-seed0-quick` (files sha256 {family['files_sha256'][:12]}, kernels AVX2)" in md


def test_a_changed_file_changes_the_digest(tiny_family, tmp_path):
    run = _demo_family_run(tiny_family, tmp_path)
    before = environment(RunData.read(run))["families"][0]["files_sha256"]
    root = tmp_path / "cache" / "v9-seed0-quick"
    (root / "base" / "config.json").write_text((root / "base" / "config.json").read_text() + "\n")
    finish(root, json.loads((root / "family.json").read_text()))  # a rebuild that differs by one file
    assert environment(RunData.read(run))["families"][0]["files_sha256"] != before


def test_a_damaged_family_record_is_said_not_fatal(tmp_path):
    (tmp_path / "family.json").write_text("{not json")
    record = family_record(tmp_path, ["base"], "demo")
    assert record["files_sha256"] is None and "family.json unreadable" in record["error"]
