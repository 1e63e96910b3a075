"""The layer-wise merge methods (RegMean, Chain of Merges): names, papers and parameters with their own defaults.

A module of its own so that the recipe check, the mergekit entry point and the layer-wise driver all read one
table without importing each other.
"""

from dataclasses import dataclass
from typing import Literal, Type

from pydantic import Field

from wildmerge.plugins.method_params import MethodParams


class LayerwiseParams(MethodParams):
    """What RegMean and CoM share: the regularised closed-form solve and the covariate-shift diagnostic."""

    norm: Literal["token", "feature", "none"] = Field(
        description="activation normalisation before the Gram (CoM's Norm component): per token, per feature, none")
    sim: bool = Field(description="weight each model by its Gram's off-diagonal mass (CoM's Sim component, Eq. 6)")
    # The CoM paper adds Tikhonov regularisation without saying towards what; shrinking unseen input directions
    # towards the base ('delta') leaves a layer no calibration token reaches as it was.
    ridge: Literal["delta", "per_task", "zero"] = Field(
        "delta", description="what the Tikhonov term shrinks towards: the base, the weighted mean of the models, 0")
    lam_rel: float = Field(0.01, ge=0.0, allow_inf_nan=False,
                           description="Tikhonov lambda relative to the mean diagonal of sum_i omega_i G_i")
    diagnostics: bool = Field(True, description="write the merging covariate shift (CoM paper, Eq. 8) per layer")


class ChainOfMergesParams(LayerwiseParams):
    """Chain of Merges (Buzzega et al., arXiv 2508.21421): token normalisation and Gram importance on."""

    norm: Literal["token", "feature", "none"] = "token"
    sim: bool = True


class RegMeanParams(LayerwiseParams):
    """RegMean (Jin et al., ICLR 2023): raw Grams, every model weighted alike."""

    norm: Literal["token", "feature", "none"] = "none"
    sim: bool = False


@dataclass(frozen=True)
class LayerwiseMethod:
    label: str
    paper: str
    params: Type[LayerwiseParams]


LAYERWISE_METHODS = {
    "chain_of_merges": LayerwiseMethod(
        label="Chain of Merges (CoM)",
        paper="Buzzega, Salami, Porrello, Calderara: Rethinking layer-wise model merging through Chain of Merges, "
              "arXiv:2508.21421",
        params=ChainOfMergesParams),
    "regmean": LayerwiseMethod(
        label="RegMean",
        paper="Jin, Ren, Preotiuc-Pietro, Cheng: Dataless Knowledge Fusion by Merging Weights of Language Models "
              "(RegMean), ICLR 2023, arXiv:2212.09849",
        params=RegMeanParams),
}
