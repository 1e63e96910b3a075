"""Merges that correct for unequal task-vector norms (the reality-check paper, "Model merging beyond image classification", App. B).

- ``norm_avg`` (NormAvg): every task vector rescaled to the smallest norm, then averaged:
  ``theta = theta_0 + lambda * (1/T) sum_t tau_t * min_j ||tau_j|| / ||tau_t||``.
- ``metagpt`` (MetaGPT, Eq. 4): norm-proportional weights ``w_t = ||tau_t||^p / sum_j ||tau_j||^p``,
  ``theta = theta_0 + lambda * sum_t w_t tau_t``; ``p = 1`` as printed in the reality-check paper, ``p = 2`` as in the MetaGPT paper.

``scope`` says over what the norms ``||tau_t||`` are taken (the reality-check paper, App. B and G):

- ``tensor`` (default): each weight tensor alone; needs nothing but the tensor mergekit hands over.
- ``block``: the paper's per-layer variant, the one in its tables: a layer is a transformer block with all its
  parameters flattened together (``model.layers.<i>.*``); every tensor outside the blocks (embeddings, final norm,
  lm_head) is its own group, as in the paper's Table 3.
- ``model``: the paper's full-model variant, one norm per expert over every tensor.

Block and model norms come from one streamed pass over the checkpoints before the first tensor is merged
(``model_pass.py``), kept for the rest of the merge.
"""

import dataclasses
from typing import Callable, List, Optional, Type

import torch
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from pydantic import Field
from typing_extensions import Literal

from wildmerge.plugins.method_params import MethodParams
from wildmerge.plugins.model_pass import task_vector_norms
from wildmerge.plugins.task_vector_method import TaskVectorMethod, all_zero

METAGPT_URL = "https://arxiv.org/abs/2406.11385"


class NormAvgParams(MethodParams):
    """NormAvg (the reality-check paper, App. B): average of task vectors rescaled to the smallest norm."""

    lambda_: float = Field(1.0, alias="lambda", ge=0.0, allow_inf_nan=False, description="scale of the merged update")
    scope: Literal["tensor", "block", "model"] = Field(
        "tensor", description="norms per weight tensor, per transformer block (the paper's per-layer variant) or "
                              "over the whole model")


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
    """``theta_0 + lambda * update(tau_1..tau_T, ||tau_1||..||tau_T||)``, norms in float64 over the ``scope``."""

    method_name: str
    method_pretty_name: str
    method_reference_url: Optional[str]
    kernel: Callable[..., torch.Tensor]  # (task vectors, their norms, every parameter but lambda and scope)
    params: Type[MethodParams]

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> Optional[torch.Tensor]:
        if all_zero(deltas):
            return None  # a zero task vector gives the base exactly
        norms = task_vector_norms(self.method_name, group, parameters["scope"])
        if norms is None:
            norms = [float(d.double().norm()) for d in deltas]
        if max(norms) == 0.0:
            return None
        extra = {k: parameters[k] for k in self.params.fields_by_name() if k not in ("lambda", "scope")}
        return parameters["lambda"] * self.kernel(deltas, norms, **extra)


NORM_AVG = NormMerge("norm_avg", "NormAvg", None,  # the reality-check paper is anonymous, under review
                      norm_avg_update, NormAvgParams)
METAGPT = NormMerge("metagpt", "MetaGPT", METAGPT_URL, metagpt_update, MetaGPTParams)
METHODS = (NORM_AVG, METAGPT)  # registered by registration.py
