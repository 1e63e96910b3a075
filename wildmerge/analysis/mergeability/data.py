"""Each expert's calibration items for the activation and gradient metrics (Zhou et al., arXiv 2601.22285, §3.4-3.5).

An expert's ``calibration:`` (pool file) is a ``.jsonl`` / ``.json`` file, or ``{data, prompt_field, answer_field,
text_field}``. Records with a prompt and an answer are labelled (loss on the answer tokens only); records with only
text serve the activation metrics. Each expert's items are a seeded sample that depends only on that expert and the
seed (not on the pool or the pair order), drawn from the expert's own data, never from the evaluation suite.
"""

import json
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


def read_items(expert: str, spec, relative_to: Optional[Path] = None) -> List[Dict[str, str]]:
    """All records of an expert's calibration source as ``{"prompt", "answer"}`` (answer "" when unlabelled)."""
    if spec is None:
        raise ConfigError(f"expert {expert!r} has no calibration data: activation and gradient metrics need each "
                          f"expert's own items. Add 'calibration: path/to/data.jsonl' (records with prompt and answer "
                          f"fields) under that expert in the pool file, or use --groups weights")
    spec = {"data": spec} if isinstance(spec, str) else dict(spec)
    unknown = set(spec) - {"data", "prompt_field", "answer_field", "text_field", "n_samples", "seq_len", "split",
                           "subset", "seed", "min_tokens", "batch_size"}
    if unknown:
        raise ConfigError(f"calibration of {expert!r}: unknown key(s) {sorted(unknown)}")
    path = Path(str(spec.get("data", ""))).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if path.suffix not in (".jsonl", ".json") or not path.is_file():
        raise ConfigError(f"calibration of {expert!r}: {path} is not a local .jsonl/.json file; the mergeability "
                          f"metrics read local files with prompt and answer fields")
    text = path.read_text()
    records = json.loads(text) if path.suffix == ".json" else [json.loads(l) for l in text.splitlines() if l.strip()]
    pf, af, tf = spec.get("prompt_field", "prompt"), spec.get("answer_field", "answer"), spec.get("text_field", "text")
    items = []
    for r in records:
        if pf in r and af in r:
            items.append({"prompt": str(r[pf]), "answer": str(r[af])})
        elif tf in r:
            items.append({"prompt": str(r[tf]), "answer": ""})
    if not items:
        raise ConfigError(f"calibration of {expert!r}: no record in {path} has {pf!r}/{af!r} or {tf!r} fields")
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
