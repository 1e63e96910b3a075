"""The trained Localize-and-Stitch (He et al. 2024, "Localize-and-Stitch: Efficient Model Merging via Sparse Task
Arithmetic", arXiv 2408.13656): the paper's data-based Localize, then the dataless method's Stitch.

Localize, per expert t on its own data: a real-valued score ``S_t`` per parameter, the model
``theta_0 + sigmoid(S_t) * tau_t`` and

    min_S  CE(theta_0 + sigmoid(S) * tau_t; expert t's batches) + l1 * sum sigmoid(S)

(CE: the mean next-token cross-entropy over the batch's valid tokens), ``steps`` Adam steps at ``lr`` over the
expert's calibration batches in turn (no random draw: the calibration's ``seed`` picks the texts). ``S`` starts at
``+init_logit`` on the top ``density`` of ``|tau_t|`` over the whole model and at ``-init_logit`` elsewhere (the
paper's init). The mask is then binarised: the top ``density`` of ``S`` over the whole model (``top_density``, so the
stated share holds) or ``sigmoid(S) > 0.5`` (``sigmoid``, the paper's rounding). Stitch: the masked task vectors are
combined as the dataless ``localize_stitch`` does (``plugins/localize_stitch.Stitch``: overlaps averaged, the rest
keeps the base). Tensors that are no parameter keep the base.

Cost: ``steps`` forward and backward passes of the whole model per expert, one expert at a time, with six
model-sized float32 tensors besides the model (``theta_0``, ``tau``, ``S``, its gradient, Adam's two moments).
"""

import logging
from typing import Callable, Dict, List

import torch
import torch.nn.functional as F
from torch.func import functional_call
from tqdm.auto import tqdm

from wildmerge.plugins.layerwise.io import WholeModelJob, load_eval_model, parameter_aliases
from wildmerge.plugins.layerwise.methods import LocalizeTrainedParams
from wildmerge.plugins.localize_stitch import Stitch

log = logging.getLogger("wildmerge")


def top_share(values: Dict[str, torch.Tensor], density: float) -> Dict[str, torch.Tensor]:
    """Boolean masks of the ``int(density * N)`` (at least 1) largest entries over all tensors together."""
    flat = torch.cat([v.detach().flatten() for v in values.values()])
    k = max(1, int(density * flat.numel()))
    keep = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
    keep[torch.topk(flat, k, sorted=False).indices] = True
    out, start = {}, 0
    for n, v in values.items():
        out[n] = keep[start:start + v.numel()].view_as(v)
        start += v.numel()
    return out


def initial_scores(tau: Dict[str, torch.Tensor], density: float, init_logit: float) -> Dict[str, torch.Tensor]:
    """The paper's init: ``+init_logit`` on the top ``density`` of ``|tau|`` over the model, ``-init_logit``
    elsewhere."""
    top = top_share({n: t.abs() for n, t in tau.items()}, density)
    return {n: torch.where(m, init_logit, -init_logit).to(tau[n].dtype) for n, m in top.items()}


def lm_loss(model: torch.nn.Module, params: Dict[str, torch.Tensor], ids: torch.Tensor,
            mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the valid (non-padding) tokens of one batch, with ``params`` in the model."""
    logits = functional_call(model, params, args=(), kwargs={"input_ids": ids, "attention_mask": mask,
                                                              "use_cache": False}).logits[:, :-1]
    valid = mask[:, 1:].bool()
    return F.cross_entropy(logits[valid].float(), ids[:, 1:][valid])


def train_scores(model: torch.nn.Module, theta0: Dict[str, torch.Tensor], tau: Dict[str, torch.Tensor],
                 batches: List[tuple], settings: LocalizeTrainedParams, progress: bool = False,
                 desc: str = "Localize") -> tuple:
    """Localize for one expert: the trained scores ``S`` (detached) and a report row (the task loss at the first
    and the last step, the mean of ``sigmoid(S)`` after the last)."""
    scores = {n: s.requires_grad_() for n, s in initial_scores(tau, settings.density, settings.init_logit).items()}
    optimizer = torch.optim.Adam(list(scores.values()), lr=settings.lr)
    losses = []
    with torch.enable_grad():
        for step in tqdm(range(settings.steps), desc=desc, disable=not progress, leave=False):
            ids, mask = batches[step % len(batches)]
            gates = {n: torch.sigmoid(s) for n, s in scores.items()}
            task = lm_loss(model, {n: theta0[n] + gates[n] * tau[n] for n in tau}, ids, mask)
            loss = task + settings.l1 * sum(g.sum() for g in gates.values())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(task.detach()))
    scores = {n: s.detach() for n, s in scores.items()}
    total = sum(s.numel() for s in scores.values())
    report = {"task_loss_start": losses[0] if losses else None, "task_loss_end": losses[-1] if losses else None,
              "mask_mean_end": sum(float(torch.sigmoid(s).double().sum()) for s in scores.values()) / total}
    return scores, report


def binarize(scores: Dict[str, torch.Tensor], settings: LocalizeTrainedParams) -> Dict[str, torch.Tensor]:
    """The trained mask as 0 / 1: the top ``density`` of ``S`` over the model, or ``sigmoid(S) > 0.5``."""
    if settings.binarize == "sigmoid":
        return {n: s > 0 for n, s in scores.items()}
    return top_share(scores, settings.density)


def _expert(job: WholeModelJob, i: int, model, theta0, stitch: Dict[str, Stitch]) -> Dict:
    """Localize expert i on its own data and add its masked task vector to ``stitch``; returns its report row."""
    expert = job.experts[i]
    tau = {n: expert.get(n, job.device, torch.float32) - t for n, t in theta0.items()}
    batches = [(ids.to(job.device), mask.to(job.device)) for ids, mask in job.batches[i]]
    init = top_share({n: t.abs() for n, t in tau.items()}, job.settings.density)
    scores, row = train_scores(model, theta0, tau, batches, job.settings, job.progress, f"Localize {expert.path.name}")
    masks = binarize(scores, job.settings)
    kept = moved = 0
    for n, m in masks.items():
        stitch.setdefault(n, Stitch()).add(torch.where(m, tau[n], torch.zeros_like(tau[n])))
        kept += int(m.sum())
        moved += int((m != init[n]).sum())
    total = sum(m.numel() for m in masks.values())
    # changed_from_init: entries whose bit differs from the initial mask (those that left plus those that entered)
    return {"model": expert.name, "batches": len(batches), **row, "mask_share": kept / total,
            "changed_from_init": moved / total}


def run_localize_trained(job: WholeModelJob, save_tensor: Callable[[str, torch.Tensor], None]) -> Dict:
    """Merge every tensor of ``job`` and hand it to ``save_tensor``; returns the report."""
    model = load_eval_model(job.base.path, job.device, frozen=True)  # only the scores train
    theta0 = {n: p.detach().float() for n, p in model.named_parameters()}
    alias = parameter_aliases(model)
    stitch: Dict[str, Stitch] = {}
    rows = [_expert(job, i, model, theta0, stitch) for i in range(len(job.experts))]
    for n in job.base.names():
        if n in alias:
            save_tensor(n, (theta0[alias[n]] + stitch[alias[n]].result()).cpu())
        else:  # a tensor that is no parameter (none in the supported decoders): the base's
            save_tensor(n, job.base.get(n))
    claimed = sum(int((s.count >= 2).sum()) for s in stitch.values())
    total = sum(s.count.numel() for s in stitch.values())
    report = {"experts": rows, "overlap_share": claimed / max(total, 1)}
    return report if job.settings.diagnostics else {}

