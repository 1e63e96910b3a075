"""wildmerge's per-tensor merge methods, as mergekit 0.1.5 methods.

- ``iso_c``, ``iso_cts``, ``tsv_m``: spectral merges of the task vectors ``delta_i = w_i (theta_i - theta_0)``.
- ``task_arithmetic_sb``, ``ties_sb``: mergekit's Task Arithmetic / TIES followed by Subspace Boosting of the merged
  update; with ``beta = 1`` mergekit's own result, byte for byte.

Which tensors get the spectral step: 2-D weight matrices. 1-D tensors (norms, biases) and tensors with a
vocabulary axis (embeddings, lm_head) follow plain task arithmetic instead: ``theta_0 + lambda * mean_w(delta_i)``
for the spectral merges, the unboosted TA/TIES result for the boosted ones. Override with ``spectral_vocab: true``
(vocabulary matrices get the spectral step too) and ``exclude: <regex>`` (matching tensor names are not treated).

Each method's parameters, defaults and ranges are one pydantic model below (``IsoCParams`` ... ``TiesSBParams``);
mergekit's ParameterSpec tuples and the recipe check (``validation.py``) are derived from it.
"""

import dataclasses
import re
from functools import cached_property
from typing import Any, Callable, Optional, Type

import torch
from mergekit.merge_methods.base import GroupMergeMethod, MergeMethodSpec, TensorGroup
from mergekit.merge_methods.generalized_task_arithmetic import ConsensusMethod, GeneralizedTaskArithmeticMerge
from mergekit.sparsify import SparsificationMethod
from pydantic import AfterValidator, Field
from typing_extensions import Annotated, Literal

from wildmerge.checkpoints import all_finite
from wildmerge.plugins import spectral
from wildmerge.plugins.method_params import MethodParams, per_model
from wildmerge.plugins.task_vector_method import (TaskVectorMethod, all_zero, check_finite, check_shapes,
                                                  groups_side_by_side, summed_task_vectors)

ISO_URL = "https://arxiv.org/abs/2502.04959"
TSV_URL = "https://arxiv.org/abs/2412.00081"
SB_URL = "https://arxiv.org/abs/2506.16506"

Precision = Literal["float32", "float64"]
TopkSolver = Literal["auto", "exact", "randomized", "randomized_batched"]  # batched: one GEMM chain for all tasks (GPU)


def _valid_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regex: {exc}") from None
    return pattern


class SpectralOptions(MethodParams):
    """How the SVD-based step runs and which tensors it touches (Iso-C, Iso-CTS, TSV-M and Subspace Boosting)."""

    svd_precision: Precision = Field(
        "float64", description="float64: float64 Gram + eigh (exact to the rank); float32: float32 Gram + eigh, "
                               "about 2x faster, approximate (drops directions under ~0.5% of s_1)")
    rank_tol: Optional[float] = Field(
        None, ge=0.0, lt=1.0,
        description="singular values <= rank_tol * s_1 count as zero (default max(m, n) * eps32)")
    spectral_vocab: bool = Field(False, description="also apply the spectral step to embedding / lm_head matrices")
    exclude: Annotated[str, AfterValidator(_valid_regex)] = Field(
        "", description="regex: matching tensor names get plain task arithmetic")


class ScaledTaskVectors(MethodParams):
    """``theta_0 + lambda * merge(w_1 delta_1, ..., w_T delta_T)``; negative scales are refused (use TA for that)."""

    weight: float = per_model(1.0, ge=0.0, allow_inf_nan=False, description="per-expert scale of its task vector")
    lambda_: float = Field(1.0, alias="lambda", ge=0.0, allow_inf_nan=False, description="scale of the merged update")


# SpectralOptions is listed first so that its fields come last (pydantic orders fields from the last base on).
class IsoCParams(SpectralOptions, ScaledTaskVectors):
    """Iso-C (Marczak et al. 2025, arXiv 2502.04959)."""


def _topk_solver_field():
    return Field("auto", description="how each task's top singular directions are found: auto (exact on the CPU, "
                                     "randomized_batched on a GPU), exact (Gram + eigh), randomized (subspace "
                                     "iteration, approximate) or randomized_batched (the same, all tasks at once)")


class IsoCTSParams(IsoCParams):
    """Iso-CTS (Marczak et al. 2025, arXiv 2502.04959): a common subspace plus task-specific subspaces."""

    common_space_fraction: float = Field(
        0.8, gt=0.0, le=1.0, description="share of the rank given to the common subspace")
    topk_solver: TopkSolver = _topk_solver_field()


class TSVMParams(SpectralOptions, ScaledTaskVectors):
    """TSV-Merge (Gargiulo et al. 2025, arXiv 2412.00081)."""

    topk_solver: TopkSolver = _topk_solver_field()


class TaskArithmeticParams(MethodParams):
    """The parameters mergekit 0.1.5 declares for ``task_arithmetic`` / ``ties`` (its GeneralizedTaskArithmeticMerge).

    ``weight`` and ``lambda`` keep mergekit's semantics: no range (a negative value negates a task), and ``weight``
    has no default. ``density`` is the kept share of each task vector.
    """

    int8_mask: bool = False
    normalize: bool = False
    rescale: bool = False
    lambda_: float = Field(1.0, alias="lambda")
    weight: float = per_model()
    density: float = per_model(1.0, gt=0.0, le=1.0)


class _Boosted(TaskArithmeticParams):
    beta: float = Field(0.2, ge=0.0, le=1.0,
                        description="cumulative-energy cutoff; 1 = no boosting, 0 = all raised to s_1")


class TaskArithmeticSBParams(SpectralOptions, _Boosted):
    """Task Arithmetic + Subspace Boosting (Skorobogat et al. 2025, arXiv 2506.16506)."""


class TiesSBParams(TaskArithmeticSBParams):
    """TIES + Subspace Boosting: mergekit's TIES normalises by default."""

    normalize: bool = True


def spectral_eligible(group: TensorGroup, spectral_vocab: bool, exclude: str) -> bool:
    tensor = group.entries[0].tensor
    name = group.metadata.name or ""
    if tensor.ndim != 2 or (group.metadata.vocabulary_axis is not None and not spectral_vocab):
        return False
    return not (exclude and re.search(exclude, name))


# A spectral kernel (spectral.py) maps the weighted task vectors (float, base-shaped) to the merged update.
Kernel = Callable[..., torch.Tensor]


@dataclasses.dataclass(frozen=True)
class SpectralMerge(TaskVectorMethod, GroupMergeMethod):
    """``theta = theta_0 + lambda * kernel(w_1 delta_1, ..., w_T delta_T)`` on eligible matrices.

    The kernel gets the method's parameters by their recipe names, less the weights, ``lambda`` and the tensor
    selection (``spectral_vocab``, ``exclude``): e.g. ``rank_tol``, ``svd_precision``, ``common_space_fraction``.
    """

    method_name: str
    method_pretty_name: str
    method_reference_url: str
    kernel: Kernel
    params: Type[MethodParams] = IsoCParams
    on_sum: bool = False  # the kernel takes the summed task vectors (Iso-C), not the list

    def takes_sum(self, group: TensorGroup, parameters) -> bool:
        """The kernel's own input when it takes the sum; the plain mean of every tensor without the spectral step."""
        return self.on_sum or not spectral_eligible(group, parameters["spectral_vocab"], parameters["exclude"])

    def merged_sum(self, group: TensorGroup, total, weights, parameters) -> torch.Tensor:
        if spectral_eligible(group, parameters["spectral_vocab"], parameters["exclude"]):
            update = self._kernel(total, parameters)
        else:  # ``sum(deltas) / sum(weights)``: ``0 + d_1`` and ``d_1`` differ at most in the sign of a zero, which
            # ``theta_0 + update`` keeps only where theta_0 is -0.0 and every scaled task vector is -0.0
            weight = sum(weights)
            update = total / (weight if abs(weight) > 1e-12 else 1.0)
        return _scaled_update(update, parameters)

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> Optional[torch.Tensor]:
        if all_zero(deltas):
            return None  # a zero task vector gives the base exactly
        return _scaled_update(self._kernel(deltas, parameters), parameters)

    def _kernel(self, data, parameters) -> torch.Tensor:
        return self.kernel(data, **{k: parameters[k] for k in self.params.fields_by_name() if k not in _NOT_KERNEL})


def _scaled_update(update: torch.Tensor, parameters) -> torch.Tensor:
    return update if parameters["lambda"] == 1.0 else parameters["lambda"] * update  # 1.0 * x is x


# What picks and scales the tensors; every other parameter is the kernel's keyword of the same name.
_NOT_KERNEL = (*ScaledTaskVectors.fields_by_name(), "spectral_vocab", "exclude")


@dataclasses.dataclass(frozen=True)
class BoostedTaskArithmetic(GeneralizedTaskArithmeticMerge):
    """mergekit's Task Arithmetic / TIES, then Subspace Boosting of the merged update (Skorobogat et al. 2025).

    With ``beta = 1``, and on every tensor that gets no spectral step, the base method runs unchanged, so the result
    is bit-for-bit the base method's. Where Task Arithmetic's update is boosted, it is computed as mergekit writes
    it (``lambda * sum_i w_i tau_i``, divided by ``sum_i w_i`` with ``normalize``) but in float32 and in one buffer
    (``summed_task_vectors``, as Iso-C sums them) instead of mergekit's stack of every task vector (a quarter of its
    time on tensors in memory; the whole merge 0.90-1.00x, benchmarks/HISTORY.md): the boosted result differs from
    boosting mergekit's rounded tensor by float32 round-off only.
    """

    params: Type[MethodParams] = TaskArithmeticSBParams
    __wildmerge__ = True
    merges_side_by_side = True  # several tensors at once (``_execute``; ``tensors_side_by_side`` in mergekit-yaml)

    @cached_property
    def spec(self) -> MergeMethodSpec:
        base_spec = GeneralizedTaskArithmeticMerge.spec.func(self)
        return dataclasses.replace(base_spec, parameters=self.params.parameter_specs())

    def renamed(self, name: str) -> "BoostedTaskArithmetic":
        return dataclasses.replace(self, method_name=name)

    def _execute(self, groups, parameters, options, *, input_dtypes, out_dtype=None):
        return groups_side_by_side(super()._execute, groups, parameters, options, input_dtypes, out_dtype)

    def merge_group(self, group: TensorGroup, /, **parameters: Any) -> torch.Tensor:
        """Without sparsification a NaN / Inf in any input reaches the merged tensor (``w * NaN`` is NaN even for
        ``w = 0``), so the check reads that one tensor and names the model only when it is not finite; TIES' top-k
        could drop a NaN, so there every input is checked first."""
        check_shapes(self.method_name, group)
        if self.sparsification_method is not None:
            check_finite(self.method_name, group)
        self.params.check_resolved(self.method_name, parameters)
        own = {k: parameters.pop(k) for k in ("beta", *SpectralOptions.fields_by_name())}
        base = group.base.tensor
        if (own["beta"] < 1.0 and self.sparsification_method is None and self.consensus_method is None
                and base.is_floating_point() and group.non_base
                and spectral_eligible(group, own["spectral_vocab"], own["exclude"])):
            return self._boosted_sum(group, parameters, own)
        merged = super().merge_group(group, **parameters)
        if self.sparsification_method is None and merged.is_floating_point() and not all_finite(merged):
            check_finite(self.method_name, group)
        if own["beta"] >= 1.0 or not merged.is_floating_point():
            return merged
        if not spectral_eligible(group, own["spectral_vocab"], own["exclude"]):
            return merged
        update = merged.to(torch.float32) - base.to(torch.float32)
        if not bool(update.any()):
            return merged
        correction = spectral.subspace_boost(update, beta=own["beta"], rank_tol=own["rank_tol"],
                                             svd_precision=own["svd_precision"])
        return (merged.to(correction.dtype) + correction).to(base.dtype)

    def _boosted_sum(self, group: TensorGroup, parameters, own) -> torch.Tensor:
        """Task Arithmetic's update in float32, summed in one buffer, then boosted: ``theta_0 + u + SB(u)``."""
        base32 = group.base.tensor.to(torch.float32)
        weights = [float(parameters["weight"][e.id]) for e in group.non_base]
        update = summed_task_vectors(base32, [e.tensor for e in group.non_base], weights)
        if not all_finite(update):  # a NaN / Inf in any input makes the sum non-finite: name the model
            check_finite(self.method_name, group)
        divisor = sum(weights)
        if parameters["normalize"] and abs(divisor) >= 1e-8:  # mergekit's rule: a near-zero sum divides by 1
            update /= divisor
        if parameters["lambda"] != 1:
            update *= parameters["lambda"]
        if not bool(update.any()):
            return group.base.tensor.clone()
        correction = spectral.subspace_boost(update, beta=own["beta"], rank_tol=own["rank_tol"],
                                             svd_precision=own["svd_precision"])
        return (base32 + update + correction).to(group.base.tensor.dtype)


def _boosted(params: Type[TaskArithmeticSBParams], **kwargs) -> BoostedTaskArithmetic:
    """A boosted TA/TIES whose mergekit defaults (normalize, rescale) are taken from its parameter model."""
    defaults = params.defaults()
    return BoostedTaskArithmetic(default_normalize=defaults["normalize"], default_rescale=defaults["rescale"],
                                 params=params, method_reference_url=SB_URL, **kwargs)


ISO_C = SpectralMerge("iso_c", "Iso-C", ISO_URL, spectral.iso_c_of_sum, IsoCParams, on_sum=True)
ISO_CTS = SpectralMerge("iso_cts", "Iso-CTS", ISO_URL, spectral.iso_cts, IsoCTSParams)
TSV_M = SpectralMerge("tsv_m", "TSV-Merge", TSV_URL, spectral.tsv_m, TSVMParams)
TASK_ARITHMETIC_SB = _boosted(
    TaskArithmeticSBParams, consensus_method=None, sparsification_method=None,
    method_name="task_arithmetic_sb", method_pretty_name="Task Arithmetic + Subspace Boosting",
)
TIES_SB = _boosted(
    TiesSBParams, consensus_method=ConsensusMethod.sum, sparsification_method=SparsificationMethod.magnitude,
    method_name="ties_sb", method_pretty_name="TIES + Subspace Boosting",
)

METHODS = (ISO_C, ISO_CTS, TSV_M, TASK_ARITHMETIC_SB, TIES_SB)  # registered by registration.py
