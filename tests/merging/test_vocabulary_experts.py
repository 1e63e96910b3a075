"""Experts with added tokens or another chat template: merged through mergekit's tokenizer alignment onto the base's
vocabulary, with a run-log line; RegMean / CoM and the task-vector diagnostics read them on the base's tokens, exactly
as if the expert had been cut to the base's vocabulary by hand."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from helpers import lm_family  # noqa: F401  (fixture)
from wildmerge.cli import main

ADDED = ["<|tool|>", "<|think|>", "<|end_think|>"]
TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"


@pytest.fixture(scope="module")
def odd_experts(lm_family, tmp_path_factory):  # noqa: F811
    """An expert with three added tokens (embeddings resized, new rows trained) and one with a chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("odd")
    resized = root / "resized"
    tok = AutoTokenizer.from_pretrained(lm_family["experts"][0])
    tok.add_tokens(ADDED)
    model = AutoModelForCausalLM.from_pretrained(lm_family["experts"][0], dtype=torch.float32)
    model.resize_token_embeddings(len(tok))
    torch.manual_seed(7)
    with torch.no_grad():
        n = len(ADDED)
        model.get_input_embeddings().weight[-n:] = torch.randn(n, model.config.hidden_size)
        model.get_output_embeddings().weight[-n:] = torch.randn(n, model.config.hidden_size)
    model.save_pretrained(str(resized))
    tok.save_pretrained(str(resized))

    chat = root / "chat"
    tok = AutoTokenizer.from_pretrained(lm_family["experts"][1])
    tok.chat_template = TEMPLATE
    AutoModelForCausalLM.from_pretrained(lm_family["experts"][1], dtype=torch.float32).save_pretrained(str(chat))
    tok.save_pretrained(str(chat))
    return {"resized": str(resized), "chat": str(chat)}


@pytest.fixture(scope="module")
def cut_expert(lm_family, odd_experts, tmp_path_factory):  # noqa: F811
    """The resized expert cut to the base's vocabulary by hand (resize_token_embeddings down, the base's tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_tok = AutoTokenizer.from_pretrained(lm_family["base"])
    cut = tmp_path_factory.mktemp("cut") / "cut"
    model = AutoModelForCausalLM.from_pretrained(odd_experts["resized"], dtype=torch.float32)
    model.resize_token_embeddings(len(base_tok))
    model.save_pretrained(str(cut))
    base_tok.save_pretrained(str(cut))
    return str(cut)


def _pool(tmp_path, base, experts, calibration=None) -> str:
    pool = {"name": "vocab", "base": {"model": base},
            "experts": [{"model": p, "name": n} for n, p in experts.items()]}
    if calibration:
        pool["calibration"] = calibration
    path = tmp_path / "pool.yml"
    path.write_text(yaml.safe_dump(pool))
    return str(path)


def test_resized_and_templated_experts_merge_onto_the_base_vocabulary(lm_family, odd_experts, tmp_path,  # noqa: F811
                                                                      capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_vocab = len(AutoTokenizer.from_pretrained(lm_family["base"]))
    run = tmp_path / "run"
    argv = ["sample", "--base", _pool(tmp_path, lm_family["base"], odd_experts), "--out", str(run),
            "--methods", "ta", "--sizes", "2", "--no-evaluate"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"note: resized: vocabulary of {base_vocab + len(ADDED)} tokens vs base {base_vocab}" in out
    line = (f"expert resized has vocabulary {base_vocab + len(ADDED)} vs base {base_vocab}; expert chat has another "
            "chat template: tokenizer source=base, embeddings aligned by mergekit, chat template: the most common "
            "among the inputs (the base has none)")
    assert line in out
    log = json.loads((run / "sample_log.json").read_text())
    assert list(log["stats"]["tokenizer"].values()) == [line]  # the run log says what was done, once per merge

    plan = json.loads((run / "plan.json").read_text())
    merged = Path(next(e["path"] for e in plan["entries"] if e["kind"] == "merge"))
    recipe = yaml.safe_load((merged / "recipe.yml").read_text())
    assert recipe["tokenizer"] == {"source": "base"} and recipe["chat_template"] == "auto"

    # loads, with the base's vocabulary and the expert's chat template
    model = AutoModelForCausalLM.from_pretrained(str(merged))
    tok = AutoTokenizer.from_pretrained(str(merged))
    assert model.config.vocab_size == base_vocab == len(tok)
    assert not any(t in tok.get_vocab() for t in ADDED)
    assert tok.chat_template.strip() == TEMPLATE

    # every tensor, embedding rows of the shared tokens included: float64 task arithmetic (lambda 1, normalised
    # weights 1) on the rows aligned by token id
    base = load_file(f"{lm_family['base']}/model.safetensors")
    experts = [load_file(f"{p}/model.safetensors") for p in odd_experts.values()]
    out_w = load_file(str(merged / "model.safetensors"))
    assert set(out_w) == set(base)
    for name, b in base.items():
        rows = [e[name][:base_vocab] if "embed" in name or "lm_head" in name else e[name] for e in experts]
        assert rows[0].shape == b.shape, name
        want = b.double() + sum(r.double() - b.double() for r in rows) / len(rows)
        assert torch.allclose(out_w[name].double(), want, atol=1e-5), name

    # the stock mergekit-yaml runs the rendered recipe to the same weights
    stock = tmp_path / "stock"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([str(Path(sys.executable).parent / "mergekit-yaml"), str(merged / "recipe.yml"),
                          str(stock)], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    stock_w = load_file(str(stock / "model.safetensors"))
    assert all(torch.equal(stock_w[k], out_w[k]) for k in out_w)
    assert len(AutoTokenizer.from_pretrained(str(stock))) == base_vocab


def test_same_tokenizer_adds_nothing_to_the_recipe_and_loads_nothing(lm_family, tmp_path):  # noqa: F811
    from wildmerge.recipes import tokenizer as vocabulary

    calls = vocabulary._load.cache_info()
    experts = {f"x{i}": p for i, p in enumerate(lm_family["experts"])}
    assert vocabulary.plan_tokenizer(lm_family["base"], experts, layerwise=False, method="ta") == ({}, None)
    after = vocabulary._load.cache_info()
    assert after.hits + after.misses == calls.hits + calls.misses  # decided from file stamps and config.json


def test_chat_template_only_is_fine_for_layerwise(lm_family, odd_experts):  # noqa: F811
    from wildmerge.recipes.tokenizer import plan_tokenizer

    keys, note = plan_tokenizer(lm_family["base"], {"chat": odd_experts["chat"]}, layerwise=True, method="com")
    assert keys == {} and note == "expert chat has another chat template: the merged model keeps the base's " \
                                  "tokenizer and chat template"


PER_TENSOR = ["ta", "ties", "model_stock", "tsv_m", "iso_c", "iso_cts", "ta_sb", "ties_sb", "metagpt", "norm_avg",
              "zhou2026_dare", "zhou2026_wa"]


def _merge_both_ways(lm_family, odd_experts, cut, tmp_path, methods, data=None) -> dict:  # noqa: F811
    """{aligned | by_hand: run folder}: the same merges of (resized, chat) and of (resized cut by hand, chat)."""
    runs = {}
    for label, experts in {"aligned": odd_experts,
                           "by_hand": {"resized": cut, "chat": lm_family["experts"][1]}}.items():
        (tmp_path / label).mkdir()
        runs[label] = run = tmp_path / label / "run"
        argv = ["sample", "--base", _pool(tmp_path / label, lm_family["base"], experts, data), "--out", str(run),
                "--methods", ",".join(methods), "--sizes", "2", "--no-evaluate"]
        assert main(argv) == 0
    return runs


def test_every_per_tensor_method_merges_aligned_rows_as_if_pre_aligned(lm_family, odd_experts, cut_expert,  # noqa: F811
                                                                       tmp_path):
    """Each method through mergekit's alignment gives what it gives on experts cut to the base's vocabulary by
    hand (resize_token_embeddings down, the base's tokenizer): the alignment is the only difference."""
    from transformers import AutoTokenizer

    base_tok = AutoTokenizer.from_pretrained(lm_family["base"])
    runs = _merge_both_ways(lm_family, odd_experts, cut_expert, tmp_path, PER_TENSOR)
    plan = json.loads((runs["aligned"] / "plan.json").read_text())
    merges = [e for e in plan["entries"] if e["kind"] == "merge"]
    assert sorted(e["method"] for e in merges) == sorted(PER_TENSOR)
    for e in merges:
        a = load_file(str(Path(e["path"]) / "model.safetensors"))
        b = load_file(str(runs["by_hand"] / Path(e["path"]).relative_to(runs["aligned"]) / "model.safetensors"))
        assert a["model.embed_tokens.weight"].shape[0] == len(base_tok), e["method"]
        for name in b:
            assert torch.allclose(a[name], b[name], atol=1e-6), (e["method"], name)


def test_regmean_and_chain_of_merges_read_a_resized_expert_on_the_base_tokens(lm_family, odd_experts,  # noqa: F811
                                                                              cut_expert, tmp_path, capsys):
    """RegMean, Chain of Merges and MaTS (which solve per-layer systems outside mergekit's alignment) merge an expert
    with added tokens exactly as they merge it cut to the base's vocabulary by hand."""
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"the sky is blue number {i} and the grass is green" for i in range(80)))
    data = {"text": str(text)}
    runs = _merge_both_ways(lm_family, odd_experts, cut_expert, tmp_path, ["regmean", "com", "mats"], data)
    assert "embeddings read at the rows of the base's tokens" in capsys.readouterr().out
    merges = [e for e in json.loads((runs["aligned"] / "plan.json").read_text())["entries"] if e["kind"] == "merge"]
    assert sorted(e["method"] for e in merges) == ["com", "mats", "regmean"]
    for e in merges:
        a = load_file(str(Path(e["path"]) / "model.safetensors"))
        b = load_file(str(runs["by_hand"] / Path(e["path"]).relative_to(runs["aligned"]) / "model.safetensors"))
        assert a.keys() == b.keys()
        for name in b:
            assert torch.allclose(a[name], b[name], atol=1e-6), (e["method"], name)


def test_fisher_merging_reads_a_resized_expert_on_the_base_tokens(lm_family, odd_experts, cut_expert,  # noqa: F811
                                                                   tmp_path):
    """Fisher merging runs the expert with added tokens as it is (its Fisher is its own model's) and writes the base's
    rows: alone it gives back exactly the rows of the hand-cut expert; with another expert, a finite merge."""
    from wildmerge.plugins.layerwise.driver import merge_layerwise

    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"the sky is blue number {i} and the grass is green" for i in range(20)))
    recipe = {"merge_method": "fisher", "base_model": lm_family["base"], "parameters": {"fisher_samples": 4},
              "calibration": {"n_samples": 4, "seq_len": 16},
              "models": [{"model": odd_experts["resized"], "calibration": str(text)}]}
    alone = load_file(str(merge_layerwise(recipe, tmp_path / "alone", device="cpu", progress=False)
                          / "model.safetensors"))
    cut = load_file(str(Path(cut_expert) / "model.safetensors"))
    assert alone.keys() == cut.keys()
    for name in cut:
        assert torch.allclose(alone[name], cut[name], atol=1e-6), name
    recipe["models"].append({"model": odd_experts["chat"], "calibration": str(text)})
    pair = load_file(str(merge_layerwise(recipe, tmp_path / "pair", device="cpu", progress=False)
                         / "model.safetensors"))
    assert pair["model.embed_tokens.weight"].shape == cut["model.embed_tokens.weight"].shape
    assert all(bool(torch.isfinite(t).all()) for t in pair.values())


def test_norm_imbalance_reads_a_resized_expert_on_the_base_tokens(lm_family, odd_experts, cut_expert,  # noqa: F811
                                                                  tmp_path):
    import pandas as pd

    tables = {}
    for label, resized in {"aligned": odd_experts["resized"], "by_hand": cut_expert}.items():
        (tmp_path / label).mkdir()
        pool = _pool(tmp_path / label, lm_family["base"], {"a": lm_family["experts"][1], "resized": resized})
        assert main(["analyze", "norms", "--pool", pool, "--out", str(tmp_path / label / "out")]) == 0
        tables[label] = pd.read_csv(next((tmp_path / label / "out").glob("*.csv")))
    pd.testing.assert_frame_equal(tables["aligned"], tables["by_hand"], rtol=1e-9)


def test_weight_mergeability_metrics_read_a_resized_expert_on_the_base_tokens(lm_family, odd_experts,  # noqa: F811
                                                                               cut_expert, tmp_path):
    import pandas as pd

    tables = {}
    for label, resized in {"aligned": odd_experts["resized"], "by_hand": cut_expert}.items():
        (tmp_path / label).mkdir()
        pool = _pool(tmp_path / label, lm_family["base"], {"a": lm_family["experts"][1], "resized": resized})
        out = tmp_path / label / "out"
        assert main(["analyze", "mergeability", "--pool", pool, "--out", str(out), "--groups", "weights"]) == 0
        tables[label] = {p.name: pd.read_csv(p) for p in sorted(out.glob("*.csv"))}
    assert tables["aligned"] and tables["aligned"].keys() == tables["by_hand"].keys()
    for name, frame in tables["aligned"].items():
        timed = [c for c in frame.columns if c == "seconds"]  # category_cost.csv: wall time, never equal twice
        pd.testing.assert_frame_equal(frame.drop(columns=timed), tables["by_hand"][name].drop(columns=timed),
                                      rtol=1e-6)


def test_in_memory_candidates_hold_a_resized_expert_on_the_base_tokens(lm_family, odd_experts,  # noqa: F811
                                                                       cut_expert):
    """The task alignment score's sweeps merge in memory: a resized expert is held at the base's token rows."""
    from wildmerge.merging.inmemory import CandidateMerger

    recipe = {"merge_method": "task_arithmetic", "parameters": {"lambda": 0.7},
              "models": [{"model": "a", "parameters": {"weight": 1.0}}, {"model": "resized", "parameters": {"weight": 1.0}}]}
    merged = [CandidateMerger(lm_family["base"], {"a": lm_family["experts"][1], "resized": r}).merge(recipe)
              for r in (odd_experts["resized"], cut_expert)]
    assert merged[0].keys() == merged[1].keys()
    for name in merged[1]:
        assert torch.equal(merged[0][name], merged[1][name]), name


def test_the_reports_task_vector_norm_reads_a_resized_expert_on_the_base_tokens(lm_family, odd_experts,  # noqa: F811
                                                                                 cut_expert):
    from wildmerge.analysis.pool.norms import task_vector_norm

    aligned = task_vector_norm(odd_experts["resized"], lm_family["base"])
    assert aligned == pytest.approx(task_vector_norm(cut_expert, lm_family["base"]), rel=1e-12) and aligned > 0
