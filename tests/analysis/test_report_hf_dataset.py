"""``wildmerge report RUN --hf-dataset OUT``: a dataset folder that `datasets` loads back, offline."""

import pytest
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


def test_a_target_that_would_mix_files_is_refused_in_one_line_before_the_report(tiny_family, tmp_path, capsys):
    """The run folder, a non-empty folder, a file, another run's dataset folder: refused before the report is
    written; the same run's earlier dataset folder is written again."""
    from helpers import one_error_line

    run = fabricate_run(tmp_path / "run", tiny_family)
    other = fabricate_run(tmp_path / "other", tiny_family)
    assert main(["report", str(other), "--hf-dataset", str(tmp_path / "other_dataset")]) == 0
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # a file: refused at parse time, by the option's type
        main(["report", str(run), "--hf-dataset", str(a_file)])
    line = one_error_line(capsys.readouterr().err)
    assert exit_info.value.code == 2 and "--hf-dataset" in line and "is a file" in line and "new or empty folder" in line
    for target, said in [(run, "not empty"), (busy, "not empty"),
                         (tmp_path / "other_dataset", "no dataset folder of run 'run'")]:
        assert main(["report", str(run), "--hf-dataset", str(target)]) == 2, target
        line = one_error_line(capsys.readouterr().err)
        assert f"--hf-dataset {target}" in line and said in line and "new or empty folder" in line, line
        assert not (run / "report").exists()  # refused before the report
    assert (busy / "notes.txt").read_text() == "mine" and sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    assert main(["report", str(run), "--hf-dataset", str(tmp_path / "dataset")]) == 0
    first = sorted(p.name for p in (tmp_path / "dataset").iterdir())
    assert main(["report", str(run), "--hf-dataset", str(tmp_path / "dataset")]) == 0  # its own: written again
    assert sorted(p.name for p in (tmp_path / "dataset").iterdir()) == first
