"""Merges that correct for unequal task-vector norms (the reality-check paper, "Model merging beyond image classification", App. B).

- ``norm_avg`` (NormAvg): every task vector rescaled to the smallest norm, then averaged:
  ``theta = theta_0 + lambda * (1/T) sum_t tau_t * min_j ||tau_j|| / ||tau_t||``.
- ``metagpt`` (MetaGPT, Eq. 4): norm-proportional weights ``w_t = ||tau_t||^p / sum_j ||tau_j||^p``,
  ``theta = theta_0 + lambda * sum_t w_t tau_t``; ``p = 1`` as printed in the reality-check paper, ``p = 2`` as in the MetaGPT paper.

Norms are taken per tensor: mergekit hands a method one tensor at a time, so a "layer" here is one weight tensor
(the paper's per-layer unit is a transformer block; block-level norms are not implemented).
"""

import dataclasses
from typing import Any, Callable, List, Optional, Type

import torch
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from pydantic import Field

from wildmerge.plugins.method_params import MethodParams
from wildmerge.plugins.task_vector_method import TaskVectorMethod

METAGPT_URL = "https://arxiv.org/abs/2406.11385"


class NormAvgParams(MethodParams):
    """NormAvg (the reality-check paper, App. B): average of task vectors rescaled to the smallest norm."""

    lambda_: float = Field(1.0, alias="lambda", ge=0.0, allow_inf_nan=False, description="scale of the merged update")


class MetaGPTParams(NormAvgParams):
    """MetaGPT (Zhou et al. 2024; the reality-check paper Eq. 4): task vectors weighted by their share of the norm."""

    power: float = Field(1.0, gt=0.0, le=4.0, description="norm exponent p: 1 as in the reality-check paper, 2 as in MetaGPT")


def norm_avg_update(deltas: List[torch.Tensor], norms: List[float]) -> torch.Tensor:
    smallest = min(norms)
    scaled = [d * (smallest / n) for d, n in zip(deltas, norms) if n > 0]
    return sum(scaled, torch.zeros_like(deltas[0])) / len(deltas)


def metagpt_update(deltas: List[torch.Tensor], norms: List[float], power: float) -> torch.Tensor:
    mass = [n ** power for n in norms]
    total = sum(mass)
    return sum((d * (m / total) for d, m in zip(deltas, mass)), torch.zeros_like(deltas[0]))


@dataclasses.dataclass(frozen=True)
class NormMerge(TaskVectorMethod, GroupMergeMethod):
    """``theta_0 + lambda * update(tau_1..tau_T, ||tau_1||..||tau_T||)``, norms computed in float64 per tensor."""

    method_name: str
    method_pretty_name: str
    method_reference_url: Optional[str]
    update: Callable[..., torch.Tensor]
    params: Type[MethodParams]

    def merge_group(self, group: TensorGroup, /, **parameters: Any) -> torch.Tensor:
        base = group.base.tensor
        deltas = self.task_vectors(group, parameters)
        if deltas is None:
            return base
        norms = [float(d.double().norm()) for d in deltas]
        if max(norms) == 0.0:
            return base.clone()  # a zero task vector gives the base exactly
        extra = {k: parameters[k] for k in self.params.fields_by_name() if k != "lambda"}
        update = self.update(deltas, norms, **extra)
        return (base.to(torch.float32) + parameters["lambda"] * update).to(base.dtype)


NORM_AVG = NormMerge("norm_avg", "NormAvg", None,  # the reality-check paper is anonymous, under review
                      norm_avg_update, NormAvgParams)
METAGPT = NormMerge("metagpt", "MetaGPT", METAGPT_URL, metagpt_update, MetaGPTParams)
NORM_METHODS = (NORM_AVG, METAGPT)
