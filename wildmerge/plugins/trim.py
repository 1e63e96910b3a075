"""TIES's trim in linear time: a tensor's top ``density`` share by magnitude, ties at the cut kept lowest index first.

mergekit's ``magnitude`` sorts every entry of every task vector (``argsort``, n log n): 69 % of a 9-expert TIES merge
of SmolLM2-135M on the CPU (docs/performance.md). Selecting the k-th largest magnitude (``kthvalue``, linear time)
keeps the same entries wherever no two of them tie at the cut. Task vectors are differences of nearby float32
weights, so in large tensors ties at the cut are common; mergekit's unstable sort keeps an unspecified subset of
them, this keeps the lowest flat indices (a stable sort's order). The tied entries are equal in magnitude, so only
their signs can differ from mergekit's choice, in a few entries per tensor.

Used inside wildmerge's own merges (``linear_time_trim``: ``wildmerge merge``, the sampler's merges and the
in-memory candidates, so what a sweep scores is what the runner writes); the stock ``mergekit-yaml`` keeps mergekit's
sort. On a GPU mergekit's sort is cheap and is kept.
"""

from typing import Optional

import torch
from mergekit.sparsify import RescaleNorm, rescaled_masked_tensor

from wildmerge.plugins import host_patches

_MERGEKIT_MAGNITUDE = host_patches.original("mergekit.sparsify.magnitude")


def top_share_mask(magnitudes: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the ``k`` largest of the flat ``magnitudes``; ties at the cut: the lowest indices."""
    n = magnitudes.numel()
    cut = torch.kthvalue(magnitudes, n - k + 1).values  # the k-th largest
    keep = magnitudes > cut
    short = k - int(keep.sum())
    if short > 0:
        keep[torch.nonzero(magnitudes == cut).flatten()[:short]] = True
    return keep


def magnitude(tensor: torch.Tensor, density: float, rescale_norm: Optional[RescaleNorm] = None) -> torch.Tensor:
    """mergekit's ``sparsify.magnitude`` (same arguments, same kept count, same masking and rescaling), selecting by
    ``top_share_mask`` on the CPU."""
    if tensor.device.type != "cpu" or density >= 1 or density <= 0 or tensor.numel() == 0:
        return _MERGEKIT_MAGNITUDE(tensor, density, rescale_norm)
    k = max(1, int(density * tensor.numel()))
    keep = top_share_mask(tensor.abs().reshape(-1).float(), k)
    return rescaled_masked_tensor(tensor, keep.to(tensor.dtype).reshape_as(tensor), rescale_norm)


def linear_time_trim():
    """Within this block (re-entrant, any thread), mergekit's magnitude sparsification (TIES and every method built
    on it) selects in linear time; mergekit's own function is back when the outermost block ends
    (``host_patches``: mergekit.sparsify.magnitude)."""
    return host_patches.replaced("mergekit.sparsify.magnitude", lambda original: magnitude)
