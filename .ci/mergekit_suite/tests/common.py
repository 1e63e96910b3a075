"""Helpers that mergekit 0.1.5's own tests import as ``tests.common`` but that its sdist does not ship.

Written for wildmerge's CI (not taken from mergekit): tiny random checkpoints of the shapes the tests assume
(hidden size 32, untied ``lm_head``, one ``model.safetensors``) and a merge-then-check helper. This folder has no
``__init__.py`` so that ``tests`` is a namespace package spanning it and the sdist's ``tests/`` folder.
"""

import tempfile
from pathlib import Path

import torch
import transformers


def _save(model, path) -> str:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


def _random(model_class, config):
    torch.manual_seed(abs(hash(repr(config.to_dict()))) % 2**31)
    return model_class(config).to(torch.float32)


def make_picollama(path, vocab_size: int = 64) -> str:
    """A two-layer Llama with hidden size 32 and a separate ``lm_head``."""
    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )
    return _save(_random(transformers.LlamaForCausalLM, config), path)


def make_picogranite(path, vocab_size: int = 64) -> str:
    config = transformers.GraniteConfig(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )
    return _save(_random(transformers.GraniteForCausalLM, config), path)


def make_gpt2size(path) -> str:
    """GPT-2's layer count (12) at a tiny width: the stacking test expects 24 layers from two copies."""
    config = transformers.GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=12, n_head=2)
    return _save(_random(transformers.GPT2LMHeadModel, config), path)


def make_picoLlaVa(path) -> str:  # noqa: N802 (name fixed by mergekit's tests)
    """A LLaVA with a tiny CLIP vision tower and a tiny Llama language model."""
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, image_size=32,
        patch_size=16, projection_dim=32,
    )
    text = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
    )
    config = transformers.LlavaConfig(vision_config=vision, text_config=text, image_token_index=63)
    return _save(_random(transformers.LlavaForConditionalGeneration, config), path)


def run_and_check_merge(config, check_nan: bool = True, validate=None, auto_arch: bool = False, **_ignored):
    """Merge ``config`` into a temporary folder with mergekit's ``run_merge``; check that a loadable config and
    finite weights came out, then call ``validate(folder)``."""
    from mergekit.io import LazyTensorLoader
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    with tempfile.TemporaryDirectory() as out:
        run_merge(config, out_path=out, options=MergeOptions(quiet=True))
        assert (Path(out) / "config.json").is_file(), "no config.json in the merge output"
        transformers.AutoConfig.from_pretrained(out)
        loader = LazyTensorLoader.from_disk(out)
        assert loader.index.tensor_paths, "the merge output holds no tensors"
        if check_nan:
            for name in loader.index.tensor_paths:
                tensor = loader.get_tensor(name)
                assert torch.isfinite(tensor.float()).all(), f"non-finite values in {name}"
        if validate is not None:
            validate(out)
