"""The synthetic demo family: a small Qwen3 base and 12 experts trained on a laptop CPU, plus lm-eval tasks.

Importing this package is cheap (no torch): the functions below load their modules on first use.
``resolve_demo_ref("demo:expert_01")`` gives a checkpoint path, building and caching the family if needed.
"""

_EXPORTS = {
    "resolve_demo_ref": "wildmerge.demo.family",
    "ensure_family": "wildmerge.demo.family",
    "default_cache_dir": "wildmerge.demo.family",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'wildmerge.demo' has no attribute {name!r}")
