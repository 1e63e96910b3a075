"""AdaMerging and AdaMerging++ (Yang et al., "AdaMerging: Adaptive Model Merging for Multi-Task Learning", ICLR
2024): merging coefficients of task vectors learned by gradient descent on unlabelled data, the one optimiser of the
recipes ``adamerging`` / ``adamerging_pp`` (this module's engine, ``run_adamerging``, run by the layer-wise driver)
and of ``wildmerge tune --adamerging`` (``analysis/tas/adamerging.py``).

``theta(lambda) = theta_0 + sum_t lambda[t, g(p)] tau_t[p]``. Granularity: ``layer`` (the paper's layer-wise
AdaMerging, one coefficient per expert and decoder block, one more column for every tensor outside the blocks:
embeddings, final norm, output head; the paper's own code gives each parameter tensor its own) or ``task`` (the
paper's task-wise AdaMerging, one coefficient per expert). AdaMerging++ runs the same on TIES-Merging's task vectors
(``ties_vectors``): each ``tau_t`` trimmed to its top ``density`` share by magnitude per tensor (the trim of the
``ties`` recipe, ``plugins/trim.magnitude``), a sign elected per entry from the sum of the trimmed vectors (TIES'
"sum" election, mergekit's ``get_mask``), and each trimmed vector keeps the entries that agree with it (no division
by the agreeing count: the learned coefficients take its place).

Losses: ``entropy`` (AdaMerging's objective): the mean Shannon entropy of the merged model's next-token distribution
over the non-padding tokens of each expert's batch, averaged over the experts; ``tas`` (AdaMerging+TAS, the
reality-check paper's Eq. 6-7): ``mean_t mean_tokens (1 - cos(f(x; theta(lambda)), f(x; theta_t)))`` with ``f`` the
final hidden states, pulling the merge towards each expert on that expert's data.

Adam on ``lambda``, ``batch_size`` (a recipe's ``samples_per_step``) sequences per expert and step drawn
(reshuffled every pass, seeded) from its unlabelled texts; coefficients clamped to ``[0, 1]`` after each step
(``clamp``; the AdaMerging code clamps them).
The paper learns on the tasks' unlabelled test inputs; wildmerge learns on each expert's own data
(``expert_data/``: the pool's ``data:``), as every data-based method here does.
"""

import dataclasses
from typing import Callable, Dict, List, Optional

import torch
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Literal

from wildmerge.errors import ConfigError
from wildmerge.plugins.model_pass import layer_index


class AdaMergingSettings(BaseModel):
    """How the coefficients are learned (defaults: the reality-check paper's AdaMerging+TAS, as ``tune``)."""

    model_config = ConfigDict(extra="forbid")

    loss: Literal["tas", "entropy"] = "tas"
    iterations: int = Field(500, ge=1)
    lr: float = Field(1e-3, gt=0.0)
    batch_size: int = Field(16, ge=1, description="samples per expert and step")
    init: Optional[float] = Field(None, ge=0.0, description="starting coefficient (default 1/T)")
    clamp: bool = True
    seed: int = 0


@dataclasses.dataclass
class Learned:
    """Coefficients ``[T, G]`` (``layer``: G = L + 1, column L the tensors outside the blocks; ``task``: G = 1), with
    the loss after every step and each expert's mean coefficient over the groups after every step (its trajectory:
    the reality-check paper, Fig. 14)."""

    experts: List[str]
    coefficients: torch.Tensor
    losses: List[float]
    trajectory: List[List[float]] = dataclasses.field(default_factory=list)


def groups_of(names: List[str], n_layers: int, granularity: str = "layer") -> Dict[str, int]:
    """{parameter: coefficient column}: its block, or ``n_layers`` outside the blocks (``task``: all 0)."""
    out = {}
    for name in names:
        layer = layer_index(name)
        if layer is not None and layer >= n_layers:
            raise ConfigError(f"parameter {name!r} is in block {layer}, but the model has {n_layers} blocks")
        out[name] = 0 if granularity == "task" else n_layers if layer is None else layer
    return out


def group_names(n_layers: int, granularity: str = "layer") -> List[str]:
    """The columns' names: ``layers.<i>`` and ``other``, or ``all`` for task-wise coefficients."""
    return ["all"] if granularity == "task" else [f"layers.{l}" for l in range(n_layers)] + ["other"]


def merged_parameters(base: Dict[str, torch.Tensor], taus: List[Dict[str, torch.Tensor]], lam: torch.Tensor,
                      groups: Dict[str, int]) -> Dict[str, torch.Tensor]:
    """``theta_0 + sum_t lam[t, g(p)] tau_t[p]`` for every parameter (differentiable in ``lam``)."""
    return {name: b + sum(lam[t, groups[name]] * tau[name] for t, tau in enumerate(taus)) for name, b in base.items()}


def ties_vectors(taus: List[Dict[str, torch.Tensor]], density: float) -> List[Dict[str, torch.Tensor]]:
    """AdaMerging++'s task vectors: per tensor, each trimmed to its top ``density`` by magnitude (the ``ties``
    recipe's trim), a sign elected from the sum of the trimmed vectors (TIES' "sum"; ties count as +), each trimmed
    vector's entries of the other sign set to 0."""
    from mergekit.merge_methods.generalized_task_arithmetic import get_mask

    from wildmerge.plugins.trim import magnitude

    out: List[Dict[str, torch.Tensor]] = [{} for _ in taus]
    for name in taus[0]:
        trimmed = torch.stack([magnitude(tau[name], density) for tau in taus])
        kept = trimmed * get_mask(trimmed, method="sum", mask_dtype=trimmed.dtype)
        for t in range(len(taus)):
            out[t][name] = kept[t]
    return out


def _forward(model, params, ids, mask):
    from torch.func import functional_call

    out = functional_call(model, params, (), {"input_ids": ids, "attention_mask": mask,
                                              "output_hidden_states": True, "use_cache": False})
    return out.hidden_states[-1], out.logits


def entropy_loss(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean Shannon entropy (nats) of the next-token distributions at the kept positions."""
    logp = torch.log_softmax(logits[keep].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


def batch_loss(model, params, ids, mask, loss: str, teacher: Optional[Dict[str, torch.Tensor]] = None):
    """One expert's batch: the entropy of the merged model's predictions, or TAS' cosine gap to ``teacher``."""
    keep = mask.bool()
    hidden, logits = _forward(model, params, ids, mask)
    if loss == "entropy":
        return entropy_loss(logits, keep)
    with torch.no_grad():
        target, _ = _forward(model, teacher, ids, mask)
    cos = torch.nn.functional.cosine_similarity(hidden[keep], target[keep], dim=-1, eps=1e-12)
    return (1.0 - cos).mean()


def batches_cycle(batches: List[tuple], size: int, seed: int):
    """Endless batches of ``size`` samples (reshuffled every pass) from one expert's token batches, each padded
    to its longest sample (the input batches are padded each to their own width)."""
    rows = [ids[r][mask[r].bool()] for ids, mask in batches for r in range(ids.shape[0])]
    gen = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(rows), generator=gen).tolist()
        for start in range(0, len(order), size):
            chunk = [rows[i] for i in order[start:start + size]]
            width = max(len(c) for c in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for r, c in enumerate(chunk):
                ids[r, :len(c)], mask[r, :len(c)] = c, 1
            yield ids, mask


def learn_coefficients(model, base: Dict[str, torch.Tensor], taus: List[Dict[str, torch.Tensor]],
                       batches: List[List[tuple]], groups: Dict[str, int], settings: AdaMergingSettings,
                       names: List[str], teachers: Optional[List[Dict[str, torch.Tensor]]] = None,
                       progress: bool = True) -> Learned:
    """Learn ``lambda[t, g]`` on each expert's token batches; ``model`` is any module of the base's architecture
    (its own weights are not used); ``teachers``: the experts' weights (the ``tas`` loss only). Tensors are float32
    on the model's device."""
    from tqdm.auto import tqdm

    if settings.loss == "tas" and teachers is None:
        raise ConfigError("the tas loss compares the merge with each expert: give the experts' weights (teachers)")
    device = next(model.parameters()).device
    columns = max(groups.values()) + 1
    lam = torch.full((len(taus), columns), settings.init if settings.init is not None else 1.0 / len(taus),
                     dtype=torch.float32, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([lam], lr=settings.lr)
    streams = [batches_cycle(b, settings.batch_size, settings.seed + i) for i, b in enumerate(batches)]
    for p in model.parameters():
        p.requires_grad_(False)
    losses, trajectory = [], []
    with torch.enable_grad():
        for _ in tqdm(range(settings.iterations), desc=f"AdaMerging ({settings.loss})", unit="step",
                      disable=not progress):
            params = merged_parameters(base, taus, lam, groups)
            loss = torch.zeros((), device=device)
            for i, stream in enumerate(streams):
                ids, mask = (x.to(device) for x in next(stream))
                loss = loss + batch_loss(model, params, ids, mask, settings.loss, teachers[i] if teachers else None)
            loss = loss / len(streams)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if settings.clamp:
                with torch.no_grad():
                    lam.clamp_(0.0, 1.0)
            losses.append(float(loss.detach()))
            trajectory.append(lam.detach().mean(dim=1).cpu().tolist())
    return Learned(list(names), lam.detach().cpu(), losses, trajectory)


# ---- the recipes' engine (the layer-wise driver's job) ---------------------------------------------------------


def settings_of(params) -> AdaMergingSettings:
    """The optimiser's settings from a recipe's parameters (``AdaMergingParams``)."""
    return AdaMergingSettings(loss=params.loss, iterations=params.iterations, lr=params.lr,
                              batch_size=params.samples_per_step, init=params.init, clamp=params.clamp,
                              seed=params.seed)


def run_adamerging(job, save_tensor: Callable[[str, torch.Tensor], None]) -> Dict:
    """Learn the coefficients of ``job`` (a ``WholeModelJob``; AdaMerging++ when its settings carry ``density``),
    hand every merged tensor to ``save_tensor``; returns the report."""
    from wildmerge.plugins.layerwise.io import load_eval_model, parameter_aliases

    model = load_eval_model(job.base.path, job.device, frozen=True)
    base = {n: p.detach().float() for n, p in model.named_parameters()}
    alias = parameter_aliases(model)
    experts = [{n: ck.get(n, job.device, torch.float32) for n in base} for ck in job.experts]
    taus = [{n: e[n] - base[n] for n in base} for e in experts]
    density = getattr(job.settings, "density", None)
    if density is not None:
        taus = ties_vectors(taus, density)
    settings = settings_of(job.settings)
    if settings.loss == "entropy":
        experts = None  # only the tas loss reads the experts' own weights again
    n_layers = job.config.num_hidden_layers
    groups = groups_of(list(base), n_layers, job.settings.granularity)
    batches = [[(ids, mask) for ids, mask in b] for b in job.batches]
    learned = learn_coefficients(model, base, taus, batches, groups, settings, [e.name for e in job.experts],
                                 teachers=experts, progress=job.progress)
    with torch.no_grad():
        merged = merged_parameters(base, taus, learned.coefficients.to(job.device), groups)
    for n in job.base.names():
        save_tensor(n, merged[alias[n]].cpu() if n in alias else job.base.get(n))
    kept = (None if density is None else
            [sum(int((t != 0).sum()) for t in tau.values()) / sum(t.numel() for t in tau.values()) for tau in taus])
    report = {"experts": learned.experts, "groups": group_names(n_layers, job.settings.granularity),
              "coefficients": learned.coefficients.tolist(), "loss_start": learned.losses[0],
              "loss_end": learned.losses[-1], "losses": learned.losses,
              **({} if kept is None else {"kept_share": kept})}
    return report if job.settings.diagnostics else {}
