"""What the layer-wise driver needs to know about a decoder LLM: its blocks, linear groups and layer inputs.

Modules in one group share an input, so they are merged from one set of Grams (RegMean's solve depends on a
layer's inputs only). Groups are listed in forward order inside a block: a forward pass that stops at a group's
first module has already gone through every earlier group.
"""

import contextlib
from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch
from torch import nn

from wildmerge.errors import WildmergeError

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")

GROUPS: List[Tuple[str, Tuple[str, ...]]] = [
    ("qkv", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
    ("o", ("self_attn.o_proj",)),
    ("up", ("mlp.gate_proj", "mlp.up_proj")),
    ("down", ("mlp.down_proj",)),
]


def block_prefix(k: int) -> str:
    return f"model.layers.{k}."


def linear_weight_names(k: int) -> Dict[str, List[str]]:
    """group name -> full tensor names of that group's linear weights in block k."""
    return {g: [f"{block_prefix(k)}{m}.weight" for m in mods] for g, mods in GROUPS}


def check_supported(config) -> None:
    if getattr(config, "model_type", None) not in SUPPORTED:
        raise WildmergeError(
            f"architecture {getattr(config, 'model_type', '?')!r} is not supported by the layer-wise merge "
            f"(RegMean / Chain of Merges); supported decoder families: {', '.join(SUPPORTED)}"
        )


class _Stop(Exception):
    pass


class _Recorder(nn.Module):
    """Stands in for decoder layer k: keeps the keyword arguments the model builds for it (mask, RoPE)."""

    def __init__(self, k: int, last: bool, sink: Dict[int, dict]):
        super().__init__()
        self.k, self.last, self.sink = k, last, sink

    def forward(self, hidden_states, **kwargs):
        self.sink[self.k] = {n: v for n, v in kwargs.items() if n not in ("cache", "past_key_values", "use_cache")}
        if self.last:
            raise _Stop
        return hidden_states


@dataclass
class DecoderSkeleton:
    """The weightless parts of a decoder: per-layer kwargs builder and decoder-layer factory."""

    config: object
    model: nn.Module  # the inner ``model.model`` with layers replaced by recorders (meta weights)
    layer_cls: type

    @classmethod
    def build(cls, config, device) -> "DecoderSkeleton":
        from transformers import AutoModel

        check_supported(config)
        with torch.device("meta"):
            inner = AutoModel.from_config(config)
        layer_cls = type(inner.layers[0])
        with torch.device(device):
            rotary = type(inner.rotary_emb)(config=config)
        inner.rotary_emb = rotary
        return cls(config=config, model=inner, layer_cls=layer_cls)

    def layer_kwargs(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor) -> List[dict]:
        """The kwargs each decoder layer receives for this batch (causal + padding mask, RoPE, positions)."""
        n = self.config.num_hidden_layers
        sink: Dict[int, dict] = {}
        self.model.layers = nn.ModuleList(_Recorder(k, k == n - 1, sink) for k in range(n))
        try:
            self.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask, use_cache=False)
        except _Stop:
            pass
        if len(sink) != n:
            raise RuntimeError(f"captured layer inputs for {len(sink)} of {n} layers")
        return [sink[k] for k in range(n)]

    def make_layer(self, k: int) -> nn.Module:
        with torch.device("meta"):
            layer = self.layer_cls(self.config, layer_idx=k)
        return layer.eval()


def load_block(layer: nn.Module, params: Dict[str, torch.Tensor], k: int) -> None:
    """Put one model's block-k tensors into the (shared) layer module without copying."""
    prefix = block_prefix(k)
    layer.load_state_dict({n[len(prefix) :]: t for n, t in params.items()}, strict=True, assign=True)


def run_layer(layer: nn.Module, hidden: torch.Tensor, kwargs: dict) -> torch.Tensor:
    out = layer(hidden, **kwargs)
    return out[0] if isinstance(out, tuple) else out


@contextlib.contextmanager
def input_hooks(layer: nn.Module, modules: Dict[str, str], on_input, stop_at: str = None):
    """Forward-pre-hooks calling ``on_input(group, x)`` for each group's first module; raise at ``stop_at``.
    A context manager: the hooks are removed when the block ends, whatever happens in it."""
    handles = []
    for group, mod_name in modules.items():
        module = layer.get_submodule(mod_name)

        def hook(_mod, args, group=group):
            on_input(group, args[0])
            if group == stop_at:
                raise _Stop

        handles.append(module.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def forward_until(layer, hidden, kwargs) -> None:
    """Run the layer, swallowing the stop signal of ``input_hooks``."""
    try:
        run_layer(layer, hidden, kwargs)
    except _Stop:
        pass
