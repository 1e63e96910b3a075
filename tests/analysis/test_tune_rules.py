"""``wildmerge tune --select adamms`` (AdaMMS*), ``wildmerge tune --adamerging``, and the new baselines in memory (the
in-memory merger names each input with its folder for the block / model passes) equal to the stock merge."""

import json

import pytest
import torch
import yaml
from mergekit.config import MergeConfiguration
from mergekit.merge import run_merge
from mergekit.options import MergeOptions
from safetensors.torch import load_file

from helpers import lm_family  # noqa: F401  (fixture)
from helpers import run_tune as _tune, text_pool as _pool
from wildmerge.errors import ConfigError

def _grid(tmp_path, method, grid):
    path = tmp_path / f"{method}.yml"
    path.write_text(yaml.safe_dump({"sweep": {"method": method, "grid": grid}}))
    return path


def test_select_adamms_writes_its_choice_and_refuses_two_hyperparameters(lm_family, tmp_path):  # noqa: F811
    pool, out = _pool(lm_family, tmp_path), tmp_path / "out"
    before = torch.get_num_threads()
    threads = 1 if before != 1 else 2  # --threads holds for the call only: the caller's count comes back
    assert _tune("--pool", pool, "--grid", _grid(tmp_path, "ta", {"lambda": [0.2, 0.6, 1.0]}), "--out", out,
                 "--samples", 4, "--select", "adamms", "--threads", threads) == 0
    assert torch.get_num_threads() == before
    selected = json.loads((out / "sweep" / "selected.json").read_text())
    records = json.loads((out / "sweep" / "adamms.json").read_text())
    assert selected["rule"] == "adamms" and selected["hparams"] == {"lambda": 0.6}  # the only interior point
    assert records[1]["score"] == pytest.approx((records[1]["d_prev"] + records[1]["d_next"]) / 2)
    assert yaml.safe_load((out / "sweep" / "recipe.yml").read_text())["parameters"]["lambda"] == 0.6
    with pytest.raises(ConfigError, match="grid 'sweep': AdaMMS\\* needs a grid over exactly one hyperparameter"):
        _tune("--pool", pool, "--grid", _grid(tmp_path, "ties", {"lambda": [0.5, 1.0], "density": [0.2, 0.5]}),
              "--out", tmp_path / "out2", "--samples", 4, "--select", "adamms", "--threads", threads)
    assert not (tmp_path / "out2").exists() and torch.get_num_threads() == before


def test_tune_adamerging_writes_a_model_and_a_recipe(lm_family, tmp_path):  # noqa: F811
    out = tmp_path / "ada"
    assert _tune("--pool", _pool(lm_family, tmp_path), "--adamerging", "entropy", "--iterations", 2, "--samples", 4,
                 "--batch-size", 2, "--out", out) == 0
    assert (out / "model" / "model.safetensors").is_file() and (out / "model" / "tokenizer.json").is_file()
    recipe = yaml.safe_load((out / "recipe.yml").read_text())
    assert recipe["merge_method"] == "task_arithmetic" and len(recipe["models"]) == 2
    assert json.loads((out / "coefficients.json").read_text())["settings"]["loss"] == "entropy"


@pytest.mark.parametrize("method", ["lines_consensus", "norm_avg_block"])
def test_block_and_model_methods_merge_in_memory_as_the_stock_merge(lm_family, tmp_path, method):  # noqa: F811
    from wildmerge.merging.inmemory import CandidateMerger
    from wildmerge.recipes.render import render_recipe

    experts = {f"e{i}": p for i, p in enumerate(lm_family["experts"])}
    merger = CandidateMerger(lm_family["base"], experts)  # names its inputs with their folders itself
    recipe = render_recipe(method, "base", list(experts))
    recipe.pop("out_dtype", None)
    in_memory = merger.merge(recipe)
    stock = render_recipe(method, lm_family["base"], list(experts.values()))
    run_merge(MergeConfiguration.model_validate(stock), str(tmp_path / "m"),
              options=MergeOptions(copy_tokenizer=False, quiet=True))
    written = load_file(str(tmp_path / "m" / "model.safetensors"))
    for name, tensor in written.items():
        torch.testing.assert_close(in_memory[name], tensor, rtol=0, atol=1e-6)
