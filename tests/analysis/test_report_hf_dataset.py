"""``wildmerge report RUN --hf-dataset OUT``: a dataset folder that `datasets` loads back, offline."""

import pandas as pd
import yaml

from report_fixtures import fabricate_run
from wildmerge.cli import main


def test_the_leaderboard_loads_back_as_a_dataset(tiny_family, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    run = fabricate_run(tmp_path / "run", tiny_family)
    assert main(["report", str(run), "--hf-dataset", str(tmp_path / "dataset")]) == 0
    out = tmp_path / "dataset"
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] and "model-merging" in front["tags"]
    configs = {c["config_name"]: c for c in front["configs"]}
    assert configs["scores"]["default"] and configs["scores"]["data_files"] == "scores.csv"

    from datasets import load_dataset

    scores = load_dataset(str(out), split="train")  # the default config: scores
    expected = pd.read_csv(run / "report" / "scores.csv")
    assert scores.num_rows == len(expected) and list(scores.column_names) == list(expected.columns)
    assert sorted(scores["model_id"]) == sorted(expected["model_id"])
    other = next(name for name in configs if name != "scores")
    assert load_dataset(str(out), other, split="train").num_rows == len(pd.read_csv(out / f"{other}.csv"))
