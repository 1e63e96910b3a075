"""Chain of Merges' importance weights analysed on a real run of the quick demo family (Buzzega et al., "Rethinking
Layer-wise Model Merging through Chain of Merges", Figs. 2 / 4, 5, 6): the omega / gap relation recomputed in
float64 here, omegas re-measured through the finished merge equal the ones the merge wrote, and the analytic
forward-pass, solve and Gram-memory counts equal what one merge does."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from wildmerge.analysis.flops import accounting, group_dims
from wildmerge.cli import main
from wildmerge.families.demo.family import ensure_family
from wildmerge.plugins.layerwise.driver import recipe_calibration


@pytest.fixture(scope="module")
def com_run(tmp_path_factory):
    fam = ensure_family(None, seed=0, quick=True, progress=False)
    tmp = tmp_path_factory.mktemp("com_importance")
    pool = yaml.safe_load(open(fam["pool_file"]))
    for e in pool["experts"]:  # the quick family has 32 texts per expert; CoM's recipe asks for 64
        e["calibration"] = {"data": e["calibration"], "n_samples": 16}
    (tmp / "pool.yml").write_text(yaml.safe_dump(pool))
    run = tmp / "run"
    assert main(["sample", "--base", str(tmp / "pool.yml"), "--methods", "com", "--sizes", "2,3", "--k", "3",
                 "--evaluate", "--suite", "demo", "--limit", "10", "--out", str(run)]) == 0
    assert main(["analyze", "importance", "--run", str(run), "--reference"]) == 0
    return run, run / "com_importance"


def _pearson64(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))


def test_omega_against_the_gap_in_float64(com_run):
    run, out = com_run
    table = pd.read_csv(out / "importance_vs_gap.csv")
    result = json.loads((out / "importance.json").read_text())
    assert len(table) == 3 * 2 + 3  # three pairs and the triple
    for model_id, rows in table.groupby("model_id"):
        diag = json.loads((run / "models" / model_id / "layerwise_diagnostics.json").read_text())
        om = np.array([r["omega"] for r in diag["layers"] if r.get("omega")], np.float64)
        assert len(om) == 4 * diag_layers(run)  # every group of every layer was solved
        mean = om.mean(0)
        assert rows["omega"].to_numpy() == pytest.approx(mean, rel=1e-8)
        assert rows["omega_share"].to_numpy() == pytest.approx(mean / mean.sum(), rel=1e-8)
        assert rows["omega_rel"].to_numpy() == pytest.approx(len(mean) * mean / mean.sum(), rel=1e-8)
        assert (mean > 0).all()
    assert result["r_pooled"]["pearson"] == pytest.approx(_pearson64(table["omega_rel"], table["gap"]), abs=1e-7)
    per = table.groupby("expert")[["omega_rel", "gap"]].mean()
    assert result["r_per_expert"]["pearson"] == pytest.approx(_pearson64(per["omega_rel"], per["gap"]), abs=1e-7)
    assert set(result["gaps"]) == {"expert_01", "expert_02", "expert_03"}
    assert all(np.isfinite(v) for v in result["gaps"].values())
    assert (out / "importance_vs_gap.png").is_file() and "Figs. 2 / 4" in (out / "README.md").read_text()


def diag_layers(run):
    return json.loads(next((run / "models").glob("*/config.json")).read_text())["num_hidden_layers"]


def test_reference_ablation_and_the_merged_reference_gives_back_com_omegas(com_run):
    from wildmerge.plugins.layerwise.reference import reference_omegas

    run, out = com_run
    ab = pd.read_csv(out / "omega_reference.csv")
    assert len(ab) == 9 and np.isfinite(ab[["share_merged", "share_base"]].to_numpy()).all()
    assert ab.groupby("model_id")["share_base"].sum().to_numpy() == pytest.approx(1.0)
    result = json.loads((out / "importance.json").read_text())["reference"]
    assert result["r_base_gap"]["pearson"] == pytest.approx(_pearson64(ab["rel_base"], ab["gap"]), abs=1e-7)
    assert result["r_merged_base"]["pearson"] == pytest.approx(_pearson64(ab["rel_merged"], ab["rel_base"]), abs=1e-7)
    model = next(p for p in (run / "models").iterdir() if p.name.startswith("com__n03"))
    diag = json.loads((model / "layerwise_diagnostics.json").read_text())
    cal = recipe_calibration(model / "mergekit_config.yml")
    again = reference_omegas(str(model), cal["batches"], progress=False)
    for r in diag["layers"]:
        assert again[(r["layer"], r["group"])] == pytest.approx(r["omega"], rel=2e-3)
    base = reference_omegas(cal["base_path"], cal["batches"], progress=False)
    assert any(base[(r["layer"], r["group"])] != pytest.approx(r["omega"], rel=2e-3) for r in diag["layers"])


def test_accounting_matches_a_counted_merge(com_run, tmp_path):
    from wildmerge.plugins.layerwise.driver import merge_layerwise

    run, out = com_run
    model = next(p for p in (run / "models").iterdir() if p.name.startswith("com__n02"))
    recipe = yaml.safe_load((model / "mergekit_config.yml").read_text())
    cal = recipe_calibration(model / "mergekit_config.yml")
    traced, calls = [], {"layer": 0}

    def count(module, _args):
        if type(module).__name__.endswith("DecoderLayer"):
            calls["layer"] += 1

    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        merge_layerwise(recipe, tmp_path / "again", device="cpu", progress=False,
                        trace=lambda k, g, grams, om: traced.append(sum(G.numel() * G.element_size() for G in grams)))
    finally:
        handle.remove()
    tokens = [int(m.sum()) for b in cal["batches"] for _, m in b]
    expected = accounting(cal["config"], [sum(int(m.sum()) for _, m in b) for b in cal["batches"]])
    assert sum(tokens) == expected["tokens"]
    assert len(traced) == expected["gram_solves"]
    assert max(traced) == expected["gram_bytes_peak"]  # one group's N float32 Grams at a time
    batches = {len(b) for b in cal["batches"]}
    assert len(batches) == 1  # the same number of batches per expert, so passes x batches is the count
    assert calls["layer"] == (expected["partial_block_passes"] + expected["full_block_passes"]) * batches.pop()
    dims = group_dims(cal["config"])
    assert expected["gram_bytes_peak"] == 2 * max(d["d"] for d in dims.values()) ** 2 * 4
    diag = json.loads((tmp_path / "again" / "layerwise_diagnostics.json").read_text())
    assert diag["peak_rss_mib"] * 2**20 > expected["gram_bytes_peak"]  # loose: the process holds far more
    table = pd.read_csv(out / "accounting.csv").set_index("model_id")
    assert table.loc[model.name, "flops_total"] > table.loc[model.name, "flops_grams"] > 0
