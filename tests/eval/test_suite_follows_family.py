"""A family's suite reads the task folder of the family whose models it scores: the quick SmolLM2 family's pool file
(absolute paths, no ``WILDMERGE_SMOLLM2_QUICK``) is scored on the quick family's tasks, and no other family is built.

The families come from the default caches (built once, reused); the environment's own cache is pointed at an empty
folder and the builders refuse to run, so a task folder taken from the family the environment selects (the full
family, a build of 40 minutes or more) fails at once instead of starting that build.
"""

from pathlib import Path

import pytest
import yaml

from wildmerge.eval.suites import load_suite

from wildmerge.families.smollm2.source import missing

FAMILIES = {"smollm2": "WILDMERGE_SMOLLM2", "demo": "WILDMERGE_DEMO"}


def _no_build(*args, **kwargs):
    raise AssertionError("a family build started")


def _untouched(cache: Path) -> bool:
    return not cache.exists() or not any(cache.iterdir())


def _quick_family(name, monkeypatch, tmp_path):
    """The quick family from the default cache; then an empty cache for the environment, and no builds."""
    import importlib

    if name == "smollm2" and missing():
        pytest.skip(missing())
    family = importlib.import_module(f"wildmerge.families.{name}.family")
    env = FAMILIES[name]
    for variable in ("CACHE", "QUICK", "SEED"):
        monkeypatch.delenv(f"{env}_{variable}", raising=False)
    info = family.ensure_family(quick=True, progress=False)
    monkeypatch.setenv(f"{env}_CACHE", str(tmp_path / "empty_cache"))
    monkeypatch.setattr(family, "_build", _no_build)
    return info


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_suite_reads_the_tasks_of_the_pool_family(name, monkeypatch, tmp_path):
    info = _quick_family(name, monkeypatch, tmp_path)
    pool = yaml.safe_load(Path(info["pool_file"]).read_text())
    paths = [pool["base"]["model"]] + [e["model"] for e in pool["experts"]]
    suite = load_suite(name)
    assert suite.include_path == f"{name}:tasks"
    followed = suite.following(paths)
    assert followed.resolved_include_path() == info["tasks"] and Path(info["tasks"]).parent.name.endswith("-quick")
    assert suite.following(paths[1:]).include_path == info["tasks"]  # an expert alone says it too
    assert suite.following(["org/model", str(tmp_path)]).include_path == f"{name}:tasks"  # not a family's: as written
    assert _untouched(tmp_path / "empty_cache")


def test_evaluating_the_quick_pool_base_builds_no_other_family(monkeypatch, tmp_path):
    """What `wildmerge eval --model <the quick family's base> --suite smollm2` runs, on one task's first items."""
    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.options import EvalOptions
    from wildmerge.eval.store import ResultStore

    info = _quick_family("smollm2", monkeypatch, tmp_path)
    suite = yaml.safe_load((Path(load_suite("smollm2").source)).read_text())
    suite["tasks"] = [t for t in suite["tasks"] if t["task"] == "smollm2_sentiment"]
    (tmp_path / "one.yml").write_text(yaml.safe_dump(suite))
    summary = evaluate_models([info["base"]], tmp_path / "one.yml", tmp_path / "out", EvalOptions(limit=2))
    record = ResultStore(summary["store"]).load(summary["index"][info["base"]])
    assert not summary["failed"] and record["status"] == "ok" and "sentiment" in record["scores"]
    assert _untouched(tmp_path / "empty_cache")
