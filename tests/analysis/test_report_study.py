"""The rest of the paper in the report: sweep points and tuned variants out of Table 1, homogeneous merges per domain,
per-task changes, Average rows across runs, layer-wise diagnostics plots, model cards, and every plot file.

The merges are real (`wildmerge sample` on conftest's tiny models, TA with a lambda grid); the scores are chosen
(sealed result files), so every table cell is computed by hand below.
"""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import write_plan
from report_fixtures import STUDY_SCORES, fabricate_results, mean_pct, sample_study
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main
from wildmerge.run import RunFolder

SCORES = STUDY_SCORES  # t1, t2 as lm-eval fractions; model mean in percent


@pytest.fixture(scope="module")
def study(tiny_family, tmp_path_factory):
    run = sample_study(tmp_path_factory.mktemp("study"), tiny_family)
    return run, write_report(run)


def test_sweep_points_stay_out_of_table_1(study):
    _, written = study
    t = pd.read_csv(written["table_vs_base_csv"])
    # base 40; experts 35, 45, 35; main TA: n=2 42, 44; n=3 50 (the sweep point at the recipe's lambda = 1.0)
    assert list(t["method"].unique()) == ["TA"]
    cell = t.set_index("n")
    assert cell.loc[2, "k"] == 2 and cell.loc[2, "mean_diff_pp"] == pytest.approx(3.0)
    assert cell.loc[3, "k"] == 1 and cell.loc[3, "mean_diff_pp"] == pytest.approx(10.0)
    assert "lambda=" not in Path(written["accuracy_vs_n_svg"]).read_text()  # no one-point sweep curves
    md = Path(written["leaderboard_md"]).read_text()
    assert "| TA       | 40.0   | 33 / -1.67  | 100 / +3.00 | 100 / +10.00 |" in md


def test_sweep_table_and_plot(study):
    _, written = study
    sweep = pd.read_csv(written["sweep_lam_csv"])
    assert sweep["lambda"].tolist() == [0.5, 1.0, 1.5]
    assert sweep["mean"].tolist() == pytest.approx([46.0, 50.0, 30.0])
    assert sweep["diff_vs_base_pp"].tolist() == pytest.approx([6.0, 10.0, -10.0])
    assert sweep["task_vector_norm"].notna().all() and sweep["task_vector_norm"].is_monotonic_increasing
    svg = Path(written["sweep_lam_svg"]).read_text()
    assert "lambda (swept hyperparameter, unitless)" in svg and "mean accuracy (%)" in svg


def test_per_task_change_vs_base(study):
    _, written = study
    t = pd.read_csv(written["table_task_change_vs_base_csv"]).set_index(["method", "n"])
    # experts vs base (50, 30): t1 -10, +10, 0 -> 0; t2 0, 0, -10 -> -10/3
    assert t.loc[("experts alone", 1), "t1"] == pytest.approx(0.0)
    assert t.loc[("experts alone", 1), "t2"] == pytest.approx(-10 / 3)
    # TA n=2: t1 0, +2 -> +1; t2 +4, +6 -> +5; mean +3
    assert t.loc[("TA", 2), ["t1", "t2", "mean"]].tolist() == pytest.approx([1.0, 5.0, 3.0])
    assert t.loc[("TA", 3), "k"] == 1


def test_tuned_variants_have_their_own_section(study, tmp_path):
    run, _ = study
    copy = tmp_path / "run"
    import shutil

    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report", "*.safetensors"))
    plan = RunFolder(copy).read_plan()
    for e in plan.entries:
        e.path = e.path.replace(str(run), str(copy))
        if e.model_id == "ta__n03_full__lambda-1.5":
            e.ablations = []  # non-default settings outside any sweep: a tuned variant
    RunFolder(copy).write_plan(plan)
    for d in (copy / "models").iterdir():  # borrow the weights for the norms
        (d / "model.safetensors").symlink_to(run / "models" / d.name / "model.safetensors")
    written = write_report(copy)
    assert list(pd.read_csv(written["table_vs_base_csv"])["method"].unique()) == ["TA"]
    assert len(pd.read_csv(written["sweep_lam_csv"])) == 2
    md = Path(written["leaderboard_md"]).read_text()
    assert "## Tuned variants" in md and "TA (lambda=1.5)" in md


def test_model_cards_carry_sources_recipe_and_scores(study):
    run, _ = study
    card = (run / "models" / "ta__n02_s01" / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["library_name"] == "transformers" and "merge" in front["tags"]
    result = {r["dataset"]["name"]: r["metrics"][0]["value"] for r in front["model-index"][0]["results"]}
    assert result == pytest.approx({"t1": 0.52, "t2": 0.36})
    assert "| **mean** | **44.00** |" in card and "merge_method: task_arithmetic" in card
    experts = RunFolder(run).read_plan().entries
    subset = next(e for e in experts if e.model_id == "ta__n02_s01").experts
    for name in subset:
        assert f"| expert | {name} |" in card


def test_model_card_pins_hub_revisions():
    from wildmerge.run import PlanEntry, PoolModels, ResolvedModel
    from wildmerge.merging.model_card import render_card

    sha = "0123456789abcdef0123456789abcdef01234567"
    models = PoolModels(base=ResolvedModel(name="base", model="org/base", kind="hub", path="/x", revision=sha),
                        experts=[ResolvedModel(name="a", model="org/a", kind="hub", path="/a", revision="f" * 40)])
    entry = PlanEntry(model_id="ta__n01", kind="merge", path="/m", method="ta", label="TA", n=1, experts=["a"],
                      hparams={"lambda": 1.0})
    card = render_card(entry, models, "merge_method: task_arithmetic\n")
    front = yaml.safe_load(card.split("---")[1])
    assert front["base_model"] == ["org/base", "org/a"] and front["base_model_relation"] == "merge"
    assert f"| base | base | `org/base` | `{sha}` |" in card and f"`{'f' * 40}`" in card
    assert "model-index" not in front  # no scores before evaluation


def test_homogeneous_merges_are_reported_per_domain(tiny_family, tmp_path):
    ex = tiny_family["experts"]
    entries = [{"model_id": "base", "kind": "base", "path": tiny_family["base"]}]
    doms = {"m1": "math", "m2": "math", "d1": "medical", "d2": "medical"}
    entries += [{"model_id": f"expert__{e}", "kind": "expert", "path": ex[i % 3], "domain": d, "experts": [e]}
                for i, (e, d) in enumerate(doms.items())]
    for method in ("ta", "ties"):
        for sub, n, members in (("domain_math", 2, ["m1", "m2"]), ("domain_medical", 2, ["d1", "d2"]),
                                ("domain_all", 4, list(doms))):
            entries.append({"model_id": f"{method}__{sub}", "kind": "merge", "path": ex[n % 3], "method": method,
                            "n": n, "subset_id": sub, "domain": sub.split("_")[1], "experts": members})
    run = write_plan(tmp_path / "run", entries)
    scores = {"base": (0.5, 0.3), "expert__m1": (0.4, 0.3), "expert__m2": (0.5, 0.3), "expert__d1": (0.5, 0.3),
              "expert__d2": (0.5, 0.3), "ta__domain_math": (0.6, 0.4), "ta__domain_medical": (0.4, 0.3),
              "ta__domain_all": (0.7, 0.3), "ties__domain_math": (0.5, 0.3), "ties__domain_medical": (0.5, 0.32),
              "ties__domain_all": (0.5, 0.34)}
    fabricate_results(run, scores)
    written = write_report(run)
    t = pd.read_csv(written["table_homogeneous_csv"]).set_index(["method", "configuration"])
    for (method, sub) in (("TA", "math"), ("TA", "medical"), ("TIES", "all")):
        config = "All experts" if sub == "all" else f"{sub.capitalize()} only"
        expected = mean_pct(scores[f"{method.lower()}__domain_{sub}"])
        assert t.loc[(method, config), "mean"] == pytest.approx(expected)
        assert t.loc[(method, config), "diff_vs_base_pp"] == pytest.approx(expected - 40.0)
    assert t.loc[("TA", "Math only"), "n"] == 2 and t.loc[("TA", "All experts"), "n"] == 4
    # Math-only and Medical-only (both n = 2) are never pooled into a Table 1 cell
    assert pd.read_csv(written["table_vs_base_csv"]).query("n == 2").empty
    md = Path(written["leaderboard_md"]).read_text()
    assert "| TA       | 40.0   | 50.0 (+10.00)       | 35.0 (-5.00)           | 50.0 (+10.00)         |" in md
    assert "merge method" in Path(written["homogeneous_bars_svg"]).read_text()


def test_combine_average_rows(study, tiny_family, tmp_path, capsys):
    run_a, _ = study
    # a second "base": same plan, other scores (base 50; every model +10 points on t1 -> +5 on the mean)
    import shutil

    run_b = tmp_path / "other"
    shutil.copytree(run_a, run_b, ignore=shutil.ignore_patterns("report", "eval"))
    fabricate_results(run_b, {k: (a + 0.2 if k == "base" else a + 0.1, b) for k, (a, b) in SCORES.items()})
    out = tmp_path / "combined"
    assert main(["report", "--combine", str(run_a), str(run_b), "--out", str(out)]) == 0
    t = pd.read_csv(out / "combined_vs_base.csv")
    avg = t[t["base_model"] == "Average"].set_index("n")
    # run a: base 40, TA n=2 diffs +2, +4; run b: base 50, diffs (47 - 50), (49 - 50) -> -3, -1
    assert avg.loc[2, "mean_diff_pp"] == pytest.approx((3.0 + -2.0) / 2)
    assert avg.loc[2, "pct_beat"] == pytest.approx((100 + 0) / 2) and avg.loc[2, "bases"] == 2
    assert avg.loc[2, "reference_acc"] == pytest.approx(45.0)
    md = (out / "combined.md").read_text()
    assert "| Average      | TA       | 45.0   | 17 / -4.17 | 50 / +0.50  | 100 / +7.50  |" in md
    assert main(["report", "--combine", str(run_a), "--out", str(out)]) == 2
    assert "at least two run folders" in capsys.readouterr().err


def test_layerwise_diagnostics_plot(tmp_path):
    from wildmerge.analysis.report.layerwise_plots import layerwise_figures, shift_per_layer, weight_shares

    diag = {"layers": [{"layer": k, "group": g, "mcs": 1.0 + k + (g == "o"), "omega": [1.0 + k, 3.0]}
                       for k in range(3) for g in ("qkv", "o")]}
    assert shift_per_layer(diag) == {0: 3.0, 1: 5.0, 2: 7.0}
    assert weight_shares(diag)[1] == pytest.approx([0.4, 0.6])
    model = tmp_path / "m"
    model.mkdir()
    (model / "layerwise_diagnostics.json").write_text(json.dumps(diag))
    df = pd.DataFrame([{"model_id": "com__full", "kind": "merge", "variant": "CoM", "method": "com", "n": 2,
                        "experts": "a;b"}])
    saved = layerwise_figures(df, {"com__full": model}, tmp_path)
    svg = saved["CoM"]["svg"].read_text()
    assert "decoder layer" in svg and "importance weight share" in svg and "covariate shift" in svg


def test_every_plot_opens_with_labelled_axes(study):
    import matplotlib.image as mpimg

    _, written = study
    pngs = [Path(p) for k, p in written.items() if k.endswith("_png")]
    assert {p.stem for p in pngs} >= {"accuracy_vs_n", "accuracy_vs_n_per_task", "norm_vs_n", "sweep_lam"}
    for png in pngs:
        image = mpimg.imread(png)
        assert image.shape[0] > 200 and image.shape[1] > 200 and image[..., :3].std() > 0.01, png
        svg = png.with_suffix(".svg")
        texts = " ".join(t.text or "" for t in ET.parse(svg).iter() if t.tag.endswith("text"))
        assert "number of merged experts n" in texts or "swept hyperparameter" in texts \
            or "seconds per model" in texts or "expert (its task)" in texts \
            or "seconds spent choosing the hyperparameters" in texts or "counted from the config" in texts \
            or png.stem == "accuracy_vs_norm" and "‖θ_merged − θ_base‖₂" in texts, svg  # x axis (cost: seconds)
        assert "accuracy (%)" in texts or "task-vector norm" in texts, svg  # y axis, with its unit


def test_curves_differ_without_colour():
    from wildmerge.analysis.plotting import style

    looks = {(style(i)["marker"], style(i)["ls"]) for i in range(12)}
    assert len(looks) == 12  # marker and dash pattern tell twelve curves apart in grey scale


def test_model_card_keeps_the_merge_tools_text(study):
    run, _ = study
    card = (run / "models" / "ta__n02_s00" / "README.md").read_text()
    assert card.count("## The merge tool's own card") == 1  # kept once through the report's rewrite
    assert "mergekit" in card.split("## The merge tool's own card")[1]  # mergekit's card names itself
    assert card.count("\n---\n") == 1 and card.startswith("---\n")  # one front matter block


def test_bad_report_arguments_fail_with_a_message(capsys):
    assert main(["report"]) == 2
    assert "give a run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused when the arguments are parsed, before any model is read
        main(["analyze", "geometry", "--tolerance", "1.5"])
    assert exit_.value.code == 2
    assert "argument --tolerance: expected a number >= 0 and < 1, got 1.5" in capsys.readouterr().err


def test_model_card_keeps_every_suites_scores(tmp_path):
    from wildmerge.run import PlanEntry, PoolModels, ResolvedModel
    from wildmerge.merging.model_card import card_evaluations, write_card

    models = PoolModels(base=ResolvedModel(name="base", model="/b", kind="local", path="/b"),
                        experts=[ResolvedModel(name="a", model="/a", kind="local", path="/a")])
    entry = PlanEntry(model_id="m", kind="merge", path=str(tmp_path), method="ta", label="TA", n=1, experts=["a"])
    write_card(tmp_path, entry, models, "x: 1\n", scores={"medmcqa": 0.4}, suite="medical")
    write_card(tmp_path, entry, models, "x: 1\n", scores={"gsm": 0.25, "bbh": 0.5}, suite="math")
    write_card(tmp_path, entry, models, "x: 1\n", scores={"medmcqa": 0.45}, suite="medical")  # a rerun replaces
    card = (tmp_path / "README.md").read_text()
    assert card_evaluations(card) == {"medical": {"medmcqa": 0.45}, "math": {"gsm": 0.25, "bbh": 0.5}}
    assert "## Evaluation: suite `math`" in card and "| **mean** | **37.50** |" in card
