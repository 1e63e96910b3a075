"""Leaderboard arithmetic against hand-computed values, norms against an independent float64 computation, plots.

The run's results are fabricated (sealed result files with chosen scores); the models are conftest's tiny ones, so
the norms are real.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import write_plan
from report_fixtures import SCORES, fabricate_run
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main
from wildmerge.eval.store import write_result

# scores as lm-eval fractions (t1, t2); a model's mean is their mean in percent




@pytest.fixture(scope="module")
def report(tiny_family, tmp_path_factory):
    run = fabricate_run(tmp_path_factory.mktemp("r") / "run", tiny_family)
    return run, write_report(run)


def test_scores_csv(report):
    run, written = report
    df = pd.read_csv(written["scores_csv"])
    assert len(df) == 11
    row = df.set_index("model_id")
    assert row.loc["ta_2_s1", "mean"] == pytest.approx(38.0) and row.loc["ta_2_s1", "t2"] == pytest.approx(36.0)
    assert row.loc["ties_2_s1", "status"] == "failed" and np.isnan(row.loc["ties_2_s1", "mean"])
    assert row.loc["ties_3_s0", "status"] == "corrupt" and np.isnan(row.loc["ties_3_s0", "mean"])
    assert row.loc["ta_2_s0", "method_label"] == "TA" and row.loc["ta_2_s0", "n"] == 2


def test_table_vs_base_hand_computed(report):
    _, written = report
    t = pd.read_csv(written["table_vs_base_csv"]).set_index(["method", "n"])
    # experts: 35, 45, 35 vs base 40 -> 1 of 3 above, mean diff -5/3
    assert t.loc[("TA", 1), "k"] == 3 and t.loc[("TA", 1), "pct_beat"] == pytest.approx(100 / 3)
    assert t.loc[("TA", 1), "mean_diff_pp"] == pytest.approx(-5 / 3)
    # TA n=2: 45, 38, 40 (equal is not above) -> 1 of 3, mean diff (5 - 2 + 0) / 3
    assert t.loc[("TA", 2), "pct_beat"] == pytest.approx(100 / 3) and t.loc[("TA", 2), "mean_diff_pp"] == pytest.approx(1.0)
    assert t.loc[("TA", 3), "k"] == 1 and t.loc[("TA", 3), "mean_diff_pp"] == pytest.approx(10.0)
    # TIES n=2: one subset failed -> k = 1 (41 vs 40); n=3 only has a corrupt result -> no cell
    assert t.loc[("TIES", 2), "k"] == 1 and t.loc[("TIES", 2), "mean_diff_pp"] == pytest.approx(1.0)
    assert ("TIES", 3) not in t.index
    md = Path(written["table_vs_base_md"]).read_text().splitlines()
    assert md[0] == "| Method   | Base   | n = 1 (3)   | n = 2 (3)         | n = 3 (1)    |"
    assert md[2] == "| TA       | 40.0   | 33 / -1.67  | 33 / +1.00        | 100 / +10.00 |"
    assert md[3] == "| TIES     | 40.0   | 33 / -1.67  | 100 / +1.00 (k=1) |              |"


def test_table_vs_best_expert_hand_computed(report):
    _, written = report
    md = Path(written["table_vs_best_expert_md"]).read_text().splitlines()
    # best expert e2 = 45: experts -10, 0, -10; TA n=2: 0, -7, -5; TA n=3: +5; TIES n=2: -4
    assert md[2] == "| TA       | 45.0      | 0 / -6.67   | 0 / -4.00       | 100 / +5.00 |"
    assert md[3] == "| TIES     | 45.0      | 0 / -6.67   | 0 / -4.00 (k=1) |             |"
    lb = Path(report[1]["leaderboard_md"]).read_text()
    assert "`e2`, 45.00" in lb and "ties_3_s0 (merge) has no score: corrupt" in lb


def _norm64(a_dir, b_dir):
    from safetensors.numpy import load_file

    a = {k: v for f in sorted(Path(a_dir).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    b = {k: v for f in sorted(Path(b_dir).glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    return float(np.sqrt(sum(np.sum((a[k].astype(np.float64) - b[k].astype(np.float64)) ** 2) for k in a)))


def test_norms_match_float64_reference(report, tiny_family):
    from wildmerge.analysis.pool import norms

    _, written = report
    df = pd.read_csv(written["norms_csv"]).set_index("model_id")
    for mid, path in (("e1", tiny_family["experts"][0]), ("ta_2_s2", tiny_family["experts"][2])):
        assert df.loc[mid, "task_vector_norm"] == pytest.approx(_norm64(path, tiny_family["base"]), rel=1e-9)
    assert df.loc["ta_3_s0", "task_vector_norm"] == 0.0  # the base itself
    old = norms.BLOCK
    try:  # row blocks must add up to the same norm
        norms.BLOCK = 7
        small = norms.task_vector_norm(tiny_family["experts"][1], tiny_family["base"])
    finally:
        norms.BLOCK = old
    assert small == pytest.approx(_norm64(tiny_family["experts"][1], tiny_family["base"]), rel=1e-9)


def test_plots_are_written(report):
    _, written = report
    for name in ("accuracy_vs_n", "accuracy_vs_n_per_task", "norm_vs_n"):
        assert Path(written[f"{name}_png"]).stat().st_size > 10_000
        svg = Path(written[f"{name}_svg"]).read_text()
        assert svg.lstrip().startswith("<?xml") and "number of merged experts n" in svg  # the x axis label


def test_no_base_score_means_no_tables(tiny_family, tmp_path, capsys):
    run = fabricate_run(tmp_path / "run", tiny_family, base_scores=False)
    assert main(["report", str(run)]) == 0
    assert not (run / "report" / "table_vs_base.csv").exists()
    assert "base model has no score" in (run / "report" / "leaderboard.md").read_text()


def test_leftover_of_a_killed_report_is_removed(tiny_family, tmp_path):
    run = fabricate_run(tmp_path / "run", tiny_family)
    killed = run / ".report.tmp-killed"  # what a SIGKILL inside the report's atomic write leaves
    killed.mkdir()
    (killed / "scores.csv").write_text("half")
    write_report(run)
    assert not killed.exists() and (run / "report" / "scores.csv").is_file()


@pytest.mark.parametrize("damaged", ["suite.yml", "index.json"])
def test_damaged_store_files_are_one_line_with_advice(tiny_family, tmp_path, capsys, damaged):
    run = fabricate_run(tmp_path / "run", tiny_family)
    f = run / "eval" / "mini" / damaged
    f.write_text(f.read_text()[:20])
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{damaged} is damaged" in err and f"rerun `wildmerge eval {run}" in err and len(err.splitlines()) == 1
