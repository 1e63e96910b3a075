"""Normalized accuracy (each expert's own tasks, merge over expert) and the cost-against-performance figure, on
hand-computed numbers; and a report of a run whose pool declares its experts' tasks shows both."""

import math

import pandas as pd
import pytest
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


def _reference_normalized(scores, experts_of, own, lower):
    """The reality-check paper's normalized performance (Zhou et al. 2026, Sec. 4) in float64, written from its text:
    per expert, 1/T sum_t rho_t(model) / rho_t(expert) over its own tasks, rho = metric (higher is better) or
    1 / metric (lower is better); then the mean over the model's experts that declare tasks."""
    import numpy as np

    rho = {m: {t: np.float64(v) if t not in lower else 1.0 / np.float64(v) for t, v in s.items()}
           for m, s in scores.items()}
    out = {}
    for model, members in experts_of.items():
        per = [np.mean([rho[model][t] / rho[e][t] for t in own[e]]) for e in members if e in own]
        out[model] = float(np.mean(per)) if per else float("nan")
    return out


def test_normalized_inverts_a_lower_is_better_task_per_task():
    # t1 accuracy (higher is better), ppl perplexity (lower is better)
    scores = {"e1": {"t1": 80.0, "ppl": 20.0}, "e2": {"t1": 40.0, "ppl": 10.0},
              "m12": {"t1": 60.0, "ppl": 25.0}, "m1": {"t1": 88.0, "ppl": 16.0}}
    experts_of = {"e1": ["e1"], "e2": ["e2"], "m12": ["e1", "e2"], "m1": ["e1"]}
    own = {"e1": ["t1", "ppl"], "e2": ["ppl"]}
    # as in a run folder: an expert's row is ``expert__<name>``, its name in the ``experts`` cell
    df = pd.DataFrame([{"model_id": f"expert__{m}" if m.startswith("e") else m,
                        "kind": "expert" if m.startswith("e") else "merge",
                        "experts": ";".join(experts_of[m]), "status": "ok", **s} for m, s in scores.items()])
    add_normalized(df, own, lower_is_better=["ppl"])
    got = dict(zip(df["model_id"].str.removeprefix("expert__"), df["normalized"]))
    want = _reference_normalized(scores, experts_of, own, {"ppl"})
    assert got == pytest.approx(want, rel=1e-12)
    assert got["e1"] == got["e2"] == 1.0  # invariant: an expert against itself
    assert got["m1"] == pytest.approx((88 / 80 + 20 / 16) / 2)  # a lower perplexity than the expert's is > 1
    assert got["m12"] == pytest.approx(((60 / 80 + 20 / 25) / 2 + 10 / 25) / 2)
    add_normalized(df, own)  # read as higher-is-better the perplexity's ratio flips: the direction matters
    assert df.set_index("model_id").loc["m1", "normalized"] == pytest.approx((88 / 80 + 16 / 20) / 2)


def test_metric_direction_from_lm_eval_or_the_suite():
    from wildmerge.eval.suites import SuiteTask, higher_is_better

    assert higher_is_better("acc,none") and higher_is_better("exact_match,strict-match")
    assert not higher_is_better("word_perplexity,none") and not higher_is_better("perplexity,none")
    assert higher_is_better("my_metric,none") and not higher_is_better("my_metric,none", declared=False)
    # an undeclared direction is not dumped: stored suites and job files stay as they were
    assert "higher_is_better" not in SuiteTask(task="x", num_fewshot=0).model_dump()
    assert SuiteTask(task="x", num_fewshot=0, higher_is_better=False).model_dump()["higher_is_better"] is False


def test_report_reads_the_direction_from_the_runs_suite_file(tiny_family, tmp_path):
    from wildmerge.analysis.report.scores import lower_is_better

    run = fabricate_run(tmp_path / "run", tiny_family)
    assert lower_is_better(run, "mini") == []
    suite = run / "eval" / "mini" / "suite.yml"
    data = yaml.safe_load(suite.read_text())
    data["tasks"][0]["metric"] = "word_perplexity,none"
    data["tasks"][1]["higher_is_better"] = False
    suite.write_text(yaml.safe_dump(data))
    assert lower_is_better(run, "mini") == ["t1", "t2"]


@pytest.mark.parametrize("pool, suite", [("demo", "demo"), ("smollm2", "smollm2")])
def test_shipped_pools_declare_each_experts_trained_tasks(pool, suite):
    """Each expert's ``tasks:`` are exactly the suite tasks of the skills its family trained it on (a generation
    task belongs to the skill it generates), and every one is a task of the family's suite."""
    from wildmerge.eval.suites import load_suite
    from wildmerge.pools import load_pool

    labels = [t.name for t in load_suite(suite).tasks]
    if pool == "demo":
        from wildmerge.families.demo.spec import EXPERTS
        skill_of = {t: t.removesuffix("_gen") for t in labels}
    else:
        from wildmerge.families.smollm2.spec import EXPERTS
        from wildmerge.families.smollm2.tasks import GENERATION_TASKS
        skill_of = {t: t for t in labels} | {name.removeprefix("smollm2_"): skill
                                              for name, (skill, _) in GENERATION_TASKS.items()}
    trained = {e.name: sorted(t for t in labels if skill_of[t] in e.mixture) for e in EXPERTS}
    declared = {e.label: sorted(e.tasks or []) for e in load_pool(pool).experts}
    assert declared == {name: trained[name] for name in declared} and all(declared.values())
