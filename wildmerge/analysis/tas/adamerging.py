"""AdaMerging+TAS (the reality-check paper, Sec. 4.1 and App. H) and AdaMerging with its entropy loss (Yang et al.
2024, "AdaMerging: Adaptive Model Merging for Multi-Task Learning"): task-arithmetic coefficients per block and per
expert, learned by gradient descent on unlabelled data of each expert.

``theta(lambda) = theta_0 + sum_t lambda[t, g(p)] tau_t[p]``, with ``g(p)`` the transformer block of parameter ``p``
(one more group holds every tensor outside the blocks: embeddings, final norm, lm_head). Losses:

- ``tas`` (AdaMerging+TAS, the paper's Eq. 6-7): the student ``theta(lambda)`` is pulled towards each expert on that
  expert's own data, ``L = mean_t mean_{x in D_t} mean_tokens (1 - cos(f(x; theta(lambda)), f(x; theta_t)))`` with
  ``f`` the final hidden states of the non-padding tokens (the paper: cosine, per token, "more stable" than l2);
- ``entropy`` (AdaMerging's own objective): the mean Shannon entropy of the merged model's next-token distribution
  over the same tokens (for classification-style suites, where confident predictions are the target).

As the paper (following AdaMerging): Adam, lr 1e-3, batch 16 per expert, 500 iterations, ``lambda = 1/T`` at the
start; coefficients are clamped to ``[0, 1]`` after each step (AdaMerging's practice; the paper is silent). The
EMA feature normalisation the paper mentions without details is not implemented.

The result is a merged checkpoint and a mergekit recipe, ``task_arithmetic`` with every expert's ``weight`` given per
block as a conditional parameter, that the stock ``mergekit-yaml`` turns into the same weights.
"""

import dataclasses
import json
from pathlib import Path
from typing import Dict, List, Optional

import torch
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Literal

from wildmerge.errors import ConfigError
from wildmerge.plugins.model_pass import layer_index


class AdaMergingSettings(BaseModel):
    """How the coefficients are learned (defaults: the paper's)."""

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
    """Coefficients ``[T, L + 1]`` (column L: tensors outside the blocks), with the loss after every step and each
    expert's mean coefficient over the groups after every step (its trajectory: the reality-check paper, Fig. 14)."""

    experts: List[str]
    coefficients: torch.Tensor
    losses: List[float]
    trajectory: List[List[float]] = dataclasses.field(default_factory=list)


def groups_of(names: List[str], n_layers: int) -> Dict[str, int]:
    """{parameter: coefficient column}: its block, or ``n_layers`` outside the blocks."""
    out = {}
    for name in names:
        layer = layer_index(name)
        if layer is not None and layer >= n_layers:
            raise ConfigError(f"parameter {name!r} is in block {layer}, but the model has {n_layers} blocks")
        out[name] = n_layers if layer is None else layer
    return out


def merged_parameters(base: Dict[str, torch.Tensor], taus: List[Dict[str, torch.Tensor]], lam: torch.Tensor,
                      groups: Dict[str, int]) -> Dict[str, torch.Tensor]:
    """``theta_0 + sum_t lam[t, g(p)] tau_t[p]`` for every parameter (differentiable in ``lam``)."""
    return {name: b + sum(lam[t, groups[name]] * tau[name] for t, tau in enumerate(taus)) for name, b in base.items()}


def _token_features(model, params, ids, mask):
    from torch.func import functional_call

    out = functional_call(model, params, (), {"input_ids": ids, "attention_mask": mask,
                                              "output_hidden_states": True})
    return out.hidden_states[-1], out.logits


def _batches_cycle(batches: List[tuple], size: int, seed: int):
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


def learn_coefficients(model, base: Dict[str, torch.Tensor], experts: Dict[str, Dict[str, torch.Tensor]],
                       batches: Dict[str, List[tuple]], n_layers: int, settings: AdaMergingSettings,
                       progress: bool = True) -> Learned:
    """Learn ``lambda[t, g]`` on the experts' token batches; ``model`` is any module of the base's architecture
    (its own weights are not used). Tensors are float32 on the model's device."""
    from tqdm.auto import tqdm

    names = list(experts)
    device = next(model.parameters()).device
    taus = [{k: experts[n][k] - base[k] for k in base} for n in names]
    groups = groups_of(list(base), n_layers)
    lam = torch.full((len(names), n_layers + 1), settings.init if settings.init is not None else 1.0 / len(names),
                     dtype=torch.float32, device=device, requires_grad=True)
    optimizer = torch.optim.Adam([lam], lr=settings.lr)
    streams = {n: _batches_cycle(batches[n], settings.batch_size, settings.seed + i) for i, n in enumerate(names)}
    for p in model.parameters():
        p.requires_grad_(False)
    losses, trajectory = [], []
    for _ in tqdm(range(settings.iterations), desc=f"AdaMerging ({settings.loss})", unit="step",
                  disable=not progress):
        params = merged_parameters(base, taus, lam, groups)
        loss = torch.zeros((), device=device)
        for n in names:
            ids, mask = (x.to(device) for x in next(streams[n]))
            keep = mask.bool()
            hidden, logits = _token_features(model, params, ids, mask)
            if settings.loss == "tas":
                with torch.no_grad():
                    teacher, _ = _token_features(model, experts[n], ids, mask)
                cos = torch.nn.functional.cosine_similarity(hidden[keep], teacher[keep], dim=-1, eps=1e-12)
                loss = loss + (1.0 - cos).mean()
            else:
                logp = torch.log_softmax(logits[keep].float(), dim=-1)
                loss = loss + -(logp.exp() * logp).sum(-1).mean()
        loss = loss / len(names)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if settings.clamp:
            with torch.no_grad():
                lam.clamp_(0.0, 1.0)
        losses.append(float(loss.detach()))
        trajectory.append(lam.detach().mean(dim=1).cpu().tolist())
    return Learned(names, lam.detach().cpu(), losses, trajectory)


def recipe(base_path: str, expert_paths: List[str], coefficients: torch.Tensor, out_dtype: Optional[str] = None) -> dict:
    """The stock mergekit recipe of the learned merge: ``task_arithmetic`` (lambda 1, no normalisation), each
    expert's weight per block as a conditional parameter (first matching ``filter`` wins; the last is the rest)."""
    n_layers = coefficients.shape[1] - 1
    models = []
    for path, row in zip(expert_paths, coefficients.tolist()):
        weight = [{"filter": f"layers.{l}.", "value": row[l]} for l in range(n_layers)] + [{"value": row[n_layers]}]
        models.append({"model": path, "parameters": {"weight": weight}})
    out = {"merge_method": "task_arithmetic", "base_model": base_path, "models": models,
           "parameters": {"lambda": 1.0, "normalize": False}, "dtype": "float32"}
    if out_dtype:
        out["out_dtype"] = out_dtype
    return out


def _load(path, device) -> Dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from wildmerge.checkpoints import weight_files

    tensors = {}
    for f in weight_files(path):
        tensors.update(load_file(str(f), device=str(device)))
    return tensors


def _token_batches(base_path: str, texts: Dict[str, list], samples: int,
                   seq_len: Optional[int]) -> Dict[str, List[tuple]]:
    """Each expert's unlabelled text (already read: strings or records) as token batches."""
    from transformers import AutoTokenizer

    from wildmerge.checkpoints import read_config
    from wildmerge.plugins.layerwise.calibration import CalibrationSpec, apply_seq_len, load_token_batches

    config = read_config(base_path)
    names = list(texts)
    specs = apply_seq_len([CalibrationSpec(n_samples=samples, batch_size=32, seq_len=seq_len)] * len(names), names,
                          config.get("max_position_embeddings"))
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    return {n: load_token_batches(s, tokenizer, n, config["vocab_size"], records=texts[n])
            for n, s in zip(names, specs)}


def adamerge(base_path: str, experts: Dict[str, str], texts: Dict[str, list], out_dir,
             settings: Optional[AdaMergingSettings] = None, samples: int = 128, seq_len: Optional[int] = None,
             device: str = "cpu", progress: bool = True, data_key=None) -> Dict[str, Path]:
    """Learn the coefficients and write ``out_dir/model`` (merged checkpoint), ``recipe.yml`` (stock mergekit)
    and ``coefficients.json``. ``texts``: each expert's unlabelled text (``expert_data.read.expert_texts``);
    ``data_key``: what describes it in ``coefficients.json``."""
    import yaml
    from transformers import AutoModelForCausalLM

    from wildmerge.atomic import atomic_dir, write_json, write_text
    from wildmerge.plugins.model_pass import num_layers

    settings = settings or AdaMergingSettings()
    missing = [n for n in experts if not texts.get(n)]
    if missing:
        raise ConfigError(f"AdaMerging learns on each expert's own unlabelled data: none given for {missing}")
    batches = _token_batches(base_path, {n: texts[n] for n in experts}, samples, seq_len)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).to(device).eval()
    names = [n for n, _ in model.named_parameters()]
    base = {k: v for k, v in _load(base_path, device).items() if k in names}
    if set(names) - set(base):
        raise ConfigError(f"{base_path}: parameters {sorted(set(names) - set(base))[:3]} are not in its weights "
                          f"(tied or missing tensors are not supported by AdaMerging here)")
    base = {k: v.to(torch.float32) for k, v in base.items()}
    weights = {n: {k: v.to(torch.float32) for k, v in _load(p, device).items() if k in base}
               for n, p in experts.items()}
    learned = learn_coefficients(model, base, weights, batches, num_layers(base_path), settings, progress)
    out = Path(out_dir)
    groups = groups_of(list(base), num_layers(base_path))
    taus = [{k: weights[n][k] - base[k] for k in base} for n in learned.experts]
    with torch.no_grad():
        merged = merged_parameters(base, taus, learned.coefficients.to(device), groups)
    source_dtype = next(iter(_load(base_path, "cpu").values())).dtype
    with atomic_dir(out / "model") as tmp:
        model.load_state_dict(merged, strict=False)
        model.to(source_dtype).save_pretrained(str(tmp), safe_serialization=True)
        _copy_tokenizer(base_path, Path(tmp))
    recipe_dict = recipe(base_path, list(experts.values()), learned.coefficients,
                         out_dtype=str(source_dtype).replace("torch.", ""))
    written = {"model": out / "model",
               "recipe": write_text(out / "recipe.yml", yaml.safe_dump(recipe_dict, sort_keys=False)),
               "coefficients": write_json(out / "coefficients.json", {
                   "experts": learned.experts, "groups": [f"layers.{l}" for l in range(num_layers(base_path))]
                   + ["other"], "coefficients": learned.coefficients.tolist(), "losses": learned.losses,
                   "trajectory": learned.trajectory, "settings": settings.model_dump(), "samples": samples,
                   "data": json.loads(json.dumps(data_key, default=str))})}
    return written


def _copy_tokenizer(src: str, dst: Path) -> None:
    import shutil

    for f in Path(src).iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")) and f.is_file():
            shutil.copy2(f, dst / f.name)
