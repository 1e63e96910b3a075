"""The data-based merge methods (RegMean, Chain of Merges, MaTS, Fisher merging, ProDistill, the trained
Localize-and-Stitch, AdaMerging and AdaMerging++): names, papers and parameters with their own defaults.

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
    # the paper's Fig. 6: omega through the merged model (Algorithm 1) or the base, its "ideal" zero-shot reference
    omega_reference: Literal["merged", "base"] = Field(
        "merged", description="which model's features Sim's importance weights are measured on: the merged model "
                              "(CoM, as the chain computes them) or the base (one extra base forward over the data)")


class RegMeanParams(LayerwiseParams):
    """RegMean (Jin et al., ICLR 2023): raw Grams, every model weighted alike."""

    norm: Literal["token", "feature", "none"] = "none"
    sim: bool = False


class MaTSParams(LayerwiseParams):
    """MaTS (Tam et al. 2023) on RegMean's Grams: conjugate gradient on (sum_i C_i) W = sum_i C_i W_i from an initial
    merge, stopped after ``iterations`` steps (the early stop is part of the method, not only a cost knob)."""

    norm: Literal["token", "feature", "none"] = "none"
    sim: bool = False
    # the paper solves the plain system (sum_i C_i) theta = sum_i C_i theta_i; the truncated CG regularises it
    ridge: Literal["delta", "per_task", "zero"] = "zero"
    lam_rel: float = Field(0.0, ge=0.0, allow_inf_nan=False,
                           description="Tikhonov lambda relative to the mean diagonal of sum_i G_i (0: the paper)")
    iterations: int = Field(10, ge=1, le=100000, description="conjugate-gradient steps per linear layer")
    init: Literal["task_arithmetic", "average"] = Field(
        "task_arithmetic", description="where CG starts: base + init_lambda * sum of task vectors, or the mean")
    init_lambda: float = Field(0.4, ge=0.0, allow_inf_nan=False,
                               description="task arithmetic's scaling of the summed task vectors for init")
    tol: float = Field(1e-6, ge=0.0, allow_inf_nan=False,
                       description="stop early once the residual is this fraction of the right-hand side")


class FisherParams(MethodParams):
    """Fisher merging (Matena & Raffel 2022): per parameter sum_i F_i theta_i / sum_i F_i, F_i the diagonal empirical
    Fisher of expert i on its own data."""

    fisher_samples: int = Field(64, ge=1, le=1000000,
                                description="sequences per expert with one backward pass each (cost scales with it)")
    fisher_floor: float = Field(1e-6, ge=0.0, allow_inf_nan=False,
                                description="added to every Fisher: where all are 0 the merge is the plain average")
    diagnostics: bool = Field(True, description="write each expert's Fisher totals and the samples used")


class ProDistillParams(MethodParams):
    """ProDistill (Xu et al. 2025): per decoder block, per expert and per tensor a scalar coefficient on the task
    vector, trained by Adam so that the merged block on the merged prefix's activations matches each expert's block
    on its own activations (mean squared error), block after block."""

    steps: int = Field(20, ge=0, le=100000, description="Adam steps per decoder block (0: task arithmetic)")
    lr: float = Field(0.01, ge=0.0, allow_inf_nan=False, description="Adam's learning rate on the coefficients")
    samples: int = Field(16, ge=1, le=1000000,
                         description="sequences per expert in the distillation loss (whole calibration batches)")
    init_lambda: float = Field(0.4, ge=0.0, allow_inf_nan=False,
                               description="every coefficient's start: task arithmetic with this scaling")
    diagnostics: bool = Field(True, description="write the merging covariate shift (CoM paper, Eq. 8) per layer")


class LocalizeTrainedParams(MethodParams):
    """The trained Localize-and-Stitch (He et al. 2024): per expert a score S per parameter, the model
    theta_0 + sigmoid(S) * tau trained by Adam on the expert's own data with an L1 penalty on the mask, binarised,
    then stitched (overlaps averaged)."""

    steps: int = Field(50, ge=0, le=1000000, description="Adam steps per expert (0: the initial top-density mask)")
    lr: float = Field(0.1, ge=0.0, allow_inf_nan=False, description="Adam's learning rate on the scores (logits)")
    l1: float = Field(1e-6, ge=0.0, allow_inf_nan=False,
                      description="weight of the L1 penalty sum(sigmoid(S)) added to the mean token cross-entropy")
    density: float = Field(0.1, gt=0.0, le=1.0,
                           description="share of the model each mask starts at and, for top_density, keeps")
    init_logit: float = Field(2.0, gt=0.0, le=50.0, allow_inf_nan=False,
                              description="S starts at +init_logit on the top density of |tau|, -init_logit elsewhere")
    binarize: Literal["top_density", "sigmoid"] = Field(
        "top_density", description="the final mask: the top density of S over the model, or sigmoid(S) > 0.5")
    diagnostics: bool = Field(True, description="write each expert's losses, mask share and overlap")


class AdaMergingParams(MethodParams):
    """AdaMerging (Yang et al., ICLR 2024): coefficients of the task vectors per expert and decoder block (or per
    expert), learned by Adam to minimise the entropy of the merged model's predictions on each expert's unlabelled
    data. The paper: lr 1e-3, 500 steps, 16 samples, init 0.3; the defaults keep its reach (lr x steps = 0.5, init
    0.3) in a fifth of the steps, small enough for the demo family on a CPU."""

    loss: Literal["entropy", "tas"] = Field(
        "entropy", description="entropy of the merged model's predictions (AdaMerging) or TAS' cosine gap to each "
                               "expert's features (AdaMerging+TAS)")
    granularity: Literal["layer", "task"] = Field(
        "layer", description="one coefficient per expert and decoder block (plus one for the tensors outside the "
                             "blocks), or one per expert")
    iterations: int = Field(100, ge=1, le=1000000, description="Adam steps (each: every expert's batch)")
    lr: float = Field(0.005, gt=0.0, allow_inf_nan=False, description="Adam's learning rate on the coefficients")
    # not batch_size: that key of a recipe's hyperparameters sets the calibration's token batches
    samples_per_step: int = Field(16, ge=1, le=100000, description="unlabelled sequences per expert and step")
    init: float = Field(0.3, ge=0.0, le=1.0, allow_inf_nan=False, description="every coefficient's start")
    clamp: bool = Field(True, description="clamp the coefficients to [0, 1] after every step")
    seed: int = Field(0, ge=0, description="the order the sequences are drawn in")
    diagnostics: bool = Field(True, description="write the coefficients and the loss at every step")


class AdaMergingPPParams(AdaMergingParams):
    """AdaMerging++: AdaMerging on TIES-Merging's task vectors (trimmed per tensor to the top ``density`` by
    magnitude, a sign elected per entry, the disagreeing entries dropped)."""

    density: float = Field(0.2, gt=0.0, le=1.0, allow_inf_nan=False,
                           description="share of each task vector's entries TIES' trim keeps, per tensor")


@dataclass(frozen=True)
class LayerwiseMethod:
    label: str
    paper: str
    params: Type[MethodParams]


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
    "mats": LayerwiseMethod(
        label="MaTS",
        paper="Tam, Bansal, Raffel: Merging by Matching Models in Task Parameter Subspaces, TMLR 2024, "
              "arXiv:2312.04339",
        params=MaTSParams),
    "fisher": LayerwiseMethod(
        label="Fisher merging",
        paper="Matena, Raffel: Merging Models with Fisher-Weighted Averaging, NeurIPS 2022, arXiv:2111.09832",
        params=FisherParams),
    "prodistill": LayerwiseMethod(
        label="ProDistill",
        paper="Xu et al.: Scalable Model Merging with Progressive Layer-wise Distillation (ProDistill), 2025",
        params=ProDistillParams),
    "localize_stitch_trained": LayerwiseMethod(
        label="Localize-and-Stitch (trained)",
        paper="He, Hu, Lin, Zhang, Zhao: Localize-and-Stitch: Efficient Model Merging via Sparse Task Arithmetic, "
              "TMLR 2024, arXiv:2408.13656",
        params=LocalizeTrainedParams),
    "adamerging": LayerwiseMethod(
        label="AdaMerging",
        paper="Yang, Wang, Shen, Liu, Guo, Wang, Tao: AdaMerging: Adaptive Model Merging for Multi-Task Learning, "
              "ICLR 2024, arXiv:2310.02575",
        params=AdaMergingParams),
    "adamerging_pp": LayerwiseMethod(
        label="AdaMerging++",
        paper="Yang, Wang, Shen, Liu, Guo, Wang, Tao: AdaMerging: Adaptive Model Merging for Multi-Task Learning, "
              "ICLR 2024, arXiv:2310.02575 (AdaMerging++: on TIES-Merging's task vectors)",
        params=AdaMergingPPParams),
}
