"""Forward and backward passes of one model on calibration items (Zhou et al., arXiv 2601.22285, §3.4-3.5), LLM port:

- activation: the last decoder block's output (the residual stream before the final norm), averaged over the
  non-pad tokens of each item except position 0 (attention-sink activations would dominate the mean), then summed
  over items (the caller divides by the item count of the pooled set);
- encoder gradient: d/dtheta of the exact per-item mean of the answer-token cross-entropy, over every parameter in
  the weight metrics' scope (the LM head is backpropagated through but not part of the vector);
- input gradient: d loss / d input embeddings of each item, zero at pad positions, padded to ``max_len``.
"""

from typing import Dict, List

from wildmerge.errors import WildmergeError


def load_model(path: str, device: str = "cpu"):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    for m in model.modules():  # dropout off: two identical passes must give identical gradients
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


def last_block(model):
    import torch

    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers):
            return layers[-1]
    raise WildmergeError(f"{type(model).__name__}: no decoder-layer list (`.layers`) to hook for activations")


def _token_ce(logits, labels):
    """(per-item mean cross-entropy over answer tokens, answer-token counts)."""
    import torch.nn.functional as F

    shift_logits, shift_labels = logits[:, :-1].float(), labels[:, 1:]
    ce = F.cross_entropy(shift_logits.transpose(1, 2), shift_labels, ignore_index=-100, reduction="none")
    count = (shift_labels != -100).sum(1)
    return ce.sum(1) / count.clamp(min=1), count


def activation_sum(model, batches: List[dict]):
    """(sum over items of the per-item token mean, float64 (d,); number of items)."""
    import torch

    store = {}
    hook = last_block(model).register_forward_hook(
        lambda m, i, o: store.__setitem__("h", o[0] if isinstance(o, tuple) else o))
    total, n = None, 0
    model.eval()
    try:
        with torch.no_grad():
            for b in batches:
                dev = next(model.parameters()).device
                model(input_ids=b["input_ids"].to(dev), attention_mask=b["attention_mask"].to(dev))
                h = store["h"].double()
                mask = b["attention_mask"].to(dev).double().clone()
                mask[:, 0] = 0
                per_item = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
                s = per_item.sum(0).cpu()
                total = s if total is None else total + s
                n += h.shape[0]
    finally:
        hook.remove()
    return total, n


def encoder_gradient(model, batches: List[dict], in_scope) -> Dict[str, "object"]:
    """{parameter name: float32 gradient} of (1/N) sum_n loss_n over the in-scope parameters."""

    n_items = sum(b["input_ids"].shape[0] for b in batches)
    names = {p: n for n, p in model.named_parameters()}
    model.train()
    model.zero_grad(set_to_none=True)
    dev = next(model.parameters()).device
    for b in batches:
        out = model(input_ids=b["input_ids"].to(dev), attention_mask=b["attention_mask"].to(dev))
        loss_n, count = _token_ce(out.logits, b["labels"].to(dev))
        if int((count == 0).sum()):
            raise WildmergeError("a calibration item has no answer token left after truncation; raise max_len")
        (loss_n.sum() / n_items).backward()
    grads = {names[p]: p.grad.detach().float().cpu().clone() for p in model.parameters()
             if p.grad is not None and in_scope(names[p])}
    model.zero_grad(set_to_none=True)
    model.eval()
    return grads


def input_gradient(model, batches: List[dict]):
    """(items, max_len, d) float32: each item's gradient of its own answer-token loss w.r.t. its input embeddings."""
    import torch

    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    out = []
    try:
        for b in batches:
            dev = next(model.parameters()).device
            emb = model.get_input_embeddings()(b["input_ids"].to(dev)).detach().float().requires_grad_(True)
            logits = model(inputs_embeds=emb, attention_mask=b["attention_mask"].to(dev)).logits
            loss_n, _ = _token_ce(logits, b["labels"].to(dev))
            (g,) = torch.autograd.grad(loss_n.sum(), emb)
            out.append((g * b["attention_mask"].to(dev)[..., None]).float().cpu())
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
    return torch.cat(out)
