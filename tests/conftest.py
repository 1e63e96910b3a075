"""Shared fixtures: tiny real transformers checkpoints on disk, built from a config (no hub)."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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


@pytest.fixture(scope="session")
def tiny_family(tmp_path_factory):
    """A tiny Llama base and three noisy experts of it: {'base': path, 'experts': [paths]}."""
    root = tmp_path_factory.mktemp("tiny_llama")
    base = make_tiny_model(root / "base", "llama", seed=0)
    experts = [make_tiny_model(root / f"expert{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
    return {"base": base, "experts": experts}


@pytest.fixture(scope="session")
def tiny_qwen3_family(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_qwen3")
    base = make_tiny_model(root / "base", "qwen3", seed=0)
    experts = [make_tiny_model(root / f"expert{i}", base=base, seed=i + 1, noise=0.02) for i in range(3)]
    return {"base": base, "experts": experts}
