"""`wildmerge sample` end to end on tiny real checkpoints: run layout, TA against float64, resume after a failure
and after a SIGKILL (identical results, no temporary leftovers), redo of broken merges, methods added later."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import ARGS, METHODS, assert_same_models, leftovers, sample, tensors, write_pool
from wildmerge.cli import main


@pytest.fixture(scope="module")
def pool(tiny_family, tmp_path_factory):
    return write_pool(tmp_path_factory.mktemp("pool"), tiny_family)


@pytest.fixture(scope="module")
def reference(pool, tmp_path_factory):
    run = tmp_path_factory.mktemp("ref") / "run"
    assert sample(pool, run) == 0
    return run


def test_run_layout_and_contract(reference):
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["pool"] == "tiny" and manifest["seed"] == 7 and manifest["k"] == 3 and manifest["sizes"] == [1, 2, 3]
    subsets = {s["subset_id"]: s for s in manifest["subsets"]}
    assert sorted(s["n"] for s in subsets.values()) == [1, 1, 1, 2, 2, 2, 3]
    assert "all 3 combinations are taken" in " ".join(manifest["notes"])
    csv_lines = (reference / "subsets.csv").read_text().splitlines()
    assert csv_lines[0] == "subset_id,n,experts,exhaustive,domain" and len(csv_lines) == 8
    plan = json.loads((reference / "plan.json").read_text())
    entries = plan["entries"]
    assert [e["kind"] for e in entries[:4]] == ["base", "expert", "expert", "expert"]
    merges = [e for e in entries if e["kind"] == "merge"]
    assert len(merges) == 3 * 4  # 3 methods x (3 pairs + the full pool); n = 1 are the experts themselves
    for e in entries:
        assert {"model_id", "kind", "method", "label", "n", "subset_id", "hparams", "experts", "path"} <= e.keys()
        assert Path(e["path"]).is_absolute()
    for e in merges:  # the same subsets for every method
        assert e["experts"] == subsets[e["subset_id"]]["experts"] and e["n"] == len(e["experts"])
        d = Path(e["path"])
        assert d == reference.resolve() / "models" / e["model_id"]
        assert {"recipe.yml", "merge_info.json", "model.safetensors", "config.json"} <= {p.name for p in d.iterdir()}
        info = json.loads((d / "merge_info.json").read_text())
        assert info["experts"] == e["experts"] and info["method"] == e["method"]
    ties = next(e for e in merges if e["method"] == "ties")
    assert ties["hparams"] == {"lambda": 0.1, "normalize": True, "weight": 1.0, "density": 0.1} and ties["label"] == "TIES"
    assert leftovers(reference) == []
    assert json.loads((reference / "sample_log.json").read_text())["stats"]["merged"] == 12


def test_ta_merge_matches_float64(reference, tiny_family):
    """TA with normalize, lambda 1: W0 + mean_i (W_i - W0), computed independently in float64."""
    merged = load_file(str(reference / "models" / "ta__n03_full" / "model.safetensors"))
    base = load_file(str(Path(tiny_family["base"]) / "model.safetensors"))
    experts = [load_file(str(Path(e) / "model.safetensors")) for e in tiny_family["experts"]]
    for name, w0 in base.items():
        w0 = w0.double()
        expected = w0 + sum(e[name].double() - w0 for e in experts) / len(experts)
        torch.testing.assert_close(merged[name].double(), expected, atol=1e-6, rtol=1e-6)


def test_rerun_does_nothing(reference, pool, capsys):
    before = {p: p.stat().st_mtime_ns for p in reference.glob("models/*/model.safetensors")}
    assert sample(pool, reference) == 0
    assert "0 new, 0 redone, 12 already done" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in reference.glob("models/*/model.safetensors")}


def test_resume_after_failure_mid_plan(pool, reference, tmp_path, monkeypatch):
    """A merge that dies after writing its weights leaves no folder; the rerun finishes with identical results."""
    import mergekit.merge

    real, calls = mergekit.merge.run_merge, []

    def dying(config, out_path, options, config_source=None):
        calls.append(out_path)
        real(config, out_path, options, config_source=config_source)
        if len(calls) == 3:
            raise KeyboardInterrupt  # like Ctrl-C in the middle of the third merge
    monkeypatch.setattr(mergekit.merge, "run_merge", dying)
    run = tmp_path / "run"
    assert sample(pool, run) == 130
    done = sorted(p.name for p in (run / "models").iterdir())
    assert len(done) == 2 and leftovers(run) == []
    (run / "models" / ".ta__n02_s99.tmp-killed").mkdir()  # what a SIGKILL inside atomic_dir leaves behind
    monkeypatch.setattr(mergekit.merge, "run_merge", real)
    assert sample(pool, run) == 0
    assert leftovers(run) == []
    assert_same_models(run, reference)
    assert json.loads((run / "manifest.json").read_text())["subsets"] == json.loads(
        (reference / "manifest.json").read_text())["subsets"]


def test_resume_after_sigkill(pool, reference, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "wildmerge.cli", "sample", "--base", pool, "--out", str(run), *ARGS]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and len(list(run.glob("models/*/merge_info.json"))) < 2:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert len(list(run.glob("models/*/merge_info.json"))) < 12
    assert sample(pool, run) == 0
    assert leftovers(run) == []
    assert_same_models(run, reference)


def test_broken_and_stale_merges_are_redone(pool, reference, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "models" / "ta__n02_s00" / "model.safetensors").unlink()  # broken: weights gone
    info = run / "models" / "ties__n03_full" / "merge_info.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "recipe_sha256": "other recipe"}))
    (run / "models" / "iso_c__n02_s01" / "merge_info.json").write_text("{not json")
    assert sample(pool, run) == 0
    assert "0 new, 3 redone, 9 already done" in capsys.readouterr().out
    assert_same_models(run, reference)


def test_methods_added_later_reuse_the_subsets(pool, reference, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    assert main(["sample", "--base", pool, "--out", str(run), "--sizes", "1,2", "--k", "3", "--seed", "7",
                 "--methods", "model_stock", "--no-evaluate"]) == 0
    assert "4 new, 0 redone, 12 already done" in capsys.readouterr().out
    plan = json.loads((run / "plan.json").read_text())["entries"]
    by_subset = {}
    for e in plan:
        if e["kind"] == "merge":
            by_subset.setdefault(e["subset_id"], set()).add((e["method"], tuple(e["experts"])))
    assert all({m for m, _ in v} == {"ta", "ties", "iso_c", "model_stock"} and len({x for _, x in v}) == 1
               for v in by_subset.values())
    # this invocation's entries come first (the base leads the plan) and their metadata wins over the old plan's
    assert [e["kind"] for e in plan[:4]] == ["base", "expert", "expert", "expert"]
    assert [e["method"] for e in plan if e["kind"] == "merge"][:4] == ["model_stock"] * 4


def test_new_plan_entries_win_over_old_ones():
    from wildmerge.run import PlanEntry, merged_with_previous

    old = [PlanEntry(model_id="ta__n02_s00", kind="merge", path="/r/m", method="ta", label="old label"),
           PlanEntry(model_id="ties__n02_s00", kind="merge", path="/r/t", method="ties")]
    new = [PlanEntry(model_id="base", kind="base", path="/b"),
           PlanEntry(model_id="ta__n02_s00", kind="merge", path="/r/m", method="ta", label="TA", ablations=["x"])]
    merged = merged_with_previous(old, new)
    assert [e.model_id for e in merged] == ["base", "ta__n02_s00", "ties__n02_s00"]
    assert merged[1].label == "TA" and merged[1].ablations == ["x"]


def test_grid_overrides_reach_the_recipe(pool, tmp_path):
    grid = tmp_path / "grid.yml"
    grid.write_text("dens: {method: ties, grid: {density: [0.5], lambda: [0.1]}}\n"
                    "lam: {method: ta, grid: {lambda: [1.0, 0.5], normalize: [false]}}\n")
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--sizes", "1", "--methods", "ta", "--grid", str(grid),
                 "--no-evaluate"]) == 0
    plan = {e["model_id"]: e for e in json.loads((run / "plan.json").read_text())["entries"]}
    assert {"ta__n03_full", "ties__n03_full__density-0.5", "ta__n03_full__normalize-false",
            "ta__n03_full__lambda-0.5_normalize-false"} <= plan.keys()
    assert plan["ties__n03_full__density-0.5"]["ablations"] == ["dens"]
    import yaml

    recipe = yaml.safe_load((run / "models" / "ties__n03_full__density-0.5" / "recipe.yml").read_text())
    assert all(m["parameters"]["density"] == 0.5 for m in recipe["models"]) and recipe["parameters"]["lambda"] == 0.1
    recipe = yaml.safe_load((run / "models" / "ta__n03_full__lambda-0.5_normalize-false" / "recipe.yml").read_text())
    assert recipe["parameters"] == {"lambda": 0.5, "normalize": False}
    # lambda 0.5 without normalization: W0 + 0.5 * sum_i (W_i - W0), in float64
    merged = load_file(str(run / "models" / "ta__n03_full__lambda-0.5_normalize-false" / "model.safetensors"))
    base = load_file(str(Path(plan["base"]["path"]) / "model.safetensors"))
    experts = [load_file(str(Path(plan[f"expert__x{i}"]["path"]) / "model.safetensors")) for i in range(3)]
    name = "model.layers.0.mlp.up_proj.weight"
    expected = base[name].double() + 0.5 * sum(e[name].double() - base[name].double() for e in experts)
    torch.testing.assert_close(merged[name].double(), expected, atol=1e-6, rtol=1e-6)


def test_keep_models_none_prunes_after_each(pool, tmp_path):
    from wildmerge.planning.manifest import prepare
    from wildmerge.planning.plan import build_entries
    from wildmerge.recipes.method import load_methods
    from wildmerge.pools import load_pool
    from wildmerge.run import read_merge_info
    from wildmerge.merging.runner import merge_options, run_plan
    from wildmerge.planning.settings import Sampling

    run = tmp_path / "run"
    loaded = load_pool(pool)
    manifest, models = prepare(run, loaded, Sampling.of(loaded, sizes=[1], k=1))
    methods = load_methods(["ta"])
    entries = build_entries(run, manifest.subsets, models, methods, {})
    seen = []

    def evaluate(entry):  # weights must still be there when the hook runs
        assert (Path(entry.path) / "model.safetensors").is_file()
        seen.append(entry.model_id)
    stats = run_plan(entries, models, methods, merge_options(models), keep_models="none", after_each=evaluate,
                     progress=False)
    assert seen == ["ta__n03_full"] and stats["pruned"] == 1
    d = run / "models" / "ta__n03_full"
    assert not list(d.glob("*.safetensors")) and read_merge_info(d).weights_pruned and (d / "recipe.yml").is_file()
    stats = run_plan(entries, models, methods, merge_options(models), keep_models="none", after_each=evaluate,
                     progress=False)
    assert stats["skipped"] == 1 and stats["merged"] == 0 and seen == ["ta__n03_full"]
