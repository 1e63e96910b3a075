"""What a per-tensor method needs to know about the whole model: which block a tensor belongs to, how many blocks
there are, and numbers summed over many tensors (task-vector norms per block or per model).

mergekit hands a merge method one tensor at a time. Methods defined on transformer blocks (NormAvg and MetaGPT per
block, LiNeS's depth scale) or on the whole model (NormAvg / MetaGPT per model, LiNeS's alpha for Consensus) get
those numbers from one streamed first pass over the checkpoints: one tensor of every model in memory at a time,
float64 sums, computed once per set of checkpoints and kept for the rest of the merge (and of the process).

The checkpoints are found from the tensor group: mergekit's graph names every input by its ``ModelReference``; a
caller of the in-memory API names them by their folders, or by ``FolderName``s (a name that carries its folder:
the in-memory merger's inputs).
"""

import re
from functools import lru_cache
from pathlib import Path
from typing import Callable, Dict, Hashable, Iterator, List, Optional, Sequence, Tuple

import torch

from wildmerge.checkpoints import read_config, tensor_index
from wildmerge.errors import ConfigError

_BLOCK = re.compile(r"\blayers\.(\d+)\.")


def layer_index(name: Optional[str]) -> Optional[int]:
    """0-based transformer block of a tensor (``model.layers.<i>.``), None for embeddings, final norm, lm_head."""
    match = _BLOCK.search(name or "")
    return int(match.group(1)) if match else None


def block_of(name: str) -> str:
    """The paper's "layer" of a tensor: its transformer block; every tensor outside the blocks is its own group."""
    index = layer_index(name)
    return f"layers.{index}" if index is not None else name


def num_layers(folder: str) -> int:
    """``num_hidden_layers`` from the checkpoint's config (multimodal configs: from ``text_config``)."""
    config = read_config(folder)
    count = config.get("num_hidden_layers") or (config.get("text_config") or {}).get("num_hidden_layers")
    if not count:
        raise ConfigError(f"{folder}/config.json has no num_hidden_layers; give num_layers in the recipe")
    return int(count)


class FolderName(str):
    """An input's name in an in-memory merge ("base", an expert's name: what recipes and per-model parameters are
    keyed by; equal to and hashed as the plain name) that carries the checkpoint folder it was loaded from, so the
    block / model passes find the checkpoints of exactly this merge's inputs."""

    folder: str

    def __new__(cls, name: str, folder: str):
        named = super().__new__(cls, name)
        named.folder = str(folder)
        return named

    def __reduce__(self):
        return FolderName, (str(self), self.folder)


def folder_of(entry_id: Hashable) -> Optional[str]:
    """The local checkpoint folder behind a tensor group's entry id, or None when the id names no folder."""
    from mergekit.common import ModelReference

    if isinstance(entry_id, FolderName):
        return entry_id.folder
    if isinstance(entry_id, ModelReference):
        return _reference_folder(entry_id)
    if isinstance(entry_id, (str, Path)) and (Path(entry_id) / "config.json").is_file():
        return str(entry_id)
    return None


@lru_cache(maxsize=64)
def _reference_folder(ref) -> Optional[str]:
    """A mergekit model reference's local folder, looked up once (a hub id asks the hub cache)."""
    return None if ref.lora is not None else ref.local_path()


def group_folders(method: str, group, why: str) -> Tuple[str, Tuple[str, ...]]:
    """(base folder, expert folders) of a tensor group, or a ConfigError saying why they are needed."""
    base = folder_of(group.base.id)
    experts = tuple(folder_of(e.id) for e in group.non_base)
    if base is None or any(e is None for e in experts):
        raise ConfigError(f"{method}: {why} needs the checkpoints on disk, but the tensor group names its models "
                          f"{[str(e.id) for e in group.entries]}; merge with mergekit-yaml / wildmerge merge, or "
                          f"name the inputs by their folders")
    return base, experts


def stream_tensors(base: str, experts: Sequence[str]) -> Iterator[Tuple[str, torch.Tensor, List[torch.Tensor]]]:
    """(name, base tensor, expert tensors) for every floating-point tensor of the base, one at a time."""
    from safetensors import safe_open

    base_index = tensor_index(base)
    indexes = [tensor_index(e) for e in experts]
    handles: Dict[Path, object] = {}

    def read(index, name):
        shard = index.get(name)
        if shard is None:
            return None
        if shard not in handles:
            handles[shard] = safe_open(str(shard), framework="pt")
        return handles[shard].get_tensor(name)

    for name in sorted(base_index):
        b = read(base_index, name)
        if not b.is_floating_point():
            continue
        tensors = [read(index, name) for index in indexes]
        if any(t is None or t.shape != b.shape for t in tensors):
            continue  # a resized vocabulary or a missing tensor: mergekit aligns it, the norms skip it
        yield name, b, tensors


def stamp(folders: Sequence[str]) -> tuple:
    """(name, size, mtime) of every weight file: part of a cache key, so a checkpoint rewritten in place is read
    again instead of answered from the cache."""
    from wildmerge.checkpoints import weight_files

    return tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for folder in folders for f in weight_files(folder))


def _squares(b: torch.Tensor, tensors: List[torch.Tensor]) -> List[float]:
    b = b.to(torch.float64)
    return [float((t.to(torch.float64) - b).square().sum()) for t in tensors]


def squared_norms(base: str, experts: Tuple[str, ...], scope: str) -> Dict[str, Tuple[float, ...]]:
    """{group: (||tau_1||^2, ..., ||tau_T||^2)} with groups per ``scope``: ``block`` (``layers.<i>`` and every
    other tensor alone) or ``model`` (one group, key ``model``). Computed once per set of checkpoints."""
    return _squared_norms(base, experts, scope, stamp([base, *experts]))


@lru_cache(maxsize=8)
def _squared_norms(base: str, experts: Tuple[str, ...], scope: str, _stamp: tuple) -> Dict[str, Tuple[float, ...]]:
    key: Callable[[str], str] = block_of if scope == "block" else (lambda name: "model")
    sums: Dict[str, List[float]] = {}
    for name, b, tensors in stream_tensors(base, experts):
        acc = sums.setdefault(key(name), [0.0] * len(experts))
        for i, s in enumerate(_squares(b, tensors)):
            acc[i] += s
    return {k: tuple(v) for k, v in sums.items()}


def task_vector_norms(method: str, group, scope: str) -> Optional[List[float]]:
    """The experts' task-vector norms over the tensor's block or the whole model; None for ``scope="tensor"`` and
    for a tensor outside the blocks at ``block`` scope (its own group: the caller takes the tensor's norms)."""
    if scope == "tensor" or (scope == "block" and layer_index(group.metadata.name) is None):
        return None
    base, experts = group_folders(method, group, f"scope {scope!r}")
    table = squared_norms(base, experts, scope)
    key = "model" if scope == "model" else block_of(group.metadata.name)
    if key not in table:
        raise ConfigError(f"{method}: tensor {group.metadata.name!r} is not in {base}'s checkpoint; "
                          f"cannot take its {scope} norm")
    return [s ** 0.5 for s in table[key]]
