"""AdaMerging and AdaMerging++ (Yang et al., ICLR 2024, "AdaMerging: Adaptive Model Merging for Multi-Task Learning")
as layer-wise recipes: the entropy gradient and Adam's first step against a float64 implementation written here from
the paper, the written merge against ``theta_0 + sum_t lambda[t, block] tau_t`` from the files (AdaMerging++ with
TIES' trimmed, sign-elected vectors computed here in numpy), the protocol on the quick demo family across two sizes,
an interrupted run resumed to the same bytes, and an expert without data refused before any work."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import lm_family, one_thread, run_mergekit_yaml, token_family, write_pool  # noqa: F401  (one_thread: autouse)
from safetensors.torch import load_file

from wildmerge.plugins.layerwise.adamerging import (
    AdaMergingSettings,
    batch_loss,
    groups_of,
    learn_coefficients,
    merged_parameters,
    ties_vectors,
)
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise

N_SAMPLES, SEQ = 6, 12


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny Llama base (2 blocks) and two experts, each with its own token data from its own vocabulary slice."""
    return token_family(tmp_path_factory.mktemp("adamerging"), [(4, 30), (30, 64)], N_SAMPLES, SEQ)


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def _batch(path):
    """Every sequence of an expert's token file in one right-padded batch."""
    rows = [json.loads(line)["input_ids"] for line in Path(path).read_text().splitlines()]
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.tensor(r), 1
    return ids, mask


def _column(name: str, n_layers: int = 2) -> int:
    found = re.search(r"\.layers\.(\d+)\.", name)
    return int(found.group(1)) if found else n_layers


# ---- the float64 reference, from the paper -----------------------------------------------------------------------


def _entropy64(model64, base, taus, lam, ids, mask):
    """AdaMerging's objective in float64, written out: theta = theta_0 + sum_t lam[t, block] tau_t, then the mean
    over every non-padding position of H(p) = -sum_v p_v log p_v of the next-token distribution."""
    from torch.func import functional_call

    params = {n: b + sum(lam[t, _column(n)] * tau[n] for t, tau in enumerate(taus)) for n, b in base.items()}
    logits = functional_call(model64, params, (), {"input_ids": ids, "attention_mask": mask}).logits
    terms = []
    for b in range(ids.shape[0]):
        for i in range(int(mask[b].sum())):
            p = torch.softmax(logits[b, i], dim=-1)
            terms.append(-(p * torch.log(p)).sum())
    return torch.stack(terms).mean()


def _models(family):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(family["base"], dtype=torch.float32).eval()
    model64 = AutoModelForCausalLM.from_pretrained(family["base"], dtype=torch.float64).eval()
    base = {n: p.detach() for n, p in model.named_parameters()}
    taus = [{n: _weights(e)[n] - base[n] for n in base} for e in family["experts"]]
    return model, model64, base, taus


def test_entropy_and_its_gradient_match_the_float64_formula(family):
    model, model64, base, taus = _models(family)
    ids, mask = _batch(family["data"][0])
    start = [[0.3, 0.5, 0.2], [0.6, 0.1, 0.4]]
    lam = torch.tensor(start, requires_grad=True)
    batch_loss(model, merged_parameters(base, taus, lam, groups_of(list(base), 2)), ids, mask, "entropy").backward()
    base64 = {n: b.double() for n, b in base.items()}
    taus64 = [{n: t.double() for n, t in tau.items()} for tau in taus]
    lam64 = torch.tensor(start, dtype=torch.float64, requires_grad=True)
    loss64 = _entropy64(model64, base64, taus64, lam64, ids, mask)
    (grad64,) = torch.autograd.grad(loss64, lam64)
    # (no finite differences: transformers runs the norms and rotary tables in float32 even in a float64 model)
    assert float(loss64.detach()) == pytest.approx(float(batch_loss(model, merged_parameters(
        base, taus, lam.detach(), groups_of(list(base), 2)), ids, mask, "entropy")), rel=1e-5)
    np.testing.assert_allclose(lam.grad.numpy(), grad64.numpy(), rtol=2e-3, atol=1e-6)


def test_first_adam_step_moves_every_coefficient_against_the_mean_expert_gradient(family):
    """Adam's first step is lr * g / (|g| + eps): each coefficient moves by lr against the sign of the experts' mean
    entropy gradient (each expert on its own batch; batch_size = every sequence, so the batch is the whole data)."""
    model, model64, base, taus = _models(family)
    settings = AdaMergingSettings(loss="entropy", iterations=1, lr=0.01, batch_size=N_SAMPLES, init=0.3, clamp=False)
    batches = [[_batch(d)] for d in family["data"]]
    learned = learn_coefficients(model, base, taus, batches, groups_of(list(base), 2), settings, ["a", "b"],
                                 progress=False)
    lam64 = torch.full((2, 3), 0.3, dtype=torch.float64, requires_grad=True)
    base64 = {n: b.double() for n, b in base.items()}
    taus64 = [{n: t.double() for n, t in tau.items()} for tau in taus]
    mean = sum(_entropy64(model64, base64, taus64, lam64, *b[0]) for b in batches) / 2
    (grad,) = torch.autograd.grad(mean, lam64)
    assert (grad.abs() > 1e-6).all()
    np.testing.assert_allclose(learned.coefficients.numpy(), (0.3 - 0.01 * torch.sign(grad)).numpy(), atol=1e-6)
    assert learned.losses[0] == pytest.approx(float(mean), rel=1e-5)


def _ties64(taus, density):
    """TIES-Merging's trim and sign election per tensor, in numpy float64: the top int(density * n) by magnitude
    (at least 1), the sign of the trimmed vectors' sum (0 counts as +), each vector's agreeing entries."""
    out = [{} for _ in taus]
    for name in taus[0]:
        trimmed = []
        for tau in taus:
            flat = tau[name].double().numpy().ravel()
            k = max(1, int(density * flat.size))
            keep = np.zeros(flat.size, dtype=bool)
            keep[np.argsort(-np.abs(flat), kind="stable")[:k]] = True
            trimmed.append(np.where(keep, flat, 0.0))
        sign = np.where(np.sum(trimmed, axis=0) >= 0, 1.0, -1.0)
        for t, v in enumerate(trimmed):
            out[t][name] = np.where(np.sign(v) == sign, v, 0.0).reshape(tuple(taus[0][name].shape))
    return out


def test_adamerging_pp_vectors_are_ties_trimmed_and_sign_elected():
    from wildmerge.plugins import host_patches

    gen = torch.Generator().manual_seed(0)
    taus = [{"w": torch.randn(7, 5, generator=gen), "b": torch.randn(11, generator=gen)} for _ in range(3)]
    got = ties_vectors(taus, 0.3)
    for mine, ref in zip(got, _ties64(taus, 0.3)):
        for name in ref:
            np.testing.assert_array_equal(mine[name].double().numpy(), ref[name])
    stock = host_patches.original("mergekit.sparsify.magnitude")  # mergekit's own trim keeps the same entries
    for tau, mine in zip(taus, got):
        for name, t in tau.items():
            trimmed = stock(t, 0.3)
            assert bool(((mine[name] != 0) <= (trimmed != 0)).all())  # kept entries are trimmed entries
            assert torch.equal(mine[name][mine[name] != 0], t[mine[name] != 0])


def _recipe(fam, method, params):
    return {"merge_method": method, "base_model": fam["base"], "parameters": params,
            "calibration": {"n_samples": N_SAMPLES, "seq_len": SEQ, "batch_size": N_SAMPLES},
            "models": [{"model": e, "calibration": d} for e, d in zip(fam["experts"], fam["data"])]}


@pytest.mark.parametrize("method,granularity", [("adamerging", "layer"), ("adamerging", "task"),
                                                ("adamerging_pp", "layer")])
def test_the_merge_is_the_learned_coefficients_on_the_task_vectors(family, tmp_path, method, granularity):
    params = {"iterations": 8, "lr": 0.02, "samples_per_step": N_SAMPLES, "granularity": granularity}
    if method == "adamerging_pp":
        params["density"] = 0.3
    out = merge_layerwise(_recipe(family, method, params), tmp_path / "out", device="cpu", progress=False)
    diag = json.loads((Path(out) / DIAGNOSTICS_FILE).read_text())
    lam = np.array(diag["coefficients"])
    assert lam.shape == (2, 3 if granularity == "layer" else 1) and (lam >= 0).all() and (lam <= 1).all()
    assert not np.allclose(lam, 0.3) and diag["loss_end"] < diag["loss_start"] and len(diag["losses"]) == 8
    base = {n: t.double() for n, t in _weights(family["base"]).items()}
    taus = [{n: _weights(e)[n].double() - b for n, b in base.items()} for e in family["experts"]]
    if method == "adamerging_pp":
        taus = [{n: torch.from_numpy(v) for n, v in tau.items()} for tau in _ties64(taus, 0.3)]
    merged = _weights(out)
    for name, b in base.items():
        col = _column(name) if granularity == "layer" else 0
        ref = b + sum(float(lam[t, col]) * tau[name] for t, tau in enumerate(taus))
        np.testing.assert_allclose(merged[name].double().numpy(), ref.numpy(), atol=2e-6, err_msg=name)


def test_it_needs_a_base(family, tmp_path):
    from wildmerge.errors import ConfigError

    recipe = _recipe(family, "adamerging", {})
    del recipe["base_model"]
    with pytest.raises(ConfigError, match="adamerging learns coefficients of task vectors"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)


def test_an_expert_without_data_is_refused_before_any_model_loads(lm_family, tmp_path, capsys):  # noqa: F811
    from wildmerge.cli import main

    pool = write_pool(tmp_path, lm_family)  # no expert has data
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--methods", "adamerging,adamerging_pp",
                 "--sizes", "2", "--k", "1", "--no-evaluate"]) != 0
    err = capsys.readouterr().err
    for method in ("adamerging", "adamerging_pp"):
        assert f"{method} needs each expert's text data; none for x0, x1. Add under each" in err
    assert "data: generate" in err and not (run / "models").exists()


# ---- the shipped recipes through the stock mergekit-yaml, and the protocol, on the quick demo family -------------


@pytest.mark.parametrize("method", ["adamerging", "adamerging_pp"])
def test_stock_mergekit_yaml_runs_the_shipped_recipe_on_the_demo_family(tmp_path, method):
    from wildmerge.families.demo.family import ensure_family
    from wildmerge.recipes.render import render_recipe

    demo = ensure_family(seed=0, quick=True, progress=False)  # the shared cache (~/.cache/wildmerge/demo)
    names = sorted(demo["experts"])[:2]
    recipe = render_recipe(method, demo["base"], [demo["experts"][n] for n in names], {})
    recipe["parameters"]["iterations"] = 3  # the recipe's other settings as shipped; 3 steps keep the test short
    for m, n in zip(recipe["models"], names):
        m["calibration"] = {"data": f"demo:unlabelled/{n}"}  # what the protocol's recipes name (64 texts each)
    diag = run_mergekit_yaml(recipe, tmp_path, WILDMERGE_DEMO_QUICK="1")
    assert diag["method"] == method and len(diag["coefficients"]) == 2 and len(diag["losses"]) == 3
    assert diag["parameters"]["init"] == 0.3 and diag["parameters"]["loss"] == "entropy"


PROTOCOL = ["--pool", "demo", "--methods", "adamerging,adamerging_pp", "--sizes", "2,3", "--k", "1", "--no-full"]


def _bytes(run):
    return {d.name: {f.name: f.read_bytes() for f in sorted(d.glob("*.safetensors"))}
            for d in sorted((Path(run) / "models").iterdir())}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """Both recipes as shipped, two subset sizes (2 and all 3 experts), evaluated on a few items per task."""
    from wildmerge.cli import main

    mp = pytest.MonkeyPatch()
    mp.setenv("WILDMERGE_DEMO_QUICK", "1")
    run = tmp_path_factory.mktemp("ada_demo") / "run"
    try:
        assert main(["sample", *PROTOCOL, "--limit", "4", "--out", str(run)]) == 0
    finally:
        mp.undo()
    return run


def test_the_protocol_runs_both_recipes_across_two_sizes(demo_run):
    from wildmerge.run import RunFolder

    merges = [e for e in RunFolder(demo_run).read_plan().entries if e.kind == "merge"]
    assert sorted((e.method, e.n) for e in merges) == [("adamerging", 2), ("adamerging", 3),
                                                       ("adamerging_pp", 2), ("adamerging_pp", 3)]
    for e in merges:
        recipe = yaml.safe_load((Path(e.path) / "recipe.yml").read_text())
        assert recipe["merge_method"] == e.method and all(m["calibration"]["data"].startswith("demo:unlabelled/")
                                                           for m in recipe["models"])
        diag = json.loads((Path(e.path) / DIAGNOSTICS_FILE).read_text())
        assert len(diag["experts"]) == e.n and len(diag["coefficients"][0]) == 3  # 2 blocks + the rest
        assert ("kept_share" in diag) == (e.method == "adamerging_pp")
    scores = pd.read_csv(demo_run / "report" / "scores.csv").set_index("model_id")
    ids = [e.model_id for e in merges]
    assert (scores.loc[ids, "status"] == "ok").all() and scores.loc[ids, "mean"].notna().all()
    compute = pd.read_csv(demo_run / "report" / "merge_compute.csv").set_index("model_id")
    assert set(compute.index) == set(ids) and set(compute["method"]) == {"AdaMerging", "AdaMerging++"}


def test_an_interrupted_run_resumes_to_the_same_bytes(demo_run, tmp_path, monkeypatch):
    import mergekit.merge

    from wildmerge.cli import main

    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    real, calls = mergekit.merge.run_merge, []

    def dying(config, out_path, options, config_source=None):
        calls.append(out_path)
        if len(calls) == 2:
            raise KeyboardInterrupt  # like Ctrl-C inside the second merge
        return real(config, out_path, options, config_source=config_source)
    monkeypatch.setattr(mergekit.merge, "run_merge", dying)
    run = tmp_path / "run"
    assert main(["sample", *PROTOCOL, "--no-evaluate", "--out", str(run)]) == 130
    assert len(list(run.glob("models/*/merge_info.json"))) == 1
    monkeypatch.setattr(mergekit.merge, "run_merge", real)
    assert main(["sample", *PROTOCOL, "--no-evaluate", "--out", str(run)]) == 0
    again, first = _bytes(run), _bytes(demo_run)
    assert again.keys() == first.keys() and len(again) == 4
    assert all(again[m] == first[m] for m in first)
