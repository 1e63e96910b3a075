"""Fisher merging (Matena & Raffel 2022) and MaTS (Tam, Bansal, Raffel 2023): each against a float64
implementation written here from its paper, their invariants, and the shipped recipes through the stock
``mergekit-yaml`` on the demo family."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import one_thread, run_mergekit_yaml, token_family  # noqa: F401  (one_thread: autouse fixture)
from safetensors.torch import load_file

from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise
from wildmerge.plugins.layerwise.fisher import fisher_merge
from wildmerge.plugins.layerwise.mats import conjugate_gradient, mats_merge
from wildmerge.plugins.layerwise.regmean import closed_form_merge

N_SAMPLES, SEQ = 6, 12
MATS = dict(lam_rel=0.0, ridge="zero", init="task_arithmetic", init_lambda=0.4, tol=0.0, precision=torch.float64)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny Llama base, three experts of it, each with its own token data from its own slice of the vocabulary."""
    return token_family(tmp_path_factory.mktemp("fisher_mats"), [(4, 24), (24, 44), (44, 64)], N_SAMPLES, SEQ)


def _recipe(fam, method, params=None, experts=None):
    experts = fam["experts"] if experts is None else experts
    return {"merge_method": method, "base_model": fam["base"], "parameters": params or {},
            "calibration": {"n_samples": N_SAMPLES, "seq_len": SEQ, "batch_size": 4},
            "models": [{"model": e, "calibration": d} for e, d in zip(experts, fam["data"])]}


def _merge(fam, recipe, name):
    return merge_layerwise(recipe, fam["root"] / name, device="cpu", progress=False)


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def _sequences(data):
    return [json.loads(line)["input_ids"] for line in open(data)]


# ---- Fisher merging --------------------------------------------------------------------------------------------


def _reference_fisher(path, seqs):
    """Matena & Raffel's diagonal empirical Fisher, float64: the mean over examples of the squared gradient of each
    example's log-likelihood (here: the sum of its next-token log-probabilities)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    names, params = zip(*model.named_parameters())
    fisher = [torch.zeros_like(p) for p in params]
    for s in seqs:
        ids = torch.tensor([s])
        logp = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
        loglik = sum(logp[t, s[t + 1]] for t in range(len(s) - 1))
        for f, g in zip(fisher, torch.autograd.grad(loglik, params)):
            f += g * g
    return {n: f / len(seqs) for n, f in zip(names, fisher)}, {n: p.detach() for n, p in zip(names, params)}


def test_fisher_merge_matches_float64_reference(family):
    floor = 1e-6
    out = _weights(_merge(family, _recipe(family, "fisher", {"fisher_samples": N_SAMPLES, "fisher_floor": floor}),
                          "fisher_ref"))
    refs = [_reference_fisher(e, _sequences(d)) for e, d in zip(family["experts"], family["data"])]
    assert set(out) == set(refs[0][0])
    for name in out:
        num = sum((F[name] + floor) * theta[name] for F, theta in refs)
        den = sum(F[name] + floor for F, _ in refs)
        ref = num / den
        # the merge's Fishers are float32 gradients squared: a weight off by a share e moves the merged value by at
        # most e times the experts' spread around it (a wrong rule moves it by a good part of that spread)
        spread = torch.stack([(theta[name] - ref).abs() for _, theta in refs]).amax(0)
        error = (out[name].double() - ref).abs()
        assert bool((error <= 1e-3 * spread + 1e-7).all()), (name, float((error / (spread + 1e-12)).max()))
    # the merge is no plain average: the experts' Fishers differ where their data differ
    mean = sum(theta["model.embed_tokens.weight"] for _, theta in refs) / 3
    assert (out["model.embed_tokens.weight"].double() - mean).abs().max() > 1e-3


def test_fisher_diagnostics_and_sample_budget(family):
    out = _merge(family, _recipe(family, "fisher", {"fisher_samples": 2}), "fisher_two")
    diag = json.loads((out / DIAGNOSTICS_FILE).read_text())
    assert diag["method"] == "fisher" and [e["samples"] for e in diag["experts"]] == [2, 2, 2]
    assert all(e["fisher_sum"] > 0 and 0 <= e["fisher_zero_fraction"] < 1 for e in diag["experts"])
    assert "Fisher" in (out / "README.md").read_text()


def test_fisher_invariants():
    g = torch.Generator().manual_seed(0)
    thetas = [torch.randn(5, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    fishers = [torch.rand(5, 4, generator=g, dtype=torch.float64) for _ in range(3)]
    mean = sum(thetas) / 3
    # equal Fishers (any value, zero included): the average
    torch.testing.assert_close(fisher_merge(thetas, [fishers[0]] * 3, floor=0.0), mean)
    torch.testing.assert_close(fisher_merge(thetas, [torch.zeros(5, 4, dtype=torch.float64)] * 3, floor=1e-6), mean)
    # one expert: itself; the scale of the Fishers does not matter (floor 0)
    torch.testing.assert_close(fisher_merge(thetas[:1], fishers[:1], floor=1e-6), thetas[0])
    torch.testing.assert_close(fisher_merge(thetas, [7.0 * f for f in fishers], floor=0.0),
                               fisher_merge(thetas, fishers, floor=0.0))
    # every entry between the experts' extremes; an expert with all the Fisher of an entry wins it
    merged = fisher_merge(thetas, fishers, floor=0.0)
    stack = torch.stack(thetas)
    assert (merged >= stack.min(0).values - 1e-12).all() and (merged <= stack.max(0).values + 1e-12).all()
    only = [torch.zeros(5, 4, dtype=torch.float64), fishers[1], torch.zeros(5, 4, dtype=torch.float64)]
    torch.testing.assert_close(fisher_merge(thetas, only, floor=0.0), thetas[1])
    # no Fisher anywhere and no floor: undefined (the engine refuses the NaN)
    assert torch.isnan(fisher_merge(thetas, [torch.zeros(5, 4)] * 3, floor=0.0)).all()


def test_fisher_single_expert_gives_itself_back(family):
    out = _weights(_merge(family, _recipe(family, "fisher", experts=family["experts"][:1]), "fisher_single"))
    expected = _weights(family["experts"][0])
    for name in expected:
        torch.testing.assert_close(out[name], expected[name], rtol=1e-6, atol=1e-7)


# ---- MaTS --------------------------------------------------------------------------------------------------------


def _reference_cg(K, b, x0, steps):
    """Textbook conjugate gradient on K x = b (Hestenes & Stiefel), float64 numpy, for a fixed number of steps."""
    x = x0.copy()
    r = b - K @ x
    p = r.copy()
    for _ in range(steps):
        rr = r @ r
        if rr == 0:
            break
        Kp = K @ p
        alpha = rr / (p @ Kp)
        x = x + alpha * p
        r = r - alpha * Kp
        p = r + (r @ r) / rr * p
    return x


def _mats_reference(Ws, Gs, W0, init_lambda, steps):
    """Tam et al.: (Σ C_i) θ = Σ C_i θ_i with C_i = G_i ⊗ I for a linear layer W (vec(W G) = (G ⊗ I) vec(W),
    column-major), CG from task arithmetic."""
    d_out, d_in = Ws[0].shape
    eye = np.eye(d_out)
    K = sum(np.kron(G.T, eye) for G in Gs)
    b = sum(np.kron(G.T, eye) @ W.flatten(order="F") for W, G in zip(Ws, Gs))
    x0 = (W0 + init_lambda * sum(W - W0 for W in Ws)).flatten(order="F")
    return _reference_cg(K, b, x0, steps).reshape((d_out, d_in), order="F")


def _random_layer(seed, n=3, d_out=6, d_in=5, rank=None):
    g = torch.Generator().manual_seed(seed)
    W0 = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    Ws = [W0 + 0.3 * torch.randn(d_out, d_in, generator=g, dtype=torch.float64) for _ in range(n)]
    Gs = []
    for _ in range(n):
        X = torch.randn(rank or 2 * d_in, d_in, generator=g, dtype=torch.float64)
        Gs.append(X.T @ X / X.shape[0])
    return W0, Ws, Gs


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_mats_kernel_matches_the_vectorised_cg_reference(steps):
    W0, Ws, Gs = _random_layer(steps)
    got, info = mats_merge(Ws, Gs, None, base=W0, iterations=steps, **MATS)
    expected = _mats_reference([W.numpy() for W in Ws], [G.numpy() for G in Gs], W0.numpy(), 0.4, steps)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-10)
    assert info["iterations"] == steps


def test_mats_converges_to_regmean_with_every_ridge():
    W0, Ws, Gs = _random_layer(11)
    for ridge, lam in (("zero", 0.0), ("zero", 0.05), ("delta", 0.05), ("per_task", 0.05)):
        got, info = mats_merge(Ws, Gs, [1.0, 2.0, 0.5], base=W0, iterations=500,
                               **dict(MATS, ridge=ridge, lam_rel=lam, tol=1e-13))
        exact = closed_form_merge(Ws, Gs, [1.0, 2.0, 0.5], lam_rel=lam, ridge=ridge, base=W0,
                                  precision=torch.float64)
        torch.testing.assert_close(got, exact, rtol=1e-8, atol=1e-9)
        assert info["residual"] < 1e-10, (ridge, info)


def test_mats_invariants():
    W0, Ws, Gs = _random_layer(3)
    mean = sum(Ws) / 3
    # identity C: the average, after one step, from either start
    eye = [torch.eye(5, dtype=torch.float64)] * 3
    for init in ("task_arithmetic", "average"):
        got, info = mats_merge(Ws, eye, None, base=W0, iterations=1, **dict(MATS, init=init))
        torch.testing.assert_close(got, mean)
        assert info["residual"] < 1e-12
    # equal C_i: the average at convergence; one model: itself
    got, _ = mats_merge(Ws, [Gs[0]] * 3, None, base=W0, iterations=200, **dict(MATS, tol=1e-14))
    torch.testing.assert_close(got, mean, rtol=1e-8, atol=1e-9)
    got, _ = mats_merge(Ws[:1], Gs[:1], None, base=W0, iterations=200, **dict(MATS, tol=1e-14))
    torch.testing.assert_close(got, Ws[0], rtol=1e-8, atol=1e-9)
    # the A-norm of the error falls with every CG step; the start is the 0-step answer
    A = sum(Gs)
    exact = closed_form_merge(Ws, Gs, None, lam_rel=0.0, ridge="zero", base=None, precision=torch.float64)
    errors = []
    for steps in range(1, 6):
        got, _ = mats_merge(Ws, Gs, None, base=W0, iterations=steps, **MATS)
        E = got - exact
        errors.append(float(torch.trace(E @ A @ E.T)))
    assert all(b < a for a, b in zip(errors, errors[1:]))
    # a rank-deficient system: CG stays finite and leaves the start alone where no data reaches
    W0, Ws, Gs = _random_layer(5, rank=1)  # three rank-1 Grams of 5 x 5
    got, _ = mats_merge(Ws, Gs, None, base=W0, iterations=50, **dict(MATS, tol=1e-12))
    assert torch.isfinite(got).all()
    X0 = W0 + 0.4 * sum(W - W0 for W in Ws)
    values, vectors = torch.linalg.eigh(sum(Gs))
    assert values[:2].abs().max() < 1e-12
    null = vectors[:, :2]  # the directions no model's inputs reach
    torch.testing.assert_close(got @ null, X0 @ null, rtol=1e-8, atol=1e-9)


def test_conjugate_gradient_reports_its_true_residual():
    A = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    B = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    X, info = conjugate_gradient(lambda X: X @ A, B, torch.zeros(1, 2, dtype=torch.float64), 2, 0.0)
    torch.testing.assert_close(X, B @ torch.linalg.inv(A))
    assert info == {"iterations": 2, "residual": pytest.approx(0.0, abs=1e-15)}
    _, early = conjugate_gradient(lambda X: X @ A, B, torch.zeros(1, 2, dtype=torch.float64), 1, 0.0)
    assert early["iterations"] == 1 and early["residual"] > 1e-3


def test_mats_first_projection_matches_float64_reference(family):
    """q_proj of block 0 through the driver, recomputed in float64: each expert's Gram of its own block-0 inputs
    (RMSNorm of its own embeddings), then 10 CG steps on the vectorised system from task arithmetic."""
    out = _merge(family, _recipe(family, "mats", {"diagnostics": False}), "mats_ref")
    experts = [_weights(e) for e in family["experts"]]
    name = "model.layers.0.self_attn.q_proj.weight"
    grams = []
    for w, data in zip(experts, family["data"]):
        ids = torch.tensor([t for s in _sequences(data) for t in s])
        h = w["model.embed_tokens.weight"].double()[ids]
        norm = w["model.layers.0.input_layernorm.weight"].double()
        x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
        grams.append((x.T @ x / x.shape[0]).numpy())
    W0 = _weights(family["base"])[name].double().numpy()
    expected = _mats_reference([w[name].double().numpy() for w in experts], grams, W0, 0.4, 10)
    np.testing.assert_allclose(_weights(out)[name].double().numpy(), expected, rtol=1e-3, atol=2e-5)
    diag = json.loads((out / DIAGNOSTICS_FILE).read_text())
    first = next(e for e in diag["layers"] if e["layer"] == 0 and e["group"] == "qkv")
    assert first["cg"][name]["iterations"] == 10 and 0 < first["cg"][name]["residual"] < 1


def test_mats_single_expert_gives_itself_back(family):
    out = _weights(_merge(family, _recipe(family, "mats", experts=family["experts"][:1]), "mats_single"))
    expected = _weights(family["experts"][0])
    for name in expected:
        torch.testing.assert_close(out[name], expected[name], rtol=0, atol=0)


@pytest.mark.parametrize("method,params,message", [
    ("mats", {"iterations": 0}, "parameter 'iterations' = 0 is out of range"),
    ("mats", {"init": "ties"}, "parameter 'init' = 'ties' is invalid"),
    ("fisher", {"fisher_samples": 0}, "parameter 'fisher_samples' = 0 is out of range"),
    ("fisher", {"ridge": "delta"}, "unknown parameter 'ridge' for fisher"),
])
def test_bad_parameters_fail_before_any_work(family, tmp_path, method, params, message):
    with pytest.raises(WildmergeError, match=message):
        merge_layerwise(_recipe(family, method, params), tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def test_mats_from_task_arithmetic_needs_a_base(family, tmp_path):
    recipe = _recipe(family, "mats")
    del recipe["base_model"]
    with pytest.raises(WildmergeError, match="needs the base model: set base_model, or use init: average"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)


# ---- the shipped recipes, through the stock mergekit-yaml, on the demo family -----------------------------------


@pytest.fixture(scope="module")
def demo():
    from wildmerge.families.demo.family import ensure_family

    return ensure_family(seed=0, quick=True, progress=False)  # the shared cache (~/.cache/wildmerge/demo)


@pytest.mark.parametrize("recipe_name,method", [("fisher", "fisher"), ("mats", "mats")])
def test_stock_mergekit_yaml_runs_the_shipped_recipe_on_the_demo_family(demo, tmp_path, recipe_name, method):
    from transformers import AutoModelForCausalLM

    from wildmerge.recipes.render import render_recipe

    names = sorted(demo["experts"])
    recipe = render_recipe(recipe_name, demo["base"], [demo["experts"][n] for n in names], {})
    recipe["calibration"].update(n_samples=8, seq_len=32)
    for m, n in zip(recipe["models"], names):
        m["calibration"] = str(Path(demo["root"]) / "calibration" / f"{n}.jsonl")
    diag = run_mergekit_yaml(recipe, tmp_path)
    assert diag["method"] == method and len(diag["models"]) == len(names)
    merged = _weights(tmp_path / "out")
    experts = [_weights(demo["experts"][n]) for n in names]
    moved = [n for n in merged if merged[n].is_floating_point()
             and not torch.allclose(merged[n].float(), sum(e[n].float() for e in experts) / len(experts), atol=1e-6)]
    assert moved, "the data-based merge should differ from the plain average somewhere"
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()


def test_sampler_merges_the_demo_pool_with_each_experts_own_data(demo, tmp_path, monkeypatch):
    """`wildmerge sample --methods mats,fisher` on the demo pool: each expert's `data:` reaches its recipe."""
    from wildmerge.cli import main

    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    run = tmp_path / "run"
    assert main(["sample", "--pool", "demo", "--methods", "mats,fisher", "--sizes", "2", "--k", "1", "--no-full",
                 "--no-evaluate", "--out", str(run)]) == 0
    for method in ("mats", "fisher"):
        folder = run / "models" / f"{method}__n02_s00"
        recipe = yaml.safe_load((folder / "recipe.yml").read_text())
        assert recipe["merge_method"] == method and all(m.get("calibration") for m in recipe["models"])
        assert json.loads((folder / DIAGNOSTICS_FILE).read_text())["method"] == method
