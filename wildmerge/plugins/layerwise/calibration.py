"""Calibration data for the layer-wise methods: the ``calibration:`` section of a recipe, validated and loaded.

RegMean and Chain of Merges need inputs from each model's own task (with shared data CoM collapses to plain
averaging, spec property 4), so every expert needs a data source. A recipe gives defaults at the top level and
per-model overrides next to each ``model:``::

    merge_method: chain_of_merges
    base_model: path/to/base
    calibration: {n_samples: 64, seq_len: 256, text_field: text}   # defaults for every model
    models:
      - model: path/to/math_expert
        calibration: data/math.jsonl                # a string is the data source
      - model: path/to/code_expert
        calibration: {data: org/code_dataset, split: train, text_field: content}
      - model: path/to/chat_expert
        parameters: {calibration: data/chat.txt}     # same, when only mergekit's parsed config travels

``data`` may be a template: ``{model}`` is the model's path, ``{name}`` its folder name, so one default such as
``data: "{model}/calibration.jsonl"`` or ``data: "calib/{name}.jsonl"`` gives every model its own file.

A data source is what a pool expert's ``data:`` names (wildmerge/expert_data, which reads it): a local
``.jsonl`` / ``.json`` (records with ``text_field``, or pre-tokenised ``input_ids``), ``.txt`` (one sample per
non-empty line) or ``.parquet`` file, ``demo:unlabelled/<expert>``, ``generate`` (text sampled from the model), a
hub dataset name (``revision``, ``subset``, ``split``, ``text_field`` or ``template``) or ``lm_eval_task: NAME``.
"""

import logging
import random
from pathlib import Path
from typing import Any, Dict, List, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wildmerge.errors import ConfigError, WildmergeError, did_you_mean

log = logging.getLogger("wildmerge")

DEFAULT_SEQ_LEN = 256
DEFAULT_SAMPLES = 64


class CalibrationSpec(BaseModel):
    """Where one model's calibration text comes from and how much of it to use."""

    model_config = ConfigDict(extra="forbid")

    data: Optional[str] = None
    text_field: str = "text"
    template: Optional[str] = None  # "{question} {answer}" instead of one field
    revision: Optional[str] = None  # a hub dataset's pinned commit
    lm_eval_task: Optional[str] = None  # an lm-eval task's documents (prompt + answer) instead of 'data'
    tasks: Optional[str] = None  # lm-eval include path for lm_eval_task
    prompt_field: Optional[str] = None
    answer_field: Optional[str] = None
    n_samples: Optional[int] = Field(None, ge=1)  # default: up to 64; an explicit count must be met
    seq_len: Optional[int] = Field(None, ge=2)  # default: min(256, the model's max_position_embeddings)
    min_tokens: int = Field(4, ge=1)
    batch_size: int = Field(8, ge=1)
    split: str = "train"
    subset: Optional[str] = None
    seed: int = 0


def _validate(values: Dict[str, Any], where: str) -> CalibrationSpec:
    unknown = sorted(set(values) - set(CalibrationSpec.model_fields))
    valid = ", ".join(CalibrationSpec.model_fields)
    if unknown:
        hint = did_you_mean(unknown[0], CalibrationSpec.model_fields)
        raise ConfigError(f"unknown key {unknown[0]!r} in {where}{hint}; valid keys: {valid}")
    try:
        return CalibrationSpec.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"{where}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def _as_dict(value: Any, where: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"data": value}
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(f"{where} must be a data source (string) or a mapping of calibration settings, got {value!r}")


def resolve_calibration(raw: Dict[str, Any], model_names: List[str], base_dir: Optional[Path] = None):
    """One validated ``CalibrationSpec`` per model, from the raw recipe dict (errors name the model to fix)."""
    defaults = _as_dict(raw.get("calibration"), "the top-level 'calibration' section")
    _validate(defaults, "the top-level 'calibration' section")
    raw_models = raw.get("models") or []
    specs = []
    for j, name in enumerate(model_names):
        entry = raw_models[j] if j < len(raw_models) and isinstance(raw_models[j], dict) else {}
        params = entry.get("parameters") or {}
        where = f"calibration of model {name!r}"
        override = _as_dict(entry.get("calibration"), where)
        if "calibration" in params:
            if override:
                raise ConfigError(f"model {name!r} sets calibration twice (next to 'model:' and in 'parameters'): keep one")
            override = _as_dict(params["calibration"], where)
        spec = _validate({**defaults, **override}, where)
        if spec.data is None and spec.lm_eval_task is None:
            raise ConfigError(
                f"model {name!r} has no calibration data: the data-based methods (RegMean, Chain of Merges, MaTS, "
                f"Fisher, ProDistill, the trained Localize-and-Stitch) need each model's own task data. Add 'calibration: path/to/data.jsonl' under that model (or 'data:' in the "
                f"top-level calibration section)"
            )
        if spec.data and "{" in spec.data:  # a template: "{model}/calibration.jsonl", "calib/{name}.jsonl"
            try:
                spec = spec.model_copy(update={"data": spec.data.format(model=name, name=Path(name).name)})
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"{where}: data template {spec.data!r} may only use {{model}} (the model path) "
                                  f"and {{name}} (its folder name): {exc!r}") from None
        if spec.data and base_dir is not None and not Path(spec.data).is_absolute() and (base_dir / spec.data).exists():
            spec = spec.model_copy(update={"data": str(base_dir / spec.data)})
        specs.append(spec)
    return specs


def apply_seq_len(specs: List[CalibrationSpec], names: List[str], max_positions: Optional[int]):
    """Fill the default sequence length; an explicit one beyond the model's positions is an error."""
    out = []
    for name, spec in zip(names, specs):
        if spec.seq_len is None:
            spec = spec.model_copy(update={"seq_len": min(DEFAULT_SEQ_LEN, max_positions or DEFAULT_SEQ_LEN)})
        elif max_positions is not None and spec.seq_len > max_positions:
            raise ConfigError(f"calibration seq_len {spec.seq_len} of model {name!r} exceeds the model's "
                              f"max_position_embeddings ({max_positions}); lower calibration.seq_len")
        out.append(spec)
    return out


def source_of(spec: CalibrationSpec):
    """The expert-data source a recipe's calibration entry names (one reader for every feature)."""
    from wildmerge.expert_data.schema import parse_source

    keys = {"data": spec.data, "lm_eval_task": spec.lm_eval_task, "tasks": spec.tasks, "revision": spec.revision,
            "subset": spec.subset, "split": spec.split, "template": spec.template, "prompt_field": spec.prompt_field,
            "answer_field": spec.answer_field}
    if spec.text_field != "text":
        keys["text_field"] = spec.text_field
    if spec.data is not None and not spec.data.startswith("demo:") and spec.data != "generate" \
            and Path(spec.data).exists() and not Path(spec.data).is_dir():
        keys["data"] = str(Path(spec.data).resolve())  # a local file by any name
    return parse_source({k: v for k, v in keys.items() if v is not None}, f"calibration data {spec.data!r}")


def read_texts(spec: CalibrationSpec, model_name: str) -> List[Any]:
    """The texts (or pre-tokenised id lists) of one model's calibration entry, read through wildmerge.expert_data."""
    from wildmerge.expert_data.read import texts
    from wildmerge.expert_data.recipe import text_source
    from wildmerge.expert_data.schema import ExpertData

    source = source_of(spec)
    if source.kind == "lm_eval_task":  # labelled items as prompt + answer
        source = text_source(ExpertData(labelled=source))
    where = f"calibration data {source.describe()} of model {model_name!r}"
    return texts(source, where, model_path=model_name if source.kind == "generate" else None,
                 expert=Path(model_name).name)


def _to_ids(text: Any, spec: CalibrationSpec, tokenizer, where: str) -> List[int]:
    if isinstance(text, list):  # pre-tokenised
        return [int(t) for t in text][: spec.seq_len]
    if tokenizer is None:
        raise WildmergeError(f"{where}: the base model has no tokenizer to encode text; save one beside it or "
                             f"give pre-tokenised records with 'input_ids'")
    return tokenizer(str(text), truncation=True, max_length=spec.seq_len)["input_ids"]


def load_token_batches(spec: CalibrationSpec, tokenizer, model_name: str, vocab_size: int, records=None):
    """Token batches ``[(input_ids [b, s], attention_mask [b, s])]`` of one model's calibration data (``records``:
    its texts when the caller read them already)."""
    import torch

    where = f"calibration data {spec.data or spec.lm_eval_task!r} of model {model_name!r}"
    records = read_texts(spec, model_name) if records is None else records
    order = list(range(len(records)))
    random.Random(spec.seed).shuffle(order)
    wanted = spec.n_samples or DEFAULT_SAMPLES
    seqs = []
    for k in order:
        ids = _to_ids(records[k], spec, tokenizer, where)
        if len(ids) >= spec.min_tokens:
            seqs.append(ids)
            if len(seqs) == wanted:
                break
    if not seqs or (spec.n_samples is not None and len(seqs) < spec.n_samples):
        raise WildmergeError(
            f"{where}: only {len(seqs)} of {len(records)} records have at least {spec.min_tokens} tokens, "
            f"{spec.n_samples or 1} needed; add data or lower calibration.n_samples (or min_tokens)"
        )
    bad = [t for s in seqs for t in s if not 0 <= t < vocab_size]
    if bad:
        raise WildmergeError(f"{where}: token id {bad[0]} is outside the model's vocabulary (size {vocab_size})")
    batches = []
    for start in range(0, len(seqs), spec.batch_size):
        chunk = seqs[start : start + spec.batch_size]
        width = max(len(s) for s in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for r, s in enumerate(chunk):
            ids[r, : len(s)] = torch.tensor(s)
            mask[r, : len(s)] = 1
        batches.append((ids, mask))
    return batches


def warn_if_shared(specs: List[CalibrationSpec], method: str) -> None:
    """Spec A15: with one data source for every model, CoM is exactly plain averaging."""
    if len(specs) > 1 and len({(s.data, s.lm_eval_task, s.subset, s.split, s.text_field, s.template, s.seed)
                               for s in specs}) == 1:
        log.warning("every model uses the same calibration data (%s): %s then reduces to simple averaging; give "
                    "each model its own task data", specs[0].data, method)
