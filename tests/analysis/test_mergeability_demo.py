"""End to end on the quick demo family through the real models and the CLI: the 28 metrics of every pair, the
cache on a rerun, subsets chosen by a predictor (recorded in the manifest), and refusals before heavy work."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from wildmerge.analysis.mergeability.registry import METRICS
from wildmerge.analysis.mergeability.selection import pair_scores
from wildmerge.cli import main
from wildmerge.families.demo.family import ensure_family


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    return ensure_family(tmp_path_factory.mktemp("demo_cache"), seed=0, quick=True, progress=False)


def test_metrics_end_to_end_on_the_quick_family(quick, tmp_path, capsys):
    pool = yaml.safe_load(open(quick["pool_file"]))
    assert all(e["calibration"].endswith(f"{e['name']}.jsonl") for e in pool["experts"])  # the family's own items
    out = tmp_path / "m"
    args = ["analyze", "mergeability", "--pool", quick["pool_file"], "--out", str(out), "--n-own", "4",
            "--n-pooled", "3", "--max-len", "24"]
    assert main(args) == 0
    df = pd.read_csv(out / "metrics.csv")
    side = json.loads((out / "metrics.json").read_text())
    assert len(df) == 3 and list(df.columns) == ["pair", "expert_a", "expert_b"] + METRICS
    assert np.isfinite(df[METRICS].to_numpy()).all()
    assert df["task_vector_cosine_similarity"].between(-1, 1).all() and (df["task_vector_l2_distance"] > 0).all()
    assert side["weights"]["new_models"] == ["expert_01", "expert_02", "expert_03"]
    assert side["forward"]["own_items"] == {"expert_01": 4, "expert_02": 4, "expert_03": 4}
    assert main(args) == 0  # rerun: everything from the cache, same numbers
    side = json.loads((out / "metrics.json").read_text())
    assert side["weights"]["new_models"] == [] and side["forward"]["models_computed"] == []
    assert np.allclose(pd.read_csv(out / "metrics.csv")[METRICS], df[METRICS])

    # subsets chosen by a predictor: a fit that rewards activation cosine picks the most similar pair
    fits = {"metrics": ["activation_cosine_similarity"],
            "methods": {"m": {"final": {"w": [1.0], "lo": [0.0], "range": [1.0]}}}}
    (tmp_path / "predictor.json").write_text(json.dumps({"pair_scores": pair_scores(fits, df)}))
    best = df.loc[df["activation_cosine_similarity"].idxmax()]
    run = tmp_path / "run"
    assert main(["sample", "--base", quick["pool_file"], "--out", str(run), "--methods", "ta", "--sizes", "2",
                 "--k", "1", "--no-full", "--no-evaluate", "--select", "predicted", "--predictor",
                 str(tmp_path / "predictor.json")]) == 0
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["sampling"]["mode"] == "predicted"
    assert manifest["sampling"]["select"]["aggregation"] == "mean predicted pairwise score over the subset's pairs"
    chosen = [s["experts"] for s in manifest["subsets"] if s["n"] == 2]
    assert chosen == [[best["expert_a"], best["expert_b"]]]
    assert (run / "models" / "ta__n02_p00" / "merge_info.json").is_file()


def test_refusals_before_heavy_work(quick, tmp_path, tiny_family, capsys):
    pool = yaml.safe_load(open(quick["pool_file"]))
    pool["experts"][1]["model"] = tiny_family["experts"][0]  # another architecture: does not share the base
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(pool))
    assert main(["analyze", "mergeability", "--pool", str(tmp_path / "bad.yml"), "--out", str(tmp_path / "o")]) == 2
    assert "cannot be merged with base" in capsys.readouterr().err
    del pool["experts"][1]
    for e in pool["experts"]:
        e.pop("calibration")
    (tmp_path / "nocal.yml").write_text(yaml.safe_dump(pool))
    assert main(["analyze", "mergeability", "--pool", str(tmp_path / "nocal.yml"), "--out", str(tmp_path / "o"),
                 "--groups", "gradients"]) == 2
    assert "gradient metrics needs each expert's labelled data; none for expert_01" in capsys.readouterr().err
    assert main(["sample", "--base", quick["pool_file"], "--out", str(tmp_path / "r"), "--select", "predicted",
                 "--no-evaluate"]) == 2
    assert "--select predicted needs --predictor" in capsys.readouterr().err
