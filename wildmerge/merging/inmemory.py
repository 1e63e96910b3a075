"""Candidate merges in memory: base and experts loaded once, each candidate merged tensor by tensor.

A hyperparameter sweep scores many merges of the same models; writing each to disk and reading it back costs more
than the merge itself. ``CandidateMerger`` keeps every checkpoint's tensors in memory and runs the recipe's own
mergekit merge-method object on a ``TensorGroup`` per tensor, all of them in one call (mergekit's multi-tensor entry
point, as its ``merge_state_dicts``: wildmerge's methods then merge the large CPU matrices side by side, mergekit's run
them one by one), each as wildmerge's merges run it (tests compare the two),
so what a sweep scores is what ``wildmerge merge`` writes from the selected recipe: ``mergekit-yaml``'s bytes except
TIES's trim, which selects in linear time there (``plugins/trim.py``). An expert with added tokens is held on the
base's tokens, as a recipe's ``tokenizer: {source: base}`` merges it.
"""

from typing import Dict, Optional

from wildmerge.checkpoints import on_base_tokens, read_config, resized_rows, weight_files
from wildmerge.errors import ConfigError, WildmergeError
from wildmerge.plugins.layerwise.methods import LAYERWISE_METHODS
from wildmerge.plugins.model_pass import FolderName

_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float64"}


def _load(path, device: str) -> dict:
    from safetensors.torch import load_file

    tensors = {}
    for f in weight_files(path):
        tensors.update(load_file(str(f), device=device))
    return tensors


def _vocabulary_axes(base_path) -> Dict[str, Optional[int]]:
    """{tensor name: vocabulary axis} from mergekit's architecture tables (empty when it does not know the model)."""
    from mergekit.architecture import arch_info_for_config
    from transformers import AutoConfig

    arch = arch_info_for_config(AutoConfig.from_pretrained(base_path))
    if arch is None:
        return {}
    config = AutoConfig.from_pretrained(base_path)
    return {w.name: w.vocabulary_axis for w in arch.all_weights(config)}


class CandidateMerger:
    """Merges recipes over one base and a fixed set of experts without writing checkpoints."""

    def __init__(self, base_path: str, experts: Dict[str, str], device: str = "cpu"):
        import torch

        self.device = torch.device(device)
        self.base_path = base_path
        self.folders = dict(experts)  # each input's name carries its folder (model_pass.FolderName): LiNeS and the
        # per-block / per-model norms read the checkpoints of exactly these inputs
        self.expert_names = list(experts)
        self.base = _load(base_path, device)
        resized = resized_rows(base_path, experts)  # added tokens: read on the base's tokens (tokenizer source=base)
        self.experts = {name: {k: on_base_tokens(v, *resized.get(name, (None, None)))
                               for k, v in _load(path, device).items()} for name, path in experts.items()}
        for name, tensors in self.experts.items():
            if set(tensors) != set(self.base):
                missing = sorted(set(self.base) - set(tensors))[:3]
                raise WildmergeError(f"expert {name!r} does not hold the base's tensors (missing e.g. {missing}); "
                                     f"is it a fine-tune of this base?")
        self.vocabulary_axis = _vocabulary_axes(base_path)
        self.out_dtype = read_config(base_path).get("dtype") or read_config(base_path).get("torch_dtype")

    def method(self, recipe: dict):
        import mergekit.merge_methods as merge_methods

        from wildmerge import _autoload

        _autoload.install()  # our methods are in mergekit's registry even from a source checkout
        name = recipe.get("merge_method")
        if name in LAYERWISE_METHODS:
            raise ConfigError(f"merge method {name!r} runs layer by layer on calibration data, not per tensor; "
                              f"it cannot be merged in memory for a sweep: tune a per-tensor method")
        try:
            return merge_methods.get(name)
        except Exception:
            raise ConfigError(f"unknown merge method {name!r} in the recipe") from None

    def bound_parameters(self, recipe: dict) -> dict:
        """mergekit's parameters as the graph hands them over: shared scalars, per-model ``{expert: value}``."""
        params = dict(recipe.get("parameters") or {})
        models = recipe.get("models") or []
        names = [m["model"] for m in models]
        if names != self.expert_names:
            raise ConfigError(f"the recipe's models {names} are not the loaded experts {self.expert_names}")
        per_model: Dict[str, dict] = {}
        for m in models:
            for key, value in (m.get("parameters") or {}).items():
                per_model.setdefault(key, {})[m["model"]] = value
        for key, value in {**params, **{k: v for d in per_model.values() for k, v in d.items()}}.items():
            if isinstance(value, (list, dict)):
                raise ConfigError(f"parameter {key!r} = {value!r}: gradients / per-layer values are not supported "
                                  f"in an in-memory sweep; give one number")
        return {**params, **per_model}

    def merge(self, recipe: dict) -> dict:
        """{tensor name: merged tensor} of the recipe, in the recipe's ``out_dtype`` (else the base's dtype)."""
        import torch

        from wildmerge.plugins.trim import linear_time_trim

        method = self.method(recipe)
        parameters = self.bound_parameters(recipe)
        dtype = getattr(torch, _DTYPES.get(recipe.get("dtype") or "float32", "float32"))
        out_name = recipe.get("out_dtype") or self.out_dtype
        out_dtype = getattr(torch, _DTYPES[out_name]) if out_name in _DTYPES else None
        by_out_dtype: Dict[torch.dtype, list] = {}  # one call per output dtype (the base's, when the recipe has none)
        for name, base in self.base.items():
            by_out_dtype.setdefault(out_dtype or base.dtype, []).append(name)
        merged = {}
        # every tensor in one call: wildmerge's methods merge the large ones side by side (groups_side_by_side)
        with linear_time_trim(), torch.no_grad():
            for out, names in by_out_dtype.items():
                merged.update(zip(names, method([self._group(name) for name in names], parameters=parameters,
                                                dtype=dtype, out_dtype=out)))
        return {name: merged[name] for name in self.base}

    def _group(self, name: str):
        from mergekit.merge_methods.base import TensorEntry, TensorGroup, TensorMetadata

        entries = [TensorEntry(id=FolderName("base", self.base_path), tensor=self.base[name], is_base=True)]
        entries += [TensorEntry(id=FolderName(e, self.folders[e]), tensor=self.experts[e][name])
                    for e in self.expert_names]
        return TensorGroup(entries=tuple(entries),
                           metadata=TensorMetadata(name=name, vocabulary_axis=self.vocabulary_axis.get(name)))
