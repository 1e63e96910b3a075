"""What a causal LM computes for a context, read the way lm-eval reads it: last-token features and log-likelihoods.

The feature of a context is the final decoder layer's hidden state at the context's last token, after the final
norm: exactly what ``lm_head`` multiplies to score the next token, so a label that is one token is read from it
by one linear layer. Contexts and continuations are split into tokens like lm-eval 0.4.13's HF backend
(``_encode_pair``: a trailing space of the context moves to the continuation; no special tokens added), so the
numbers here match what lm-eval scores.
"""

from typing import List, Sequence, Tuple


def load_causal_lm(path: str, device: str = "cpu"):
    """(model in eval mode, float32, on ``device``; its tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    return model, tokenizer


def encode_pair(tokenizer, context: str, continuation: str) -> Tuple[List[int], List[int]]:
    """Token ids of ``context`` and ``continuation`` as lm-eval splits them."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation, context = context[-spaces:] + continuation, context[:-spaces]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    return ctx, whole[len(ctx):]


def _padded(rows: Sequence[List[int]], pad: int, device):
    import torch

    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device)
    return ids, mask


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)


def last_token_features(model, tokenizer, contexts: Sequence[str], batch_size: int = 32, progress=None):
    """(n, hidden) float32 CPU tensor: the post-norm final hidden state at each context's last token."""
    import torch

    device = next(model.parameters()).device
    trunk, out = model.get_decoder(), []
    rows = [encode_pair(tokenizer, c, "")[0] for c in contexts]
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            ids, mask = _padded(rows[i:i + batch_size], _pad_id(tokenizer), device)
            hidden = trunk(input_ids=ids, attention_mask=mask).last_hidden_state
            last = mask.sum(1) - 1
            out.append(hidden[torch.arange(len(last), device=device), last].float().cpu())
            if progress is not None:
                progress.update(len(last))
    return torch.cat(out) if out else torch.zeros(0, model.config.hidden_size)


def continuation_loglikelihoods(model, tokenizer, pairs: Sequence[Tuple[str, str]], batch_size: int = 32):
    """Sum of the continuation tokens' log-probabilities for each (context, continuation): lm-eval's ``acc``
    score of a choice."""
    import torch

    device = next(model.parameters()).device
    encoded = [encode_pair(tokenizer, c, x) for c, x in pairs]
    scores = []
    with torch.no_grad():
        for i in range(0, len(encoded), batch_size):
            chunk = encoded[i:i + batch_size]
            ids, mask = _padded([(c + x)[:-1] for c, x in chunk], _pad_id(tokenizer), device)
            logprobs = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
            for row, (c, x) in enumerate(chunk):
                positions = torch.arange(len(c) - 1, len(c) - 1 + len(x), device=device)
                scores.append(float(logprobs[row, positions, torch.tensor(x, device=device)].sum()))
    return scores
