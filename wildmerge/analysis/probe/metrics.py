"""The numbers of the fresh-head probe (the fresh-head probe paper, "A Fresh-Head Probe for Parameter-Space Model Merging"):
train a new linear head on frozen features, and the gap quantities that compare it with the native readout.

- Fresh head (App. C.1): ``nn.Linear`` trained with AdamW (lr 1e-3, weight decay 1e-4), batch 64, 10 epochs; the
  epoch with the best validation accuracy is kept and scored on the test split.
- Gaps (Sec. 3, Tables 5-6): Delta_RR = FH - N (readout-recoverable), S = J - N (native shortfall),
  R = (FH - N) / (J - N) (recovered fraction; undefined when J - N is at most ``MIN_HEADROOM``), U = J - FH
  (unrecovered residual, deliberately not attributed).
- Statistics (Sec. 4): mean and sample SD (ddof = 1) across seeds; the headline R is the ratio of the means.
"""

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

MIN_HEADROOM = 0.01  # R is reported only when J - N exceeds this (a tiny denominator makes R meaningless)

# What each quantity can and cannot tell (the paper's identification contract, Table 1).
ESTIMANDS = {
    "native": ("delivered_model_utility", "where a failure sits (representation, readout or their interface)"),
    "fresh_head": ("readout_recoverable_shortfall",
                   "the merge's deployable accuracy (the fresh head uses labelled data the merge never saw)"),
    "recovered": ("recovered_fraction_of_headroom",
                  "whether the unrecovered residual is representation-side, optimisation-side or data-limited"),
    "composer_minus_ensemble": ("composer_vs_ensemble_geometry", "universality beyond the tested task geometry"),
}


@dataclass(frozen=True)
class HeadSettings:
    epochs: int = 10
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 64
    bias: bool = False  # an LM's readout (lm_head) has no bias: the fresh head matches its family


def accuracy(logits, labels) -> float:
    return float((logits.argmax(-1) == labels).float().mean()) if len(labels) else float("nan")


def train_fresh_head(train, val, test, n_labels: int, seed: int, settings: HeadSettings = HeadSettings()) -> dict:
    """Fit a fresh linear head on ``train = (features, labels)``, keep the best validation epoch, score ``test``.

    Returns test accuracy ``fh``, ``val`` accuracy and the chosen ``epoch`` (1-based).
    """
    from wildmerge.threads import torch_threads

    (ztr, ytr), (zva, yva), (zte, yte) = train, val, test
    with torch_threads(1):  # tiny matrices: extra threads only spin, badly so on a shared machine
        return _fit(ztr, ytr, zva, yva, zte, yte, n_labels, seed, settings)


def _fit(ztr, ytr, zva, yva, zte, yte, n_labels, seed, settings) -> dict:
    import torch

    head, best, best_epoch = fit_head((ztr, ytr), (zva, yva), n_labels, seed, settings)
    with torch.no_grad():
        return {"fh": accuracy(head(zte), yte), "val": best, "epoch": best_epoch}


def fit_head(train, val, n_labels: int, seed: int, settings: HeadSettings = HeadSettings()):
    """(head at its best validation epoch, that accuracy, the epoch (1-based)): the paper's App. C.1 recipe; the
    partition experts of ``partitions.py`` are heads of this same recipe."""
    import copy

    import torch

    (ztr, ytr), (zva, yva) = train, val
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    head = torch.nn.Linear(ztr.shape[1], n_labels, bias=settings.bias)
    opt = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    best, best_state, best_epoch = -1.0, None, 0
    for epoch in range(settings.epochs):
        head.train()
        for idx in torch.randperm(len(ytr), generator=generator).split(settings.batch_size):
            loss = torch.nn.functional.cross_entropy(head(ztr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.no_grad():
            acc = accuracy(head(zva), yva)
        if acc > best:
            best, best_state, best_epoch = acc, copy.deepcopy(head.state_dict()), epoch + 1
    head.load_state_dict(best_state)
    return head, best, best_epoch


def gap_metrics(native: float, fresh: float, joint: Optional[float]) -> Dict[str, float]:
    """Delta_RR, and with a joint reference S, R (NaN when J - N <= MIN_HEADROOM) and U; NaN where undefined."""
    nan = float("nan")
    out = {"delta_rr": fresh - native, "shortfall": nan, "recovered": nan, "residual": nan}
    if joint is not None and math.isfinite(joint):
        out["shortfall"], out["residual"] = joint - native, joint - fresh
        if joint - native > MIN_HEADROOM:
            out["recovered"] = (fresh - native) / (joint - native)
    return out


def mean_sd(values: Sequence[float]) -> tuple:
    """(mean, sample SD with ddof = 1); SD is NaN for a single value; NaNs are left out."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return float("nan"), float("nan")
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else float("nan")
    return m, sd


def aggregate(native: Sequence[float], fresh: Sequence[float], joint: Optional[Sequence[float]]) -> dict:
    """Per-seed values -> means and SDs of N, FH, J and per-seed R, plus the ratio-of-means R (the headline)."""
    out = {}
    for name, xs in (("native", native), ("fresh_head", fresh), ("joint", joint or [])):
        out[f"{name}_mean"], out[f"{name}_sd"] = mean_sd(xs)
    per_seed = [gap_metrics(n, f, j) for n, f, j in zip(native, fresh, joint or [None] * len(native))]
    for key in ("delta_rr", "recovered", "residual"):
        out[f"{key}_mean"], out[f"{key}_sd"] = mean_sd([g[key] for g in per_seed])
    headline = gap_metrics(out["native_mean"], out["fresh_head_mean"], out["joint_mean"] if joint else None)
    out["recovered_ratio_of_means"] = headline["recovered"]
    return out
