"""The report's norm figures (norm per task, accuracy against norm), the balanced / unbalanced table and the
``--combine`` figure, drawn from a real run: TA merges of conftest's tiny family (``report_fixtures.sample_study``)
with chosen scores. Each figure's numbers are checked against the report's own tables (``scores.csv``,
``norms.csv``) and against a float64 computation written here from the papers' definitions.
"""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from report_fixtures import STUDY_SCORES, fabricate_results, sample_study
from wildmerge import versions
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main


@pytest.fixture(scope="module")
def study(tiny_family, tmp_path_factory):
    run = sample_study(tmp_path_factory.mktemp("figures"), tiny_family)
    return run, write_report(run)


def _tables(written):
    return pd.read_csv(written["scores_csv"]), pd.read_csv(written["norms_csv"])


def test_norm_per_task_bars_are_the_experts_norms(study):
    _, written = study
    _, norms = _tables(written)
    bars = pd.read_csv(written["norm_per_task_csv"])
    experts = norms[norms["kind"] == "expert"]
    assert bars["expert"].tolist() == [m.split("__")[1] for m in experts["model_id"]]  # x0, x1, x2
    assert bars["task_vector_norm"].tolist() == pytest.approx(experts["task_vector_norm"].tolist(), rel=1e-9)
    assert (bars["task_vector_norm"] > 0).all()
    svg = Path(written["norm_per_task_svg"]).read_text()
    assert Path(written["norm_per_task_png"]).stat().st_size > 0
    assert all(name in svg for name in ("x0", "x1", "x2")) and "whole-model task-vector norm per task" in svg


def test_accuracy_against_norm_points_are_the_main_protocol(study):
    _, written = study
    scores, norms = _tables(written)
    points = pd.read_csv(written["accuracy_vs_norm_csv"]).set_index("model_id")
    # the main protocol: the three experts and the TA merges at the recipe's lambda (sweep points stay out)
    assert set(points.index) == {"expert__x0", "expert__x1", "expert__x2", "ta__n02_s00", "ta__n02_s01",
                                 "ta__n03_full"}
    for mid, row in points.iterrows():
        t1, t2 = STUDY_SCORES[mid]
        assert row["mean"] == pytest.approx(100 * (t1 + t2) / 2)
        assert row["task_vector_norm"] == pytest.approx(norms.set_index("model_id").loc[mid, "task_vector_norm"])
        assert row["series"] == ("experts alone" if mid.startswith("expert") else "TA")
    assert "accuracy against task-vector norm" in Path(written["accuracy_vs_norm_svg"]).read_text()


def test_balanced_against_unbalanced_table(study):
    """The reality-check paper's Fig. 6 as a table: per method and n, merges split at the median max/min ratio of
    their experts' whole-model norms; recomputed here in float64."""
    run, written = study
    _, norms = _tables(written)
    own = {m.split("__")[1]: v for m, k, v in zip(norms["model_id"], norms["kind"], norms["task_vector_norm"])
           if k == "expert"}
    from wildmerge.run import RunFolder

    members = {e.model_id: e.experts for e in RunFolder(run).read_plan().entries}
    ratio = {m: max(own[x] for x in members[m]) / min(own[x] for x in members[m])
             for m in ("ta__n02_s00", "ta__n02_s01")}
    low, high = sorted(ratio, key=ratio.get)
    mean = {m: 100 * np.mean(STUDY_SCORES[m], dtype=np.float64) for m in ratio}
    (row,) = pd.read_csv(written["table_balance_csv"]).to_dict("records")  # n = 3 has one merge: no split
    assert (row["method"], row["n"], row["merges"]) == ("TA", 2, 2)
    assert row["balanced_ratio"] == pytest.approx(ratio[low]) and row["unbalanced_ratio"] == pytest.approx(ratio[high])
    assert row["balanced_mean"] == pytest.approx(mean[low]) and row["unbalanced_mean"] == pytest.approx(mean[high])
    assert row["diff_pp"] == pytest.approx(mean[low] - mean[high])
    md = Path(written["leaderboard_md"]).read_text()
    assert "the reality-check paper, Fig. 6" in md
    page = Path(written["index_html"]).read_text()
    assert "Norm-balanced against norm-unbalanced subsets" in page and "Fig. 12" in page
    # Fig. 6 drawn: one pair of bars per row of the table, the bars' heights its two means
    assert Path(written["balance_png"]).stat().st_size > 0
    assert "subsets per method (the reality-check paper, Fig. 6)" in page
    svg = Path(written["balance_svg"]).read_text()
    assert "TA\nn = 2" in svg or ("n = 2" in svg and "TA" in svg)
    assert f"{row['balanced_ratio']:.2f}" in svg and f"{row['unbalanced_ratio']:.2f}" in svg


def _curve64(values):
    x = np.asarray(values, dtype=np.float64)
    return float(x.mean()), float(math.sqrt(((x - x.mean()) ** 2).mean()))


def test_combine_writes_figs_3_4_6_across_bases(study, tmp_path):
    run_a, written = study
    run_b = tmp_path / "other"  # a second "base": the same merges, other scores
    shutil.copytree(run_a, run_b, ignore=shutil.ignore_patterns("report", "eval"))
    other = {k: (a + 0.2 if k == "base" else a + 0.1, b) for k, (a, b) in STUDY_SCORES.items()}
    fabricate_results(run_b, other)
    out = tmp_path / "combined"
    assert main(["report", "--combine", str(run_a), str(run_b), "--out", str(out)]) == 0
    curves = pd.read_csv(out / "combined_curves.csv")
    assert set(curves["base_model"]) == {"tiny", "tiny (other)"}
    norms = pd.read_csv(written["norms_csv"]).set_index("model_id")["task_vector_norm"]
    groups = {1: ["expert__x0", "expert__x1", "expert__x2"], 2: ["ta__n02_s00", "ta__n02_s01"], 3: ["ta__n03_full"]}
    for label, scores in (("tiny", STUDY_SCORES), ("tiny (other)", other)):
        for quantity, value in (("mean", lambda m: 100 * (scores[m][0] + scores[m][1]) / 2),
                                ("task_vector_norm", lambda m: norms[m])):  # same weights: same norms
            got = curves[(curves["base_model"] == label) & (curves["quantity"] == quantity)].set_index("n")
            assert got["method"].unique().tolist() == ["TA"] and sorted(got.index) == [1, 2, 3]
            for n, models in groups.items():
                mean, std = _curve64([value(m) for m in models])
                assert got.loc[n, "mean"] == pytest.approx(mean) and got.loc[n, "std"] == pytest.approx(std, abs=1e-9)
    svg = (out / "combined_vs_n.svg").read_text()
    assert (out / "combined_vs_n.png").stat().st_size > 0
    assert "tiny (other) (Fig. 4)" in svg and "tiny (Figs. 3 / 6)" in svg
    assert "combined_vs_n.png" in (out / "combined.md").read_text()
    env = json.loads((out / "environment.json").read_text())  # the versions once, and each run's families
    assert [r["path"] for r in env["runs"]] == [str(Path(run_a).resolve()), str(Path(run_b).resolve())]
    assert env["packages"]["torch"] == versions.installed()["torch"]
    assert "details in `environment.json`" in (out / "combined.md").read_text()


def test_combine_tables_the_hyperparameters_each_run_chose(study, tmp_path):
    """Two runs (seeds) of one grid: each run's choice is its best sweep point on test (no validation split), and
    the counts say how often each lambda was chosen."""
    run_a, _ = study
    run_b = tmp_path / "seed1"
    shutil.copytree(run_a, run_b, ignore=shutil.ignore_patterns("report", "eval"))
    other = {**STUDY_SCORES, "ta__n03_full__lambda-0.5": (0.9, 0.9)}  # lambda 0.5 now beats 1.0 on test
    fabricate_results(run_b, other)
    out = tmp_path / "combined"
    assert main(["report", "--combine", str(run_a), str(run_b), "--out", str(out)]) == 0
    chosen = pd.read_csv(out / "chosen_hyperparameters.csv")
    sweep = {"ta__n03_full": 1.0, "ta__n03_full__lambda-0.5": 0.5, "ta__n03_full__lambda-1.5": 1.5}
    for label, scores in (("tiny", STUDY_SCORES), ("tiny (seed1)", other)):
        best = max(sweep, key=lambda m: np.mean(scores[m], dtype=np.float64))
        row = chosen[chosen["run"] == label].iloc[0]
        assert (row["method"], row["rule"], row["setting"]) == ("TA", "grid, on test", f"lambda={sweep[best]}")
        assert row["test_mean"] == pytest.approx(100 * np.mean(scores[best], dtype=np.float64))
    counts = pd.read_csv(out / "chosen_counts.csv")
    assert sorted(zip(counts["setting"], counts["chosen"], counts["runs"])) == [("lambda=0.5", 1, 2),
                                                                               ("lambda=1.0", 1, 2)]
    assert "## Hyperparameters chosen across runs" in (out / "combined.md").read_text()
