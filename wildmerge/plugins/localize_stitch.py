"""Dataless Localize-and-Stitch (He et al. 2024, "Localize-and-Stitch: Efficient Model Merging via Sparse Task
Arithmetic"), as the mergekit method ``localize_stitch``.

Localize: each task's region is the top ``density`` share of its task vector by magnitude (the paper's data-free
variant; its data-based one, which trains the masks, is ``layerwise/localize_trained.py``). Stitch: ``theta =
theta_0 + lambda * sum_t gamma'_t * tau_t`` with ``gamma'_t = gamma_t / sum_j gamma_j`` where at least one task claims the entry, so
overlapping regions are averaged and the rest keeps the base. Elementwise, so every floating-point tensor gets it;
regions are chosen per tensor (mergekit hands a method one tensor at a time), where the paper ranks the whole model.
An entry a task leaves unchanged (exactly zero) claims nothing.
"""

import dataclasses
from typing import Sequence

import torch
from mergekit import sparsify
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from pydantic import Field

from wildmerge.plugins.method_params import MethodParams, per_model
from wildmerge.plugins.task_vector_method import TaskVectorMethod

LOCALIZE_STITCH_URL = "https://arxiv.org/abs/2408.13656"


class LocalizeStitchParams(MethodParams):
    """Dataless Localize-and-Stitch: ``theta_0 + lambda * stitch(top_density(w_t tau_t))``."""

    weight: float = per_model(1.0, ge=0.0, allow_inf_nan=False, description="per-expert scale of its task vector")
    lambda_: float = Field(1.0, alias="lambda", ge=0.0, allow_inf_nan=False,
                           description="scale of the stitched update (the paper stitches at 1)")
    density: float = Field(0.1, gt=0.0, le=1.0, description="share of each task vector localized, by magnitude")


class Stitch:
    """Stitch: ``sum_t kept_t / max(1, #{t: kept_t != 0})`` entry by entry, one localized task vector ``kept_t``
    (``gamma_t * tau_t``) at a time; the one rule of the dataless and the trained Localize-and-Stitch."""

    def __init__(self):
        self.total = self.count = None

    def add(self, kept: torch.Tensor) -> None:
        claimed = (kept != 0).to(kept.dtype)
        self.total = kept.clone() if self.total is None else self.total.add_(kept)
        self.count = claimed if self.count is None else self.count.add_(claimed)

    def result(self) -> torch.Tensor:
        return self.total / self.count.clamp(min=1)


def localize_stitch(deltas: Sequence[torch.Tensor], density: float) -> torch.Tensor:
    """``sum_t gamma_t tau_t / max(1, sum_t gamma_t)`` with ``gamma_t`` the non-zero top-``density`` entries of
    ``tau_t`` (mergekit's ``magnitude``, looked up per call: inside wildmerge's merges TIES' linear-time trim,
    plugins/trim.py)."""
    stitch = Stitch()
    for d in deltas:
        stitch.add(sparsify.magnitude(d, density))
    return stitch.result()


@dataclasses.dataclass(frozen=True)
class LocalizeStitch(TaskVectorMethod, GroupMergeMethod):
    """``theta_0 + lambda * localize_stitch(w_1 tau_1, ..., w_T tau_T)`` on every floating-point tensor."""

    method_name: str = "localize_stitch"
    method_pretty_name: str = "Localize-and-Stitch (dataless)"
    method_reference_url: str = LOCALIZE_STITCH_URL
    params: type = LocalizeStitchParams

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> torch.Tensor:
        return parameters["lambda"] * localize_stitch(deltas, parameters["density"])


LOCALIZE_STITCH = LocalizeStitch()
METHODS = (LOCALIZE_STITCH,)  # registered by registration.py
