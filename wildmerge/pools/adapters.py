"""LoRA / PEFT adapters as pool experts: materialised once against the pool's base, then merged like any expert.

Many fine-tunes are published as adapters (``adapter_config.json`` + ``adapter_model.safetensors``), not full
checkpoints. mergekit merges full weights, so each adapter is folded into the pool's base with PEFT's own
``merge_and_unload`` (W + scale * B A, Hu et al., arXiv 2106.09685) and saved as an ordinary safetensors
checkpoint in a cache keyed by the base's and the adapter's files, so every run reuses it. The adapter's hub
revision is pinned in the run's manifest like any expert's.
"""

import hashlib
import json
import os
from pathlib import Path

from wildmerge.errors import WildmergeError

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter(path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_cache_dir() -> Path:
    """``$WILDMERGE_ADAPTER_CACHE`` or ``~/.cache/wildmerge/adapters``."""
    env = os.environ.get("WILDMERGE_ADAPTER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "wildmerge" / "adapters"


def _files_key(folder) -> list:
    return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.suffix in (".safetensors", ".json")]


def materialised_path(base_path, adapter_path) -> Path:
    key = json.dumps([str(Path(base_path).resolve()), _files_key(base_path), _files_key(adapter_path)])
    name = Path(adapter_path).name
    return adapter_cache_dir() / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _check_adapter(adapter_path) -> dict:
    try:
        config = json.loads((Path(adapter_path) / ADAPTER_CONFIG).read_text())
    except ValueError as exc:
        raise WildmergeError(f"{adapter_path}/{ADAPTER_CONFIG} is not valid JSON ({exc}); download it again") from None
    if not any(Path(adapter_path).glob("adapter_model*.safetensors")):
        raise WildmergeError(f"{adapter_path}: an adapter without adapter_model.safetensors (pickled adapters are not "
                             f"read); convert it to safetensors")
    if config.get("peft_type", "LORA") != "LORA":
        raise WildmergeError(f"{adapter_path}: a {config.get('peft_type')} adapter; only LoRA adapters can be folded "
                             f"into the base's weights")
    return config


def check_fits(base_path, adapter_path) -> None:
    """Every module the adapter changes exists in the base with the shapes its LoRA factors need, from the
    safetensors headers (milliseconds): an adapter of another model fails here, naming it, not in PEFT's loader."""
    from safetensors import safe_open

    from wildmerge.checkpoints import tensor_shapes

    base = tensor_shapes(base_path)
    problems = []
    for file in sorted(Path(adapter_path).glob("adapter_model*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            factors = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        for key, shape in factors.items():
            for part, axis in ((".lora_A.", 1), (".lora_B.", 0)):  # A: (r, in), B: (out, r); W: (out, in)
                if part not in key:
                    continue
                module = key.split(part)[0].removeprefix("base_model.model.")
                weight = base.get(f"{module}.weight")
                if weight is None:
                    problems.append(f"module {module} is not in the base")
                elif len(shape) == 2 and len(weight) == 2 and shape[axis] != weight[axis]:
                    problems.append(f"{module}: factor {part.strip('.')} of shape {list(shape)} does not fit the "
                                    f"base's weight of shape {list(weight)}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise WildmergeError(f"adapter {adapter_path} does not fit the pool's base {base_path}: {problems[0]}{more}; "
                             f"use an adapter trained on this base (its adapter_config.json names "
                             f"{declared_base(adapter_path) or 'none'!r})")


def declared_base(adapter_path) -> str | None:
    """The base an adapter's ``adapter_config.json`` says it was trained on, if it says."""
    try:
        return json.loads((Path(adapter_path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or None
    except (OSError, ValueError):
        return None


def materialise(base_path, adapter_path, progress: bool = True) -> tuple[Path, str]:
    """(folder of base + adapter as a full checkpoint, a note for the run log); built once, then reused."""
    from wildmerge.atomic import atomic_dir
    from wildmerge.locks import wait_claim

    config = _check_adapter(adapter_path)
    check_fits(base_path, adapter_path)
    out = materialised_path(base_path, adapter_path)
    declared = config.get("base_model_name_or_path")
    note = (f"adapter {adapter_path} (LoRA r={config.get('r')}, on {', '.join(sorted(config.get('target_modules') or []))}"
            f") folded into the pool's base -> {out}")
    if declared and Path(str(declared)).name != Path(base_path).name:
        note += f"; the adapter says it was trained on {declared!r}"
    if (out / "config.json").is_file():
        return out, note
    out.parent.mkdir(parents=True, exist_ok=True)
    with wait_claim(out.parent / f".{out.name}.lock"):
        if (out / "config.json").is_file():
            return out, note
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if progress:
            print(f"materialising adapter {adapter_path} against {base_path}", flush=True)
        base = AutoModelForCausalLM.from_pretrained(str(base_path), dtype="auto")
        try:
            merged = PeftModel.from_pretrained(base, str(adapter_path), dtype=torch.float32).merge_and_unload()
        except (RuntimeError, ValueError, KeyError) as exc:  # what the header check cannot see
            raise WildmergeError(f"adapter {adapter_path} cannot be folded into {base_path} "
                                 f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
        with atomic_dir(out) as tmp:
            merged.save_pretrained(str(tmp), safe_serialization=True)
            tok_from = adapter_path if any((Path(adapter_path) / f).is_file() for f in
                                           ("tokenizer.json", "tokenizer_config.json")) else base_path
            try:
                AutoTokenizer.from_pretrained(str(tok_from)).save_pretrained(str(tmp))
            except (OSError, ValueError):
                pass  # a base without a tokenizer: nothing to copy
            (Path(tmp) / "wildmerge_adapter.json").write_text(json.dumps(
                {"base": str(base_path), "adapter": str(adapter_path), "adapter_config": config}, indent=2))
    return out, note


def materialise_experts(base_path, experts: dict, progress: bool = True) -> tuple[dict, list]:
    """({expert: full checkpoint folder}, notes for the log): every adapter among ``experts`` folded into the base
    (``materialise``, cached), every other expert as it is."""
    out, notes = {}, []
    for name, path in experts.items():
        if is_adapter(path):
            whole, note = materialise(base_path, path, progress=progress)
            out[name] = str(whole)
            notes.append(f"{name}: {note}")
        else:
            out[name] = path
    return out, notes


def full_checkpoints(base_path, experts: dict) -> dict:
    """``materialise_experts`` with its notes printed: what ``pools.resolve`` (every pool reader) and
    ``analyze probe --model`` call."""
    experts, notes = materialise_experts(base_path, experts)
    for note in notes:
        print(f"  note: {note}", flush=True)
    return experts
