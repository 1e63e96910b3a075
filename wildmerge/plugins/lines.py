"""LiNeS (Wang et al. 2025, "LiNeS: Post-training Layer Scaling Prevents Forgetting and Enhances Model Merging") on
Task Arithmetic and on Consensus TA, as mergekit methods ``lines_ta`` and ``lines_consensus``.

The merged task vector of block ``l`` (1..L) is scaled by ``alpha + beta * (l - 1) / (L - 1)``: shallow blocks stay
near the base, deep blocks keep the task update; tensors outside the blocks (embeddings, final norm, lm_head) are
scaled by ``alpha``. ``theta = theta_0 + scale(l) * tau_merged`` with ``tau_merged = sum_t w_t tau_t`` (TA) or
the consensus-masked sum (``baselines.consensus_sum``).

``lambda`` is ``beta``, the one value the reality-check paper tunes (its Table 4 "Lines+TA" / "Lines+Consensus").
``alpha`` left unset follows the authors' multi-task rule: ``alpha = ||sum_t tau_t||_1 / (T ||tau_merged||_1)``
over the whole model, i.e. ``1/T`` for TA; for Consensus the L1 norms come from one pass over the checkpoints
(``model_pass.py``), or, when the models are tensors in memory (mergekit's ``merge_state_dicts``), from the tensor
groups merged together in that call. ``L`` is the base config's ``num_hidden_layers`` unless ``num_layers`` is given.
"""

import dataclasses
from functools import lru_cache
from typing import Callable, List, Optional, Tuple

import torch
from mergekit.merge_methods.base import GroupMergeMethod, TensorGroup
from pydantic import Field

from wildmerge.errors import ConfigError
from wildmerge.plugins.baselines import ConsensusOptions, consensus_sum
from wildmerge.plugins.method_params import MethodParams, per_model
from wildmerge.plugins.model_pass import folder_of, group_folders, layer_index, num_layers, stamp, stream_tensors
from wildmerge.plugins.task_vector_method import TaskVectorMethod

LINES_URL = "https://arxiv.org/abs/2410.17146"


class LinesParams(MethodParams):
    """LiNeS on Task Arithmetic: ``theta_0 + (alpha + lambda * depth) * sum_t w_t tau_t``, depth 0 .. 1."""

    weight: float = per_model(1.0, ge=0.0, allow_inf_nan=False, description="per-expert scale of its task vector")
    lambda_: float = Field(0.5, alias="lambda", ge=0.0, allow_inf_nan=False,
                           description="beta: extra scale of the deepest block over the first")
    alpha: Optional[float] = Field(None, ge=0.0, allow_inf_nan=False,
                                   description="scale of the first block and of tensors outside the blocks; unset: "
                                               "||sum tau||_1 / (T ||merged||_1) over the model (1/T for TA)")
    num_layers: int = Field(0, ge=0, description="number of blocks L; 0: num_hidden_layers of the base config")


class LinesConsensusParams(ConsensusOptions, LinesParams):
    """LiNeS on Consensus TA."""


def lines_scale(layer: Optional[int], n_layers: int, alpha: float, beta: float) -> float:
    """``alpha + beta * l / (L - 1)`` for the 0-based block ``l``; ``alpha`` outside the blocks (and when L = 1)."""
    if layer is None or n_layers <= 1:
        return alpha
    return alpha + beta * layer / (n_layers - 1)


def ta_sum(deltas: List[torch.Tensor]) -> torch.Tensor:
    return sum(deltas)


@lru_cache(maxsize=8)
def _l1_ratio(base: str, experts: Tuple[str, ...], weights: Tuple[float, ...], tall_lambda: float, k: int,
              _stamp: tuple) -> float:
    """``||sum_t w_t tau_t||_1 / ||consensus(...)||_1`` over every tensor of the checkpoints (once per set of
    checkpoints and settings: ``_stamp`` is ``model_pass.stamp`` of the folders)."""
    whole = kept = 0.0
    for _, b, tensors in stream_tensors(base, experts):
        b = b.to(torch.float32)
        deltas = [w * (t.to(torch.float32) - b) for w, t in zip(weights, tensors)]
        whole += float(sum(deltas).double().abs().sum())
        kept += float(consensus_sum(deltas, tall_lambda, k).double().abs().sum())
    return whole / kept if kept > 0 else 1.0


@dataclasses.dataclass(frozen=True)
class LinesMerge(TaskVectorMethod, GroupMergeMethod):
    """LiNeS on a base merge: ``merged`` maps the weighted task vectors (and the parameters) to ``tau_merged``."""

    method_name: str
    method_pretty_name: str
    merged: Callable[..., torch.Tensor]
    params: type = LinesParams
    method_reference_url: str = LINES_URL

    def merged_update(self, group: TensorGroup, deltas, weights, parameters) -> torch.Tensor:
        update = self.merged(deltas, **self._mask_options(parameters))
        layer, n_layers = layer_index(group.metadata.name), self._layers(group, parameters)
        if layer is not None and layer >= n_layers:
            raise ConfigError(f"{self.method_name}: tensor {group.metadata.name!r} is in block {layer}, but "
                              f"num_layers is {n_layers}; give the model's number of blocks (0: from its config)")
        scale = lines_scale(layer, n_layers, self._alpha(group, parameters, weights), parameters["lambda"])
        return scale * update

    def _execute(self, groups, parameters, options, **kwargs):
        """In-memory inputs (no folders behind the ids): alpha unset takes its L1 norms from the groups of this call."""
        if groups and self._needs_groups_alpha(groups, parameters):
            alpha = self._groups_alpha(groups, parameters)
            parameters = [dict(p, alpha=alpha) for p in parameters]
        return super()._execute(groups, parameters, options, **kwargs)

    def _needs_groups_alpha(self, groups, parameters) -> bool:
        return (parameters[0]["alpha"] is None and bool(self._mask_options(parameters[0]))
                and any(folder_of(e.id) is None for g in groups for e in g.entries if g.entries))

    def _groups_alpha(self, groups, parameters) -> float:
        """``||sum_t w_t tau_t||_1 / (T ||consensus||_1)`` over the tensors of ``groups`` (in float64)."""
        whole = kept = 0.0
        n = 0
        for group, p in zip(groups, parameters):
            if not group.entries or group.base is None:
                continue
            base = group.base.tensor.double()
            deltas = [float(p["weight"][e.id]) * (e.tensor.double() - base) for e in group.non_base]
            n = len(deltas)
            opts = self._mask_options(p)
            whole += float(sum(deltas).abs().sum())
            kept += float(consensus_sum(deltas, opts["tall_lambda"], opts["k"]).abs().sum())
        return (whole / kept if kept > 0 else 1.0) / max(n, 1)

    def _mask_options(self, parameters) -> dict:
        return {k: parameters[k] for k in ConsensusOptions.fields_by_name() if k in parameters}

    def _layers(self, group: TensorGroup, parameters) -> int:
        if parameters["num_layers"]:
            return parameters["num_layers"]
        if layer_index(group.metadata.name) is None:
            return 1  # outside the blocks the depth does not matter
        base, _ = group_folders(self.method_name, group, "the number of blocks (num_layers: 0)")
        return num_layers(base)

    def _alpha(self, group: TensorGroup, parameters, weights: List[float]) -> float:
        if parameters["alpha"] is not None:
            return parameters["alpha"]
        n = len(weights)
        options = self._mask_options(parameters)
        if not options:  # TA: the merged vector is the sum itself
            return 1.0 / n
        base, experts = group_folders(self.method_name, group, "alpha's L1 norms (alpha unset)")
        return _l1_ratio(base, experts, tuple(weights), options["tall_lambda"], options["k"],
                         stamp([base, *experts])) / n


LINES_TA = LinesMerge("lines_ta", "LiNeS + TA", ta_sum, LinesParams)
LINES_CONSENSUS = LinesMerge("lines_consensus", "LiNeS + Consensus TA", consensus_sum, LinesConsensusParams)
METHODS = (LINES_TA, LINES_CONSENSUS)  # registered by registration.py
