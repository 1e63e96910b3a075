"""The synthetic demo family: a small Qwen3 base and 12 experts trained on a laptop CPU, plus lm-eval tasks.

Importing this package is cheap (no torch): the functions below load their modules on first use.
``resolve_demo_ref("demo:expert_01")`` gives a checkpoint path, building and caching the family if needed.
"""

__all__ = ["resolve_demo_ref", "ensure_family", "default_cache_dir"]


def lazy_exports(package: str, exports: dict):
    """A package's module ``__getattr__`` that imports ``exports[name]`` (a module name) on first use of ``name``:
    the embedded families' packages stay cheap to import (no torch)."""

    def __getattr__(name):
        if name in exports:
            import importlib

            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "wildmerge.demo.family"))
