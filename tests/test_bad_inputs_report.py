"""A report never mixes settings silently and never crashes on a suite that failed."""

import csv
import shutil
from pathlib import Path

import yaml

from helpers import lm_family, write_plan  # noqa: F401 (fixture)
from wildmerge.cli import main
from wildmerge.run import PlanEntry


def _run(lm_family, tmp_path):  # noqa: F811
    entries = [PlanEntry(model_id="base", kind="base", path=lm_family["base"]),
               PlanEntry(model_id="e0", kind="expert", path=lm_family["experts"][0], n=1, experts=["e0"]),
               PlanEntry(model_id="ta-2", kind="merge", method="ta", path=lm_family["experts"][1], n=2,
                         subset_id="s0", experts=["e0", "e1"])]
    return write_plan(tmp_path / "run", entries)


def test_an_override_is_stated_at_the_top_and_in_every_csv(lm_family, tmp_path, capsys):  # noqa: F811
    run = _run(lm_family, tmp_path)
    assert main(["eval", str(run), "--suite", lm_family["suite"], "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "overridden (limit=2)" in out
    report = run / "report"
    top = (report / "leaderboard.md").read_text().splitlines()[:4]
    assert any("overridden: limit=2" in line for line in top), top
    csvs = sorted(report.glob("*.csv"))
    assert csvs
    for path in csvs:
        rows = list(csv.DictReader(path.open()))
        assert rows and all(r["overridden"] == "limit=2" for r in rows), path.name
    assert "overridden: limit=2" in (report / "index.html").read_text()


def test_a_suite_whose_jobs_all_failed_does_not_break_the_report(lm_family, tmp_path, capsys):  # noqa: F811
    run = _run(lm_family, tmp_path)
    assert main(["eval", str(run), "--suite", lm_family["suite"]]) == 0
    broken = yaml.safe_load(Path(lm_family["suite"]).read_text())
    broken["name"] = "broken"
    broken["tasks"] = [{**t, "metric": "f1,none"} if t["task"] == "mini_mc" else t for t in broken["tasks"]]
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken))
    assert main(["eval", str(run), "--suite", str(path)]) == 1  # every job failed: exit 1, a report all the same
    err = capsys.readouterr()
    assert "Traceback" not in err.err and "number sections" not in err.err
    assert (run / "report" / "broken" / "leaderboard.md").is_file()
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "mini" / "scores.csv").is_file()
    shutil.rmtree(run / "report")
