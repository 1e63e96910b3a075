"""wildmerge: merge fine-tuned LLMs in the wild, evaluate them, and find out what merging buys.

This module is imported at every Python start-up by the ``.pth`` autoload hook, so it must stay light:
no torch, no mergekit, no transformers here. The Python API (``wildmerge.api``: ``sample``, ``guided_search``,
``open_run``, ``Run``) is imported on first use of one of its names.
"""

__version__ = "0.1.0"
_API = ("sample", "guided_search", "open_run", "Run")


def __getattr__(name: str):
    if name in _API:
        from wildmerge import api

        return getattr(api, name)
    raise AttributeError(f"module 'wildmerge' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
