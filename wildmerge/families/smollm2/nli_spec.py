"""What the SmolLM2 NLI experts are: one LoRA adapter per genre and the build budgets, as plain data.

Changing anything here changes the models: bump ``NLI_VERSION`` so old caches are not reused.
"""

from dataclasses import dataclass

from wildmerge.families.smollm2.nli import GENRES

NLI_VERSION = 1
NAME_PREFIX = "nli_"  # an expert's name and its data's: smollm2:nli_fiction, smollm2:text/nli_fiction
TASK_PREFIX = "smollm2_nli_"  # lm-eval task names: smollm2_nli_fiction
# Chain of Merges' LoRA experts: rank 16 on q, k, v and the output projection; alpha 16 as in the KnOTS checkpoints
LORA = {"r": 16, "alpha": 16, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass(frozen=True)
class NliBuild:
    """Budgets of one build mode."""

    genres: tuple  # the genres that get an expert (every genre gets held-out items)
    steps: int
    batch: int
    lr: float
    eval_items: int  # held-out items per genre (labels balanced)
    n_text: int  # unlabelled records per expert
    n_labelled: int  # prompt / answer records per expert


FULL = NliBuild(genres=GENRES, steps=50, batch=4, lr=2e-3, eval_items=120, n_text=64, n_labelled=48)
QUICK = NliBuild(genres=("fiction", "travel"), steps=2, batch=2, lr=2e-3, eval_items=6, n_text=64, n_labelled=6)


def build_spec(quick: bool) -> NliBuild:
    return QUICK if quick else FULL


def expert_name(genre: str) -> str:
    return NAME_PREFIX + genre


def expert_names(quick: bool) -> list:
    return [expert_name(g) for g in build_spec(quick).genres]


def task_names() -> list:
    return [TASK_PREFIX + g for g in GENRES]
