"""Pools: a base model and its fine-tuned experts, from the pool file to checkpoint folders on this machine.

``schema.py`` reads and checks a pool file (``load_pool``); ``resolved.py`` turns a pool into folders, once, the same
way for every command (``resolve`` -> ``ResolvedPool``); ``adapters.py`` folds a LoRA adapter expert into the base.
Only bottom modules are imported (hub, checkpoints, expert_data, run), so every pipeline stage may use it.
"""

from wildmerge.pools.resolved import ResolvedPool, resolve
from wildmerge.pools.schema import Pool, list_pools, load_pool

__all__ = ["Pool", "ResolvedPool", "list_pools", "load_pool", "resolve"]
