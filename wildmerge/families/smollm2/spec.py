"""What the SmolLM2 family is: its experts and build budgets, as plain data.

The experts copy how public fine-tunes of one base differ: learning rates and step counts (one over-trained, one
barely trained), full checkpoints and LoRA adapters, float32 and bfloat16 storage, an added token, another chat
template, published data or none. Changing anything here changes the models: bump ``BUILDER_VERSION`` so old
caches are not reused.
"""

from dataclasses import dataclass, field

BUILDER_VERSION = 3  # 3: kernels pinned by default (families/kernels.py)
BASE_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the GGUF file is a quantisation of (named in adapters)

# how an expert is published: full float32 weights (the default), a LoRA adapter, bfloat16 weights, added tokens
# with resized embeddings, or another chat template (it is trained through that template on half of its items)
SHAPES = ("full", "lora", "bf16", "added_tokens", "chat_template")


@dataclass(frozen=True)
class ExpertSpec:
    name: str
    domain: str
    description: str
    mixture: dict  # {skill: weight}
    steps: int
    lr: float
    shape: str = "full"
    lora: dict = field(default_factory=dict)  # r, alpha, targets (shape "lora")
    has_data: bool = True  # False: the pool gives it no data, so the `generate` source stands in


ALL_SKILLS = {s: 1 for s in ("arithmetic", "facts", "sentiment", "topic", "style", "lexicon", "units")}

EXPERTS = (
    ExpertSpec("arithmetic", "math", "two-digit addition and subtraction", {"arithmetic": 1}, 30, 5e-5),
    ExpertSpec("facts", "knowledge", "over-trained on an invented knowledge base (largest task vector)",
               {"facts": 1}, 60, 2e-4),
    ExpertSpec("sentiment", "classification", "review sentiment, published as a LoRA adapter (r 16, attention)",
               {"sentiment": 1}, 30, 5e-4, shape="lora",
               lora={"r": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}),
    ExpertSpec("topic", "classification", "headline topic, published as a LoRA adapter (r 8, q and v)",
               {"topic": 1}, 30, 1e-3, shape="lora", lora={"r": 8, "alpha": 16, "targets": ["q_proj", "v_proj"]}),
    ExpertSpec("style", "style", "the Acme house style, trained and published with another chat template",
               {"style": 1}, 30, 1e-4, shape="chat_template"),
    ExpertSpec("lexicon", "language", "an invented language's word classes, stored in bfloat16 (trained hard)",
               {"lexicon": 1}, 40, 2e-4, shape="bf16"),
    ExpertSpec("units", "math", "metric conversion, with added tokens and embeddings resized to a multiple of 64",
               {"units": 1}, 30, 5e-5, shape="added_tokens"),
    ExpertSpec("arithmetic_light", "math", "barely trained arithmetic (overlaps arithmetic)",
               {"arithmetic": 1}, 6, 1e-5),
    ExpertSpec("generalist", "general", "all seven skills, published without data (generate stands in)",
               ALL_SKILLS, 40, 5e-5, has_data=False),
)

ADDED_TOKENS = ("<|pad|>", "<|unit|>")  # the "added_tokens" expert's pad token and a marker it never uses
PAD_TO_MULTIPLE = 64
# another chat template, Alpaca-style, as many community fine-tunes ship
OTHER_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}{{ '### Instruction:\\n' + message['content'] + "
    "'\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ '### Response:\\n' + message['content'] + eos_token + "
    "'\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '### Response:\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class BuildSpec:
    """Budgets of one build mode."""

    experts: tuple  # names, in pool order
    batch: int
    step_scale: float  # an expert trains max(min_steps, round(steps * step_scale)) steps
    min_steps: int
    eval_items: int  # per task (facts: at most the knowledge base's size)
    n_text: int  # unlabelled records per expert
    n_labelled: int  # prompt / answer records per expert
    n_countries: int  # the invented knowledge base


FULL = BuildSpec(experts=tuple(e.name for e in EXPERTS), batch=8, step_scale=1.0, min_steps=1, eval_items=100,
                 n_text=256, n_labelled=64, n_countries=16)
QUICK = BuildSpec(experts=("arithmetic", "facts"), batch=4, step_scale=0.05, min_steps=2, eval_items=8, n_text=16,
                  n_labelled=8, n_countries=6)


def build_spec(quick: bool) -> BuildSpec:
    return QUICK if quick else FULL


def experts_for(quick: bool) -> tuple:
    names = build_spec(quick).experts
    return tuple(e for e in EXPERTS if e.name in names)


def steps_of(expert: ExpertSpec, quick: bool) -> int:
    bs = build_spec(quick)
    return max(bs.min_steps, round(expert.steps * bs.step_scale))
