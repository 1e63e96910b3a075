"""AdaMMS* (the reality-check paper, App. D, Eq. 5) on a tiny Qwen3: scores against a float64 computation from the
merged models' outputs, the rule's choice, and its refusals."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from wildmerge.analysis.tas.adamms import adamms_records, select_adamms, swept_key, tune_grid_adamms
from wildmerge.analysis.tas.sweep import TASSweep
from wildmerge.errors import ConfigError
from wildmerge.recipes.method import load_method_recipe


def _batches(seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (4, 7), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    return [(ids[:2], mask[:2]), (ids[2:], mask[2:])]


def _hidden(model, batches):
    out = []
    with torch.no_grad():
        for ids, mask in batches:
            h = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1].double()
            out += [h[r][mask[r].bool()].numpy() for r in range(ids.shape[0])]
    return out


def test_adamms_scores_match_a_direct_computation_and_pick_the_most_stable_point(tiny_qwen3_family, tmp_path):
    base, experts = tiny_qwen3_family["base"], tiny_qwen3_family["experts"][:2]
    batches = {"a": _batches(1), "b": _batches(2)}
    tas = TASSweep(tmp_path, base, dict(zip("ab", experts)), batches)
    ta = load_method_recipe("ta")
    lambdas = [0.2, 0.6, 1.0, 1.4]
    records = adamms_records(tas, ta, [{"lambda": v} for v in reversed(lambdas)], progress=False)  # sorted inside
    assert [r["hparams"]["lambda"] for r in records] == lambdas
    # direct: theta(lambda) = theta_0 + lambda * mean(tau) (the ta recipe normalises), features on both experts' data
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    b = {k: v.clone() for k, v in model.state_dict().items()}
    taus = [{k: v - b[k] for k, v in AutoModelForCausalLM.from_pretrained(e, dtype=torch.float32).state_dict().items()}
            for e in experts]
    feats = {}
    for lam in lambdas:
        model.load_state_dict({k: b[k] + lam * (taus[0][k] + taus[1][k]) / 2 for k in b})
        feats[lam] = _hidden(model, batches["a"]) + _hidden(model, batches["b"])
    d = [np.mean([np.sqrt(((x - y) ** 2).sum(-1)).mean() for x, y in zip(feats[p], feats[q])])
         for p, q in zip(lambdas, lambdas[1:])]
    assert records[0]["score"] is None and records[-1]["score"] is None  # the ends have one neighbour
    for i in (1, 2):
        assert records[i]["score"] == pytest.approx((d[i - 1] + d[i]) / 2, rel=1e-4)
    assert select_adamms(records)["hparams"]["lambda"] == lambdas[1 + int(np.argmin([d[0] + d[1], d[1] + d[2]]))]
    selected = tune_grid_adamms(tas, ta, [{"lambda": v} for v in lambdas], tmp_path / "out", progress=False)
    assert selected["rule"] == "adamms" and (tmp_path / "out" / "recipe.yml").is_file()


def test_adamms_needs_one_hyperparameter_and_three_points():
    with pytest.raises(ConfigError, match="exactly one hyperparameter"):
        swept_key([{"lambda": 0.1, "density": 0.2}, {"lambda": 0.2, "density": 0.3}, {"lambda": 0.3, "density": 0.1}])
    with pytest.raises(ConfigError, match="at least 3 values"):
        swept_key([{"lambda": 0.1}, {"lambda": 0.2}])
