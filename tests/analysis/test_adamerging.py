"""AdaMerging+TAS and AdaMerging (entropy) on a tiny Llama: the loss falls, the merged checkpoint is
``theta_0 + sum_t lambda[t, block] tau_t`` (float64 reference from the files), and the stock ``mergekit-yaml``
reproduces it from the written recipe."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.analysis.tas.adamerging import adamerge
from wildmerge.plugins.layerwise.adamerging import AdaMergingSettings, batches_cycle, groups_of, merged_parameters

TEXTS = {0: ["The sky is blue", "Grass is green", "Fire is hot", "Ice is cold", "A cat says meow"] * 2,
         1: ["1 plus 1 equals 2", "2 plus 3 equals 5", "4 plus 4 equals 8", "Two plus two is four"] * 3}


def test_merged_parameters_are_task_arithmetic_per_block():
    base = {"model.layers.0.w": torch.zeros(2), "model.layers.1.w": torch.zeros(2), "lm_head.weight": torch.zeros(2)}
    taus = [{k: torch.ones(2) for k in base}, {k: 2 * torch.ones(2) for k in base}]
    lam = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    out = merged_parameters(base, taus, lam, groups_of(list(base), 2))
    assert out["model.layers.0.w"].tolist() == pytest.approx([0.9, 0.9])  # 0.1 + 2 * 0.4
    assert out["model.layers.1.w"].tolist() == pytest.approx([1.2, 1.2])
    assert out["lm_head.weight"].tolist() == pytest.approx([1.5, 1.5])  # the group outside the blocks


def test_steps_draw_samples_across_batches_of_other_widths():
    """The data comes in batches padded each to its own width; a step's batch mixes them, padded anew."""
    first = (torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([[1, 1, 1], [1, 1, 0]]))
    second = (torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[1, 1, 1, 1, 1]]))
    ids, mask = next(batches_cycle([first, second], size=3, seed=0))
    assert ids.shape == mask.shape == (3, 5)
    got = sorted(tuple(r[m.bool()].tolist()) for r, m in zip(ids, mask))
    assert got == [(1, 2, 3, 4, 5), (5, 6, 7), (8, 9)]
    assert (ids[~mask.bool()] == 0).all()


@pytest.mark.parametrize("loss", ["tas", "entropy"])
def test_adamerging_learns_writes_a_model_and_a_recipe_mergekit_reproduces(lm_family, tmp_path, loss):
    experts = {f"e{i}": p for i, p in enumerate(lm_family["experts"])}
    settings = AdaMergingSettings(loss=loss, iterations=15, lr=0.05, batch_size=4)
    texts = {f"e{i}": t for i, t in TEXTS.items()}  # as expert_data.read.expert_texts gives them
    out = adamerge(lm_family["base"], experts, texts, tmp_path / "ada", settings=settings, samples=8, progress=False)
    info = json.loads(out["coefficients"].read_text())
    lam = np.array(info["coefficients"])
    assert lam.shape == (2, 3) and (lam >= 0).all() and (lam <= 1).all()  # 2 blocks + the rest, clamped
    assert not np.allclose(lam, 0.5)  # moved from 1/T
    assert info["losses"][-1] < info["losses"][0]
    # the written checkpoint is theta_0 + sum_t lambda[t, block(p)] tau_t, in float64 from the files
    base = load_file(f"{lm_family['base']}/model.safetensors")
    tensors = [load_file(f"{p}/model.safetensors") for p in experts.values()]
    merged = load_file(f"{out['model']}/model.safetensors")
    for name, b in base.items():
        col = int(name.split(".")[2]) if ".layers." in name else 2
        ref = b.astype(np.float64) + sum(lam[t, col] * (e[name].astype(np.float64) - b) for t, e in enumerate(tensors))
        np.testing.assert_allclose(merged[name], ref, atol=1e-6, err_msg=name)
    # the stock mergekit-yaml makes the same weights from recipe.yml
    cli = Path(sys.executable).with_name("mergekit-yaml")
    res = subprocess.run([str(cli), str(out["recipe"]), str(tmp_path / "stock"), "--no-copy-tokenizer"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    stock = load_file(f"{tmp_path}/stock/model.safetensors")
    for name in merged:
        np.testing.assert_allclose(stock[name], merged[name], atol=1e-6, err_msg=name)
