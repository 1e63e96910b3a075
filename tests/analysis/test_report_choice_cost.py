"""The cost of choosing hyperparameters per method (the reality-check paper's Table 1 merging cost, Fig. 2): a real
small run (`wildmerge sample` with a grid, `--tune` by TAS, evaluated by lm-eval on helpers' tiny suite), its
report's table against the seconds summed by hand from the run's own record files."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import lm_family  # noqa: F401
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main

TEXTS = ["Grass is green", "The sky is blue", "1 plus 1 equals 2", "Snow is white", "2 plus 3 equals 5",
         "4 plus 4 equals 8", "Grass is red", "The sky is green", "Snow is blue", "1 plus 2 equals 3"]


@pytest.fixture(scope="module")
def run(lm_family, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("choice_cost")
    experts = []
    for i, path in enumerate(lm_family["experts"]):
        (root / f"texts{i}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[i::2] * 2))
        experts.append({"model": path, "name": f"e{i}", "data": {"text": f"texts{i}.jsonl"}})
    (root / "pool.yml").write_text(yaml.safe_dump({"name": "tiny", "base": {"model": lm_family["base"]},
                                                   "experts": experts}))
    (root / "grid.yml").write_text(yaml.safe_dump({"lam": {"method": "ta", "grid": {"lambda": [0.3, 0.6]}}}))
    (root / "tune.yml").write_text(yaml.safe_dump({"ta": {"method": "ta", "grid": {"lambda": [0.3, 0.6, 1.0]}}}))
    out = root / "run"
    assert main(["sample", "--pool", str(root / "pool.yml"), "--methods", "ta", "--sizes", "2", "--k", "1",
                 "--grid", str(root / "grid.yml"), "--tune", "--tune-grid", str(root / "tune.yml"),
                 "--tune-samples", "4", "--evaluate", "--suite", lm_family["suite"], "--out", str(out)]) == 0
    write_report(out)
    return out


def _seconds(path: Path) -> float:
    return float(json.loads(path.read_text())["seconds"])


def test_grid_and_tas_seconds_are_the_runs_records(run):
    table = pd.read_csv(run / "report" / "choice_cost.csv")
    assert table["method"].tolist() == ["TA"]
    row = table.iloc[0]
    plan = json.loads((run / "plan.json").read_text())["entries"]
    points = [e for e in plan if e["kind"] == "merge" and e.get("ablations")]
    assert len(points) == row["grid_points"] == 2  # lambda 0.3 and 0.6 on the full pool
    merged = sum(_seconds(Path(e["path"]) / "merge_info.json") for e in points)
    index = json.loads((run / "eval" / "mini" / "index.json").read_text())["models"]
    scored = sum(_seconds(run / "eval" / "mini" / "results" / f"{index[e['model_id']]}.json") for e in points)
    assert row["grid_merges_timed"] == row["grid_evaluations"] == 2
    assert row["grid_merge_seconds"] == pytest.approx(merged) and row["grid_eval_seconds"] == pytest.approx(scored)
    assert row["grid_seconds"] == pytest.approx(merged + scored)
    candidates = sorted((run / "tune" / "ta" / "candidates").glob("*.json"))
    assert row["tas_candidates"] == len(candidates) == 3
    assert row["tas_seconds"] == pytest.approx(sum(_seconds(c) for c in candidates))
    assert row["grid_over_tas"] == pytest.approx((merged + scored) / row["tas_seconds"])
    assert row["grid_seconds"] > 0 and row["tas_seconds"] > 0


def test_the_section_names_the_paper_and_the_shared_features(run):
    md = (run / "report" / "leaderboard.md").read_text()
    assert "## Cost of choosing hyperparameters per method (the reality-check paper's Table 1" in md
    features = sum(_seconds(p) for p in (run / "tune" / "expert_features").glob("*/seconds.json"))
    assert features > 0 and f"computed once for every method's sweep: {features:.1f} s" in md
    assert "This suite has no validation split: the grid is chosen on test" in md  # helpers' suite has none
    assert "Cost of choosing hyperparameters" in (run / "report" / "index.html").read_text()


def test_fig2_points_are_the_grid_choice_and_the_tas_choice(run):
    """Fig. 2 (accuracy against the cost of choosing): each point recomputed by hand from the run's records."""
    from wildmerge.run import RunFolder

    points = pd.read_csv(run / "report" / "choice_cost_vs_accuracy.csv").set_index("choice")
    cost = pd.read_csv(run / "report" / "choice_cost.csv").iloc[0]
    scores = pd.read_csv(run / "report" / "scores.csv").set_index("model_id")
    plan = json.loads((run / "plan.json").read_text())["entries"]
    grid = {e["model_id"]: e for e in plan if e["kind"] == "merge" and e.get("ablations")}
    best = max(grid, key=lambda m: (scores.loc[m, "mean"], -list(grid).index(m)))  # no validation: best on test
    assert points.loc["grid", "model_ids"] == best
    assert points.loc["grid", "accuracy"] == pytest.approx(scores.loc[best, "mean"])
    assert points.loc["grid", "choice_seconds"] == pytest.approx(cost["grid_seconds"])
    chosen = RunFolder(run).read_manifest().tuned["ta"]["hparams"]
    at_choice = [m for m, e in grid.items() if all(e["hparams"].get(k) == v for k, v in chosen.items())]
    main = [e["model_id"] for e in plan if e["kind"] == "merge" and not e.get("ablations")]
    expected = at_choice[:1] or main  # the sweep point at the TAS choice, else the main merges (n = 2 is the pool)
    assert points.loc["TAS", "model_ids"].split(";") == expected
    assert points.loc["TAS", "accuracy"] == pytest.approx(sum(scores.loc[m, "mean"] for m in expected) / len(expected))
    assert points.loc["TAS", "choice_seconds"] == pytest.approx(cost["tas_seconds"])
    assert (run / "report" / "choice_cost_vs_accuracy.png").stat().st_size > 0
    assert "the reality-check paper&#x27;s Fig. 2" in (run / "report" / "index.html").read_text() or \
        "the reality-check paper's Fig. 2" in (run / "report" / "index.html").read_text()


def test_the_tas_choice_is_tabled_with_the_grid_choice(run):
    """``report --combine``'s chosen-hyperparameter table reads TAS's choice from the manifest, beside the grid's."""
    from wildmerge.analysis.report.choices import run_choices
    from wildmerge.analysis.report.run_data import RunData
    from wildmerge.analysis.report.scores import collect_scores

    data = RunData.read(run)
    df, _, _ = collect_scores(data, None)
    rows = {r["rule"]: r for r in run_choices(data, df, "r")}
    tuned = data.manifest.tuned["ta"]["hparams"]
    assert rows["TAS"]["setting"] == ", ".join(f"{k}={v}" for k, v in sorted(tuned.items()))
    grid = pd.read_csv(run / "report" / "choice_cost_vs_accuracy.csv").set_index("choice").loc["grid"]
    assert rows["grid, on test"]["setting"] == grid["setting"] and rows["TAS"]["method"] == "TA"
