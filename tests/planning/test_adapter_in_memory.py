"""LoRA adapters among a pool's experts (the SmolLM2 family has two) for what merges in memory without the sampler's
manifest: the TAS sweep (``tune``, ``sample --tune``), the guided search and its benchmark. They once failed on the
adapter folder as published; now the adapter is folded into the base first (``adapters.materialise_experts``). The
pool also holds an expert with added tokens, which the in-memory merger reads on the base's tokens."""

import argparse
import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from helpers import WILD_ADDED_TOKENS, make_wild_experts
from wildmerge.cli import main
from wildmerge.commands import tune
from wildmerge.errors import WildmergeError
from wildmerge.merging.inmemory import CandidateMerger
from wildmerge.recipes.render import render_recipe
from wildmerge.pools.adapters import materialise_experts

ADDED = WILD_ADDED_TOKENS


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    """base, a full expert, an expert with two added tokens (resized embeddings and head), a LoRA adapter."""
    return make_wild_experts(tmp_path_factory.mktemp("wild"))


def test_adapters_are_folded_for_the_in_memory_merger(wild, tmp_path, monkeypatch):
    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "cache"))
    experts = {"full": wild["full"], "lora": wild["lora"]}
    with pytest.raises(WildmergeError):  # what the search's merger met on the adapter as published
        CandidateMerger(wild["base"], experts)
    whole, notes = materialise_experts(wild["base"], experts)
    assert whole["full"] == wild["full"] and whole["lora"] != wild["lora"]  # a full expert is not copied
    assert len(notes) == 1 and notes[0].startswith("lora: adapter")
    assert materialise_experts(wild["base"], experts)[0] == whole  # cached: the same folder again

    # an in-memory TA merge of them equals stock mergekit's merge of the folded adapter
    names = ["full", "lora"]
    recipe = render_recipe("ta", wild["base"], [whole[n] for n in names], {"lambda": 0.7})
    (tmp_path / "recipe.yml").write_text(yaml.safe_dump(recipe))
    assert main(["merge", str(tmp_path / "recipe.yml"), str(tmp_path / "out")]) == 0
    stock = load_file(str(tmp_path / "out" / "model.safetensors"))
    named = {**recipe, "models": [{**m, "model": n} for m, n in zip(recipe["models"], names)]}
    ours = CandidateMerger(wild["base"], whole).merge(named)
    assert set(ours) == set(stock)
    for key in stock:
        assert torch.allclose(ours[key], stock[key], atol=1e-6), key


def test_tas_tuning_accepts_a_pool_with_an_adapter_and_added_tokens(wild, tmp_path, monkeypatch):
    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "cache"))
    texts = ["Grass is green", "The sky is blue", "Snow is white", "1 plus 1 equals 2", "2 plus 3 equals 5"] * 2
    experts = []
    for name in ("full", "wide", "lora"):
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        experts.append({"model": wild[name], "name": name, "calibration": str(data)})
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "wild", "base": {"model": wild["base"]}, "experts": experts}))
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump({"sweep": {"method": "ta", "grid": {"lambda": [0.5, 1.0]}}}))
    parser = argparse.ArgumentParser()
    tune.configure(parser)
    args = parser.parse_args(["--pool", str(pool), "--grid", str(grid), "--out", str(tmp_path / "out"),
                              "--samples", "4"])
    assert tune.run(args) == 0
    assert json.loads((tmp_path / "out" / "sweep" / "selected.json").read_text())["hparams"]["lambda"] in (0.5, 1.0)
