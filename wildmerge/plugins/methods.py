"""wildmerge's per-tensor merge methods, as mergekit 0.1.5 methods.

- ``iso_c``, ``iso_cts``, ``tsv_m``: spectral merges of the task vectors ``delta_i = w_i (theta_i - theta_0)``.
- ``task_arithmetic_sb``, ``ties_sb``: mergekit's own Task Arithmetic / TIES (so they behave exactly like
  ``task_arithmetic`` / ``ties``) followed by Subspace Boosting of the merged update.

Which tensors get the spectral step: 2-D weight matrices. 1-D tensors (norms, biases) and tensors with a
vocabulary axis (embeddings, lm_head) follow plain task arithmetic instead: ``theta_0 + lambda * mean_w(delta_i)``
for the spectral merges, the unboosted TA/TIES result for the boosted ones. Override with ``spectral_vocab: true``
(vocabulary matrices get the spectral step too) and ``exclude: <regex>`` (matching tensor names are not treated).
"""

import dataclasses
import math
import re
from functools import cached_property
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from mergekit.merge_methods.base import (
    BasePolicy,
    GroupMergeMethod,
    InputContract,
    MergeMethodSpec,
    ParameterScope,
    ParameterSpec,
    TensorGroup,
)
from mergekit.merge_methods.generalized_task_arithmetic import ConsensusMethod, GeneralizedTaskArithmeticMerge
from mergekit.sparsify import SparsificationMethod
from typing_extensions import Literal

from wildmerge.errors import ConfigError
from wildmerge.plugins import spectral

ISO_URL = "https://arxiv.org/abs/2502.04959"
TSV_URL = "https://arxiv.org/abs/2412.00081"
SB_URL = "https://arxiv.org/abs/2506.16506"

_SPECTRAL_OPTIONS = (
    ParameterSpec("svd_precision", Literal["float32", "float64"], ParameterScope.SHARED, default="float64",
                  description="float64: float64 Gram + eigh (exact to the rank); float32: float32 Gram + eigh, "
                              "about 2x faster, approximate (drops directions under ~0.5% of s_1)"),
    ParameterSpec("rank_tol", Optional[float], ParameterScope.SHARED, default=None,
                  description="singular values <= rank_tol * s_1 count as zero (default max(m, n) * eps32)"),
    ParameterSpec("spectral_vocab", bool, ParameterScope.SHARED, default=False,
                  description="also apply the spectral step to embedding / lm_head matrices"),
    ParameterSpec("exclude", str, ParameterScope.SHARED, default="",
                  description="regex: matching tensor names get plain task arithmetic"),
)

# Valid ranges: name -> (low, low inclusive, high, high inclusive). Shared by the kernels and the recipe check.
RANGES: Dict[str, Tuple[float, bool, float, bool]] = {
    "lambda": (0.0, True, math.inf, False),
    "weight": (0.0, True, math.inf, False),
    "beta": (0.0, True, 1.0, True),
    "common_space_fraction": (0.0, False, 1.0, True),
    "rank_tol": (0.0, True, 1.0, False),
    "density": (0.0, False, 1.0, True),
}


def check_value(method: str, name: str, value: Any) -> None:
    """Raise ConfigError if ``value`` of parameter ``name`` is outside its valid range."""
    if name not in RANGES or value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    lo, lo_in, hi, hi_in = RANGES[name]
    ok = (value >= lo if lo_in else value > lo) and (value <= hi if hi_in else value < hi)
    if not ok or math.isnan(value):
        interval = f"{'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"
        raise ConfigError(f"{method}: parameter {name!r} = {value} is out of range; it must be in {interval}")


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


def spectral_eligible(group: TensorGroup, spectral_vocab: bool, exclude: str) -> bool:
    tensor = group.entries[0].tensor
    name = group.metadata.name or ""
    if tensor.ndim != 2 or (group.metadata.vocabulary_axis is not None and not spectral_vocab):
        return False
    return not (exclude and re.search(exclude, name))


def _check_all(method: str, parameters: Dict[str, Any], entries, names=None) -> None:
    for key, value in parameters.items():
        if names is not None and key not in names:
            continue
        if key in ("weight", "density") and not isinstance(value, (int, float)):
            for entry in entries:
                check_value(method, key, value[entry.id])
        else:
            check_value(method, key, value)
    if parameters.get("exclude") and (names is None or "exclude" in names):
        try:
            re.compile(parameters["exclude"])
        except re.error as exc:
            raise ConfigError(f"{method}: parameter 'exclude' is not a valid regex: {exc}") from None


# A spectral kernel maps the weighted task vectors (float, base-shaped) and the options to the merged update.
Kernel = Callable[..., torch.Tensor]


@dataclasses.dataclass(frozen=True)
class SpectralMerge(GroupMergeMethod):
    """``theta = theta_0 + lambda * kernel(w_1 delta_1, ..., w_T delta_T)`` on eligible matrices."""

    method_name: str
    method_pretty_name: str
    method_reference_url: str
    kernel: Kernel
    extra_parameters: Tuple[ParameterSpec, ...] = ()
    __wildmerge__ = True

    @cached_property
    def spec(self) -> MergeMethodSpec:
        return MergeMethodSpec(
            name=self.method_name,
            pretty_name=self.method_pretty_name,
            reference_url=self.method_reference_url,
            parameters=(
                ParameterSpec("weight", float, ParameterScope.NON_BASE, default=1.0,
                              description="per-expert scale of its task vector"),
                ParameterSpec("lambda", float, ParameterScope.SHARED, default=1.0,
                              description="scale of the merged update"),
                *self.extra_parameters,
                *_SPECTRAL_OPTIONS,
            ),
            contract=InputContract(base=BasePolicy.REQUIRED, min_non_base=1),
        )

    checked_parameters = (*RANGES, "exclude")

    def renamed(self, name: str) -> "SpectralMerge":
        return dataclasses.replace(self, method_name=name)

    def merge_group(self, group: TensorGroup, /, **parameters: Any) -> torch.Tensor:
        check_group(self.method_name, group)
        _check_all(self.method_name, parameters, group.non_base, names=self.checked_parameters)
        base = group.base.tensor
        if not base.is_floating_point() or not group.non_base:
            return base
        weights = [float(parameters["weight"][e.id]) for e in group.non_base]
        deltas = [w * (e.tensor.to(torch.float32) - base.to(torch.float32)) for w, e in zip(weights, group.non_base)]
        if all(not bool(d.any()) for d in deltas):
            return base.clone()  # a zero task vector gives the base exactly
        options = {k: parameters[k] for k in ("svd_precision", "rank_tol")}
        if spectral_eligible(group, parameters["spectral_vocab"], parameters["exclude"]):
            extra = {p.name: parameters[p.name] for p in self.extra_parameters}
            update = self.kernel(deltas, tol=options["rank_tol"], precision=options["svd_precision"], **extra)
        else:
            total = sum(weights)
            update = sum(deltas) / (total if abs(total) > 1e-12 else 1.0)
        return (base.to(update.dtype) + parameters["lambda"] * update).to(base.dtype)


def _iso_c(deltas, tol, precision):
    return spectral.isotropic(sum(deltas), tol=tol, precision=precision)  # no stacked copy of all K


def _iso_cts(deltas, tol, precision, common_space_fraction):
    return spectral.iso_cts(deltas, common_fraction=common_space_fraction, tol=tol, precision=precision)


def _tsv_m(deltas, tol, precision):
    return spectral.tsv_merge(deltas, tol=tol, precision=precision)


@dataclasses.dataclass(frozen=True)
class BoostedTaskArithmetic(GeneralizedTaskArithmeticMerge):
    """mergekit's Task Arithmetic / TIES, then Subspace Boosting of the merged update (Skorobogat et al. 2025).

    The base method runs unchanged (in float32), so with ``beta = 1`` the result is bit-for-bit the base method's.
    """

    __wildmerge__ = True
    # weight and lambda keep mergekit's TA/TIES semantics (a negative value negates a task): not range-checked
    checked_parameters = ("beta", "rank_tol", "density", "exclude")

    @cached_property
    def spec(self) -> MergeMethodSpec:
        base_spec = GeneralizedTaskArithmeticMerge.spec.func(self)
        beta = ParameterSpec("beta", float, ParameterScope.SHARED, default=0.2,
                             description="cumulative-energy cutoff; 1 = no boosting, 0 = all raised to s_1")
        return dataclasses.replace(base_spec, parameters=base_spec.parameters + (beta, *_SPECTRAL_OPTIONS))

    def renamed(self, name: str) -> "BoostedTaskArithmetic":
        return dataclasses.replace(self, method_name=name)

    def merge_group(self, group: TensorGroup, /, **parameters: Any) -> torch.Tensor:
        check_group(self.method_name, group)
        _check_all(self.method_name, parameters, group.non_base, names=self.checked_parameters)
        own = {k: parameters.pop(k) for k in ("beta", "svd_precision", "rank_tol", "spectral_vocab", "exclude")}
        merged = super().merge_group(group, **parameters)
        if own["beta"] >= 1.0 or not merged.is_floating_point():
            return merged
        if not spectral_eligible(group, own["spectral_vocab"], own["exclude"]):
            return merged
        base = group.base.tensor
        update = merged.to(torch.float32) - base.to(torch.float32)
        if not bool(update.any()):
            return merged
        correction = spectral.subspace_boost(update, own["beta"], tol=own["rank_tol"], precision=own["svd_precision"])
        return (merged.to(correction.dtype) + correction).to(base.dtype)


ISO_C = SpectralMerge("iso_c", "Iso-C", ISO_URL, _iso_c)
ISO_CTS = SpectralMerge(
    "iso_cts", "Iso-CTS", ISO_URL, _iso_cts,
    extra_parameters=(ParameterSpec("common_space_fraction", float, ParameterScope.SHARED, default=0.8,
                                    description="share of the rank given to the common subspace, in (0, 1]"),),
)
TSV_M = SpectralMerge("tsv_m", "TSV-Merge", TSV_URL, _tsv_m)
TASK_ARITHMETIC_SB = BoostedTaskArithmetic(
    consensus_method=None, sparsification_method=None, default_normalize=False, default_rescale=False,
    method_name="task_arithmetic_sb", method_pretty_name="Task Arithmetic + Subspace Boosting",
    method_reference_url=SB_URL,
)
TIES_SB = BoostedTaskArithmetic(
    consensus_method=ConsensusMethod.sum, sparsification_method=SparsificationMethod.magnitude,
    default_normalize=True, default_rescale=False,
    method_name="ties_sb", method_pretty_name="TIES + Subspace Boosting", method_reference_url=SB_URL,
)

ALL_METHODS = (ISO_C, ISO_CTS, TSV_M, TASK_ARITHMETIC_SB, TIES_SB)
