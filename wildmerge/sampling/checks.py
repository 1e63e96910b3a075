"""Compatibility checks before any merge: architecture from config.json, tensor names and shapes from the
safetensors headers (a few KB read per shard, no weights loaded), safetensors-only weights, duplicates.

Catching a mismatched expert here costs milliseconds; catching it inside mergekit costs a half-finished merge
and a traceback.
"""

import json
import struct
from pathlib import Path

from wildmerge.checkpoints import weight_files
from wildmerge.errors import WildmergeError

# config.json keys that must agree for two checkpoints to be merged tensor by tensor.
ARCH_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads",
             "num_key_value_heads", "head_dim", "vocab_size")


def read_config(path) -> dict:
    f = Path(path) / "config.json"
    if not f.is_file():
        raise WildmergeError(f"{path}: no config.json; is this a transformers checkpoint folder?")
    return json.loads(f.read_text())


def safetensors_shapes(path, allow_pickle=False) -> dict[str, tuple]:
    """{tensor name: shape} from the headers of every ``*.safetensors`` shard in ``path`` ({} for an allowed
    pickle-only checkpoint: no cheap header to read, mergekit will load it)."""
    shards = weight_files(path, allow_pickle)
    if shards[0].suffix != ".safetensors":
        return {}
    shapes = {}
    for shard in shards:
        with open(shard, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(info["shape"])
    return shapes


def _arch(config: dict) -> dict:
    arch = {k: config.get(k) for k in ARCH_KEYS if k in config}
    arch["architectures"] = tuple(config.get("architectures") or ())
    return arch


def check_compatible(base: str, experts: dict[str, str], allow_pickle=False) -> None:
    """Raise one error listing every expert whose architecture or tensor shapes differ from the base.

    ``experts`` maps expert name -> folder. Tensors an expert lacks are errors, except a tied ``lm_head``;
    extra tensors in an expert are ignored (mergekit merges the base's tensors).
    """
    paths = {"base": base, **experts}
    seen = {}
    for name, p in paths.items():
        real = str(Path(p).resolve())
        if real in seen:
            raise WildmergeError(f"{name} and {seen[real]} are the same checkpoint ({real}); remove the duplicate")
        seen[real] = name
    base_arch = _arch(read_config(base))
    base_shapes = safetensors_shapes(base, allow_pickle)
    tied = bool(read_config(base).get("tie_word_embeddings"))
    problems = []
    for name, path in experts.items():
        arch = _arch(read_config(path))
        diff = [f"{k}: {arch.get(k)!r} vs base {v!r}" for k, v in base_arch.items() if arch.get(k) != v]
        if diff:
            problems.append(f"  {name} ({path}): architecture differs: " + "; ".join(diff))
            continue
        shapes = safetensors_shapes(path, allow_pickle)
        if not shapes or not base_shapes:
            continue
        missing = [t for t in base_shapes if t not in shapes and not (tied and t.startswith("lm_head"))]
        wrong = [f"{t} {shapes[t]} vs base {s}" for t, s in base_shapes.items() if t in shapes and shapes[t] != s]
        if missing:
            problems.append(f"  {name} ({path}): lacks {len(missing)} tensor(s) of the base, e.g. {missing[:3]}")
        if wrong:
            problems.append(f"  {name} ({path}): {len(wrong)} tensor shape(s) differ, e.g. {'; '.join(wrong[:3])}")
    if problems:
        raise WildmergeError(
            "these experts cannot be merged with the base tensor by tensor:\n" + "\n".join(problems)
            + "\nUse experts fine-tuned from this exact base, or leave them out with --exclude NAME."
        )


def param_count(path) -> int:
    """Number of parameters, from the safetensors headers (for the plan's disk estimate)."""
    import math

    return sum(math.prod(s) for s in safetensors_shapes(path, allow_pickle=True).values())
