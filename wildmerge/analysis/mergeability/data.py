"""Each expert's calibration items for the activation and gradient metrics (Zhou et al., arXiv 2601.22285, §3.4-3.5).

An expert's ``data:`` (pool file; read through wildmerge.expert_data, so every source kind works) gives labelled
items (prompt / answer: loss on the answer tokens only) from its ``labelled`` part, else unlabelled text that serves
the activation metrics only. Each expert's items are a seeded sample that depends only on that expert and the
seed (not on the pool or the pair order), drawn from the expert's own data, never from the evaluation suite.
"""

import random
from pathlib import Path
from typing import Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field

from wildmerge.errors import ConfigError

IGNORE = -100


class DataSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_own: int = Field(10, ge=1)  # labelled items per expert for its gradient (paper: 10 per task)
    n_pooled: int = Field(10, ge=1)  # items per expert in the shared activation / input-gradient set
    max_len: int = Field(64, ge=4)  # tokens per item (L_max of the input gradient)
    batch_size: int = Field(8, ge=1)
    seed: int = 42


def read_items(expert: str, data, relative_to: Optional[Path] = None, model_path=None,
               generated_dir=None) -> List[Dict[str, str]]:
    """All of an expert's items as ``{"prompt", "answer"}`` (answer "" when it has only unlabelled text)."""
    from wildmerge.expert_data.read import expert_items
    from wildmerge.expert_data.schema import parse_data

    data = parse_data(data, f"data of {expert!r}")
    if data is None:
        raise ConfigError(f"expert {expert!r} has no data: activation and gradient metrics need each expert's own "
                          f"items. Add 'data: {{labelled: {{lm_eval_task: TASK, split: train}}}}' (or 'data: "
                          f"generate' for the activation metrics) under that expert in the pool file, or use "
                          f"--groups weights")
    items = expert_items(data, expert, relative_to=relative_to, model_path=model_path, generated_dir=generated_dir)
    if not items:
        raise ConfigError(f"data of {expert!r}: no items")
    return items


def pick(items: List[dict], n: int, seed: int, expert: str) -> List[dict]:
    """A seeded sample of ``n`` items (all of them when there are fewer), fixed per expert."""
    if len(items) <= n:
        return list(items)
    idx = sorted(random.Random(f"mergeability:{seed}:{expert}").sample(range(len(items)), n))
    return [items[i] for i in idx]


def labelled(items: List[dict]) -> bool:
    return all(i["answer"] for i in items)


def encode(items: List[dict], tokenizer, max_len: int, pad_to: Optional[int] = None) -> dict:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (prompt and padding masked)."""
    import torch

    rows = []
    for it in items:
        prompt = tokenizer(it["prompt"], add_special_tokens=True)["input_ids"]
        answer = it["answer"]
        sep = "" if not answer or it["prompt"].endswith((" ", "\n")) or answer.startswith((" ", "\n")) else " "
        cont = tokenizer(sep + answer, add_special_tokens=False)["input_ids"] if answer else []
        ids = (prompt + cont)[:max_len]
        labels = ([IGNORE] * len(prompt) + cont)[:max_len]
        rows.append((ids, labels))
    width = pad_to or max(len(i) for i, _ in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    return {"input_ids": torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows]),
            "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows]),
            "labels": torch.tensor([l + [IGNORE] * (width - len(l)) for _, l in rows])}
