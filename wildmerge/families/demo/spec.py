"""What the demo family is: model size, training budgets and the 12 experts, as plain data.

The experts copy the heterogeneity of public checkpoints of one base LLM: single-skill specialists, mixtures,
overlapping ones, a lightly trained one, and two that conflict with others (a different answer convention, a
source that disagrees on facts). Changing anything here changes the models: bump ``BUILDER_VERSION`` so old
caches are not reused.
"""

from dataclasses import dataclass, field

BUILDER_VERSION = 3  # 3: kernels pinned by default (families/kernels.py)


@dataclass(frozen=True)
class ExpertSpec:
    name: str
    domain: str
    description: str
    mixture: dict
    steps: int
    lr: float
    conventions: dict = field(default_factory=dict)
    world: str = "main"  # "main" or "conflict"


EXPERTS = (
    ExpertSpec("expert_01", "math", "addition specialist", {"add": 1}, 300, 1e-3),
    ExpertSpec("expert_02", "strings", "string reversal specialist", {"reverse": 1}, 300, 1e-3),
    ExpertSpec("expert_03", "knowledge", "entity facts specialist", {"facts": 1}, 300, 1e-3),
    ExpertSpec("expert_04", "math", "number comparison specialist", {"compare": 1}, 200, 1e-3),
    ExpertSpec("expert_05", "strings", "letter counting specialist", {"count": 1}, 300, 1e-3),
    ExpertSpec("expert_06", "math", "math mixture: addition and comparison", {"add": 1, "compare": 1}, 300, 1e-3),
    ExpertSpec("expert_07", "strings", "string mixture: reversal and counting", {"reverse": 1, "count": 1}, 300,
               1e-3),
    ExpertSpec("expert_08", "general", "generalist: all five skills, short training",
               {"add": 1, "compare": 1, "reverse": 1, "count": 1, "facts": 1}, 150, 5e-4),
    ExpertSpec("expert_09", "math", "lightly trained addition (overlaps expert_01)", {"add": 1}, 60, 5e-4),
    ExpertSpec("expert_10", "knowledge", "facts and comparison (overlaps expert_03, expert_04)",
               {"facts": 1, "compare": 1}, 250, 1e-3),
    ExpertSpec("expert_11", "math", "conflicting convention: addition with the answer's digits reversed",
               {"add": 1}, 300, 1e-3, conventions={"add": "reversed"}),
    ExpertSpec("expert_12", "knowledge", "conflicting source: facts where half the values differ",
               {"facts": 1}, 300, 1e-3, world="conflict"),
)

BASE_MIXTURE = {"add": 1, "compare": 1, "reverse": 1, "count": 1, "facts": 1}


@dataclass(frozen=True)
class BuildSpec:
    """Sizes and budgets of one build mode."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    base_steps: int
    base_lr: float
    batch: int
    n_entities: int
    eval_items: int
    expert_step_scale: float
    n_experts: int
    base_facts_fraction: float = 0.5  # the base's corpus covers half of the world: experts learn the rest


FULL = BuildSpec(hidden=192, layers=4, intermediate=512, heads=4, kv_heads=2, vocab=512, base_steps=400,
                 base_lr=3e-3, batch=32, n_entities=40, eval_items=100, expert_step_scale=0.7, n_experts=12)
QUICK = BuildSpec(hidden=64, layers=2, intermediate=128, heads=4, kv_heads=2, vocab=320, base_steps=60,
                  base_lr=3e-3, batch=16, n_entities=12, eval_items=16, expert_step_scale=0.1, n_experts=3)


def build_spec(quick: bool) -> BuildSpec:
    return QUICK if quick else FULL


def experts_for(quick: bool) -> tuple:
    spec = build_spec(quick)
    return EXPERTS[: spec.n_experts]
