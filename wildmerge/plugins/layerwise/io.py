"""Streaming access to checkpoints for the layer-wise driver: one tensor at a time, straight from safetensors.

Only the tensors of the block being merged are ever in memory; everything else stays on disk. Checkpoints that
ship only pickle files are refused (untrusted input, see DESIGN.md).
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import torch

from wildmerge.checkpoints import on_base_tokens, tensor_index
from wildmerge.errors import WildmergeError
from wildmerge.hub import resolve_path


def resolve_model_path(ref, cache_dir=None, allow_pickle=False) -> str:
    """A local folder for a mergekit ``ModelReference`` (local path, ``demo:<name>`` or hub id at its revision)."""
    if getattr(ref, "lora", None) is not None:
        raise WildmergeError(f"{ref}: LoRA references (model+lora) are not supported by the layer-wise merge; "
                             f"merge the adapter into its model first (e.g. with peft's merge_and_unload)")
    return resolve_path(str(ref.model.path), ref.model.revision, cache_dir=cache_dir, allow_pickle=allow_pickle)


@dataclass
class WholeModelJob:
    """What an engine that runs whole models on each expert's data needs (Fisher, the trained Localize), validated
    beforehand by the driver; ``settings``: the method's parameter model; ``report``: the engine's diagnostics."""

    experts: List["Checkpoint"]  # with ``rows`` / ``vocab_size`` for an expert read on the base's tokens
    base: Optional["Checkpoint"]  # required by the trained Localize (the driver checks)
    batches: List[list]  # per expert: [(input_ids, attention_mask)] on the base's tokens
    config: object
    settings: object
    compute_dtype: torch.dtype = torch.float32  # whole models run in float32 (said in the diagnostics)
    device: str = "cpu"
    progress: bool = True
    report: Dict = field(default_factory=dict)


def load_eval_model(path, device: str, frozen: bool = False) -> torch.nn.Module:
    """A whole model in float32 on ``device``, in eval mode (dropout off: the deterministic model the data-based
    methods measure or train through); ``frozen``: no gradient for its own parameters (only what a method adds
    trains)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device)
    for p in model.parameters() if frozen else ():
        p.requires_grad_(False)
    return model.eval()


def parameter_aliases(model: torch.nn.Module) -> Dict[str, str]:
    """Every parameter name (tied ones too) -> the name ``named_parameters`` keeps for it."""
    first = {id(p): n for n, p in model.named_parameters()}
    return {n: first[id(p)] for n, p in model.named_parameters(remove_duplicate=False)}


class Checkpoint:
    """Tensor names -> safetensors file of one model folder, with per-tensor lazy reads.

    ``rows`` (from ``checkpoints.vocabulary_rows``) reads an expert with a resized vocabulary on the base's tokens: every tensor
    with ``vocab_size`` rows (embeddings, output head) is read at those rows."""

    def __init__(self, path: str, name: str = None, rows: Optional[torch.Tensor] = None,
                 vocab_size: Optional[int] = None):
        self.path = Path(path)
        self.name = name or str(path)
        self.files = tensor_index(self.path)  # refuses pickle-only checkpoints (untrusted input)
        self._handles: Dict[Path, object] = {}
        self.rows, self.vocab_size = rows, vocab_size

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
        t = on_base_tokens(t, self.rows, self.vocab_size)
        return t.to(device=device, dtype=dtype if (dtype is not None and t.is_floating_point()) else t.dtype)

    def close(self) -> None:
        self._handles.clear()
