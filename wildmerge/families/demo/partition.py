"""Partition families: the demo family's skills split at random into tasks, one expert per task (the fresh-head
probe paper's random class-to-task partitions, App. A.3 and Table 6, with the demo's five skills as the classes).

``random:SEED:T`` names a partition: ``torch.randperm`` over the five skills from a generator seeded with SEED, cut
into T contiguous blocks (``families/partitions.py``, the same split the probe's geometry tables use). The partition
family of a demo family (seed, quick or full) has the same base, world, tokenizer and held-out items; its experts are
``expert_01`` ... ``expert_<T>``, each trained on its task's skills with one recipe; its probe folder holds its own
joint reference. It is cached under its own key (``<family key>-random<SEED>t<T>``), so partitions and seeds never
share a folder. ``$WILDMERGE_DEMO_PARTITION`` makes every ``demo:`` reference resolve to it.
"""

import os
import re

from wildmerge.errors import ConfigError
from wildmerge.families.demo import spec as S
from wildmerge.families.demo.skills import SKILLS

ENV = "WILDMERGE_DEMO_PARTITION"
EXPERT_STEPS, EXPERT_LR = 300, 1e-3  # the single-skill specialists' recipe (spec.EXPERTS), for every task
_SYNTAX = re.compile(r"random:(\d+):(\d+)")


def parse_partition(text) -> tuple:
    """``"random:SEED:T"`` -> (SEED, T); a wrong syntax or a T that leaves a task without a skill is refused."""
    match = _SYNTAX.fullmatch(str(text).strip())
    if not match:
        raise ConfigError(f"partition {text!r} is not random:SEED:TASKS (e.g. random:100:3: the five demo skills "
                          f"split at random by seed 100 into 3 tasks)")
    seed, tasks = int(match[1]), int(match[2])
    if not 2 <= tasks <= len(SKILLS):
        raise ConfigError(f"partition {text!r}: {tasks} tasks over the {len(SKILLS)} demo skills "
                          + ("leaves a task without a skill" if tasks > len(SKILLS) else "is no partition to merge")
                          + f"; give 2 to {len(SKILLS)} tasks")
    return seed, tasks


def canonical(text) -> str | None:
    """The partition's one spelling (``random:100:3``), or None for no partition."""
    if text is None or str(text).strip() == "":
        return None
    seed, tasks = parse_partition(text)
    return f"random:{seed}:{tasks}"


def env_partition() -> str | None:
    """``$WILDMERGE_DEMO_PARTITION`` checked (unset or empty: the family's own experts)."""
    text = os.environ.get(ENV)
    try:
        return canonical(text)
    except ConfigError as exc:
        raise ConfigError(f"{ENV}: {exc}") from None


def key_suffix(partition: str | None) -> str:
    if partition is None:
        return ""
    seed, tasks = parse_partition(partition)
    return f"-random{seed}t{tasks}"


def task_skills(partition: str) -> list:
    """The skills of each task, in the order of ``SKILLS`` within a task."""
    from wildmerge.families.partitions import random_partition

    seed, tasks = parse_partition(partition)
    return [[SKILLS[i] for i in block] for block in random_partition(range(len(SKILLS)), tasks, seed)]


def experts_of(quick: bool, partition: str | None) -> tuple:
    """The experts a family is built with: the demo's own (``spec.experts_for``) or one per task of ``partition``."""
    if partition is None:
        return S.experts_for(quick)
    return tuple(S.ExpertSpec(f"expert_{t:02d}", "task", f"random task {t} of {partition}: {', '.join(skills)}",
                              dict.fromkeys(skills, 1), EXPERT_STEPS, EXPERT_LR)
                 for t, skills in enumerate(task_skills(partition), start=1))
