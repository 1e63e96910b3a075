"""Normalized accuracy (each expert's own tasks, merge over expert) and the cost-against-performance figure, on
hand-computed numbers; and a report of a run whose pool declares its experts' tasks shows both."""

import math

import pandas as pd
import yaml

from report_fixtures import fabricate_run
from wildmerge.analysis.report.costs import cost_points
from wildmerge.analysis.report.leaderboard import add_normalized
from wildmerge.analysis.report.plots import cost_vs_performance
from wildmerge.analysis.report.write import write_report
from wildmerge.eval.store import ResultStore, write_result


def _df():
    rows = [("base", "base", "", 50, 50), ("e1", "expert", "", 90, 40), ("e2", "expert", "", 40, 60),
            ("e3", "expert", "", 50, 50), ("m12", "merge", "e1;e2", 45, 30), ("m13", "merge", "e1;e3", 72, 50)]
    return pd.DataFrame([{"model_id": m, "kind": k, "experts": e, "t1": a, "t2": b, "status": "ok",
                          "variant": "TA", "mean": (a + b) / 2, "job_id": f"j-{m}"} for m, k, e, a, b in rows])


def test_normalized_accuracy_is_each_experts_own_tasks_over_its_own_score():
    df = _df()
    add_normalized(df, {"e1": ["t1"], "e2": ["t2"]})  # e3 declares nothing
    got = dict(zip(df["model_id"], df["normalized"]))
    assert got["e1"] == got["e2"] == 1.0
    assert got["m12"] == (45 / 90 + 30 / 60) / 2 == 0.5
    assert got["m13"] == 72 / 90  # only e1 declares tasks
    assert math.isnan(got["base"]) and math.isnan(got["e3"])


def test_cost_points_and_figure(tmp_path):
    df = _df()
    store = ResultStore(tmp_path / "store").prepare()
    for mid, seconds in (("m12", 10.0), ("m13", 30.0)):
        write_result(store.result_path(f"j-{mid}"), {"job_id": f"j-{mid}", "status": "ok", "seconds": seconds,
                                                                 "fingerprint": mid, "settings": {}})
    points = cost_points(store, df, {"m12": 1.0, "m13": 3.0})
    row = points.iloc[0]
    assert (row["variant"], row["k"], row["merge_seconds"], row["eval_seconds"]) == ("TA", 2, 2.0, 20.0)
    assert row["mean"] == (37.5 + 61) / 2
    saved = cost_vs_performance(points, tmp_path, "t")
    assert saved["png"].stat().st_size > 0
    assert cost_vs_performance(cost_points(store, df, {}), tmp_path, "t") is None  # no merge time recorded


def test_report_shows_normalized_accuracy_when_the_pool_declares_tasks(tiny_family, tmp_path):
    from wildmerge.hub import ResolvedModel
    from wildmerge.run import Manifest, PoolModels, RunFolder

    run = fabricate_run(tmp_path / "run", tiny_family)
    folder = RunFolder(run)
    plan = folder.read_plan()
    experts = {"ta_2_s0": ["e1", "e2"], "ta_2_s1": ["e2", "e3"], "ta_2_s2": ["e1", "e3"],
               "ties_2_s0": ["e1", "e2"], "ties_2_s1": ["e2", "e3"]}
    folder.write_plan(plan.model_copy(update={"entries": [
        e.model_copy(update={"experts": experts.get(e.model_id, e.experts)}) for e in plan.entries]}))
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": tiny_family["base"]}, "experts": [
        {"model": p, "name": f"e{i + 1}", "tasks": [["t1"], ["t2"], ["t1", "t2"]][i]}
        for i, p in enumerate(tiny_family["experts"])]}))
    base = ResolvedModel(name="base", model=tiny_family["base"], kind="local", path=tiny_family["base"])
    folder.write_manifest(Manifest(pool="tiny", pool_file=str(pool), seed=0, sizes=[2], k=1, subsets=[],
                                   models=PoolModels(base=base, experts=[]), sampling={}))
    write_report(run)
    md = (run / "report" / "leaderboard.md").read_text()
    assert "## Normalized accuracy" in md
    assert "normalized acc." in (run / "report" / "index.html").read_text()
