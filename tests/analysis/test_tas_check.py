"""Does TAS track accuracy on a user's pool? The check's maths on known numbers, and ``wildmerge tune --check`` /
``sample --tune --tune-check`` end to end on real tiny models scored by lm-eval."""

import json
import math

import pytest
import yaml
from helpers import lm_family  # noqa: F401  (fixture)

from wildmerge.analysis.tas.check import spearman, spread, summarize, verdict


def _records(tas, acc=None):
    return [{"candidate": f"c{i}", "hparams": {"lambda": round(0.1 * (i + 1), 1)}, "tas": {"l2": t},
             **({"accuracy": acc[i]} if acc else {})} for i, t in enumerate(tas)]


def test_spearman_sign_and_regret_in_points():
    rows = _records([3.0, 2.0, 1.0, 4.0], acc=[0.5, 0.6, 0.7, 0.4])  # lower TAS, higher accuracy: a perfect proxy
    s = summarize(rows)
    assert s["spearman"] == pytest.approx(-1.0) and s["regret_points"] == 0.0 and s["tracks"]
    assert s["choice"] == {"lambda": 0.3} == s["best"]
    rows = _records([1.0, 2.0, 3.0, 4.0], acc=[0.4, 0.5, 0.6, 0.7])  # backwards: TAS picks the worst
    s = summarize(rows)
    assert s["spearman"] == pytest.approx(1.0) and s["regret_points"] == pytest.approx(30.0) and not s["tracks"]
    assert "warning: TAS does not track accuracy" in verdict("ta", s)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))  # a constant side has no ranking


def test_fewer_than_three_points_never_track():
    """One or two evaluated points (a grid smaller than K) conclude nothing, and the verdict says so."""
    for n in (1, 2):
        s = summarize(_records([1.0, 2.0][:n], acc=[0.7, 0.5][:n]))
        assert s["points"] == n and not s["tracks"]
        assert "cannot tell whether TAS tracks accuracy" in verdict("ta", s)


def test_spread_covers_the_ranking_and_keeps_the_tas_choice():
    records = _records([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 0.5])
    picked = spread(records, 3)
    assert [r["tas"]["l2"] for r in picked] == [0.5, 3.0, 6.0]
    assert spread(records, 10) == sorted(records, key=lambda r: r["tas"]["l2"])


def _pool(family, tmp_path):
    experts = []
    for i, path in enumerate(family["experts"]):
        data = tmp_path / f"texts{i}.jsonl"
        data.write_text("".join(json.dumps({"text": f"{i} plus {j} equals {i + j}"}) + "\n" for j in range(8)))
        experts.append({"model": path, "name": f"e{i}", "calibration": str(data)})
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": family["base"]}, "experts": experts}))
    return str(pool)


def test_tune_check_evaluates_k_points_and_sample_records_the_check(lm_family, tmp_path):  # noqa: F811
    from wildmerge.cli import main
    from wildmerge.run import RunFolder

    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"ta_lambda": {"method": "ta", "grid": {"lambda": [0.2, 0.6, 1.0, 1.4]}}}))
    pool, out = _pool(lm_family, tmp_path), tmp_path / "tune"
    assert main(["tune", "--pool", pool, "--grid", str(grid), "--samples", "4", "--out", str(out), "--check", "3",
                 "--suite", lm_family["suite"]]) == 0
    check = json.loads((out / "ta_lambda" / "check" / "check.json").read_text())
    assert check["points"] == len(check["rows"]) == 3
    tas = {r["candidate"]: r["tas"]["l2"] for r in check["rows"]}
    selected = json.loads((out / "ta_lambda" / "selected.json").read_text())
    assert selected["candidate"] in tas and min(tas, key=tas.get) == selected["candidate"]
    accuracy = [r["accuracy"] for r in check["rows"]]
    assert check["regret_points"] == pytest.approx(100 * (max(accuracy) - check["choice_accuracy"]))
    assert check["tracks"] == (check["spearman"] <= -0.5 and check["regret_points"] <= 1.0)
    assert (out / "ta_lambda" / "check" / "tas_check_ta.png").stat().st_size > 0
    # AdaMMS* beside TAS on the same evaluations (one-hyperparameter grid of 4): its choice evaluated too
    from scipy.stats import spearmanr

    adamms = check["adamms"]
    interior = [r for r in adamms["records"] if r["score"] is not None]
    assert [r["hparams"]["lambda"] for r in interior] == [0.6, 1.0]  # the two ends have one neighbour
    choice = min(interior, key=lambda r: r["score"])["hparams"]
    assert adamms["choice"] == choice and any(r["hparams"] == choice for r in check["rows"])
    acc = {r["hparams"]["lambda"]: r["accuracy"] for r in check["rows"]}
    assert adamms["choice_accuracy"] == acc[choice["lambda"]]
    assert adamms["regret_points"] == pytest.approx(100 * (max(acc.values()) - acc[choice["lambda"]]))
    pairs = [(r["score"], acc[r["hparams"]["lambda"]]) for r in interior if r["hparams"]["lambda"] in acc]
    assert adamms["points"] == len(pairs)
    if len(pairs) >= 2 and len({p[1] for p in pairs}) > 1:
        assert adamms["spearman"] == pytest.approx(spearmanr(*zip(*pairs)).statistic)
    else:
        assert math.isnan(adamms["spearman"])

    run = tmp_path / "run"
    assert main(["sample", "--pool", pool, "--methods", "ta", "--sizes", "1", "--k", "1", "--no-evaluate",
                 "--tune", "--tune-grid", str(grid), "--tune-samples", "4", "--tune-check", "3",
                 "--suite", lm_family["suite"], "--out", str(run), "--executor", "serial", "--dtype", "float32",
                 "--limit", "4"]) == 0
    tuned = RunFolder(run).read_manifest().tuned["ta"]
    assert tuned["check"]["points"] == 3 and "spearman" in tuned["check"] and "rows" not in tuned["check"]
    assert tuned["check"]["choice"] == tuned["hparams"]
    # the check scored with the run's evaluation options (its dtype and limit), not options of its own
    from wildmerge.run import read_eval_index

    stores = list((RunFolder(run).tune_dir / "ta" / "check" / "eval").iterdir())
    jobs = read_eval_index(stores[0]).jobs.values()
    assert len(stores) == 1 and len(jobs) == 3
    assert all(j["settings"]["dtype"] == "float32" and j["settings"]["limit"] == 4 for j in jobs)
    assert tuned["check"]["adamms"]["choice"] in [{"lambda": v} for v in (0.6, 1.0)]
