"""Chain of Merges' studies as presets: Table 3 (``--ablation com_components``: RegMean, the chain, + Norm, + Sim) and
Table 4 (``com_samples``: calibration samples per task as a grid key), merged for real on tiny models and reported in
the sweep tables (scores chosen)."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from safetensors.torch import load_file

from report_fixtures import fabricate_results
from wildmerge.analysis.report.write import write_report
from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.recipes.method import default_hparams, load_method_recipe, split_hparams
from wildmerge.recipes.render import render_recipe
from wildmerge.run import RunFolder
from wildmerge.recipes.sweeps import load_sweeps


def test_presets_are_the_papers_tables_and_all_leaves_them_out():
    sweeps = load_sweeps(["com_components"])
    assert list(sweeps) == ["com_components:regmean", "com_components"]
    assert sweeps["com_components:regmean"].method == "regmean" and sweeps["com_components:regmean"].points() == [{}]
    assert sweeps["com_components:regmean"].recipe.label == "RegMean"  # loaded with the sweep, once per run
    assert sweeps["com_components"].points() == [{"norm": "none", "sim": False}, {"norm": "token", "sim": False},
                                                {"norm": "token", "sim": True}]
    assert [p["n_samples"] for p in load_sweeps(["com_samples"])["com_samples"].points()] == \
        [2, 5, 10, 50, 100, 200, 300, 400, 500]
    assert not any(name.startswith("com_") for name in load_sweeps(["all"]))
    with pytest.raises(ConfigError, match="unknown sweep 'com_component'.*did you mean 'com_components'"):
        load_sweeps(["com_component"])


def test_sample_count_is_a_hyperparameter_that_reaches_the_calibration_section():
    com = load_method_recipe("com")
    assert default_hparams(com)["n_samples"] == 64
    assert split_hparams(com, {"n_samples": 5, "sim": False}) == ({"sim": False}, {}, {"n_samples": 5})
    recipe = render_recipe(com, "b", ["e0", "e1"], {"n_samples": 5, "sim": False})
    assert recipe["calibration"]["n_samples"] == 5 and "n_samples" not in recipe["parameters"]
    assert recipe["parameters"]["sim"] is False


def _token_data(path: Path, seed: int) -> str:
    gen = torch.Generator().manual_seed(seed)
    rows = [{"input_ids": torch.randint(4, 64, (10,), generator=gen).tolist()} for _ in range(64)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def com_run(tiny_family, tmp_path_factory):
    root = tmp_path_factory.mktemp("com_presets")
    lines = ["name: tiny", f"base: {{model: {tiny_family['base']}}}", "experts:"]
    for i, e in enumerate(tiny_family["experts"]):
        lines.append(f"  - {{model: {e}, name: x{i}, calibration: {_token_data(root / f'd{i}.jsonl', i)}}}")
    (root / "pool.yml").write_text("\n".join(lines) + "\n")
    (root / "grid.yml").write_text(yaml.safe_dump({"com_samples": {"method": "com", "grid": {"n_samples": [2, 4]}}}))
    run = root / "run"
    assert main(["sample", "--base", str(root / "pool.yml"), "--out", str(run), "--sizes", "1", "--k", "1",
                 "--methods", "ta", "--ablation", "com_components", "--grid", str(root / "grid.yml"),
                 "--no-evaluate"]) == 0
    return run


def test_presets_merge_and_the_sample_count_reaches_the_merge(com_run):
    ids = {e.model_id for e in RunFolder(com_run).read_plan().entries if e.kind == "merge"}
    assert ids >= {"regmean__n03_full", "com__n03_full__norm-none_sim-false", "com__n03_full__sim-false",
                   "com__n03_full", "com__n03_full__n_samples-2", "com__n03_full__n_samples-4"}
    recipe = yaml.safe_load((com_run / "models" / "com__n03_full__n_samples-2" / "recipe.yml").read_text())
    assert recipe["calibration"]["n_samples"] == 2
    two, four = (load_file(str(com_run / "models" / f"com__n03_full__n_samples-{n}" / "model.safetensors"))
                 for n in (2, 4))
    key = "model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(two[key], four[key])  # fewer samples, other Grams: the count reached the merge


def test_sweep_tables_show_table_3_and_table_4(com_run):
    models = [e.model_id for e in RunFolder(com_run).read_plan().entries]
    scores = {m: (0.5, 0.3) for m in models}
    scores.update({"regmean__n03_full": (0.40, 0.20), "com__n03_full__norm-none_sim-false": (0.50, 0.30),
                   "com__n03_full__sim-false": (0.52, 0.30), "com__n03_full": (0.60, 0.40),
                   "com__n03_full__n_samples-2": (0.44, 0.30), "com__n03_full__n_samples-4": (0.50, 0.32)})
    fabricate_results(com_run, scores)
    written = write_report(com_run)
    table3 = pd.read_csv(written["sweep_com_components_csv"])
    assert table3[["method", "MCS", "Norm", "Sim"]].values.tolist() == [
        ["RegMean", "no", "no", "no"], ["CoM", "yes", "no", "no"], ["CoM", "yes", "yes", "no"],
        ["CoM", "yes", "yes", "yes"]]
    assert table3["mean"].tolist() == pytest.approx([30.0, 40.0, 41.0, 50.0])
    table4 = pd.read_csv(written["sweep_com_samples_csv"])
    assert table4["n_samples"].tolist() == [2, 4]
    assert table4["mean"].tolist() == pytest.approx([37.0, 41.0])


def test_sweep_flag_and_its_old_name_ablation_parse_alike():
    import argparse

    from wildmerge.commands import sample, tune

    for command in (sample, tune):
        parser = argparse.ArgumentParser()
        command.configure(parser)
        new = parser.parse_args(["--sweep", "ta_lambda", "--sweep", "com_samples"]).sweep
        old = parser.parse_args(["--ablation", "ta_lambda", "--ablation", "com_samples"]).sweep
        assert new == old and len(new) == 2
