"""The Python API runs the command line's code on the quick demo family: a run sampled from Python is the run the
command would make (the same command resumes it with nothing to do), its DataFrames are the report's CSVs, bad
input is the command line's one line, and ``import wildmerge`` stays light."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import wildmerge
from wildmerge.cli import main
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.families.demo.family import ensure_family

OPTIONS = dict(methods=["ta"], sizes=[2], k=1, limit=4)
FLAGS = ["--methods", "ta", "--sizes", "2", "--k", "1", "--limit", "4"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """``demo`` is the quick family here, as in the documented commands."""
    cache = tmp_path_factory.mktemp("demo_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WILDMERGE_DEMO_QUICK", "1")
        patch.setenv("WILDMERGE_DEMO_CACHE", str(cache))
        ensure_family(cache, seed=0, quick=True, progress=False)
        yield cache


@pytest.fixture(scope="module")
def run(quick, tmp_path_factory):
    return wildmerge.sample("demo", out=str(tmp_path_factory.mktemp("api") / "run"), **OPTIONS)


def _as_csv(frame) -> pd.DataFrame:
    """A frame as the report's CSV holds it (same float format), read back."""
    return pd.read_csv(io.StringIO(frame.to_csv(index=False, float_format="%.10g")))


def test_the_command_finds_the_api_run_done_and_its_csvs_are_the_dataframes(run, capsys):
    capsys.readouterr()
    assert main(["sample", "--base", "demo", "--out", str(run.path), *FLAGS]) == 0  # same draw: nothing is refused
    assert "merges: 0 new, 0 redone, 2 already done" in capsys.readouterr().out
    report = run.path / "report"
    for frame, csv in ((run.scores(), "scores.csv"), (run.table1(), "table_vs_base.csv"),
                       (run.table2(), "table_vs_best_expert.csv")):
        pd.testing.assert_frame_equal(_as_csv(frame), pd.read_csv(report / csv))
    scores = run.scores()
    assert (scores["overridden"] == "limit=4").all()  # a limited evaluation says so, as in the CSV
    board = run.leaderboard()
    assert list(board["mean"]) == sorted(scores["mean"], reverse=True) and len(board) == len(scores) == 6


def test_records_hold_every_model_its_merge_and_its_evaluation(run):
    records, scores = run.records(), run.scores()
    assert list(records["model_id"]) == [e.model_id for e in run._data(run.path).plan.entries]
    merges = records[records["kind"] == "merge"]
    assert len(merges) == 2 and (merges["merge_seconds"] > 0).all() and set(merges["merge_device"]) == {"cpu"}
    assert records[records["kind"] != "merge"]["merge_seconds"].isna().all()
    assert (records["eval_status"] == "ok").all() and (records["eval_seconds"] > 0).all()
    assert dict(zip(records["model_id"], records["job_id"])) == dict(zip(scores["model_id"], scores["job_id"]))


def test_report_writes_what_the_command_writes(run, tmp_path):
    written = wildmerge.open_run(run.path).report(out=tmp_path / "again")
    assert written["scores_csv"] == tmp_path / "again" / "scores.csv"
    for name in ("scores.csv", "table_vs_base.csv", "leaderboard.md"):
        assert (tmp_path / "again" / name).read_text() == (run.path / "report" / name).read_text()


def _cli_error(argv, capsys) -> str:
    """The last line the command prints for bad input (its own, or argparse's)."""
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("options,argv", [
    (dict(k=0), ["--k", "0"]),
    (dict(seed=-1), ["--seed", "-1"]),
    (dict(methods=[]), ["--methods", ","]),
    (dict(sizes=[5]), ["--sizes", "5"]),
    (dict(limit=0), ["--limit", "0"]),
    (dict(workers=0), ["--workers", "0"]),
    (dict(executor="serial", workers=2), ["--executor", "serial", "--workers", "2"]),
])
def test_bad_sample_options_get_the_command_lines_words(quick, tmp_path, capsys, options, argv):
    out = tmp_path / "run"
    with pytest.raises(ConfigError) as caught:
        wildmerge.sample("demo", out=str(out), **options)
    assert _cli_error(["sample", "--out", str(out), *argv], capsys).endswith(str(caught.value))
    assert not out.exists()


def test_unknown_options_and_bad_folders_are_one_line(quick, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"^unknown sample option 'method' \(did you mean 'methods'\?\)$"):
        wildmerge.sample("demo", method=["ta"])
    with pytest.raises(ConfigError, match="^--sizes: "):
        wildmerge.sample("demo", sizes="two")
    with pytest.raises(WildmergeError) as caught:
        wildmerge.open_run(tmp_path)
    assert _cli_error(["report", str(tmp_path)], capsys).endswith(str(caught.value))
    with pytest.raises(ConfigError) as caught:
        wildmerge.guided_search("demo", 1, out=tmp_path / "search")
    assert _cli_error(["search", "--budget", "1"], capsys).endswith(str(caught.value))
    with pytest.raises(ConfigError, match="^--tune-samples: expected a whole number >= 1, got 0$"):
        wildmerge.guided_search("demo", 3, out=tmp_path / "search", tune_samples=0)
    assert not (tmp_path / "search").exists()


def test_a_search_dry_run_prints_its_cost(quick, capsys):
    assert wildmerge.guided_search("demo", 3, methods="ta", limit=8, dry_run=True) is None
    printed = capsys.readouterr().out
    assert main(["search", "--budget", "3", "--methods", "ta", "--limit", "8", "--dry-run"]) == 0
    assert capsys.readouterr().out == printed and printed.startswith("search plan: 3 full evaluations")


def test_importing_wildmerge_stays_light():
    code = ("import sys, wildmerge; heavy = ('pandas', 'torch', 'wildmerge.api'); "
            "print([m for m in heavy if m in sys.modules]); wildmerge.open_run; print('wildmerge.api' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"]
