"""The data-based methods from an ordinary mergekit recipe: ``merge_method: regmean`` / ``chain_of_merges`` /
``mats`` / ``fisher`` / ``prodistill`` / ``localize_stitch_trained`` / ``adamerging`` / ``adamerging_pp``.

mergekit merges one tensor at a time and never runs a model, but these methods need each layer's input
activations (RegMean, CoM, MaTS) or each expert's gradients on its own data (Fisher, the trained Localize,
AdaMerging), so they have their own driver. mergekit's ``run_merge`` (wrapped in ``plugins/entrypoint.py``) sends
those recipes here, so the stock ``mergekit-yaml recipe.yml out/`` and ``wildmerge merge`` both work;
``merge_layerwise`` is the Python door.

Everything is checked before any heavy work, in phases (the recipe, the models and their architecture, the
calibration data, the engine's job); then the output is written: an ordinary Hugging Face checkpoint, atomically,
with a model card, the recipe, and the per-layer merging covariate shift and importance weights in
``layerwise_diagnostics.json``.
"""

import json
import logging
import os
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

import yaml
from pydantic import ValidationError

from wildmerge.errors import ConfigError, did_you_mean
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS
from wildmerge.plugins.method_params import MethodParams
from wildmerge.resources import checked_device, peak_rss_mib

log = logging.getLogger("wildmerge")

DIAGNOSTICS_FILE = "layerwise_diagnostics.json"
MCS_DEFINITION = ("Eq. 8 of Buzzega et al. (arXiv 2508.21421): sum over models of the Frechet distance between Gaussian "
                  "fits of the layer inputs inside each fine-tuned model and inside the merged model (groups qkv = "
                  "q/k/v input, o = o_proj input)")


def recipe_params(method: str, raw_params: Optional[Dict[str, Any]]) -> MethodParams:
    """The method's own parameter model, from the recipe's top-level ``parameters:`` (single values only)."""
    model = LAYERWISE_METHODS[method].params
    valid = model.fields_by_name()
    values = {}
    for key, value in (raw_params or {}).items():
        if key not in valid:
            raise ConfigError(f"unknown parameter {key!r} for {method}{did_you_mean(key, valid)}"
                              f"; valid parameters: {', '.join(valid)}")
        if not isinstance(value, (bool, int, float, str)):
            raise ConfigError(f"parameter {key!r} of {method} must be a single value (no gradients or filters), "
                              f"got {value!r}")
        values[key] = model.check_value(method, key, value)
    return model(**values)


def _device(options, requested: Optional[str]) -> str:
    """The merge device: asked for, else mergekit's ``--cuda``, else ``auto`` (forward passes dominate: the GPU when
    there is one)."""
    dev = requested or getattr(options, "device", None)
    if dev is None and getattr(options, "cuda", False):
        dev = "cuda"
    return checked_device(dev, "merge device")


def _dtype(name: Optional[str], fallback):
    import torch

    if name is None:
        return fallback
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype) or not dt.is_floating_point:
        raise ConfigError(f"dtype {name!r} is not a floating-point torch dtype (use float32, bfloat16, float16)")
    return dt


def _load_tokenizer(paths):
    from transformers import AutoTokenizer

    for p in paths:
        if any((Path(p) / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
            try:
                return AutoTokenizer.from_pretrained(p), p
            except Exception as exc:  # a broken tokenizer in one folder: try the next
                log.warning("could not load the tokenizer in %s: %s", p, exc)
    return None, None


@dataclass
class _Inputs:
    """What the checks resolve, phase by phase, before any weight is read: the recipe, the models, the data."""

    method: str
    params: MethodParams
    raw: Dict[str, Any]  # the recipe as a plain dict
    base_ref: Any  # mergekit ModelReference, or None
    expert_refs: List[Any]
    base_path: Optional[str] = None
    expert_paths: List[str] = field(default_factory=list)
    config: Any = None  # transformers config of the base (else of the first expert)
    specs: List[Any] = field(default_factory=list)  # per expert: its calibration spec
    batches: List[list] = field(default_factory=list)  # per expert: [(input_ids, attention_mask)]
    tokenizer: Any = None
    tok_path: Optional[str] = None
    rows: Dict[str, Any] = field(default_factory=dict)  # resized expert folder -> (rows of the base's tokens, its rows)

    @property
    def paths(self) -> List[str]:
        """Base first (when there is one), then the experts."""
        return ([self.base_path] if self.base_path else []) + self.expert_paths


def _card(inputs: _Inputs, out: Path) -> str:
    method = inputs.method
    info = LAYERWISE_METHODS[method]
    lines = [
        "---", "library_name: transformers", "tags: [merge, mergekit, wildmerge, " + method + "]", "---",
        f"# {out.name}", "",
        f"This model was merged with **{info.label}** by wildmerge's layer-wise driver (a mergekit recipe).",
        "", f"Paper: {info.paper}", "",
        f"Base model: `{inputs.base_ref}`" if inputs.base_ref else "Base model: none", "",
        "## Merged models and their calibration data", "",
        "| model | calibration data | samples | sequence length |", "|---|---|---|---|",
    ]
    lines += [f"| `{r}` | `{s.data}` | {sum(len(ids) for ids, _ in b)} | {s.seq_len} |"
              for r, s, b in zip(inputs.expert_refs, inputs.specs, inputs.batches)]
    lines += ["", "## Settings", "", "```json", json.dumps(inputs.params.model_dump(), indent=2), "```", "",
              HOW[method] + f" {REPORT[method]} is in `{DIAGNOSTICS_FILE}`.", ""]
    return "\n".join(lines)


_CLOSED_FORM = ("Linear layers of every decoder block are merged in closed form from input Gram matrices ({}); every "
                "other tensor is the mean of the merged models.")
HOW = {
    "chain_of_merges": _CLOSED_FORM.format("layer by layer through the already merged prefix"),
    "regmean": _CLOSED_FORM.format("from each model’s own activations"),
    "mats": "Linear layers of every decoder block are merged by conjugate gradient on RegMean’s system (input Gram "
            "matrices of each model’s own activations), started from the initial merge; every other tensor is the "
            "mean of the merged models.",
    "fisher": "Every parameter is the average of the models weighted by their diagonal empirical Fisher on their own "
              "data (plus fisher_floor).",
    "prodistill": "Every decoder block is task arithmetic with one coefficient per model and tensor, trained by Adam "
                  "so that the merged block, fed the merged model's activations, matches each model's block on its "
                  "own activations (mean squared error), block after block; every other tensor is task arithmetic.",
    "localize_stitch_trained": "Each model's mask over the parameters was trained on its own data (the model base + "
                               "sigmoid(S) * task vector, token cross-entropy + an L1 penalty on the mask), binarised, "
                               "and the masked task vectors stitched into the base (overlaps averaged).",
    "adamerging": "Task arithmetic with one coefficient per model and decoder block (or per model), learned by Adam "
                  "on each model's own unlabelled data to minimise the entropy of the merged model's predictions.",
    "adamerging_pp": "AdaMerging on TIES-Merging's task vectors (trimmed per tensor to the top density by magnitude, "
                     "one sign elected per entry, disagreeing entries dropped): one coefficient per model and decoder "
                     "block (or per model), learned by Adam on each model's own unlabelled data to minimise the "
                     "entropy of the merged model's predictions.",
}
REPORT = {"chain_of_merges": "The merging covariate shift (Eq. 8) per layer",
          "regmean": "The merging covariate shift (Eq. 8) per layer",
          "mats": "The merging covariate shift (Eq. 8) and the conjugate-gradient residual per layer",
          "fisher": "Each expert's Fisher sum and samples used",
          "prodistill": "The distillation loss before and after training, the coefficients and the merging "
                        "covariate shift (Eq. 8) per layer",
          "localize_stitch_trained": "Each model's task loss at the first and last step, mask share and change from "
                                     "the initial mask, and the share of entries claimed twice",
          "adamerging": "The learned coefficients and the loss at every step",
          "adamerging_pp": "The learned coefficients, the loss at every step and each trimmed vector's kept share"}


def _check_out_empty(out: Path, method: str) -> None:
    """The output is written atomically, replacing the folder: refuse one that holds anything, so that nothing a
    user had there is lost (mergekit-yaml itself writes into existing folders)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output path {out} is a file; give a folder path")
    if out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"output folder {out} is not empty: {method} writes a complete new folder and would "
                          f"delete what is there; give a new or empty folder (or `wildmerge merge --overwrite` to "
                          f"replace it on purpose)")


def _check_recipe(merge_config, raw: Optional[Dict[str, Any]], out_path) -> _Inputs:
    """Phase 1: the recipe alone (method, parameters, sections, per-model settings, output folder)."""
    method = merge_config.merge_method
    if method not in LAYERWISE_METHODS:
        raise ConfigError(f"the layer-wise driver runs {', '.join(LAYERWISE_METHODS)}, not {method!r}")
    raw = raw if raw is not None else merge_config.model_dump(mode="json", exclude_none=True)
    params = recipe_params(method, merge_config.parameters)
    if merge_config.slices or merge_config.modules or not merge_config.models:
        raise ConfigError(f"{method} recipes list their inputs under 'models:' (slices and modules are not supported)")
    if merge_config.tokenizer or merge_config.tokenizer_source:
        raise ConfigError(f"{method} always merges on the base's tokens (an expert with added tokens is read at the "
                          f"rows of the base's tokens) and takes no 'tokenizer:' / 'tokenizer_source:' section; "
                          f"remove it")
    base_ref = merge_config.base_model
    expert_refs = [m.model for m in merge_config.models if m.model != base_ref]
    for m in merge_config.models:
        bad = set((m.parameters or {}).keys()) - {"calibration"}
        if bad:
            raise ConfigError(f"model {str(m.model)!r}: unknown per-model parameter {sorted(bad)[0]!r} for {method}; "
                              f"the only per-model setting is 'calibration'")
    if not expert_refs:
        raise ConfigError(f"{method} needs at least one model besides the base under 'models:'")
    if getattr(params, "ridge", None) == "delta" and base_ref is None:
        raise ConfigError("ridge 'delta' shrinks towards the base model: set base_model, or use ridge: per_task")
    if getattr(params, "omega_reference", "merged") == "base" and (base_ref is None or not params.sim):
        raise ConfigError("omega_reference 'base' measures Sim's importance weights through the base model: set "
                          "base_model and keep sim: true (or use omega_reference: merged)")
    if method == "prodistill" and base_ref is None:
        raise ConfigError("prodistill trains coefficients on task vectors, which need the base model: set base_model")
    if method in ("adamerging", "adamerging_pp") and base_ref is None:
        raise ConfigError(f"{method} learns coefficients of task vectors, which need the base model: set base_model")
    if method == "localize_stitch_trained" and base_ref is None:
        raise ConfigError("localize_stitch_trained trains masks on task vectors, which need the base model: set "
                          "base_model")
    if getattr(params, "init", None) == "task_arithmetic" and base_ref is None:
        raise ConfigError("mats starts from task arithmetic, which needs the base model: set base_model, or use "
                          "init: average")
    if out_path is not None:
        _check_out_empty(Path(out_path), method)
    return _Inputs(method, params, raw, base_ref, expert_refs)


def _resolve_models(inputs: _Inputs, cache: Optional[str]) -> None:
    """Phase 2: local folders of the models, one supported architecture, compatible shapes and vocabulary."""
    from transformers import AutoConfig

    from wildmerge.checkpoints import check_compatible
    from wildmerge.plugins.layerwise.arch import check_supported
    from wildmerge.plugins.layerwise.io import resolve_model_path

    base_ref, expert_refs = inputs.base_ref, inputs.expert_refs
    inputs.expert_paths = [resolve_model_path(r, cache) for r in expert_refs]
    inputs.base_path = resolve_model_path(base_ref, cache) if base_ref is not None else None
    configs = [AutoConfig.from_pretrained(p) for p in inputs.paths]
    inputs.config = configs[0]
    check_supported(inputs.config)
    reference = ((str(base_ref), inputs.base_path) if inputs.base_path
                 else (str(expert_refs[0]), inputs.expert_paths[0]))
    resized = check_compatible(reference[1], {str(r): p for r, p in zip(expert_refs, inputs.expert_paths)
                                              if p != reference[1]}, base_name=reference[0])
    from wildmerge.checkpoints import resized_rows

    rows = resized_rows(reference[1], {str(r): p for r, p in zip(expert_refs, inputs.expert_paths) if str(r) in resized})
    inputs.rows = {p: rows[str(r)] for r, p in zip(expert_refs, inputs.expert_paths) if str(r) in rows}


def _load_calibration(inputs: _Inputs, recipe_dir: Optional[Path]) -> None:
    """Phase 3: each expert's calibration data, validated and tokenised before any weight is read."""
    from wildmerge.plugins.layerwise.calibration import (
        apply_seq_len,
        load_token_batches,
        read_texts,
        resolve_calibration,
        warn_if_shared,
    )

    raw, expert_refs = inputs.raw, inputs.expert_refs
    raw_models = [m for m in (raw.get("models") or [])]
    raw_models = [m for m in raw_models if not (isinstance(m, dict) and str(m.get("model")) == str(inputs.base_ref))]
    specs = resolve_calibration({**raw, "models": raw_models}, [str(r) for r in expert_refs], recipe_dir)
    specs = apply_seq_len(specs, [str(r) for r in expert_refs],
                          getattr(inputs.config, "max_position_embeddings", None))
    if inputs.method == "chain_of_merges":
        warn_if_shared(specs, "Chain of Merges")
    inputs.specs = specs
    records = [read_texts(s, str(r)) for r, s in zip(expert_refs, specs)]
    _check_counts(inputs.method, specs, [str(r) for r in expert_refs], records)
    inputs.tokenizer, inputs.tok_path = _load_tokenizer(inputs.paths)
    inputs.batches = [load_token_batches(s, inputs.tokenizer, str(r), inputs.config.vocab_size, records=t)
                      for r, s, t in zip(expert_refs, specs, records)]


def _check_counts(method: str, specs, names, records) -> None:
    """Every model with at least the texts its calibration asks (``n_samples``), said for all of them in one line
    before the tokenizer or any weight is read."""
    from wildmerge.expert_data.count import too_few_texts

    short = {n: len(t) for n, s, t in zip(names, specs, records) if s.n_samples and len(t) < s.n_samples}
    if short:
        most = max(s.n_samples for n, s in zip(names, specs) if n in short)
        raise ConfigError(f"too few calibration texts: {too_few_texts({method: most}, short)}; give each of them at "
                          f"least that many (its calibration data), or lower calibration n_samples in the recipe")


def _chain_job(inputs: _Inputs, merge_config, options, device: Optional[str], progress: bool,
               trace: Optional[Callable]):
    """Phase 4: the engine's job (checkpoints opened, dtypes and device chosen) and the output dtype."""
    import torch

    from wildmerge.plugins.layerwise.chain import ChainJob
    from wildmerge.plugins.layerwise.io import Checkpoint, WholeModelJob

    experts = [Checkpoint(p, str(r), *inputs.rows.get(p, (None, None)))
               for p, r in zip(inputs.expert_paths, inputs.expert_refs)]
    base = Checkpoint(inputs.base_path, str(inputs.base_ref)) if inputs.base_path else None
    config = inputs.config
    fallback = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    fallback = _dtype(fallback, torch.float32) if isinstance(fallback, str) else fallback
    compute_dtype = _dtype(merge_config.dtype, fallback)
    out_dtype = _dtype(merge_config.out_dtype, compute_dtype)
    dev = _device(options, device)
    if inputs.method in OWN_ENGINE:  # whole models in float32 (their own engines)
        return WholeModelJob(experts=experts, base=base, batches=inputs.batches, config=config,
                             settings=inputs.params, device=dev, progress=progress), out_dtype
    job = ChainJob(chain=inputs.method == "chain_of_merges", experts=experts, base=base, batches=inputs.batches,
                   config=config, settings=inputs.params, compute_dtype=compute_dtype, device=dev, progress=progress,
                   trace=trace)
    return job, out_dtype


# whole-model engines; the rest run on the chain engine of RegMean / CoM
OWN_ENGINE = ("fisher", "localize_stitch_trained", "adamerging", "adamerging_pp")


def _diagnostics(inputs: _Inputs, job, out_dtype, started: float, report: Dict) -> Dict[str, Any]:
    """``layerwise_diagnostics.json``: the settings, the data, the costs and the per-layer report of the engine."""
    return {
        "method": inputs.method,
        "parameters": inputs.params.model_dump(),
        "base_model": str(inputs.base_ref) if inputs.base_ref else None,
        "models": [str(r) for r in inputs.expert_refs],
        "calibration": [dict(s.model_dump(), samples=sum(len(ids) for ids, _ in b),
                             tokens=int(sum(int(m.sum()) for _, m in b)))
                        for s, b in zip(inputs.specs, inputs.batches)],
        "tokenizer_from": inputs.tok_path,
        "device": job.device, "compute_dtype": str(job.compute_dtype), "out_dtype": str(out_dtype),
        "wall_seconds": round(time.time() - started, 3),
        "peak_rss_mib": round(peak_rss_mib(), 1),
        **({} if inputs.method in OWN_ENGINE else {"mcs_definition": MCS_DEFINITION}),
        **report,
    }


def _write(inputs: _Inputs, job, out_dtype, out_path: Path, options, config_source: Optional[str],
           started: float) -> None:
    """Phase 5: run the engine into a new folder, written atomically: the weights, the config, the tokenizer,
    the recipe, the model card and the diagnostics."""
    from mergekit.io.tensor_writer import TensorWriter
    from transformers import AutoConfig

    from wildmerge.atomic import atomic_dir, write_json, write_text
    from wildmerge.plugins.layerwise.adamerging import run_adamerging
    from wildmerge.plugins.layerwise.chain import run_chain
    from wildmerge.plugins.layerwise.fisher import run_fisher
    from wildmerge.plugins.layerwise.localize_trained import run_localize_trained

    source = inputs.base_path or inputs.expert_paths[0]
    shard = getattr(options, "out_shard_size", None) or 5 * 1000**3
    with atomic_dir(out_path) as tmp:
        writer = TensorWriter(str(tmp), max_shard_size=shard, safe_serialization=True)
        engine = {"fisher": run_fisher, "localize_stitch_trained": run_localize_trained, "adamerging": run_adamerging,
                  "adamerging_pp": run_adamerging}.get(inputs.method, run_chain)
        report = engine(job, lambda n, t: writer.save_tensor(n, t.to(out_dtype) if t.is_floating_point() else t))
        writer.finalize()
        out_config = AutoConfig.from_pretrained(source)
        out_config.dtype = out_dtype
        out_config.save_pretrained(str(tmp))
        gen = Path(source) / "generation_config.json"
        if gen.is_file():
            write_text(tmp / "generation_config.json", gen.read_text())
        if inputs.tokenizer is not None and getattr(options, "copy_tokenizer", True):
            inputs.tokenizer.save_pretrained(str(tmp))
        write_text(tmp / "mergekit_config.yml", config_source or yaml.safe_dump(inputs.raw, sort_keys=False))
        if getattr(options, "write_model_card", True):
            write_text(tmp / "README.md", _card(inputs, out_path))
        write_json(tmp / DIAGNOSTICS_FILE, _diagnostics(inputs, job, out_dtype, started, report))


def merge_from_config(merge_config, out_path, options=None, raw: Optional[Dict[str, Any]] = None,
                      config_source: Optional[str] = None, recipe_dir: Optional[Path] = None,
                      device: Optional[str] = None, trace: Optional[Callable] = None, progress: bool = True) -> Path:
    """Validate everything, then merge; ``raw`` is the recipe as a plain dict (for the ``calibration`` keys)."""
    started = time.time()
    inputs = _check_recipe(merge_config, raw, out_path)
    _resolve_models(inputs, getattr(options, "transformers_cache", None))
    _load_calibration(inputs, recipe_dir)
    job, out_dtype = _chain_job(inputs, merge_config, options, device, progress, trace)
    out_path = Path(out_path)
    _write(inputs, job, out_dtype, out_path, options, config_source, started)
    for ck in job.experts + ([job.base] if job.base else []):
        ck.close()
    log.info("%s merge written to %s", inputs.method, out_path)
    return out_path


def run_layerwise_merge(merge_config, out_path, options, config_source=None):
    """Entry point used by the wrapped ``mergekit.merge.run_merge`` (stock ``mergekit-yaml``, ``wildmerge merge``)."""
    raw = yaml.safe_load(config_source) if config_source else None
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError("the recipe must be a YAML mapping")
    quiet = bool(getattr(options, "quiet", False))
    merge_from_config(merge_config, out_path, options, raw=raw, config_source=config_source, progress=not quiet)


def recipe_calibration(recipe_path, cache: Optional[str] = None) -> Dict[str, Any]:
    """What a layer-wise recipe merges from, checked and tokenised as its merge did (no weight read): the model
    folders, the expert references, the config and each expert's token batches. For analyses that re-read a
    merge's data with another reference model (the importance-weight ablation, CoM paper Fig. 6)."""
    from mergekit.config import MergeConfiguration

    path = Path(recipe_path)
    if not path.is_file():
        raise ConfigError(f"recipe {str(recipe_path)!r} not found")
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        merge_config = MergeConfiguration.model_validate(raw)
    except (ValidationError, RuntimeError) as exc:
        raise ConfigError(f"invalid mergekit recipe {path}: {exc}") from None
    inputs = _check_recipe(merge_config, raw, None)
    _resolve_models(inputs, cache)
    _load_calibration(inputs, path.parent)
    return {"method": inputs.method, "params": inputs.params, "base_path": inputs.base_path,
            "expert_refs": [str(r) for r in inputs.expert_refs], "expert_paths": inputs.expert_paths,
            "config": inputs.config, "batches": inputs.batches}


def merge_layerwise(recipe: Union[str, os.PathLike, Dict[str, Any]], out_path, *, options=None,
                    device: Optional[str] = None, trace: Optional[Callable] = None, progress: bool = True) -> Path:
    """Python door: ``recipe`` is a mergekit YAML path or the same recipe as a dict; returns the output folder.

    ``trace(layer, group, grams, omegas)`` is called with the statistics of each solved layer group.
    """
    from mergekit.config import MergeConfiguration

    recipe_dir, source = None, None
    if isinstance(recipe, dict):
        raw = recipe
    else:
        path = Path(recipe)
        if not path.is_file():
            raise ConfigError(f"recipe {str(recipe)!r} not found")
        source = path.read_text(encoding="utf-8")
        raw, recipe_dir = yaml.safe_load(source), path.parent
    try:
        merge_config = MergeConfiguration.model_validate(raw)
    except (ValidationError, RuntimeError) as exc:
        raise ConfigError(f"invalid mergekit recipe: {exc}") from None
    return merge_from_config(merge_config, out_path, options, raw=raw, config_source=source, recipe_dir=recipe_dir,
                             device=device, trace=trace, progress=progress)
