"""The training loop of both embedded families: the demo's base pre-trained from scratch, every expert and joint
reference fine-tuned from a base (AdamW, warm-up and cosine decay), and how a checkpoint is saved.

Deterministic on CPU: seeded data streams, ``torch.manual_seed``, ``torch.use_deterministic_algorithms`` and a
fixed thread count, so the same seed gives the same weights bit for bit on one machine.
Pre-training learns every token; fine-tuning learns the answers only (``prompt`` tokens are masked), like SFT.
"""

import contextlib
import math
from pathlib import Path

IGNORE = -100


@contextlib.contextmanager
def deterministic(threads: int):
    """Deterministic kernels and a fixed thread count for the block; the caller's settings come back after."""
    import torch

    from wildmerge.threads import torch_threads

    old_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with torch_threads(threads):
            yield
    finally:
        torch.use_deterministic_algorithms(old_det)


def make_batch(items, tokenizer, answers_only: bool):
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (padding and, optionally, prompts masked)."""
    import torch

    rows = []
    for item in items:
        prompt = tokenizer(item.prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(" " + item.answer + "\n", add_special_tokens=False)["input_ids"]
        ids = prompt + answer + [tokenizer.eos_token_id]
        labels = ([IGNORE] * len(prompt) if answers_only else list(prompt)) + answer + [tokenizer.eos_token_id]
        rows.append((ids, labels))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [IGNORE] * (width - len(lab)) for _, lab in rows])
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in rows])
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def train(model, stream, tokenizer, *, steps: int, lr: float, batch: int, answers_only: bool, seed: int,
          desc: str, weight_decay: float = 0.0, progress=None) -> list:
    """AdamW with linear warm-up and cosine decay to 10 %; returns the loss of every step.

    ``progress`` is an optional tqdm bar advanced once per step (one bar for the whole build).
    """
    import torch

    torch.manual_seed(seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    warmup = max(1, steps // 10)

    def schedule(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    losses = []
    for step in range(steps):
        loss = model(**make_batch([next(stream) for _ in range(batch)], tokenizer, answers_only)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if progress is not None:
            progress.set_postfix_str(f"{desc} loss {losses[-1]:.3f}", refresh=False)
            progress.update(1)
    model.eval()
    return losses


def save_checkpoint(model, tokenizer, path) -> None:
    """Save a model (or a PEFT adapter) and its tokenizer as safetensors, without a progress bar per shard."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # one bar for the whole build, not one per shard
    try:
        # an adapter: no embedding layers to save, and no look-up of its base's config on the hub to find that out
        extra = {"save_embedding_layers": False} if hasattr(model, "peft_config") else {}
        model.save_pretrained(str(path), safe_serialization=True, **extra)
        # how it was loaded (HF_HUB_OFFLINE), not what it is: left out, so the file is the same online and offline
        tokenizer.init_kwargs.pop("local_files_only", None)
        tokenizer.save_pretrained(str(path))
    finally:
        if shown:
            logging.enable_progress_bar()
    (Path(path) / "README.md").unlink(missing_ok=True)  # PEFT's empty model card names the build's temporary folder
