"""ProDistill's per-block distillation (Xu et al. 2025, "Scalable Model Merging with Progressive Layer-wise
Distillation").

One decoder block at a time: the merged block is ``W0 + Σ_i λ_{i,t} τ_{i,t}`` (base ``W0``, expert i's task vector
``τ_i`` of tensor t, one scalar ``λ`` per expert and tensor: the layer-wise coefficients the method learns), started
at task arithmetic (every ``λ = init_lambda``) and trained by Adam on

    L(λ) = 1/K Σ_i  1/(N_i d) Σ_{valid tokens of expert i} || f(W(λ); ĥ_i) - f(W_i; h_i) ||²

``ĥ_i``: expert i's data at this block's input inside the *merged* model (the merged prefix, so each block corrects
what the blocks before it left: the progressive part), ``h_i``: the same data inside expert i itself (the teacher),
``N_i`` its valid tokens, ``d`` the hidden size. The chain engine (``chain.py``) feeds both streams and pushes the
merged stream through the finished block; this module only trains one block.
"""

from typing import Dict, List, Sequence, Tuple

import torch
from torch.func import functional_call

from wildmerge.errors import WildmergeError


def combine(base: Dict[str, torch.Tensor], vectors: Sequence[Dict[str, torch.Tensor]], lam: torch.Tensor,
            names: Sequence[str]) -> Dict[str, torch.Tensor]:
    """``{t: W0_t + Σ_i lam[i, j] τ_i,t}`` with ``t = names[j]`` (differentiable in ``lam``)."""
    out = {}
    for j, n in enumerate(names):
        w = base[n]
        for i, v in enumerate(vectors):
            w = w + lam[i, j] * v[n]
        out[n] = w
    return out


def _float(kwargs: dict) -> dict:
    """The layer's keyword arguments with floating tensors (RoPE cos / sin, additive masks) in float32."""
    def cast(v):
        if torch.is_tensor(v) and v.is_floating_point():
            return v.float()
        if isinstance(v, tuple):
            return tuple(cast(x) for x in v)
        return v

    return {k: cast(v) for k, v in kwargs.items()}


def block_loss(layer: torch.nn.Module, params: Dict[str, torch.Tensor],
               data: Sequence[Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]]],
               backward: bool) -> float:
    """L above for merged block tensors ``params`` (module-relative names); ``data[i]`` holds expert i's batches as
    (merged-stream input, teacher output, valid-token mask, layer kwargs). With ``backward`` the gradient of L
    is accumulated batch by batch (one batch's graph in memory at a time)."""
    total, experts = 0.0, len(data)
    for batches in data:
        tokens = sum(int(valid.sum()) for _, _, valid, _ in batches)
        for x, target, valid, kwargs in batches:
            out = functional_call(layer, params, (x,), _float(kwargs))
            out = out[0] if isinstance(out, tuple) else out
            diff = (out - target)[valid]
            loss = diff.pow(2).sum() / (tokens * out.shape[-1] * experts)
            if backward:
                loss.backward(retain_graph=True)
            total += float(loss.detach())
    return total


def distill_block(layer: torch.nn.Module, base: Dict[str, torch.Tensor], vectors: List[Dict[str, torch.Tensor]],
                  data, *, steps: int, lr: float, init_lambda: float) -> Tuple[Dict[str, torch.Tensor], Dict]:
    """Train one block's coefficients by ``steps`` Adam steps; returns the merged tensors (float32, module-relative
    names, detached) and a report row (the loss at the start and at the end, the coefficients)."""
    names = sorted(base)
    base = {n: base[n].float() for n in names}
    vectors = [{n: v[n].float() for n in names} for v in vectors]
    lam = torch.full((len(vectors), len(names)), float(init_lambda), dtype=torch.float32,
                     device=base[names[0]].device, requires_grad=True)
    optimizer = torch.optim.Adam([lam], lr=lr)
    losses = []
    with torch.enable_grad():
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            losses.append(block_loss(layer, combine(base, vectors, lam, names), data, backward=True))
            optimizer.step()
    with torch.no_grad():
        merged = combine(base, vectors, lam.detach(), names)
        final = block_loss(layer, merged, data, backward=False) if steps else None
    if final is not None and not all(torch.isfinite(t).all() for t in merged.values()):
        raise WildmergeError(f"prodistill: the distillation diverged (NaN/Inf weights) at lr={lr:g}; lower lr in the "
                             f"recipe's parameters (e.g. lr: {lr / 10:g})")
    report = {"loss_start": losses[0] if losses else None, "loss_end": final, "steps": steps,
              "lambda": {n: lam.detach()[:, j].tolist() for j, n in enumerate(names)}}
    return merged, report
