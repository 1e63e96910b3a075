"""The synthetic demo family: a small Qwen3 base and 12 experts trained on a laptop CPU, plus lm-eval tasks.

Importing this package is cheap (no torch): the functions below load their modules on first use.
``resolve_demo_ref("demo:expert_01")`` gives a checkpoint path, building and caching the family if needed; a family
of another seed (``$WILDMERGE_DEMO_SEED``) or a partition family, its skills split at random into tasks
(``$WILDMERGE_DEMO_PARTITION``, ``partition.py``), is cached under its own key.
"""

from wildmerge.families import lazy_exports

__all__ = ["resolve_demo_ref", "task_names_of", "tasks_beside", "ensure_family", "default_cache_dir"]
__getattr__ = lazy_exports(__name__, dict.fromkeys(__all__, "wildmerge.families.demo.family"))
