"""Helpers shared by the eval and report tests: tiny models WITH a tokenizer, local lm-eval tasks, a fake run.

conftest's tiny models have no tokenizer; lm-eval needs one, so a byte-level BPE is trained here and saved next to
each model. The two tasks (one multiple_choice, one generate_until) read absolute JSONL paths (relative
``data_files`` resolve against the process CWD in lm-eval 0.4.13).
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wildmerge.run import Plan, RunFolder

MC_DOCS = [
    {"question": "The sky is", "choices": ["blue", "green", "loud"], "answer": 0},
    {"question": "Two plus two is", "choices": ["five", "four", "seven"], "answer": 1},
    {"question": "Fire is", "choices": ["cold", "wet", "hot"], "answer": 2},
    {"question": "Ice is", "choices": ["cold", "hot", "loud"], "answer": 0},
    {"question": "A cat says", "choices": ["moo", "meow", "quack"], "answer": 1},
    {"question": "Grass is", "choices": ["red", "blue", "green"], "answer": 2},
]
GEN_DOCS = [{"question": f"{a} plus {b} equals", "answer": str(a + b)} for a, b in [(1, 1), (2, 3), (4, 4)]]


def write_tokenizer(path) -> int:
    """Train a tiny byte-level BPE and save it as a transformers tokenizer at ``path``; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [d["question"] + " " + " ".join(d["choices"]) for d in MC_DOCS] + \
             [d["question"] + " " + d["answer"] for d in GEN_DOCS] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|pad|>")
    fast.save_pretrained(str(path))
    return len(fast)


def make_lm(path, seed=0, base=None, noise=0.0, vocab=None):
    """A tiny Llama with a tokenizer at ``path`` (an expert of ``base`` when given)."""
    if base is None:
        vocab = vocab or write_tokenizer(Path(path).parent / "_tok")
        make_tiny_model(path, "llama", seed=seed, vocab_size=vocab)
    else:
        make_tiny_model(path, base=base, seed=seed, noise=noise)
    write_tokenizer(path)
    return str(path)


def write_tasks(folder) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mini_mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MC_DOCS))
    (folder / "mini_gen.jsonl").write_text("".join(json.dumps(d) + "\n" for d in GEN_DOCS))
    mc = {"task": "mini_mc", "dataset_path": "json",
          "dataset_kwargs": {"data_files": {"test": str((folder / "mini_mc.jsonl").resolve())}},
          "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "{{question}}",
          "doc_to_choice": "{{choices}}", "doc_to_target": "answer",
          "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
          "metadata": {"version": 1.0}}
    gen = {"task": "mini_gen", "dataset_path": "json",
           "dataset_kwargs": {"data_files": {"test": str((folder / "mini_gen.jsonl").resolve())}},
           "test_split": "test", "output_type": "generate_until", "doc_to_text": "{{question}}",
           "doc_to_target": "{{answer}}",
           "generation_kwargs": {"until": ["\n"], "max_gen_toks": 4, "do_sample": False},
           "filter_list": [{"name": "strict", "filter": [{"function": "regex", "regex_pattern": "(\\d+)"},
                                                         {"function": "take_first"}]}],
           "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
           "metadata": {"version": 1.0}}
    (folder / "mini_mc.yaml").write_text(yaml.safe_dump(mc))
    (folder / "mini_gen.yaml").write_text(yaml.safe_dump(gen))
    return folder


def write_suite(path, tasks_dir, metric_mc="acc,none", extra_tasks=()):
    suite = {"name": "mini", "description": "two local tasks", "include_path": str(tasks_dir),
             "tasks": [{"task": "mini_mc", "num_fewshot": 0, "metric": metric_mc, "label": "mc"},
                       {"task": "mini_gen", "num_fewshot": 0, "metric": "exact_match,strict", "label": "gen"},
                       *extra_tasks],
             "settings": {"dtype": "float32", "batch_size": 4, "device": "cpu", "include_defaults": False}}
    Path(path).write_text(yaml.safe_dump(suite, sort_keys=False))
    return str(path)


def write_plan(run_dir, entries):
    """A run folder holding only a plan (through the run-folder contract)."""
    run = RunFolder(run_dir)
    run.root.mkdir(parents=True, exist_ok=True)
    run.write_plan(Plan(run=run.name, run_dir=str(run.root), entries=entries))
    return run.root


@pytest.fixture(scope="session")
def lm_family(tmp_path_factory):
    """base, two experts, a copy of expert 0 (same content, other path) and the local task folder + suite."""
    os.environ.setdefault("HF_HOME", str(tmp_path_factory.mktemp("hf_home")))
    root = tmp_path_factory.mktemp("lm_family")
    base = make_lm(root / "base", seed=0)
    experts = [make_lm(root / f"expert{i}", base=base, seed=i + 1, noise=0.5) for i in range(2)]
    copy = root / "expert0_copy"
    shutil.copytree(experts[0], copy)
    tasks = write_tasks(root / "tasks")
    suite = write_suite(root / "mini.yml", tasks)
    return {"root": root, "base": base, "experts": experts, "copy": str(copy), "tasks": tasks, "suite": suite}


def make_tiny_model(path, arch="llama", seed=0, vocab_size=64, hidden=32, layers=2, base=None, noise=0.0):
    """Save a tiny random Llama or Qwen3 causal LM at ``path``.

    With ``base`` (a path), start from that model's weights and add Gaussian noise of scale ``noise``: an "expert"
    of that base. Returns the path.
    """
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    torch.manual_seed(seed)
    if base is not None:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p))
    else:
        common = dict(
            vocab_size=vocab_size,
            hidden_size=hidden,
            intermediate_size=hidden * 2,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            tie_word_embeddings=False,
        )
        config = Qwen3Config(head_dim=hidden // 4, **common) if arch == "qwen3" else LlamaConfig(**common)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


# --- protocol runs on a tiny pool (sampling, claims) ---

METHODS = "ta,ties,iso_c"
ARGS = ["--sizes", "1,2", "--k", "3", "--methods", METHODS, "--no-evaluate", "--seed", "7"]


def write_pool(tmp_path, family, name="tiny", domains=None):
    lines = [f"name: {name}", f"base: {{model: {family['base']}}}", "experts:"]
    for i, e in enumerate(family["experts"]):
        dom = f", domain: {domains[i]}" if domains else ""
        lines.append(f"  - {{model: {e}, name: x{i}{dom}}}")
    p = tmp_path / f"{name}.yml"
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def sample(pool, out, *extra):
    from wildmerge.cli import main

    return main(["sample", "--base", pool, "--out", str(out), *ARGS, *extra])


def tensors(run):
    from safetensors.torch import load_file

    out = {}
    for d in sorted((Path(run) / "models").iterdir()):
        out[d.name] = load_file(str(d / "model.safetensors"))
    return out


def assert_same_models(a, b):
    import torch

    ta, tb = tensors(a), tensors(b)
    assert ta.keys() == tb.keys()
    for mid in ta:
        assert ta[mid].keys() == tb[mid].keys()
        for k in ta[mid]:
            assert torch.equal(ta[mid][k], tb[mid][k]), (mid, k)


def leftovers(run):
    return [p.name for p in (Path(run) / "models").iterdir() if ".tmp-" in p.name or ".old-" in p.name]



WILD_ADDED_TOKENS = ["<|unit|>", "<|pad2|>"]


def make_wild_experts(root) -> dict:
    """What public pools hold besides full fine-tunes: under ``root`` a tiny base, a full expert, an expert with two
    added tokens (resized embeddings and head) and a LoRA adapter; returns their paths."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = Path(root)
    base = make_lm(root / "base", seed=0)
    full = make_lm(root / "full", base=base, seed=1, noise=0.3)
    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(base)
    tok.add_special_tokens({"additional_special_tokens": WILD_ADDED_TOKENS})
    model.resize_token_embeddings(len(tok))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(str(root / "wide"))
    tok.save_pretrained(str(root / "wide"))
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                          LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(str(root / "lora"))
    return {"base": base, "full": full, "wide": str(root / "wide"), "lora": str(root / "lora"), "root": root}


def one_error_line(err: str) -> str:
    """The one ``error:`` line of a command's stderr (no traceback; argparse's usage lines may come before it)."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


TUNE_TEXTS = ["The sky is blue", "Two plus two is four", "Fire is hot", "Ice is cold", "A cat says meow",
              "4 plus 4 equals 8", "Grass is red", "The sky is green", "Snow is blue", "1 plus 2 equals 3"]


def text_pool(family, tmp_path):
    """A pool file over a tiny family whose experts each have a few unlabelled texts (what TAS and tune read)."""
    import json

    import yaml

    experts = []
    for i, path in enumerate(family["experts"]):
        data = tmp_path / f"texts{i}.jsonl"
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TUNE_TEXTS[i::2] * 2))
        experts.append({"model": path, "name": f"e{i}", "calibration": str(data)})
    pool = tmp_path / "pool.yml"
    pool.write_text(yaml.safe_dump({"name": "tiny", "base": {"model": family["base"]}, "experts": experts}))
    return str(pool)


def run_tune(*argv):
    """``wildmerge tune`` in this process, from string-able arguments."""
    import argparse

    from wildmerge.commands import tune

    parser = argparse.ArgumentParser()
    tune.configure(parser)
    return tune.run(parser.parse_args([str(a) for a in argv]))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny matmuls on a shared 2-core machine: thread hand-offs cost more than the maths, so run on one thread
    (import it into a test module to apply it there)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def token_family(root, vocab_slices, n_samples, seq):
    """A tiny Llama base and one expert per vocabulary slice ``(lo, hi)``, each with ``n_samples`` token sequences
    (5 to ``seq`` long) drawn from its own slice: what the layer-wise methods read as each expert's data."""
    import json
    import random

    base = make_tiny_model(root / "base", "llama", seed=0)
    experts = [make_tiny_model(root / f"e{i}", base=base, seed=i + 1, noise=0.05) for i in range(len(vocab_slices))]
    data = []
    for i, (lo, hi) in enumerate(vocab_slices):
        rng = random.Random(i)
        path = root / f"tok{i}.jsonl"
        rows = [[rng.randrange(lo, hi) for _ in range(rng.randrange(5, seq + 1))] for _ in range(n_samples)]
        path.write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rows))
        data.append(str(path))
    return {"root": root, "base": base, "experts": experts, "data": data}


def run_mergekit_yaml(recipe: dict, tmp_path, *flags, **env) -> dict:
    """Write ``recipe`` and merge it with the stock ``mergekit-yaml`` CLI into ``tmp_path/out`` (offline, one thread,
    on the CPU); fails the test with mergekit's stderr when it does not succeed. Returns the merge's diagnostics."""
    import subprocess
    import sys

    from wildmerge.plugins.layerwise.driver import DIAGNOSTICS_FILE

    path = tmp_path / "recipe.yml"
    path.write_text(yaml.safe_dump(recipe))
    exe = Path(sys.executable).with_name("mergekit-yaml")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", **env)
    proc = subprocess.run([str(exe), str(path), str(tmp_path / "out"), *flags, "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "out" / DIAGNOSTICS_FILE).read_text())


def python_output(code: str, **env) -> str:
    """``code`` run in a fresh interpreter (its own affinity, environment, imports and memory high-water mark), this
    process's import path passed on; ``env`` values set variables, None removes one. Its stdout, stripped."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    for key, value in env.items():
        if value is None:
            full.pop(key)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          check=True).stdout.strip()


def benchmark_module(name: str):
    """``benchmarks/<name>.py`` imported as the script sees its folder (its neighbours, e.g. ``search_recording``,
    importable), for tests of a benchmark's own functions."""
    import importlib.util

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
