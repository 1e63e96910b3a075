"""Task alignment score (the reality-check paper, Eq. 2) and ``wildmerge tune``: the score's maths against a float64 computation
from the model's own outputs, its invariants on real tiny models, in-memory merges against the stock mergekit-yaml
output, resumability, and every bad input refused before anything is merged."""

import argparse
import json
import os

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from helpers import lm_family  # noqa: F401  (fixture)
from transformers import AutoModelForCausalLM

from wildmerge.analysis.tas.score import DISTANCES, features, task_alignment
from wildmerge.analysis.tas.sweep import TASSweep
from wildmerge.commands import tune
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.recipes.render import render_recipe
from wildmerge.merging.inmemory import CandidateMerger


def _batches(seed=0, n=6, width=9, vocab=64, pad_from=5):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (n, width), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, pad_from:] = 0  # one padded sample: its padding must not count
    return [(ids[:4], mask[:4]), (ids[4:], mask[4:])]


def _model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def test_tas_matches_float64_reference_from_model_outputs(tiny_qwen3_family):
    base, expert = tiny_qwen3_family["base"], tiny_qwen3_family["experts"][0]
    batches = _batches()
    got = task_alignment(features(_model(base), batches), features(_model(expert), batches))
    per_sample = {k: [] for k in DISTANCES}
    for ids, mask in batches:
        with torch.no_grad():
            outs = [m(input_ids=ids, attention_mask=mask, output_hidden_states=True)
                    for m in (_model(base), _model(expert))]
        h = [o.hidden_states[-1].double().numpy() for o in outs]
        lp = [torch.log_softmax(o.logits.double(), -1).numpy() for o in outs]
        for row in range(ids.shape[0]):
            keep = mask[row].numpy().astype(bool)
            a, b = h[0][row][keep], h[1][row][keep]
            pm, pe = lp[0][row][keep], lp[1][row][keep]
            per_sample["l2"].append(np.mean(np.sqrt(((a - b) ** 2).sum(-1))))
            per_sample["l1"].append(np.mean(np.abs(a - b).sum(-1)))
            cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
            per_sample["cosine"].append(np.mean(1 - cos))
            per_sample["kl"].append(np.mean((np.exp(pe) * (pe - pm)).sum(-1)))
    for kind in DISTANCES:
        assert got[kind] == pytest.approx(np.mean(per_sample[kind]), rel=1e-4), kind
        assert got[kind] > 0


def test_tas_of_an_expert_against_itself_is_zero(tiny_qwen3_family):
    model, batches = _model(tiny_qwen3_family["experts"][1]), _batches(seed=2)
    scores = task_alignment(features(model, batches), features(model, batches))
    assert scores == {"l2": 0.0, "l1": 0.0, "cosine": pytest.approx(0.0, abs=1e-12), "kl": 0.0}


def test_tas_is_zero_at_lambda_one_and_grows_with_distance_from_it(tiny_qwen3_family, tmp_path):
    """theta = base + lambda * tau_e: the expert itself at lambda = 1, further from it on either side."""
    base, expert = tiny_qwen3_family["base"], tiny_qwen3_family["experts"][0]
    sweep = TASSweep(tmp_path, base, {"e": expert}, {"e": _batches(seed=3)})
    scores = {}
    for lam in (0.0, 0.5, 1.0, 1.5, 2.0):
        recipe = render_recipe("ta", "base", ["e"], {"lambda": lam})
        recipe.pop("out_dtype", None)
        scores[lam] = sweep.score(recipe)["e"]
    for kind in DISTANCES:
        curve = {lam: s[kind] for lam, s in scores.items()}
        assert curve[1.0] <= 1e-4 * curve[0.0], kind
        assert curve[1.0] < curve[0.5] < curve[0.0], kind
        assert curve[1.0] < curve[1.5] < curve[2.0], kind


@pytest.mark.parametrize("method,hparams", [
    ("ties", {"lambda": 0.7, "density": 0.3}),
    ("ta_sb", {"beta": 0.3}),
    ("metagpt", {"power": 2.0}),
    ("norm_avg", {"lambda": 0.9}),
])
def test_in_memory_merge_equals_stock_mergekit_yaml(tiny_qwen3_family, tmp_path, method, hparams):
    from wildmerge.cli import main

    base, paths = tiny_qwen3_family["base"], tiny_qwen3_family["experts"]
    names = ["e0", "e1", "e2"]
    recipe = render_recipe(method, base, paths, hparams)
    (tmp_path / "recipe.yml").write_text(yaml.safe_dump(recipe))
    assert main(["merge", str(tmp_path / "recipe.yml"), str(tmp_path / "out")]) == 0
    stock = load_file(str(tmp_path / "out" / "model.safetensors"))
    named = {**recipe, "models": [{**m, "model": n} for m, n in zip(recipe["models"], names)]}
    ours = CandidateMerger(base, dict(zip(names, paths))).merge(named)
    assert set(ours) == set(stock)
    for key in stock:
        assert ours[key].dtype == stock[key].dtype
        assert torch.equal(ours[key], stock[key]), key


# --- wildmerge tune ----------------------------------------------------------------------------------------------

TEXTS = ["Grass is green", "The sky is blue", "1 plus 1 equals 2", "Snow is white", "2 plus 3 equals 5",
         "4 plus 4 equals 8", "Grass is red", "The sky is green", "Snow is blue", "1 plus 2 equals 3"]


def _pool(family, tmp_path, calibration=True):
    experts = []
    for i, path in enumerate(family["experts"]):
        data = tmp_path / f"texts{i}.jsonl"
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[i::2] * 2))
        experts.append({"model": path, "name": f"e{i}", **({"calibration": str(data)} if calibration else {})})
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": family["base"]}, "experts": experts}))
    return str(pool)


def _grid(tmp_path, grid, method="ta"):
    path = tmp_path / "grid.yml"
    path.write_text(yaml.safe_dump({"sweep": {"method": method, "grid": grid}}))
    return str(path)


def _tune(*argv):
    parser = argparse.ArgumentParser()
    tune.configure(parser)
    return tune.run(parser.parse_args(argv))


def test_tune_writes_scores_selection_and_a_recipe_and_resumes(lm_family, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    argv = ("--pool", _pool(lm_family, tmp_path), "--grid", _grid(tmp_path, {"lambda": [0.2, 0.6, 1.0]}),
            "--out", str(out), "--samples", "4")
    assert _tune(*argv) == 0
    rows = (out / "sweep" / "tas.csv").read_text().splitlines()
    assert rows[0] == "candidate,lambda,expert,l2,l1,cosine,kl" and len(rows) == 1 + 3 * 3
    means = {r.split(",")[1]: float(r.split(",")[3]) for r in rows[1:] if r.split(",")[2] == "mean"}
    selected = json.loads((out / "sweep" / "selected.json").read_text())
    assert selected["hparams"]["lambda"] == float(min(means, key=means.get))
    recipe = yaml.safe_load((out / "sweep" / "recipe.yml").read_text())
    assert recipe["parameters"]["lambda"] == selected["hparams"]["lambda"]
    assert [m["model"] for m in recipe["models"]] == lm_family["experts"]
    stamps = {p: p.stat().st_mtime_ns for p in (out / "sweep" / "candidates").iterdir()}
    assert _tune(*argv) == 0  # a rerun scores nothing again
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


@pytest.mark.parametrize("case,message", [
    ("empty grid", "grid 'sweep' is empty"),
    ("unknown key", "method 'ta' has no hyperparameter 'density'"),
    ("no calibration", "tas needs each expert.s text data; none for e0, e1"),
    ("too little data", "only 10 of 10 records"),
    ("no cuda", "no CUDA GPU"),
    ("no memory", "GiB free"),
])
def test_bad_input_fails_before_any_merge(lm_family, tmp_path, monkeypatch, case, message):  # noqa: F811
    grid = {"empty grid": {"lambda": []}, "unknown key": {"density": [0.5]}}.get(case, {"lambda": [0.5]})
    argv = ["--pool", _pool(lm_family, tmp_path, calibration=case != "no calibration"),
            "--grid", _grid(tmp_path, grid), "--out", str(tmp_path / "out"), "--samples", "4"]
    if case == "too little data":
        argv[-1] = "50"
    if case == "no cuda":
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present")
        argv += ["--device", "cuda"]
    if case == "no memory":
        monkeypatch.setattr("wildmerge.analysis.tas.sweep.free_device_memory", lambda device: 1000)
    with pytest.raises((ConfigError, WildmergeError), match=message):
        _tune(*argv)
    assert not (tmp_path / "out" / "sweep" / "candidates").exists()


def test_demo_pool_experts_have_their_own_unlabelled_data(tmp_path, monkeypatch):
    from wildmerge.families.demo import ensure_family
    from wildmerge.families.demo.skills import ATTRIBUTES
    from wildmerge.hub import resolve_path

    monkeypatch.setenv("WILDMERGE_DEMO_CACHE", str(tmp_path))
    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    info = ensure_family(tmp_path, quick=True, progress=False)
    texts = {}
    for name in info["experts"]:
        lines = open(resolve_path(f"demo:unlabelled/{name}")).read().splitlines()
        texts[name] = [json.loads(line)["text"] for line in lines]
        assert len(lines) >= 128
    assert len({tuple(t) for t in texts.values()}) == len(texts)  # each expert its own data
    prompts = {json.loads(line)["prompt"] for f in os.listdir(info["tasks"]) if f.endswith(".jsonl")
               for line in open(os.path.join(info["tasks"], f))}
    recall = tuple(f"Q: {a} of " for a in ATTRIBUTES)  # facts are recall: the evaluation asks about them
    assert not any(t.rsplit("A:", 1)[0] + "A:" in prompts for ts in texts.values() for t in ts
                   if not t.startswith(recall))


def test_sample_tune_merges_with_the_tas_choice_and_records_it(lm_family, tmp_path):  # noqa: F811
    from wildmerge.cli import main
    from wildmerge.run import RunFolder

    grid = tmp_path / "tune.yml"
    grid.write_text(yaml.safe_dump({"ta_lambda": {"method": "ta", "grid": {"lambda": [0.3, 1.0]}}}))
    run = tmp_path / "run"
    assert main(["sample", "--pool", _pool(lm_family, tmp_path), "--methods", "ta", "--sizes", "1", "--k", "1",
                 "--no-evaluate", "--tune", "--tune-grid", str(grid), "--tune-samples", "4", "--out", str(run)]) == 0
    tuned = RunFolder(run).read_manifest().tuned["ta"]
    selected = json.loads((run / "tune" / "ta" / "selected.json").read_text())
    assert tuned["hparams"] == selected["hparams"] and tuned["grid"] == {"lambda": [0.3, 1.0]}
    merges = [e for e in RunFolder(run).read_plan().entries if e.kind == "merge"]
    assert len(merges) == 1
    recipe = yaml.safe_load((run / "models" / merges[0].model_id / "recipe.yml").read_text())
    assert recipe["parameters"]["lambda"] == selected["hparams"]["lambda"]


def test_the_built_in_tuning_grids_fit_their_recipes():
    """`sample --tune`'s grids: every key a hyperparameter of the method's recipe, at most 12 points each."""
    from wildmerge.analysis.tas.setup import grid_points
    from wildmerge.analysis.tas.tune import TUNE_GRIDS
    from wildmerge.recipes.sweeps import Sweep

    sweeps = grid_points({name: Sweep(method=name, grid=grid) for name, grid in TUNE_GRIDS.items()})
    assert set(sweeps) == set(TUNE_GRIDS)
    for name, (method, points) in sweeps.items():
        assert method.name == name and 1 < len(points) <= 12, name
