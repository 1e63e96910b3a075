"""NormAvg and MetaGPT (the reality-check paper, App. B) against float64 references written from the paper, plus the imbalance
report (``wildmerge analyze norms``) against a direct float64 computation."""

import csv
import json

import numpy as np
import pytest
import torch
from mergekit.merge_methods.base import TensorGroup
from safetensors.numpy import load_file

from wildmerge.analysis.pool.imbalance import imbalance_rows, layer_grams, write_imbalance
from wildmerge.errors import ConfigError
from wildmerge.plugins.norm_methods import METAGPT, NORM_AVG


def _group(base, experts):
    return TensorGroup.from_tensors([base, *experts], ids=["base", *range(len(experts))], base_index=0, name="w")


def _inputs(seed=0, scales=(1.0, 5.0, 0.2)):
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(6, 4, generator=gen)
    return base, [base + s * torch.randn(6, 4, generator=gen) for s in scales]


def _taus(base, experts):
    b = base.double().numpy()
    return b, [e.double().numpy() - b for e in experts]


def test_norm_avg_matches_float64_reference_and_rescales_to_the_smallest_norm():
    base, experts = _inputs()
    out = NORM_AVG([_group(base, experts)], parameters={"lambda": 0.8})[0]
    b, taus = _taus(base, experts)
    norms = [np.linalg.norm(t) for t in taus]
    ref = b + 0.8 * sum(t * min(norms) / n for t, n in zip(taus, norms)) / len(taus)
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=1e-5, atol=1e-6)
    # invariant: with identical directions, NormAvg is the base plus the smallest task vector
    tau = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    same = NORM_AVG([_group(base, [base + 2 * tau, base + tau, base + 7 * tau])], parameters={"lambda": 1.0})[0]
    torch.testing.assert_close(same, base + tau, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_metagpt_matches_float64_reference_eq4(power):
    base, experts = _inputs(seed=1)
    out = METAGPT([_group(base, experts)], parameters={"lambda": 1.0, "power": power})[0]
    b, taus = _taus(base, experts)
    norms = np.array([np.linalg.norm(t) for t in taus])
    weights = norms ** power / (norms ** power).sum()
    assert weights.sum() == pytest.approx(1.0)
    ref = b + sum(w * t for w, t in zip(weights, taus))
    np.testing.assert_allclose(out.double().numpy(), ref, rtol=1e-5, atol=1e-6)


def test_zero_task_vectors_give_the_base_exactly_and_bad_parameters_are_named():
    base, _ = _inputs()
    for method in (NORM_AVG, METAGPT):
        assert torch.equal(method([_group(base, [base.clone(), base.clone()])])[0], base)
    with pytest.raises(ConfigError, match="metagpt: parameter 'power' = 0.0 is out of range"):
        METAGPT([_group(base, [base + 1])], parameters={"power": 0.0})


def _flat(path, keys):
    sd = load_file(f"{path}/model.safetensors")
    return np.concatenate([sd[k].astype(np.float64).ravel() for k in keys])


def test_imbalance_report_matches_float64_computation(tiny_family, tmp_path):
    base, experts = tiny_family["base"], dict(zip(["a", "b", "c"], tiny_family["experts"]))
    rows = imbalance_rows(layer_grams(base, experts, progress=False), list(experts))
    keys = sorted(load_file(f"{base}/model.safetensors"))
    groups = {"model": keys, "layer_001": [k for k in keys if ".layers.1." in k],
              "lm_head.weight": ["lm_head.weight"]}
    for layer, layer_keys in groups.items():
        taus = {n: _flat(p, layer_keys) - _flat(base, layer_keys) for n, p in experts.items()}
        total = sum(taus.values())
        norms = {n: np.linalg.norm(t) for n, t in taus.items()}
        for n, tau in taus.items():
            row = next(r for r in rows if r["layer"] == layer and r["expert"] == n)
            assert row["norm"] == pytest.approx(norms[n], rel=1e-9)
            assert row["cos_with_sum"] == pytest.approx(tau @ total / (norms[n] * np.linalg.norm(total)), rel=1e-9)
            assert row["max_min_ratio"] == pytest.approx(max(norms.values()) / min(norms.values()), rel=1e-9)
    written = write_imbalance(rows, list(experts), tmp_path)
    assert {p.name for p in written} == {"imbalance.csv", "imbalance.json", "imbalance.png", "imbalance.svg"}
    assert len(list(csv.DictReader(open(tmp_path / "imbalance.csv")))) == len(rows)
    assert json.loads((tmp_path / "imbalance.json").read_text())["flagged"] is False  # equal noise: balanced


def test_imbalanced_pool_is_flagged(tmp_path):
    from helpers import make_tiny_model

    base = make_tiny_model(tmp_path / "base", seed=0)
    small = make_tiny_model(tmp_path / "small", base=base, seed=1, noise=0.001)
    big = make_tiny_model(tmp_path / "big", base=base, seed=2, noise=0.05)
    rows = imbalance_rows(layer_grams(base, {"small": small, "big": big}, progress=False), ["small", "big"])
    write_imbalance(rows, ["small", "big"], tmp_path / "out")
    info = json.loads((tmp_path / "out" / "imbalance.json").read_text())
    assert info["flagged"] and info["max_min_ratio"] == pytest.approx(50, rel=0.1) and "big" in info["note"]
