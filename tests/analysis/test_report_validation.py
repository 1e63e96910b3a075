"""Sweep points chosen on a validation split and reported on the test split (the fresh-head probe paper's Tables
3-4), and the plain rule where a suite has no validation split.

The merges are real (`wildmerge sample --grid` on conftest's tiny models); the scores are chosen (sealed result
files): on validation lambda 0.5 is best, on test lambda 1.0, so choosing on validation reports 0.5's test mean.
"""

from pathlib import Path

import pandas as pd
import pytest

from report_fixtures import fabricate_results
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main
from wildmerge.run import RunFolder

# test scores (t1, t2) as fractions; sweep lam: lambda 0.5 -> 46 %, 1.0 -> 50 %, 1.5 -> 30 %
TEST = {"base": (0.50, 0.30), "expert__x0": (0.40, 0.30), "expert__x1": (0.60, 0.30), "expert__x2": (0.50, 0.20),
        "ta__n02_s00": (0.50, 0.34), "ta__n03_full": (0.60, 0.40),
        "ta__n03_full__lambda-0.5": (0.56, 0.36), "ta__n03_full__lambda-1.5": (0.40, 0.20)}
# validation: lambda 0.5 -> 60 %, 1.0 -> 45 %, 1.5 -> 20 %
VALIDATION = {m: (0.5, 0.5) for m in TEST} | {"ta__n03_full__lambda-0.5": (0.70, 0.50),
                                              "ta__n03_full": (0.50, 0.40), "ta__n03_full__lambda-1.5": (0.20, 0.20)}


@pytest.fixture(scope="module")
def reports(tiny_family, tmp_path_factory):
    root = tmp_path_factory.mktemp("validation_study")
    lines = ["name: tiny", f"base: {{model: {tiny_family['base']}}}", "experts:"]
    lines += [f"  - {{model: {e}, name: x{i}}}" for i, e in enumerate(tiny_family["experts"])]
    (root / "pool.yml").write_text("\n".join(lines) + "\n")
    (root / "grid.yml").write_text("lam: {method: ta, grid: {lambda: [0.5, 1.0, 1.5]}}\n")
    run = root / "run"
    assert main(["sample", "--base", str(root / "pool.yml"), "--out", str(run), "--sizes", "2", "--k", "1",
                 "--methods", "ta", "--grid", str(root / "grid.yml"), "--no-evaluate"]) == 0
    assert {e.model_id for e in RunFolder(run).read_plan().entries} == set(TEST)
    fabricate_results(run, TEST, suite="val", validation=VALIDATION)
    fabricate_results(run, TEST, suite="plain")
    return write_report(run)


def test_sweep_point_is_chosen_on_validation_and_reported_on_test(reports):
    sweep = pd.read_csv(reports["val/sweep_lam_csv"])
    assert sweep["lambda"].tolist() == [0.5, 1.0, 1.5]
    assert sweep["mean"].tolist() == pytest.approx([46.0, 50.0, 30.0])
    assert sweep["val_mean"].tolist() == pytest.approx([60.0, 45.0, 20.0])
    assert sweep["selected"].fillna("").tolist() == ["chosen", "oracle", ""]
    picked = pd.read_csv(reports["val/sweep_selection_csv"]).iloc[0]
    assert picked["rule"].startswith("chosen on validation")
    assert picked["chosen_setting"] == "lambda=0.5" and picked["oracle_setting"] == "lambda=1.0"
    assert picked["chosen_test_mean"] == pytest.approx(46.0) and picked["chosen_val_mean"] == pytest.approx(60.0)
    assert picked["oracle_test_mean"] == pytest.approx(50.0) and picked["oracle_gap_pp"] == pytest.approx(4.0)
    md = Path(reports["val/leaderboard_md"]).read_text()
    assert "Validation splits, scored apart and never averaged into the means: t1@validation, t2@validation" in md
    assert "Selection: chosen on validation (best mean over the validation splits), reported on test: " \
           "`lambda=0.5`, validation mean 60.00, **test mean 46.00**; best on test (oracle): `lambda=1.0`" in md
    scores = pd.read_csv(reports["val/scores_csv"]).set_index("model_id")
    assert scores.loc["ta__n03_full__lambda-0.5", "t1@validation"] == pytest.approx(70.0)
    page = Path(reports["val/index_html"]).read_text()
    assert "validation mean (%)" in page and "chosen" in page


def test_without_a_validation_split_the_sweep_says_it_chose_on_test(reports):
    sweep = pd.read_csv(reports["plain/sweep_lam_csv"])
    assert "val_mean" not in sweep and "selected" not in sweep  # the table stays as it was
    picked = pd.read_csv(reports["plain/sweep_selection_csv"]).iloc[0]
    assert picked["rule"] == "chosen on test (no validation split)"
    assert picked["chosen_setting"] == picked["oracle_setting"] == "lambda=1.0"
    md = Path(reports["plain/leaderboard_md"]).read_text()
    assert "Selection: chosen on test (no validation split): `lambda=1.0`, test mean 50.00" in md
    assert "Validation splits" not in md
    assert "val_mean" not in pd.read_csv(reports["plain/scores_csv"])
