"""ProDistill (Xu et al. 2025, "Scalable Model Merging with Progressive Layer-wise Distillation"): one block's
distillation against an independent float64 Llama block and Adam written here from the paper, its invariants, the
driver end to end on a tiny family, and the shipped recipe through the stock ``mergekit-yaml`` on the demo family."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from helpers import one_thread, run_mergekit_yaml, token_family  # noqa: F401  (one_thread: autouse fixture)
from safetensors.torch import load_file

from wildmerge.errors import ConfigError
from wildmerge.plugins.layerwise.arch import DecoderSkeleton, load_block
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise
from wildmerge.plugins.layerwise.prodistill import distill_block

N_SAMPLES, SEQ = 6, 12


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny 2-layer Llama base, two experts of it, each with its own token data."""
    return token_family(tmp_path_factory.mktemp("prodistill"), [(4, 30), (30, 64)], N_SAMPLES, SEQ)


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def _block(weights, k):
    prefix = f"model.layers.{k}."
    return {n[len(prefix):]: t for n, t in weights.items() if n.startswith(prefix)}


# ---- the independent float64 reference: a Llama decoder block and Adam, from their definitions -----------------


def _rms(x, w, eps):
    return w * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = positions[:, None].double() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    half = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + half * sin


def _llama_block(W, x, cfg):
    """One Llama decoder block in float64 (pre-norm attention with RoPE and grouped KV heads, causal; SwiGLU MLP).
    Right padding needs no mask here: a valid token never attends to a later (padded) position."""
    B, T, _ = x.shape
    H, KV = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // H
    a = _rms(x, W["input_layernorm.weight"], cfg.rms_norm_eps)
    q = (a @ W["self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
    k = (a @ W["self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    v = (a @ W["self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
    pos = torch.arange(T)
    theta = cfg.rope_parameters["rope_theta"]
    q, k = _rotate(q, pos, theta), _rotate(k, pos, theta)
    k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * hd)
    h = x + att @ W["self_attn.o_proj.weight"].T
    m = _rms(h, W["post_attention_layernorm.weight"], cfg.rms_norm_eps)
    gate = torch.nn.functional.silu(m @ W["mlp.gate_proj.weight"].T)
    return h + (gate * (m @ W["mlp.up_proj.weight"].T)) @ W["mlp.down_proj.weight"].T


def _reference(base, experts, inputs, cfg, steps, lr, init):
    """ProDistill's loss and Adam (Kingma & Ba: beta 0.9 / 0.999, eps 1e-8, bias-corrected) on per-expert,
    per-tensor coefficients, float64. ``inputs[i]``: (merged-stream input, own input, valid mask) of expert i."""
    names = sorted(base)
    W0 = {n: base[n].double() for n in names}
    taus = [{n: e[n].double() - W0[n] for n in names} for e in experts]
    targets = [_llama_block({n: e[n].double() for n in names}, own.double(), cfg) for e, (_, own, _) in
               zip(experts, inputs)]
    lam = torch.full((len(experts), len(names)), float(init), dtype=torch.float64, requires_grad=True)
    m, v = torch.zeros_like(lam), torch.zeros_like(lam)

    def loss_of(lam):
        W = {n: W0[n] + sum(lam[i, j] * taus[i][n] for i in range(len(taus))) for j, n in enumerate(names)}
        total = 0.0
        for (hat, _, valid), target in zip(inputs, targets):
            out = _llama_block(W, hat.double(), cfg)
            total = total + ((out - target)[valid] ** 2).sum() / (valid.sum() * out.shape[-1])
        return total / len(inputs)

    losses = []
    for t in range(1, steps + 1):
        loss = loss_of(lam)
        (g,) = torch.autograd.grad(loss, lam)
        losses.append(float(loss.detach()))
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        with torch.no_grad():
            lam -= lr * (m / (1 - 0.9**t)) / (torch.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return losses, float(loss_of(lam)), lam.detach()


def _setup(family, seed=0, experts=None):
    """Block 0 of the tiny family: the layer module, base and expert tensors, and per expert one right-padded
    batch of random hidden states (merged stream, own stream) with its valid mask and layer kwargs."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(family["base"])
    skeleton = DecoderSkeleton.build(cfg, "cpu")
    layer = skeleton.make_layer(0)
    base = _block(_weights(family["base"]), 0)
    experts = [_block(_weights(e), 0) for e in (experts or family["experts"])]
    gen = torch.Generator().manual_seed(seed)
    inputs, rows = [], []
    for i, e in enumerate(experts):
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[1, 4:] = 0  # right padding
        hat = torch.randn(2, 6, cfg.hidden_size, generator=gen)
        own = hat + 0.1 * torch.randn(2, 6, cfg.hidden_size, generator=gen)
        kwargs = skeleton.layer_kwargs(hat, mask)[0]
        load_block(layer, {f"model.layers.0.{n}": t for n, t in e.items()}, 0)
        with torch.no_grad():
            target = layer(own, **kwargs)
            target = target[0] if isinstance(target, tuple) else target
        inputs.append((hat, own, mask.bool()))
        rows.append([(hat, target.detach(), mask.bool(), kwargs)])
    return cfg, layer, base, experts, inputs, rows


def _vectors(base, experts):
    return [{n: e[n] - base[n] for n in base} for e in experts]


def test_reference_block_is_the_transformers_block(family):
    """The float64 block above is the Llama block (so the next test compares like with like)."""
    cfg, layer, base, experts, inputs, rows = _setup(family)
    for e, (hat, own, valid), [(_, target, _, _)] in zip(experts, inputs, rows):
        ref = _llama_block({n: t.double() for n, t in e.items()}, own.double(), cfg)
        assert torch.allclose(ref[valid], target[valid].double(), atol=1e-5)


def test_distillation_steps_match_the_float64_reference(family):
    cfg, layer, base, experts, inputs, rows = _setup(family)
    steps, lr = 3, 0.05
    merged, report = distill_block(layer, base, _vectors(base, experts), rows, steps=steps, lr=lr, init_lambda=0.4)
    losses, final, lam = _reference(base, experts, inputs, cfg, steps, lr, 0.4)
    assert report["loss_start"] == pytest.approx(losses[0], rel=1e-4)
    assert report["loss_end"] == pytest.approx(final, rel=1e-4)
    assert final < losses[0]
    names = sorted(base)
    got = torch.tensor([report["lambda"][n] for n in names], dtype=torch.float64).T
    assert torch.allclose(got, lam, atol=1e-4)
    for j, n in enumerate(names):  # the merged tensors are base + sum_i lambda_i tau_i
        want = base[n].double() + sum(lam[i, j] * (e[n].double() - base[n].double()) for i, e in enumerate(experts))
        assert torch.allclose(merged[n].double(), want, atol=1e-5)


@pytest.mark.parametrize("steps,lr", [(0, 0.05), (4, 0.0)])
def test_no_step_or_zero_learning_rate_is_task_arithmetic_exactly(family, steps, lr):
    _, layer, base, experts, _, rows = _setup(family)
    merged, report = distill_block(layer, base, _vectors(base, experts), rows, steps=steps, lr=lr, init_lambda=0.4)
    start, _ = distill_block(layer, base, _vectors(base, experts), rows, steps=0, lr=lr, init_lambda=0.4)
    for n in base:
        assert torch.equal(merged[n], start[n])
        ta = base[n].double() + 0.4 * sum(e[n].double() - base[n].double() for e in experts)
        assert torch.allclose(merged[n].double(), ta, atol=1e-6)
    assert all(x == float(torch.tensor(0.4)) for col in report["lambda"].values() for x in col)  # untouched


def test_one_expert_is_distilled_into_the_merge(family):
    """One expert, the same input on both streams: lambda = 1 is exact, so the loss goes to ~0 and the merged block
    to the expert's."""
    _, layer, base, experts, _, rows = _setup(family, experts=family["experts"][:1])
    x, _, valid, kwargs = rows[0][0]
    load_block(layer, {f"model.layers.0.{n}": t for n, t in experts[0].items()}, 0)
    with torch.no_grad():
        target = layer(x, **kwargs)
        target = target[0] if isinstance(target, tuple) else target
    rows = [[(x, target, valid, kwargs)]]
    merged, report = distill_block(layer, base, _vectors(base, experts), rows, steps=300, lr=0.02, init_lambda=0.4)
    assert report["loss_end"] < 1e-4 * report["loss_start"]
    for n in base:
        start = (0.6 * (experts[0][n] - base[n])).abs().max()
        assert (merged[n] - experts[0][n]).abs().max() < 0.05 * start + 1e-7
        assert report["lambda"][n][0] == pytest.approx(1.0, abs=0.05) or start < 1e-6


# ---- the driver end to end -------------------------------------------------------------------------------------


def _recipe(fam, params):
    return {"merge_method": "prodistill", "base_model": fam["base"], "parameters": params,
            "calibration": {"n_samples": N_SAMPLES, "seq_len": SEQ, "batch_size": 4},
            "models": [{"model": e, "calibration": d} for e, d in zip(fam["experts"], fam["data"])]}


def test_zero_steps_through_the_driver_is_task_arithmetic_of_every_tensor(family):
    out = merge_layerwise(_recipe(family, {"steps": 0, "init_lambda": 0.3}), family["root"] / "ta", device="cpu",
                          progress=False)
    merged, base = _weights(out), _weights(family["base"])
    experts = [_weights(e) for e in family["experts"]]
    for n, t in merged.items():
        ta = base[n].double() + 0.3 * sum(e[n].double() - base[n].double() for e in experts)
        assert torch.allclose(t.double(), ta, atol=1e-6), n


def test_driver_trains_every_block_and_reports_it(family):
    out = merge_layerwise(_recipe(family, {"steps": 5, "lr": 0.05, "samples": 4}), family["root"] / "pd",
                          device="cpu", progress=False)
    diag = json.loads((out / DIAGNOSTICS_FILE).read_text())
    rows = [r for r in diag["layers"] if r["group"] == "block"]
    assert [r["layer"] for r in rows] == [0, 1]
    assert all(r["steps"] == 5 and r["loss_end"] < r["loss_start"] for r in rows)
    assert all("mcs" in r for r in diag["layers"] if r["group"] in ("qkv", "o"))
    assert diag["parameters"]["samples"] == 4


def test_prodistill_needs_a_base(family, tmp_path):
    recipe = _recipe(family, {})
    del recipe["base_model"]
    with pytest.raises(ConfigError, match="prodistill trains coefficients on task vectors"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)


@pytest.mark.parametrize("params,message", [({"lr": -1.0}, "lr"), ({"steps": -1}, "steps"),
                                            ({"samples": 0}, "samples")])
def test_bad_parameters_fail_before_any_work(family, tmp_path, params, message):
    with pytest.raises(ConfigError, match=message):
        merge_layerwise(_recipe(family, params), tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


# ---- the shipped recipe, through the stock mergekit-yaml, on the demo family ------------------------------------


@pytest.fixture(scope="module")
def demo():
    from wildmerge.families.demo.family import ensure_family

    return ensure_family(seed=0, quick=True, progress=False)  # the shared cache (~/.cache/wildmerge/demo)


def test_stock_mergekit_yaml_runs_the_shipped_recipe_on_the_demo_family(demo, tmp_path):
    from transformers import AutoModelForCausalLM

    from wildmerge.recipes.render import render_recipe

    names = sorted(demo["experts"])
    recipe = render_recipe("prodistill", demo["base"], [demo["experts"][n] for n in names], {})
    recipe["calibration"].update(n_samples=8, seq_len=32)
    for m, n in zip(recipe["models"], names):
        m["calibration"] = str(Path(demo["root"]) / "calibration" / f"{n}.jsonl")
    diag = run_mergekit_yaml(recipe, tmp_path, WILDMERGE_DEMO_QUICK="1")
    assert diag["method"] == "prodistill" and len(diag["models"]) == len(names)
    blocks = [r for r in diag["layers"] if r["group"] == "block"]
    assert len(blocks) == AutoModelForCausalLM.from_pretrained(demo["base"]).config.num_hidden_layers
    assert all(r["loss_end"] <= r["loss_start"] for r in blocks)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()


def test_sampler_merges_the_demo_pool_with_prodistill(demo, tmp_path, monkeypatch):
    """`wildmerge sample --methods prodistill` on the demo pool: each expert's `data:` reaches its recipe."""
    from wildmerge.cli import main

    monkeypatch.setenv("WILDMERGE_DEMO_QUICK", "1")
    run = tmp_path / "run"
    assert main(["sample", "--pool", "demo", "--methods", "prodistill", "--sizes", "2", "--k", "1", "--no-full",
                 "--no-evaluate", "--out", str(run)]) == 0
    folder = run / "models" / "prodistill__n02_s00"
    recipe = yaml.safe_load((folder / "recipe.yml").read_text())
    assert recipe["merge_method"] == "prodistill" and all(m.get("calibration") for m in recipe["models"])
    diag = json.loads((folder / DIAGNOSTICS_FILE).read_text())
    assert diag["method"] == "prodistill" and all(r["loss_end"] <= r["loss_start"]
                                                   for r in diag["layers"] if r["group"] == "block")
