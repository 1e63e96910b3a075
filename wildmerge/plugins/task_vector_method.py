"""What every wildmerge per-tensor method on task vectors shares: its mergekit spec, derived from its parameter
model, and the checks and early returns before any maths.

A method is then a frozen dataclass with the fields ``method_name``, ``method_pretty_name``,
``method_reference_url`` and ``params``, and a ``merge_group`` that starts with ``task_vectors``.
"""

import dataclasses
from functools import cached_property
from typing import Any, Dict, List, Optional

import torch
from mergekit.merge_methods.base import BasePolicy, InputContract, MergeMethodSpec, TensorGroup

from wildmerge.errors import ConfigError


class TaskVectorMethod:
    """Mixin for a ``GroupMergeMethod`` dataclass: ``spec`` and ``renamed`` from the fields above."""

    __wildmerge__ = True

    @cached_property
    def spec(self) -> MergeMethodSpec:
        return MergeMethodSpec(name=self.method_name, pretty_name=self.method_pretty_name,
                               reference_url=self.method_reference_url, parameters=self.params.parameter_specs(),
                               contract=InputContract(base=BasePolicy.REQUIRED, min_non_base=1))

    def renamed(self, name: str):
        return dataclasses.replace(self, method_name=name)

    def task_vectors(self, group: TensorGroup, parameters: Dict[str, Any],
                     weights: Optional[List[float]] = None) -> Optional[List[torch.Tensor]]:
        """The float32 task vectors ``w_i (theta_i - theta_0)`` after the checks, or None when there is nothing to
        merge (a non-float tensor, no expert): then the base is the answer."""
        check_group(self.method_name, group)
        self.params.check_resolved(self.method_name, parameters)
        base = group.base.tensor
        if not base.is_floating_point() or not group.non_base:
            return None
        weights = weights or [1.0] * len(group.non_base)
        return [w * (e.tensor.to(torch.float32) - base.to(torch.float32)) for w, e in zip(weights, group.non_base)]


def check_group(method: str, group: TensorGroup) -> None:
    """NaN/Inf and shape mismatches, named by tensor and model, before any maths."""
    name = group.metadata.name or "<unnamed tensor>"
    base_shape = group.base.tensor.shape if group.base is not None else group.entries[0].tensor.shape
    for entry in group.entries:
        if entry.tensor.shape != base_shape:
            raise ConfigError(f"{method}: tensor {name!r} of model {entry.id} has shape {tuple(entry.tensor.shape)}, "
                              f"expected {tuple(base_shape)} like the base: the models are not fine-tunes of one base")
        if entry.tensor.is_floating_point() and not bool(torch.isfinite(entry.tensor).all()):
            raise ConfigError(f"{method}: tensor {name!r} of model {entry.id} contains NaN or Inf; "
                              "this checkpoint is corrupt or diverged, remove it from the recipe")
