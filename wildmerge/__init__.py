"""wildmerge: merge fine-tuned LLMs in the wild, evaluate them, and find out what merging buys.

This module is imported at every Python start-up by the ``.pth`` autoload hook, so it must stay light:
no torch, no mergekit, no transformers here.
"""

__version__ = "0.1.0"
