"""AdaMerging+TAS (the reality-check paper, Sec. 4.1 and App. H) and AdaMerging with its entropy loss (Yang et al.
2024, "AdaMerging: Adaptive Model Merging for Multi-Task Learning") on the whole pool: ``wildmerge tune
--adamerging``. Task-arithmetic coefficients per block and per expert, learned by gradient descent on unlabelled data
of each expert, with the one optimiser of the ``adamerging`` / ``adamerging_pp`` recipes
(``plugins/layerwise/adamerging.py``: the formula, the losses, the batches, the clamp).

As the reality-check paper (following AdaMerging): Adam, lr 1e-3, batch 16 per expert, 500 iterations, ``lambda =
1/T`` at the start; coefficients are clamped to ``[0, 1]`` after each step. The EMA feature normalisation the paper
mentions without details is not implemented.

The result is a merged checkpoint and a mergekit recipe, ``task_arithmetic`` with every expert's ``weight`` given per
block as a conditional parameter, that the stock ``mergekit-yaml`` turns into the same weights.
"""

import json
from pathlib import Path
from typing import Dict, List, Optional

import torch

from wildmerge.errors import ConfigError
from wildmerge.plugins.layerwise.adamerging import AdaMergingSettings, groups_of, learn_coefficients, merged_parameters


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
    groups = groups_of(list(base), num_layers(base_path))
    names = list(experts)
    taus = [{k: weights[n][k] - base[k] for k in base} for n in names]
    learned = learn_coefficients(model, base, taus, [batches[n] for n in names], groups, settings, names,
                                 teachers=[weights[n] for n in names] if settings.loss == "tas" else None,
                                 progress=progress)
    out = Path(out_dir)
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
