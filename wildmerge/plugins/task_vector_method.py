"""The template of every wildmerge per-tensor method on task vectors: its mergekit spec, derived from its parameter
model, and ``merge_group``: the checks, the early returns, the task vectors, then the method's own step.

A method is then a frozen dataclass with the fields ``method_name``, ``method_pretty_name``,
``method_reference_url`` and ``params`` (its parameters, defaults and ranges: a ``MethodParams`` model), and a
``merged_update`` that turns the task vectors into the scaled update added to the base (calling its kernel with
the checked parameters). A method that needs only the task vectors' sum for a tensor (Iso-C; the plain mean of the
spectral methods' vectors and vocabulary matrices) says so in ``takes_sum`` and gets it in ``merged_sum``: the
sum is then accumulated in one buffer, no task vector is kept, and the NaN / Inf check reads the sum instead of
every input (one pass over one tensor instead of one per model; a non-finite sum is checked model by model).
"""

import dataclasses
from functools import cached_property
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from mergekit.merge_methods.base import BasePolicy, InputContract, MergeMethodSpec, TensorGroup

from wildmerge.checkpoints import all_finite
from wildmerge.errors import ConfigError
from wildmerge.plugins.kernel_pool import large_ones_side_by_side, worth_a_thread


class TaskVectorMethod:
    """Mixin for a ``GroupMergeMethod`` dataclass: ``spec`` and ``renamed`` from the fields above, and the
    ``merge_group`` every method shares."""

    __wildmerge__ = True
    merges_side_by_side = True  # several tensors at once (``_execute``; ``tensors_side_by_side`` in mergekit-yaml)

    @cached_property
    def spec(self) -> MergeMethodSpec:
        return MergeMethodSpec(name=self.method_name, pretty_name=self.method_pretty_name,
                               reference_url=self.method_reference_url, parameters=self.params.parameter_specs(),
                               contract=InputContract(base=BasePolicy.REQUIRED, min_non_base=1))

    def renamed(self, name: str):
        return dataclasses.replace(self, method_name=name)

    def merge_group(self, group: TensorGroup, /, **parameters: Any) -> torch.Tensor:
        """``theta_0 + merged_update(w_1 tau_1, ..., w_T tau_T)`` after the checks, in float32 and back to the base's
        dtype; the base itself when there is nothing to merge (a non-float tensor, no expert), an exact copy of it
        when the update is zero (``merged_update`` returns None; with ``takes_sum``, when the sum is zero)."""
        check_shapes(self.method_name, group)
        self.params.check_resolved(self.method_name, parameters)
        base = group.base.tensor
        if not base.is_floating_point() or not group.non_base:
            check_finite(self.method_name, group)
            return base
        weights = [float(parameters["weight"][e.id]) if "weight" in parameters else 1.0 for e in group.non_base]
        base32 = base.to(torch.float32)
        if self.takes_sum(group, parameters):
            total = summed_task_vectors(base32, [e.tensor for e in group.non_base], weights)
            if not all_finite(total):  # a NaN / Inf in any input makes the sum non-finite: name the model
                check_finite(self.method_name, group)
            update = self.merged_sum(group, total, weights, parameters) if bool(total.any()) else None
        else:
            check_finite(self.method_name, group)
            deltas = [_scaled(w, e.tensor.to(torch.float32) - base32) for w, e in zip(weights, group.non_base)]
            update = self.merged_update(group, deltas, weights, parameters)
        if update is None:
            return base.clone()
        return (base.to(update.dtype) + update).to(base.dtype)

    def _execute(self, groups, parameters, options, *, input_dtypes, out_dtype=None):
        return groups_side_by_side(super()._execute, groups, parameters, options, input_dtypes, out_dtype)

    def takes_sum(self, group: TensorGroup, parameters: Dict[str, Any]) -> bool:
        """Whether this tensor's update depends on the task vectors only through their sum (``merged_sum``)."""
        return False

    def merged_sum(self, group: TensorGroup, total: torch.Tensor, weights: List[float],
                   parameters: Dict[str, Any]) -> Optional[torch.Tensor]:
        """The update from ``sum_i w_i tau_i`` (not all zero) when ``takes_sum``; ``lambda`` applied."""
        raise NotImplementedError

    def merged_update(self, group: TensorGroup, deltas: List[torch.Tensor], weights: List[float],
                      parameters: Dict[str, Any]) -> Optional[torch.Tensor]:
        """The update added to the base (``lambda`` already applied), or None when it is exactly zero."""
        raise NotImplementedError


def groups_side_by_side(execute: Callable, groups: Sequence[TensorGroup], parameters: List[Dict[str, Any]], options,
                        input_dtypes: Sequence[Optional[torch.dtype]],
                        out_dtype: Optional[torch.dtype]) -> Tuple[torch.Tensor, ...]:
    """mergekit's ``_execute`` over several tensors (``merge_state_dicts``, wildmerge's in-memory merger), with the
    large CPU matrices merged side by side, one BLAS thread each (``kernel_pool.side_by_side``), the rest one after
    another as mergekit does; results in the groups' order.

    Why: one tensor at a time, a spectral method's eigensolves run one after another on one core (a LAPACK call on
    two threads stalls on a busy core, benchmarks/HISTORY.md); given several tensors at once, two of them fill two
    cores with no barrier between them. (``mergekit-yaml`` hands a method one tensor per call; there the planner of
    ``tensors_side_by_side`` joins neighbouring tensors' merge tasks instead.)
    A matrix merged in the pool is computed as on a machine whose other cores are busy (its products on one thread):
    the bytes of one call per tensor on one thread (tested), which products on two threads can differ from by
    round-off on some shapes.
    """
    def one(i: int) -> torch.Tensor:
        (result,) = execute((groups[i],), [parameters[i]], options, input_dtypes=[input_dtypes[i]],
                            out_dtype=out_dtype)
        return result

    firsts = [group.entries[0].tensor if group.entries else None for group in groups]
    if sum(1 for t in firsts if t is not None and worth_a_thread(t)) < 2:
        return execute(groups, parameters, options, input_dtypes=input_dtypes, out_dtype=out_dtype)
    return tuple(large_ones_side_by_side(one, firsts))


def _scaled(weight: float, delta: torch.Tensor) -> torch.Tensor:
    """``weight * delta``; a weight of 1 (every shipped recipe) skips the pass over the tensor: ``1.0 * x`` is ``x``
    bit for bit."""
    return delta if weight == 1.0 else weight * delta


def summed_task_vectors(base32: torch.Tensor, tensors: List[torch.Tensor], weights: List[float]) -> torch.Tensor:
    """``sum_i w_i (theta_i - theta_0)`` in float32, bit for bit ``d_1.clone(); d_1 += d_2; ...`` over the
    template's task vectors ``d_i = _scaled(w_i, theta_i - theta_0)``, with one scratch buffer instead of one new
    tensor per model (each a fresh allocation the kernel must fault in)."""
    total = _scaled_(weights[0], tensors[0].to(torch.float32) - base32)
    scratch = torch.empty_like(total) if len(tensors) > 1 else None
    for w, t in zip(weights[1:], tensors[1:]):
        total += _scaled_(w, torch.sub(t.to(torch.float32), base32, out=scratch))
    return total


def _scaled_(weight: float, delta: torch.Tensor) -> torch.Tensor:
    """``_scaled`` in place (``delta`` is a buffer of ours): the same single multiplication, the same bits."""
    return delta if weight == 1.0 else delta.mul_(weight)


def all_zero(deltas: List[torch.Tensor]) -> bool:
    return all(not bool(d.any()) for d in deltas)


def check_group(method: str, group: TensorGroup) -> None:
    """NaN/Inf and shape mismatches, named by tensor and model, before any maths."""
    check_shapes(method, group)
    check_finite(method, group)


def check_shapes(method: str, group: TensorGroup) -> None:
    """Every model's copy of the tensor has the base's shape (no pass over the data)."""
    name = group.metadata.name or "<unnamed tensor>"
    base_shape = group.base.tensor.shape if group.base is not None else group.entries[0].tensor.shape
    for entry in group.entries:
        if entry.tensor.shape != base_shape:
            raise ConfigError(f"{method}: tensor {name!r} of model {entry.id} has shape {tuple(entry.tensor.shape)}, "
                              f"expected {tuple(base_shape)} like the base: the models are not fine-tunes of one base")


def check_finite(method: str, group: TensorGroup) -> None:
    """No model's copy of the tensor holds NaN or Inf (one summing pass per model)."""
    name = group.metadata.name or "<unnamed tensor>"
    for entry in group.entries:
        if entry.tensor.is_floating_point() and not all_finite(entry.tensor):
            raise ConfigError(f"{method}: tensor {name!r} of model {entry.id} contains NaN or Inf; "
                              "this checkpoint is corrupt or diverged, remove it from the recipe")

