"""Fisher merging (Matena & Raffel, "Merging Models with Fisher-Weighted Averaging", NeurIPS 2022).

Each expert's diagonal empirical Fisher on its own data, ``F_i = 1/N Σ_n (∂ log p_θi(x_n) / ∂θ)²`` with
``log p(x_n)`` the log-likelihood of the whole sequence n (the sum over its next-token predictions), then per
parameter ``θ = Σ_i (F_i + floor) θ_i / Σ_i (F_i + floor)``. The floor (``fisher_floor``) is added to every Fisher
alike, so a parameter no expert's data moves (all F_i = 0) falls back to the plain average.

One backward pass per sequence (per-example squared gradients, not the square of a batch's gradient): the cost is
N backward passes per expert, whatever the model's size; one expert is in memory at a time, with two float32
accumulators of the model's size. Fisher and gradients are float32 whatever the recipe's dtype.
"""

import logging
from typing import Callable, Dict, List, Sequence

import torch
from tqdm.auto import tqdm

from wildmerge.checkpoints import on_base_tokens
from wildmerge.errors import WildmergeError
from wildmerge.plugins.layerwise.io import WholeModelJob, load_eval_model, parameter_aliases

log = logging.getLogger("wildmerge")


class FisherAverage:
    """Σ_i (F_i + floor) θ_i and Σ_i (F_i + floor) per tensor, one expert at a time (float32 or wider)."""

    def __init__(self, floor: float):
        self.floor = float(floor)
        self.num: Dict[str, torch.Tensor] = {}
        self.den: Dict[str, torch.Tensor] = {}

    def add(self, name: str, theta: torch.Tensor, fisher: torch.Tensor) -> None:
        dt = torch.promote_types(theta.dtype, torch.float32)  # float32 at least (float64 stays float64)
        f = fisher.to(dt) + self.floor
        if name not in self.num:
            self.num[name], self.den[name] = f * theta.to(dt), f.clone()
        else:
            self.num[name].addcmul_(f, theta.to(dt))
            self.den[name].add_(f)

    def result(self, name: str) -> torch.Tensor:
        """The merged tensor (0/0 where floor is 0 and no expert has Fisher: the engine refuses that)."""
        return self.num[name] / self.den[name]


def fisher_merge(weights: Sequence[torch.Tensor], fishers: Sequence[torch.Tensor], *, floor: float) -> torch.Tensor:
    """One tensor merged from every expert's weight and diagonal Fisher (the engine's rule, for callers and tests)."""
    acc = FisherAverage(floor)
    for theta, f in zip(weights, fishers):
        acc.add("t", theta, f)
    return acc.result("t")


def sequences(batches: List[tuple], limit: int) -> List[torch.Tensor]:
    """The first ``limit`` calibration sequences without their padding (the loader pads on the right)."""
    out = []
    for ids, mask in batches:
        for row, m in zip(ids, mask):
            out.append(row[: int(m.sum())])
            if len(out) == limit:
                return out
    return out


def diagonal_fisher(model: torch.nn.Module, seqs: Sequence[torch.Tensor], device: str,
                    progress: bool = False, desc: str = "Fisher") -> Dict[str, torch.Tensor]:
    """``{parameter name: 1/N Σ_n grad_n²}`` with ``grad_n`` the gradient of sequence n's log-likelihood (tied
    parameters appear once, under their first name)."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    fisher = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in params.items()}
    for ids in tqdm(seqs, desc=desc, disable=not progress, leave=False):
        model.zero_grad(set_to_none=True)
        ids = ids.to(device)[None]
        logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
        loglik = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).sum()
        loglik.backward()
        for n, p in params.items():
            if p.grad is not None:
                fisher[n].addcmul_(p.grad, p.grad)
    model.zero_grad(set_to_none=True)
    for f in fisher.values():
        f.div_(max(len(seqs), 1))
    return fisher


def _expert_fisher(job: WholeModelJob, i: int, names: List[str], acc: FisherAverage) -> Dict:
    """Expert i's Fisher on its own data, added to ``acc`` on the base's tokens; returns its report row."""
    expert = job.experts[i]
    seqs = sequences(job.batches[i], job.settings.fisher_samples)
    if len(seqs) < job.settings.fisher_samples:
        log.warning("fisher: %s has %d calibration sequences, fewer than fisher_samples=%d; its Fisher uses those "
                    "(raise calibration n_samples to use more)", expert.name, len(seqs), job.settings.fisher_samples)
    if expert.rows is not None:  # a resized vocabulary: the base's token ids at the expert's rows
        seqs = [expert.rows[s] for s in seqs]
    model = load_eval_model(expert.path, job.device)  # dropout off: the Fisher of the model as it predicts
    fisher = diagonal_fisher(model, seqs, job.device, job.progress, f"Fisher {expert.path.name}")
    alias = parameter_aliases(model)
    state = dict(model.named_parameters(remove_duplicate=False))
    total, zero, count = 0.0, 0, 0
    for n in names:
        if n not in alias:
            continue
        f = on_base_tokens(fisher[alias[n]].cpu(), expert.rows, expert.vocab_size)
        theta = on_base_tokens(state[n].detach().cpu(), expert.rows, expert.vocab_size)
        acc.add(n, theta, f)
        total += float(f.double().sum())
        zero += int((f == 0).sum())
        count += f.numel()
    del model, fisher, state
    return {"model": expert.name, "samples": len(seqs), "fisher_sum": total,
            "fisher_zero_fraction": zero / max(count, 1)}


def run_fisher(job: WholeModelJob, save_tensor: Callable[[str, torch.Tensor], None]) -> Dict:
    """Merge every tensor of ``job`` and hand it to ``save_tensor``; returns the report."""
    names = job.experts[0].names()
    acc = FisherAverage(job.settings.fisher_floor)
    rows = [_expert_fisher(job, i, names, acc) for i in range(len(job.experts))]
    for n in names:
        if n in acc.num:
            merged = acc.result(n)
            if not torch.isfinite(merged).all():
                raise WildmergeError(
                    f"fisher: the merged {n} has NaN/Inf: no expert's data moves some of its entries (all Fishers 0) "
                    f"and fisher_floor is 0, or a model's weights hold NaN/Inf; set fisher_floor > 0 (e.g. 1e-6)")
            save_tensor(n, merged)
        else:  # a tensor that is no parameter (none in the supported decoders): the plain mean
            ts = [e.get(n) for e in job.experts]
            save_tensor(n, torch.stack([t.float() for t in ts]).mean(0) if ts[0].is_floating_point() else ts[0])
    return {"experts": rows} if job.settings.diagnostics else {}
