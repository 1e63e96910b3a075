"""``data: generate``: per-expert text sampled from the expert itself, for pools without data.

RegMean and Chain of Merges need inputs from each expert's own task; public checkpoints come without their training
data, and shared data makes Chain of Merges plain averaging (Buzzega et al., arXiv 2508.21421). Text an expert
writes from neutral prompts follows its own fine-tuned distribution, so it is a stated stand-in for its data. It is
drawn with a fixed seed from a fixed prompt set and kept in the run folder under a key of the expert's weights and
the settings, so every merge of a run (and every rerun) uses the same text; the machine's data cache keeps a copy,
so the next run with the same weights and settings copies it instead of drawing it again.
"""

import hashlib
import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

# Neutral openings: a chat model, a code model and a maths model each continue them in their own way.
DEFAULT_PROMPTS = ["", "Q:", "Question:", "The", "Here is", "In this", "Answer:", "1.", "def ", "Let"]


class GenerateSpec(BaseModel):
    """How much text to draw from each expert, and how."""

    model_config = ConfigDict(extra="forbid")

    n_samples: int = Field(64, ge=1)
    max_new_tokens: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int = 0
    prompts: list[str] = Field(default_factory=lambda: list(DEFAULT_PROMPTS), min_length=1)


def _weights_key(model_path) -> str:
    """Identity of a checkpoint's weights: names, sizes and modification times of its files."""
    files = sorted(p for p in Path(model_path).iterdir() if p.is_file() and p.suffix in (".safetensors", ".json"))
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def cache_name(expert: str, model_path, spec: GenerateSpec) -> str:
    key = json.dumps([_weights_key(model_path), spec.model_dump()], sort_keys=True)
    return f"{expert}.generated-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsonl"


def sample_texts(model_path, spec: GenerateSpec, progress: bool = False) -> list[dict]:
    """``spec.n_samples`` continuations of the prompts (round robin), each prompt seeded on its own."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    counts = [spec.n_samples // len(spec.prompts) + (i < spec.n_samples % len(spec.prompts))
              for i in range(len(spec.prompts))]
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    records = []
    for i, (prompt, k) in enumerate(tqdm(list(zip(spec.prompts, counts)), desc=f"generating from {Path(model_path).name}",
                                         unit="prompt", disable=not progress)):
        if k == 0:
            continue
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] if prompt else []
        ids = torch.tensor([[start] + ids] if start is not None else [ids or [pad]])
        torch.manual_seed(spec.seed * 1_000_003 + i)
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                 temperature=spec.temperature, top_p=spec.top_p, max_new_tokens=spec.max_new_tokens,
                                 num_return_sequences=k, pad_token_id=pad)
        for row in out:
            text = tokenizer.decode(row[1 if start is not None else 0:], skip_special_tokens=True)
            records.append({"text": text, "prompt": prompt})
    return records


def as_items(records: list) -> list[dict]:
    """Generated records as labelled items (``labelled: generate``, the gradient metrics): the first half of each
    text's words (at least its neutral opening) as the prompt, the expert's own continuation as the answer. The
    generator is the expert itself, so the loss on the answer is the loss on what the expert writes; records too
    short to split (fewer than two words beyond the opening) are left out."""
    items = []
    for r in records:
        text, opening = r["text"], len(r.get("prompt", "").split())
        starts = [m.start() for m in re.finditer(r"\S+", text)]
        cut = max(opening, len(starts) // 2)
        if cut < 1 or cut >= len(starts):
            continue
        items.append({"prompt": text[:starts[cut]].rstrip(), "answer": text[starts[cut]:].strip()})
    return items


def ensure_generated(expert: str, model_path, spec: GenerateSpec, folder, progress: bool = True) -> Path:
    """The file of ``expert``'s generated text in ``folder`` (a run's own copy: the run carries its inputs).

    Drawn once per weights + settings on this machine: a run that finds the text in the shared data cache
    (``cache.cache_root()/generated``) copies it instead of loading the model (SmolLM2's generalist: 76 s on 2
    cores per run otherwise), and text drawn for a run is kept there too; a cache that cannot be written costs
    only the reuse. Concurrent commands wait for the one that writes."""
    from wildmerge.atomic import write_text
    from wildmerge.errors import WildmergeError
    from wildmerge.expert_data.cache import cache_root
    from wildmerge.locks import wait_claim

    folder = Path(folder)
    name = cache_name(expert, model_path, spec)
    path = folder / name
    if path.is_file():
        return path
    shared = cache_root() / "generated" / name
    with wait_claim(folder / f".{name}.lock"):
        if not path.is_file():
            text = shared.read_text() if shared.is_file() else None
            if text is None:
                text = "".join(json.dumps(r) + "\n" for r in sample_texts(model_path, spec, progress=progress))
            write_text(path, text)
            if not shared.is_file():
                try:
                    shared.parent.mkdir(parents=True, exist_ok=True)
                    write_text(shared, text)
                except (OSError, WildmergeError):  # a read-only or full cache: the run has its copy
                    pass
    return path
