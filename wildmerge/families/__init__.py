"""The embedded model families, built on this machine and cached: the synthetic demo family (``demo/``, ``demo:``
references) and the SmolLM2 family (``smollm2/``, ``smollm2:`` references), two peers over what they share here.

Shared: items and their JSONL files (``items.py``), lm-eval task YAMLs (``tasks.py``), the fine-tuning loop
(``train.py``), the checksummed build cache (``cache.py``: claim, signature then checksums, atomic rebuild), the probe's
folder beside a family (``probe_cache.py``), the fresh-head probe paper's random class-to-task partition
(``partitions.py``, shared with the probe's geometry tables), the pinned ATen / MKL kernels a build runs with, in a child process
(``kernels.py``), and each build checked against the shipped SHA-256 of the published families (``published.py``).
Importing a family is cheap (no torch): its package loads its modules on first use (``lazy_exports``).
"""


def lazy_exports(package: str, exports: dict):
    """A package's module ``__getattr__`` that imports ``exports[name]`` (a module name) on first use of ``name``:
    the embedded families' packages stay cheap to import (no torch)."""

    def __getattr__(name):
        if name in exports:
            import importlib

            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
