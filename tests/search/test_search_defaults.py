"""The search's default arms follow the pool's data: RegMean and CoM join TA and TIES where every expert has the
text they read, and a pool without it keeps TA and TIES with one line saying why and how to add data; ``--methods``
overrides either. The defaults are written once (``search/defaults.py``)."""

import re
from pathlib import Path

import pytest
import yaml

from wildmerge.pools import load_pool
from wildmerge.search.defaults import DATA_METHODS, WITH_DATA, WITHOUT_DATA, default_methods

ROOT = Path(__file__).resolve().parents[2]


def _pool_file(folder: Path, with_data=()) -> str:
    """The quick demo family's base and three experts (``demo:`` references: nothing is built), data only for the
    experts in ``with_data``."""
    experts = [{"model": f"demo:expert_0{i}", "name": f"expert_0{i}",
                **({"data": {"text": f"demo:unlabelled/expert_0{i}"}} if f"expert_0{i}" in with_data else {})}
               for i in (1, 2, 3)]
    path = folder / "pool.yml"
    path.write_text(yaml.safe_dump({"name": "mine", "base": {"model": "demo:base"}, "experts": experts}))
    return str(path)


def test_a_pool_with_data_for_every_expert_gets_the_data_methods(monkeypatch):
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")  # the quick family's three experts, each with its own text
    pool = load_pool("demo")
    assert len(pool.experts) == 3
    assert default_methods(pool) == (["ta", "ties", "regmean", "com"], None)
    monkeypatch.delenv("WILDMERGE_DEMO_QUICK")
    assert default_methods(load_pool("demo")) == (list(WITH_DATA), None)  # the twelve of the whole family too


def test_a_pool_without_data_keeps_ta_and_ties_and_says_why_in_one_line(tmp_path):
    path = _pool_file(tmp_path)
    methods, note = default_methods(load_pool(path))
    assert methods == ["ta", "ties"] == list(WITHOUT_DATA)
    assert "\n" not in note
    assert "regmean and com" in note and "expert_01, expert_02, expert_03" in note
    assert path in note and "data: generate" in note and "--methods" in note


def test_one_expert_without_data_is_enough_to_leave_them_out_and_is_named(tmp_path):
    methods, note = default_methods(load_pool(_pool_file(tmp_path, with_data=("expert_01", "expert_03"))))
    assert methods == ["ta", "ties"]
    assert "none for expert_02;" in note and "expert_01" not in note


def test_experts_with_fewer_texts_than_the_data_methods_read_leave_them_out_of_the_live_arms(tmp_path, capsys):
    """RegMean and CoM read 64 texts of each expert (their recipes' n_samples): an expert with 10 keeps them out of
    the live search's default arms (said in one line), and asked for by name they fail before any model is read.
    The dry run, which reads the pool file only, does not count."""
    import json

    from wildmerge.errors import ConfigError
    from wildmerge.search.defaults import methods_for
    from wildmerge.search.guided import search_pool

    texts = tmp_path / "few.jsonl"
    texts.write_text("".join(json.dumps({"text": f"a short text number {i}"}) + "\n" for i in range(10)))
    path = tmp_path / "few.yml"
    path.write_text(yaml.safe_dump({"name": "few", "base": {"model": "demo:base"}, "data": {"text": str(texts)},
                                    "experts": [{"model": "demo:expert_01"}, {"model": "demo:expert_02"}]}))
    pool = load_pool(str(path))
    assert methods_for(pool) == list(WITH_DATA)  # present: the dry run's decision
    capsys.readouterr()
    assert methods_for(pool, count=True) == list(WITHOUT_DATA)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "regmean and com read 64 texts of each expert, and expert_01 has 10" in out
    assert methods_for(pool, ["ta", "com"], count=True) == ["ta", "com"]  # --methods: not second-guessed here
    with pytest.raises(ConfigError, match="com reads 64 texts of each expert, and expert_01 has 10, expert_02 10: give every expert"):
        search_pool(str(path), 3, out=tmp_path / "run", methods=["ta", "com"], tune=False)
    assert not (tmp_path / "run" / "search").exists()


def test_the_dry_run_prints_the_default_arms_and_methods_overrides_them(tmp_path, monkeypatch, capsys):
    from wildmerge.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    assert main(["search", "--base", "demo", "--budget", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "  methods: ta, ties, regmean, com\n" in out and "note:" not in out
    assert "regmean +2, com +3 forward passes per text of each expert" in out  # priced with their data passes
    bare = _pool_file(tmp_path)
    assert main(["search", "--base", bare, "--budget", "4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "regmean and com" in notes[0] and "  methods: ta, ties\n" in out
    assert main(["search", "--base", bare, "--budget", "4", "--methods", "ta,regmean", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out and "  methods: ta, regmean\n" in out
    assert main(["search", "--base", "demo", "--budget", "4", "--methods", "ties", "--dry-run"]) == 0
    assert "  methods: ties\n" in capsys.readouterr().out
    from wildmerge.api import guided_search

    assert guided_search("demo", 4, dry_run=True) is None  # the Python API: the same default arms
    assert "  methods: ta, ties, regmean, com\n" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


def test_an_empty_methods_list_is_still_an_error(tmp_path):
    from wildmerge.errors import ConfigError
    from wildmerge.search.guided import search_pool

    with pytest.raises(ConfigError, match="--methods is empty"):
        search_pool(_pool_file(tmp_path), 3, out=tmp_path / "run", methods=[])
    assert not (tmp_path / "run").exists()


def test_the_defaults_are_written_in_one_place():
    """No other module of the search or its command names a default list of methods."""
    assert WITH_DATA == WITHOUT_DATA + DATA_METHODS
    for path in [*(ROOT / "wildmerge" / "search").glob("*.py"), ROOT / "wildmerge" / "commands" / "search.py"]:
        if path.name == "defaults.py":
            continue
        text = path.read_text()
        assert not re.search(r"""\(\s*["']ta["'],\s*["']ties["']""", text), path
        assert 'default="ta' not in text, path


def test_data_methods_alone_skip_the_tas_step():
    """RegMean and CoM have no TAS grid (a TAS sweep merges in memory): ``--methods regmean,com`` runs them at their
    recipes' settings instead of failing in the tuning step for want of a grid; with TA or TIES beside them, TAS
    tunes those."""
    from wildmerge.search.guided import tunable

    assert not tunable(["regmean", "com"]) and not tunable(list(DATA_METHODS))
    assert tunable(list(WITH_DATA)) and tunable(["com", "ties"])
