"""Every feature that reads experts' own data reads it through wildmerge.expert_data, from every source kind, on
tiny real models: Chain of Merges through the sampler, the task alignment score (`wildmerge tune`), the activation
and gradient mergeability metrics, the composer's centroids; and the pre-flight says what is missing first."""

import json
from pathlib import Path

import pytest
import yaml

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.cli import main

SMALL = {"n_samples": 4, "max_new_tokens": 6, "prompts": ["", "The"]}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WILDMERGE_DATA_CACHE", str(tmp_path / "data_cache"))


def _pool(tmp_path, fam, experts_data, default=None):
    pool = {"name": "c", "base": {"model": fam["base"]}, **({"data": default} if default else {}),
            "experts": [{"model": e, "name": f"x{i}", **({"data": d} if d else {})}
                        for i, (e, d) in enumerate(zip(fam["experts"], experts_data))]}
    path = tmp_path / "pool.yml"
    path.write_text(yaml.safe_dump(pool, sort_keys=False))
    return str(path)


@pytest.fixture
def files(tmp_path, records, hub_folder, task_folder):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(records), tmp_path / "x0.parquet")
    return {"parquet": str(tmp_path / "x0.parquet"), "hub": str(hub_folder), "tasks": str(task_folder)}


def test_com_merges_from_a_parquet_file_and_a_hub_dataset(lm_family, tmp_path, files):  # noqa: F811
    f = files
    hub = {"text": {"dataset": f["hub"], "template": "{question} {answer}"}}
    pool = _pool(tmp_path, lm_family, [f["parquet"], hub])
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--methods", "com", "--no-evaluate", "--sizes", "2"]) == 0
    diag = json.loads(next(run.glob("models/com__*/layerwise_diagnostics.json")).read_text())
    used = {c["data"]: c for c in diag["calibration"]}
    assert set(used) == {f["parquet"], f["hub"]} and used[f["hub"]]["template"] == "{question} {answer}"
    assert all(c["samples"] > 0 for c in diag["calibration"])


def test_com_merges_from_lm_eval_items_and_generated_text(lm_family, tmp_path, files):  # noqa: F811
    f = files
    pool = _pool(tmp_path, lm_family, [{"text": {"lm_eval_task": "adder", "tasks": f["tasks"]}}, None],
                 default={"generate": SMALL})  # x1 inherits the pool default
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--methods", "com", "--no-evaluate", "--sizes", "2"]) == 0
    recipe = yaml.safe_load(next(run.glob("models/com__*/recipe.yml")).read_text())
    cal = [m["calibration"] for m in recipe["models"]]
    assert cal[0]["lm_eval_task"] == "adder" and cal[0]["tasks"] == f["tasks"]
    assert ".generated-" in cal[1]["data"] and Path(cal[1]["data"]).parent == run / "calibration"


def test_tune_honours_the_pool_default(lm_family, tmp_path):  # noqa: F811
    from wildmerge.commands import tune

    import argparse

    pool = _pool(tmp_path, lm_family, [None, None], default={"generate": SMALL})
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"sweep": {"method": "ta", "grid": {"lambda": [0.5, 1.0]}}}))
    parser = argparse.ArgumentParser()
    tune.configure(parser)
    out = tmp_path / "out"
    assert tune.run(parser.parse_args(["--pool", pool, "--grid", str(grid), "--out", str(out), "--samples", "4"])) == 0
    assert len(list((out / "calibration").glob("x*.generated-*.jsonl"))) == 2  # each expert's own text
    assert json.loads((out / "sweep" / "selected.json").read_text())["hparams"]["lambda"] in (0.5, 1.0)


def test_all_metric_groups_from_text_and_lm_eval_items(lm_family, tmp_path, files, records):  # noqa: F811
    f = files
    (tmp_path / "notes.txt").write_text("".join(r["text"] + "\n" for r in records))
    labelled = {"lm_eval_task": "adder", "tasks": f["tasks"]}
    pool = _pool(tmp_path, lm_family, [{"text": "notes.txt", "labelled": labelled},
                                       {"text": {"dataset": f["hub"]}, "labelled": labelled}])
    out = tmp_path / "mm"
    assert main(["analyze", "mergeability", "--pool", pool, "--out", str(out), "--n-own", "3", "--n-pooled", "2",
                 "--max-len", "48"]) == 0
    import pandas as pd

    df = pd.read_csv(out / "metrics.csv")
    grads = [c for c in df.columns if "grad" in c]
    assert len(df) == 1 and grads and df[grads].notna().all(axis=None)
    side = json.loads((out / "metrics.json").read_text())
    assert "lm-eval task adder:train" in side["calibration"]["x0"]


def test_composer_centroids_from_a_file_and_generated_text(lm_family, tmp_path, files):  # noqa: F811
    from safetensors.torch import load_file

    from wildmerge.eval.composition import CENTROIDS_FILE, CompositionSpec, write_composition

    f = files
    spec = CompositionSpec(kind="composer", experts={"x0": lm_family["experts"][0], "x1": lm_family["experts"][1]},
                           router=lm_family["base"],
                           calibration={"x0": f["parquet"], "x1": {"text": {"generate": SMALL}}})
    folder = write_composition(tmp_path / "run" / "models" / "composer", spec)
    centroids = load_file(str(folder / CENTROIDS_FILE))["centroids"]
    assert centroids.shape[0] == 2 and not (centroids[0] == centroids[1]).all()
    assert list((tmp_path / "run" / "calibration").glob("x1.generated-*.jsonl"))


def test_dry_run_and_preflight_list_missing_data_first(lm_family, tmp_path, capsys, monkeypatch, files):  # noqa: F811
    pool = _pool(tmp_path, lm_family, [files["parquet"], None])
    assert main(["sample", "--base", pool, "--methods", "com,ta", "--dry-run", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "MISSING DATA: chain_of_merges needs each expert's text data; none for x1. Add" in out
    assert "data: generate" in out and out.index("MISSING DATA") < out.index("plan:")
    assert main(["sample", "--base", pool, "--methods", "com", "--no-evaluate", "--out", str(tmp_path / "r")]) == 2
    assert "missing expert data of pool 'c':\n  chain_of_merges" in capsys.readouterr().err
    assert not (tmp_path / "r" / "manifest.json").exists()  # stopped before anything was resolved or written
    uncached = _pool(tmp_path, lm_family, [{"dataset": "org/never-cached", "revision": "abc"}, "generate"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert main(["sample", "--base", uncached, "--methods", "com", "--no-evaluate", "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err
    assert "expert data cannot be read:\n  text data of expert 'x0' (org/never-cached@abc:train)" in err
    assert not (tmp_path / "u" / "manifest.json").exists()
    # the shipped hub pools: CoM has data for every expert, and so do the gradient metrics (labelled items for
    # every expert); offline, the hub data not cached here is named with how to fetch it, before any (uncached)
    # model is resolved
    assert main(["sample", "--base", "qwen3-4b", "--methods", "com", "--dry-run", "--out", str(tmp_path / "q")]) == 0
    assert "MISSING DATA" not in capsys.readouterr().out
    assert main(["analyze", "mergeability", "--pool", "qwen3-4b", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "missing expert data" not in err and "gradient metrics need labelled data" not in err
    assert "expert data cannot be read:" in err and "lm-eval task 'medmcqa' cannot be loaded" in err
    assert "TaskManager().load_task_or_group(['medmcqa'])" in err
    assert "cannot be resolved" not in err and "Traceback" not in err


def test_analyze_mergeability_as_the_readme_writes_it(tmp_path, monkeypatch, capsys):
    """README: `wildmerge analyze mergeability --pool demo --out runs/mm`, here on the quick demo family."""
    monkeypatch.setenv("WILDMERGE_DEMO_CACHE", str(tmp_path / "demo"))
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    assert main(["analyze", "mergeability", "--pool", "demo", "--out", "runs/mm"]) == 0
    import pandas as pd

    df = pd.read_csv(tmp_path / "runs" / "mm" / "metrics.csv")
    metrics = [c for c in df.columns if c not in ("expert_a", "expert_b", "pair", "model_a", "model_b")]
    assert len(df) == 3 and df[metrics].notna().all(axis=None)
