"""RegMean and Chain of Merges end to end on tiny real Llama / Qwen3 checkpoints."""

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from helpers import make_tiny_model, one_thread, run_mergekit_yaml  # noqa: F401  (one_thread: autouse fixture)
from safetensors.torch import load_file

from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE, merge_layerwise

N_SAMPLES, SEQ = 8, 16


def _save_tokenizer(path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, "[BOS]": 2, "[EOS]": 3, **{f"w{i}": i + 4 for i in range(60)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", bos_token="[BOS]",
                            eos_token="[EOS]").save_pretrained(str(path))


def _write_data(path, seed, lo, hi, tokenized, n=N_SAMPLES):
    """Samples drawn from one slice of the vocabulary: each expert gets its own 'task' distribution."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            ids = [rng.randrange(lo, hi) for _ in range(rng.randrange(6, SEQ + 1))]
            record = {"input_ids": ids} if tokenized else {"text": " ".join(f"w{t - 4}" for t in ids)}
            f.write(json.dumps(record) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """Tiny Llama base (with a tokenizer) + 3 experts, each with its own text and token calibration data."""
    root = tmp_path_factory.mktemp("layerwise")
    base = make_tiny_model(root / "base", "llama", seed=0)
    _save_tokenizer(base)
    experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.05) for i in range(3)]
    ranges = [(4, 24), (24, 44), (44, 64)]
    tokens = [_write_data(root / f"tok{i}.jsonl", i, *ranges[i], True) for i in range(3)]
    texts = [_write_data(root / f"txt{i}.jsonl", i, *ranges[i], False) for i in range(3)]
    return {"root": root, "base": base, "experts": experts, "tokens": tokens, "texts": texts}


def _recipe(fam, method, data_key="tokens", experts=None, params=None, **calibration):
    experts = fam["experts"] if experts is None else experts
    recipe = {
        "merge_method": method,
        "base_model": fam["base"],
        "calibration": {"n_samples": N_SAMPLES, "seq_len": SEQ, "batch_size": 4, **calibration},
        "models": [{"model": e, "calibration": d} for e, d in zip(experts, fam[data_key])],
    }
    if params:
        recipe["parameters"] = params
    return recipe


def _merge(fam, recipe, name, **kw):
    return merge_layerwise(recipe, fam["root"] / name, device="cpu", progress=False, **kw)


def _weights(path):
    return load_file(str(Path(path) / "model.safetensors"))


def test_com_first_projection_matches_float64_reference(family):
    """q_proj of block 0, recomputed from the paper's equations in float64 (Norm + Sim + delta ridge)."""
    out = _merge(family, _recipe(family, "chain_of_merges"), "com_ref")
    experts = [_weights(e) for e in family["experts"]]
    base = _weights(family["base"])
    E = sum(w["model.embed_tokens.weight"].double() for w in experts) / 3
    ln = sum(w["model.layers.0.input_layernorm.weight"].double() for w in experts) / 3
    grams = []
    for data in family["tokens"]:
        ids = torch.tensor([t for line in open(data) for t in json.loads(line)["input_ids"]])
        h = E[ids]
        x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * ln
        x = x / x.norm(dim=1, keepdim=True)
        grams.append(x.T @ x / x.shape[0])
    om = torch.tensor([sum(abs(float(G[p, q])) for p in range(32) for q in range(p + 1, 32)) for G in grams],
                      dtype=torch.float64)
    w = om / om.mean()
    A = sum(wi * G for wi, G in zip(w, grams))
    lam = 1e-2 * A.diagonal().mean()
    name = "model.layers.0.self_attn.q_proj.weight"
    W0 = base[name].double()
    B = sum(wi * (e[name].double() - W0) @ G for wi, e, G in zip(w, experts, grams))
    expected = W0 + B @ torch.linalg.inv(A + lam * torch.eye(32, dtype=torch.float64))
    torch.testing.assert_close(_weights(out)[name].double(), expected, rtol=1e-4, atol=1e-5)
    diag = json.loads((out / DIAGNOSTICS_FILE).read_text())
    first = next(e for e in diag["layers"] if e["layer"] == 0 and e["group"] == "qkv")
    assert first["omega"] == pytest.approx(om.tolist(), rel=1e-4)


def _grams_of_model(path, fam, data_key):
    """Token-normalised input Grams of every linear group, recomputed from a saved model on the calibration data."""
    from transformers import AutoModelForCausalLM

    from wildmerge.plugins.layerwise.calibration import CalibrationSpec, load_token_batches

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    mods = {"qkv": "self_attn.q_proj", "o": "self_attn.o_proj", "up": "mlp.gate_proj", "down": "mlp.down_proj"}
    out = {}
    for i, data in enumerate(fam[data_key]):
        spec = CalibrationSpec(data=data, n_samples=N_SAMPLES, seq_len=SEQ, batch_size=4)
        sums, handles, valid = {}, [], {}
        for k, layer in enumerate(model.model.layers):
            for g, m in mods.items():
                def hook(_m, args, key=(k, g)):
                    x = args[0].reshape(-1, args[0].shape[-1])[valid["mask"].reshape(-1)].double()
                    x = x / x.norm(dim=1, keepdim=True)
                    s, n = sums.get(key, (0, 0))
                    sums[key] = (s + x.T @ x, n + x.shape[0])

                handles.append(layer.get_submodule(m).register_forward_pre_hook(hook))
        with torch.no_grad():
            for ids, mask in load_token_batches(spec, None, "m", 64):
                valid["mask"] = mask.bool()
                model(input_ids=ids, attention_mask=mask)
        for h in handles:
            h.remove()
        for key, (s, n) in sums.items():
            out.setdefault(key, []).append(s / n)
    return out


def test_com_statistics_are_self_consistent_and_regmean_are_not(family):
    """Property 5: the merged model's own layer inputs reproduce the Grams CoM solved with; RegMean's do not."""
    seen = {}
    for method in ("chain_of_merges", "regmean"):
        traced = {}
        out = _merge(family, _recipe(family, method, params={"norm": "token"}), f"sc_{method}",
                     trace=lambda k, g, grams, om: traced.__setitem__((k, g), grams))
        after = _grams_of_model(out, family, "tokens")
        assert set(traced) == set(after)
        seen[method] = max(float((a.double() - b).abs().max()) for key in traced
                           for a, b in zip(traced[key], after[key]))
    assert seen["chain_of_merges"] < 1e-5
    assert seen["regmean"] > 1e-3


def test_single_model_gives_itself_back(family):
    for method in ("chain_of_merges", "regmean"):
        out = _merge(family, _recipe(family, method, experts=family["experts"][:1]), f"single_{method}")
        got, expected = _weights(out), _weights(family["experts"][0])
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


def test_shared_calibration_collapses_com_to_the_average(family):
    """Property 4: with one data set for all, CoM (per_task ridge) is exactly the mean; RegMean is not."""
    shared = dict(family, tokens=[family["tokens"][0]] * 3)
    experts = [_weights(e) for e in family["experts"]]
    mean = {n: sum(w[n] for w in experts) / 3 for n in experts[0]}
    com = _weights(_merge(shared, _recipe(shared, "chain_of_merges", params={"ridge": "per_task"}), "shared_com"))
    for name in mean:
        torch.testing.assert_close(com[name], mean[name], rtol=1e-4, atol=2e-5)
    reg = _weights(_merge(shared, _recipe(shared, "regmean", params={"ridge": "per_task"}), "shared_reg"))
    assert (reg["model.layers.1.mlp.down_proj.weight"] - mean["model.layers.1.mlp.down_proj.weight"]).abs().max() > 1e-3


def test_chaining_changes_the_result_when_inputs_differ(family):
    com = _weights(_merge(family, _recipe(family, "chain_of_merges", params={"norm": "none", "sim": False}), "ch_c"))
    reg = _weights(_merge(family, _recipe(family, "regmean"), "ch_r"))
    experts = [_weights(e) for e in family["experts"]]
    for name in ("model.layers.1.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight"):
        mean = sum(w[name] for w in experts) / 3
        assert (com[name] - reg[name]).abs().max() > 1e-4
        assert (com[name] - mean).abs().max() > 1e-4
    # non-linear tensors are the plain mean in both methods
    for name in ("model.norm.weight", "model.layers.1.input_layernorm.weight", "lm_head.weight"):
        mean = sum(w[name] for w in experts) / 3
        torch.testing.assert_close(com[name], mean)
        torch.testing.assert_close(reg[name], mean)


def _generate(path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path))
    out = model.generate(input_ids=torch.tensor([[5, 6, 7]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 7)
    return model


@pytest.mark.parametrize("method", ["chain_of_merges", "regmean"])
def test_text_calibration_writes_a_loadable_checkpoint_with_card_and_diagnostics(family, method):
    out = _merge(family, _recipe(family, method, data_key="texts"), f"full_{method}")
    for f in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "mergekit_config.yml",
              DIAGNOSTICS_FILE):
        assert (out / f).is_file(), f
    card = (out / "README.md").read_text()
    assert "arXiv:2508.21421" in card or "arXiv:2212.09849" in card
    assert all(Path(e).name in card for e in family["experts"])
    diag = json.loads((out / DIAGNOSTICS_FILE).read_text())
    mcs = [(e["layer"], e["group"], e["mcs"]) for e in diag["layers"] if "mcs" in e]
    assert {(k, g) for k, g, _ in mcs} == {(k, g) for k in range(2) for g in ("qkv", "o")}
    assert all(v > 0 and len(e["mcs_per_model"]) == 3 for (_, _, v), e in zip(mcs, [e for e in diag["layers"] if "mcs" in e]))
    assert [c["tokens"] > 0 for c in diag["calibration"]] == [True] * 3
    _generate(out)


def test_qwen3_pretokenized_without_tokenizer(tiny_qwen3_family, family):
    fam = dict(family, base=tiny_qwen3_family["base"], root=family["root"])
    out = _merge(fam, _recipe(fam, "chain_of_merges", experts=tiny_qwen3_family["experts"]), "qwen3_com")
    merged, experts = _weights(out), [_weights(e) for e in tiny_qwen3_family["experts"]]
    name = "model.layers.0.self_attn.q_norm.weight"
    torch.testing.assert_close(merged[name], sum(w[name] for w in experts) / 3)
    assert not (out / "tokenizer.json").exists()
    _generate(out)


# ---- bad input: a clear error before any weight is merged -------------------------------------------------------


@pytest.fixture
def no_heavy_work(monkeypatch):
    import wildmerge.plugins.layerwise.chain as chain

    def refuse(*a, **k):
        raise AssertionError("heavy work started before the input was validated")

    monkeypatch.setattr(chain, "run_chain", refuse)


def _bad(fam, tmp_path, mutate, match):
    recipe = _recipe(fam, "chain_of_merges")
    mutate(recipe, tmp_path)
    with pytest.raises(WildmergeError, match=match):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)
    assert not (tmp_path / "out").exists()


def _set(path, value):
    def mutate(recipe, tmp):
        target = recipe
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value(tmp) if callable(value) else value
    return mutate


def _tiny_gpt2(tmp):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(tmp / "g")
    return str(tmp / "g")


BAD_INPUTS = {
    "no data": (_set(["models", 1, "calibration"], None), "has no calibration data"),
    "empty file": (_set(["models", 0, "calibration"], lambda t: (t / "e.jsonl").write_text("") and None
                        or str(t / "e.jsonl")),
                   "too few calibration texts: chain_of_merges reads 8 texts of each expert, and .*e0 has 0;"),
    "too short": (_set(["models", 0, "calibration"], lambda t: _write_data(t / "s.jsonl", 0, 4, 9, True, n=3)),
                  "chain_of_merges reads 8 texts of each expert, and .*e0 has 3; give each of them at least"),
    "short samples": (_set(["calibration", "min_tokens"], 50), "at least 50 tokens"),
    "seq too long": (_set(["calibration", "seq_len"], 4096), "max_position_embeddings"),
    "missing file": (_set(["models", 2, "calibration"], "nowhere/data.jsonl"), "not found"),
    "unknown calibration key": (_set(["calibration", "n_sample"], 3), "did you mean 'n_samples'"),
    "unknown parameter": (_set(["parameters"], {"lam": 0.1}), "unknown parameter 'lam'.*valid parameters"),
    "bad parameter value": (_set(["parameters"], {"ridge": "lasso"}), "ridge"),
    "gradient parameter": (_set(["parameters"], {"lam_rel": [0.1, 0.2]}), "single value"),
    "per-model parameter": (_set(["models", 0, "parameters"], {"weight": 1.0}), "unknown per-model parameter"),
    "unsupported architecture": (_set(["models", 0, "model"], _tiny_gpt2), "not supported|differs"),
    "token out of vocab": (_set(["models", 0, "calibration"], lambda t: _write_data(t / "v.jsonl", 0, 60, 90, True)),
                           "outside the model's vocabulary"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_early_with_a_clear_message(family, tmp_path, no_heavy_work, case):
    mutate, match = BAD_INPUTS[case]
    _bad(family, tmp_path, mutate, match)


def test_unsupported_base_architecture(family, tmp_path, no_heavy_work):
    recipe = _recipe(family, "regmean")
    recipe["base_model"] = _tiny_gpt2(tmp_path)
    with pytest.raises(WildmergeError, match="'gpt2' is not supported"):
        merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)


# ---- the same recipe through the stock mergekit-yaml and `wildmerge merge` ---------------------------------------


@pytest.mark.parametrize("arch,method", [("llama", "chain_of_merges"), ("qwen3", "regmean")])
def test_stock_mergekit_yaml_runs_the_recipe(family, tiny_family, tiny_qwen3_family, tmp_path, arch, method):
    fam = tiny_family if arch == "llama" else tiny_qwen3_family
    recipe = _recipe(dict(family, base=fam["base"]), method, experts=fam["experts"])
    diag = run_mergekit_yaml(recipe, tmp_path, "--no-copy-tokenizer")
    assert diag["method"] == method and len(diag["models"]) == 3
    _generate(tmp_path / "out")


def test_wildmerge_merge_command(family, tmp_path):
    from wildmerge.cli import main

    recipe = _recipe(family, "chain_of_merges", data_key="texts")
    path = tmp_path / "recipe.yml"
    path.write_text(yaml.safe_dump(recipe))
    assert main(["merge", str(path), str(tmp_path / "out"), "--device", "cpu", "--quiet"]) == 0
    assert json.loads((tmp_path / "out" / DIAGNOSTICS_FILE).read_text())["method"] == "chain_of_merges"
    _generate(tmp_path / "out")


def test_data_template_gives_each_model_its_own_file(family, tmp_path):
    """``data: calib/{name}.jsonl`` in the top-level section: one default, one file per model."""
    import shutil

    (tmp_path / "calib").mkdir()
    for e, d in zip(family["experts"], family["tokens"]):
        shutil.copy(d, tmp_path / "calib" / f"{Path(e).name}.jsonl")
    recipe = _recipe(family, "regmean", data=str(tmp_path / "calib" / "{name}.jsonl"))
    for m in recipe["models"]:
        del m["calibration"]
    out = merge_layerwise(recipe, tmp_path / "out", device="cpu", progress=False)
    explicit = _merge(family, _recipe(family, "regmean"), "template_ref")
    got, expected = _weights(out), _weights(explicit)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


@pytest.mark.parametrize("recipe_name", ["com", "regmean"])
def test_method_recipe_through_run_merge_like_the_sampler(family, tmp_path, recipe_name):
    """render_recipe + per-expert data + mergekit's run_merge (wrapped by wildmerge), as the sampler calls it."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    from wildmerge.recipes.render import render_recipe

    recipe = render_recipe(recipe_name, family["base"], family["experts"], {"lam_rel": 0.1})
    recipe["calibration"].update(n_samples=N_SAMPLES, seq_len=SEQ)
    for m, data in zip(recipe["models"], family["texts"]):
        m["calibration"] = data
    text = yaml.safe_dump(recipe)
    options = MergeOptions(device="cpu", copy_tokenizer=True, quiet=True)
    run_merge(MergeConfiguration.model_validate(recipe), str(tmp_path / "out"), options=options, config_source=text)
    diag = json.loads((tmp_path / "out" / DIAGNOSTICS_FILE).read_text())
    assert diag["parameters"]["lam_rel"] == 0.1
    assert diag["method"] == {"com": "chain_of_merges", "regmean": "regmean"}[recipe_name]
    assert (tmp_path / "out" / "tokenizer.json").is_file()


def test_run_merge_without_config_source_uses_per_model_parameters(family, tmp_path):
    """Only mergekit's parsed config travels: per-model data as ``parameters: {calibration: path}`` still works."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    recipe = {"merge_method": "chain_of_merges", "base_model": family["base"],
              "models": [{"model": e, "parameters": {"calibration": d}}
                         for e, d in zip(family["experts"], family["tokens"])]}
    run_merge(MergeConfiguration.model_validate(recipe), str(tmp_path / "out"),
              options=MergeOptions(device="cpu", quiet=True))
    diag = json.loads((tmp_path / "out" / DIAGNOSTICS_FILE).read_text())
    assert [c["data"] for c in diag["calibration"]] == family["tokens"]


@pytest.mark.parametrize("arch", ["qwen2", "mistral"])
def test_other_decoder_families(family, tmp_path, arch):
    """Qwen2 (q/k/v biases, averaged) and Mistral (sliding-window config) merge, load and generate."""
    from transformers import AutoModelForCausalLM, MistralConfig, Qwen2Config

    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
    cfg = Qwen2Config(**common) if arch == "qwen2" else MistralConfig(sliding_window=8, **common)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "base")
    experts = [make_tiny_model(tmp_path / f"e{i}", base=str(tmp_path / "base"), seed=i + 1, noise=0.05)
               for i in range(3)]
    fam = dict(family, base=str(tmp_path / "base"), root=tmp_path)
    out = _merge(fam, _recipe(fam, "chain_of_merges", experts=experts), "out")
    merged, ws = _weights(out), [_weights(e) for e in experts]
    if arch == "qwen2":
        name = "model.layers.1.self_attn.q_proj.bias"
        torch.testing.assert_close(merged[name], sum(w[name] for w in ws) / 3)
    name = "model.layers.1.mlp.up_proj.weight"
    assert (merged[name] - sum(w[name] for w in ws) / 3).abs().max() > 1e-4
    _generate(out)


def test_sampler_gives_each_expert_its_calibration_data_from_the_pool(family, tmp_path):
    """A pool's per-expert ``calibration:`` reaches the rendered RegMean / CoM recipes of ``wildmerge sample``."""
    import shutil

    from wildmerge.cli import main

    for i, data in enumerate(family["texts"]):
        shutil.copy(data, tmp_path / f"calib{i}.jsonl")  # relative to the pool file
    pool = {"name": "tiny", "base": {"model": family["base"]},
            "experts": [{"model": e, "name": f"e{i}",
                         "calibration": {"data": f"calib{i}.jsonl", "n_samples": N_SAMPLES, "seq_len": SEQ}}
                        for i, e in enumerate(family["experts"])]}
    (tmp_path / "pool.yml").write_text(yaml.safe_dump(pool))
    run = tmp_path / "run"
    assert main(["sample", "--base", str(tmp_path / "pool.yml"), "--out", str(run), "--methods", "com,regmean",
                 "--sizes", "2", "--k", "1", "--no-full", "--no-evaluate"]) == 0
    merged = sorted(p.name for p in (run / "models").iterdir())
    assert merged == ["com__n02_s00", "regmean__n02_s00"]
    recipe = yaml.safe_load((run / "models" / "com__n02_s00" / "recipe.yml").read_text())
    assert all(Path(m["calibration"]["data"]).is_absolute() for m in recipe["models"])
    assert (run / "models" / "com__n02_s00" / DIAGNOSTICS_FILE).is_file()
