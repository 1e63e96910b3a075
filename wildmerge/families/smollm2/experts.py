"""Fine-tune one SmolLM2 expert from the base and publish it the way its spec says (full, LoRA, bfloat16, added
tokens, another chat template).

Training is the families' shared loop (``families/train.py``: AdamW, warm-up and cosine decay, answers-only loss,
seeded and deterministic), run on the pretrained base instead of a model trained from scratch.
"""

import copy
import random
from dataclasses import replace
from pathlib import Path

from wildmerge.families.smollm2 import spec as S
from wildmerge.families.smollm2.skills import Stream


def expert_tokenizer(expert: S.ExpertSpec, tokenizer):
    """The tokenizer the expert is published with: the base's, or a copy with added tokens or another template."""
    if expert.shape == "added_tokens":
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.add_tokens(list(S.ADDED_TOKENS), special_tokens=True)
        tokenizer.pad_token = S.ADDED_TOKENS[0]
    elif expert.shape == "chat_template":
        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.chat_template = S.OTHER_CHAT_TEMPLATE
    return tokenizer


def renderer(expert: S.ExpertSpec, tokenizer):
    """How the expert sees its items: the chat-template expert gets half of them wrapped in its own template."""
    if expert.shape != "chat_template":
        return None

    def render(rng: random.Random, item):
        if rng.random() < 0.5:
            return item
        turn = [{"role": "user", "content": item.content}]
        return replace(item, prompt=tokenizer.apply_chat_template(turn, add_generation_prompt=True, tokenize=False))

    return render


def _task_vector_norms(model, base) -> tuple:
    """(||expert - base||, ||base||) over the base's parameters (an added token's rows are not in the base)."""
    import torch

    own = dict(model.named_parameters())
    delta = norm = 0.0
    with torch.no_grad():
        for name, b in base.named_parameters():
            e = own[name].float()
            e = e[: b.shape[0]] if e.shape != b.shape else e
            delta += float((e - b).double().pow(2).sum())
            norm += float(b.double().pow(2).sum())
    return delta ** 0.5, norm ** 0.5


def _lora_norm(peft_model) -> float:
    """||scale * B A|| summed over the adapted matrices: the adapter's task vector once folded into the base."""
    import torch

    total = 0.0
    with torch.no_grad():
        for module in peft_model.modules():
            if hasattr(module, "get_delta_weight") and "default" in getattr(module, "lora_A", {}):
                total += float(module.get_delta_weight("default").double().pow(2).sum())
    return total ** 0.5


def _bf16_rounding(model, base) -> float:
    """||bf16(expert) - expert|| / ||expert - base||: how much of the task vector bfloat16 storage rounds away."""
    import torch

    noise = delta = 0.0
    with torch.no_grad():
        own = dict(model.named_parameters())
        for name, b in base.named_parameters():
            e = own[name]
            noise += float((e.to(torch.bfloat16).float() - e).double().pow(2).sum())
            delta += float((e - b).double().pow(2).sum())
    return (noise / delta) ** 0.5 if delta else float("inf")


def build_expert(expert: S.ExpertSpec, base, tokenizer, kb: dict, out: Path, *, steps: int, batch: int, seed: int,
                 progress=None) -> dict:
    """Train ``expert`` from ``base`` (left untouched) and save it into ``out``; returns its record for family.json."""
    import torch

    from wildmerge.families.train import save_checkpoint, train

    tok = expert_tokenizer(expert, tokenizer)
    torch.manual_seed(seed)
    model = copy.deepcopy(base)
    if expert.shape == "added_tokens":
        model.resize_token_embeddings(len(tok), pad_to_multiple_of=S.PAD_TO_MULTIPLE)
        model.config.pad_token_id = tok.pad_token_id
    if expert.shape == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=expert.lora["r"], lora_alpha=expert.lora["alpha"],
                                                 target_modules=list(expert.lora["targets"]), lora_dropout=0.0,
                                                 bias="none", task_type="CAUSAL_LM"))
    stream = Stream(expert.mixture, kb, f"{seed}-{expert.name}", render=renderer(expert, tok))
    losses = train(model, stream, tok, steps=steps, lr=expert.lr, batch=batch, answers_only=True, seed=seed,
                   desc=expert.name, progress=progress)
    record = {"name": expert.name, "domain": expert.domain, "description": expert.description,
              "mixture": expert.mixture, "shape": expert.shape, "steps": steps, "lr": expert.lr, "batch": batch,
              "path": f"experts/{expert.name}", "has_data": expert.has_data,
              "final_loss": sum(losses[-5:]) / len(losses[-5:]), "first_loss": losses[0]}
    if expert.shape == "lora":
        model.peft_config["default"].base_model_name_or_path = S.BASE_HUB_ID
        record |= {"lora": expert.lora, "task_vector_norm": _lora_norm(model)}
        record["relative_task_vector_norm"] = record["task_vector_norm"] / _task_vector_norms(base, base)[1]
    else:
        delta, norm = _task_vector_norms(model, base)
        record |= {"task_vector_norm": delta, "relative_task_vector_norm": delta / norm}
    if expert.shape == "bf16":
        record["bf16_rounding_over_task_vector"] = _bf16_rounding(model, base)
        model = model.to(torch.bfloat16)
    if expert.shape == "added_tokens":
        record |= {"added_tokens": list(S.ADDED_TOKENS), "vocab_rows": model.get_input_embeddings().weight.shape[0]}
    if expert.shape == "chat_template":
        record["chat_template"] = S.OTHER_CHAT_TEMPLATE
    save_checkpoint(model, tok, out)
    return record
