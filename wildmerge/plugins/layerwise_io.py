"""Streaming access to checkpoints for the layer-wise driver: one tensor at a time, straight from safetensors.

Only the tensors of the block being merged are ever in memory; everything else stays on disk. Checkpoints that
ship only pickle files are refused (untrusted input, see DESIGN.md).
"""

import json
import os
from pathlib import Path
from typing import Dict, List

import torch

from wildmerge.checkpoints import weight_files
from wildmerge.errors import WildmergeError


def resolve_model_path(ref, cache_dir=None) -> str:
    """A local folder for a mergekit ``ModelReference`` (local path, ``demo:<name>`` or hub id)."""
    if getattr(ref, "lora", None) is not None:
        raise WildmergeError(f"{ref}: LoRA references (model+lora) are not supported by the layer-wise merge; "
                             f"merge the adapter into its model first (e.g. with peft's merge_and_unload)")
    path = str(ref.model.path)
    if os.path.isdir(path):
        return path
    if path.startswith("demo:"):
        from wildmerge.demo import resolve_demo_ref

        return resolve_demo_ref(path)
    try:
        return ref.local_path(cache_dir=cache_dir)
    except Exception as exc:
        raise WildmergeError(f"model {path!r} is neither a local folder nor a downloadable hub id ({exc}); "
                             f"download it first (huggingface-cli download {path})") from None


class Checkpoint:
    """Tensor names -> safetensors file of one model folder, with per-tensor lazy reads."""

    def __init__(self, path: str, name: str = None):
        self.path = Path(path)
        self.name = name or str(path)
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.files = {n: self.path / f for n, f in weight_map.items()}
        elif (self.path / "model.safetensors").is_file():
            from safetensors import safe_open

            single = self.path / "model.safetensors"
            with safe_open(str(single), framework="pt") as f:
                self.files = {n: single for n in f.keys()}
        else:
            weight_files(self.path)  # raises: only pickles (unsafe for untrusted checkpoints) or no weights at all
            raise WildmergeError(f"{self.name}: no model.safetensors or model.safetensors.index.json")
        self._handles: Dict[Path, object] = {}

    def names(self) -> List[str]:
        return list(self.files)

    def get(self, name: str, device="cpu", dtype=None) -> torch.Tensor:
        """One tensor; treat it as read-only (it may share memory with the file mapping)."""
        from safetensors import safe_open

        file = self.files.get(name)
        if file is None:
            raise WildmergeError(f"{self.name}: tensor {name!r} is missing; all models must share one architecture")
        if file not in self._handles:
            self._handles[file] = safe_open(str(file), framework="pt", device="cpu")
        t = self._handles[file].get_tensor(name)
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise WildmergeError(f"{self.name}: tensor {name!r} contains NaN or Inf")
        return t.to(device=device, dtype=dtype if (dtype is not None and t.is_floating_point()) else t.dtype)

    def close(self) -> None:
        self._handles.clear()
