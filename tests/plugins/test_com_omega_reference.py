"""Chain of Merges with its importance weights measured through the base model (``omega_reference: base``; Buzzega
et al., "Rethinking Layer-wise Model Merging through Chain of Merges", Fig. 6 and App. E.2, the "zero-shot"
reference) on tiny real Llama checkpoints: the omegas against Eq. 6 recomputed in float64 through the base, the
first projection against Eq. 7 in float64 with those omegas, and the chain's own omegas kept beside them."""

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import make_tiny_model, one_thread  # noqa: F401  (one_thread: autouse fixture)
from safetensors.torch import load_file

from wildmerge.errors import ConfigError
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise

N, SEQ, D = 8, 16, 32
FIRST = {"qkv": "self_attn.q_proj", "o": "self_attn.o_proj", "up": "mlp.gate_proj", "down": "mlp.down_proj"}


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny Llama base and 3 experts, each with token data from its own slice of the vocabulary."""
    root = tmp_path_factory.mktemp("omega_reference")
    base = make_tiny_model(root / "base", "llama", seed=0)
    experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.05) for i in range(3)]
    data = []
    for i, (lo, hi) in enumerate([(4, 24), (24, 44), (44, 64)]):
        rng = random.Random(i)
        seqs = [[rng.randrange(lo, hi) for _ in range(rng.randrange(6, SEQ + 1))] for _ in range(N)]
        path = root / f"tok{i}.jsonl"
        path.write_text("".join(json.dumps({"input_ids": s}) + "\n" for s in seqs))
        data.append((str(path), seqs))
    return {"root": root, "base": base, "experts": experts, "data": data}


def _recipe(fam, **params):
    return {"merge_method": "chain_of_merges", "base_model": fam["base"], "parameters": params,
            "calibration": {"n_samples": N, "seq_len": SEQ, "batch_size": 4},
            "models": [{"model": e, "calibration": d[0]} for e, d in zip(fam["experts"], fam["data"])]}


def _merge(fam, name, **params):
    out = merge_layerwise(_recipe(fam, **params), fam["root"] / name, device="cpu", progress=False)
    return out, json.loads((out / DIAGNOSTICS_FILE).read_text())


def _weights(path):
    return load_file(str(path / "model.safetensors"))


def _omega64(G):
    """Eq. 6: the absolute sum of the strict upper triangle."""
    return float(torch.triu(G, diagonal=1).abs().sum())


def _base_grams64(fam):
    """{(layer, group): [token-normalised input Gram of expert i's data through the base]} in float64, one
    unpadded sequence at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(fam["base"], dtype=torch.float64).eval()
    out = {}
    for _path, seqs in fam["data"]:
        sums, handles = {}, []
        for k, layer in enumerate(model.model.layers):
            for g, m in FIRST.items():
                def hook(_m, args, key=(k, g)):
                    x = args[0].reshape(-1, args[0].shape[-1])
                    x = x / x.norm(dim=1, keepdim=True)
                    s, n = sums.get(key, (0, 0))
                    sums[key] = (s + x.T @ x, n + x.shape[0])

                handles.append(layer.get_submodule(m).register_forward_pre_hook(hook))
        with torch.no_grad():
            for s in seqs:
                model(input_ids=torch.tensor([s]))
        for h in handles:
            h.remove()
        for key, (s, n) in sums.items():
            out.setdefault(key, []).append(s / n)
    return out


def test_base_reference_omegas_and_the_solve_match_float64(family):
    out, diag = _merge(family, "com_base", omega_reference="base")
    grams = _base_grams64(family)
    rows = [r for r in diag["layers"] if r.get("omega")]
    assert len(rows) == 4 * 2  # every group of both blocks was solved
    for r in rows:
        expected = [_omega64(G) for G in grams[(r["layer"], r["group"])]]
        assert r["omega"] == pytest.approx(expected, rel=1e-4)
        assert all(v > 0 for v in r["omega"])

    # q_proj of block 0, Eq. 7 with the base's omegas and the chain's Grams (the merged block 0's inputs: the
    # averaged embeddings through the averaged input norm), delta ridge, lam_rel 1e-2
    experts = [_weights(Path(e)) for e in family["experts"]]
    base = load_file(str(Path(family["base"]) / "model.safetensors"))
    E = sum(w["model.embed_tokens.weight"].double() for w in experts) / 3
    ln = sum(w["model.layers.0.input_layernorm.weight"].double() for w in experts) / 3
    chain_grams = []
    for _path, seqs in family["data"]:
        h = E[torch.tensor([t for s in seqs for t in s])]
        x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * ln
        x = x / x.norm(dim=1, keepdim=True)
        chain_grams.append(x.T @ x / x.shape[0])
    om = torch.tensor([_omega64(G) for G in grams[(0, "qkv")]], dtype=torch.float64)
    w = om / om.mean()
    A = sum(wi * G for wi, G in zip(w, chain_grams))
    lam = 1e-2 * A.diagonal().mean()
    name = "model.layers.0.self_attn.q_proj.weight"
    W0 = base[name].double()
    B = sum(wi * (e[name].double() - W0) @ G for wi, e, G in zip(w, experts, chain_grams))
    expected = W0 + B @ torch.linalg.inv(A + lam * torch.eye(D, dtype=torch.float64))
    torch.testing.assert_close(_weights(out)[name].double(), expected, rtol=1e-4, atol=1e-5)
    first = next(r for r in rows if r["layer"] == 0 and r["group"] == "qkv")
    assert first["omega_merged"] == pytest.approx([_omega64(G) for G in chain_grams], rel=1e-4)


def test_the_merged_reference_is_com_and_the_base_reference_differs(family):
    com, com_diag = _merge(family, "com_default")
    same, same_diag = _merge(family, "com_merged", omega_reference="merged")
    base, base_diag = _merge(family, "com_base2", omega_reference="base")
    a, b, c = _weights(com), _weights(same), _weights(base)
    assert all(torch.equal(a[n], b[n]) for n in a)  # the default is the merged reference: nothing changes
    assert all("omega_merged" not in r for r in com_diag["layers"])
    # the chain's own omegas are still measured (and kept) under the base reference; block 0's first group sees
    # the same merged inputs in both merges, later groups see layers solved with other omegas
    solved = [(r, s) for r, s in zip(com_diag["layers"], base_diag["layers"]) if r.get("omega")]
    assert all(len(s["omega_merged"]) == 3 for _r, s in solved)
    assert solved[0][1]["omega_merged"] == pytest.approx(solved[0][0]["omega"], rel=1e-5)
    assert solved[0][1]["omega"] != pytest.approx(solved[0][0]["omega"], rel=1e-3)
    changed = [n for n in a if ".layers." in n and n.endswith("proj.weight") and not torch.allclose(a[n], c[n])]
    assert changed, "the base's omegas should change the solved layers"
    # outside the blocks both are the plain average
    assert torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


@pytest.mark.parametrize("method,params,match", [
    ("chain_of_merges", {"omega_reference": "base", "sim": False}, "omega_reference 'base'.*sim: true"),
    ("chain_of_merges", {"omega_reference": "zero_shot"}, "omega_reference"),
    ("regmean", {"omega_reference": "base"}, "unknown parameter 'omega_reference'"),
])
def test_bad_omega_reference_fails_before_any_work(family, tmp_path, monkeypatch, method, params, match):
    import wildmerge.plugins.layerwise.chain as chain

    monkeypatch.setattr(chain, "run_chain", lambda *a, **k: pytest.fail("heavy work started"))
    recipe = dict(_recipe(family, **params), merge_method=method)
    with pytest.raises(ConfigError, match=match):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def test_base_reference_without_a_base_model_is_refused(family, tmp_path):
    recipe = _recipe(family, omega_reference="base", ridge="per_task")
    del recipe["base_model"]
    with pytest.raises(ConfigError, match="set base_model"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)
