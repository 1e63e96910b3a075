"""RegMean / Chain of Merges merges' FLOPs and memory (Buzzega et al., arXiv 2508.21421, App. C, Fig. 5) from their
``layerwise_diagnostics.json``: the count itself, from the model config, is ``analysis/flops.accounting``.
"""

from wildmerge.analysis.flops import accounting



def merge_accounting(diag: dict, config) -> dict:
    """``accounting`` for a merge from its ``layerwise_diagnostics.json``, with its measured peak RSS beside it."""
    p = diag.get("parameters", {})
    out = accounting(config, [int(c["tokens"]) for c in diag["calibration"]],
                     chain=diag.get("method") == "chain_of_merges", diagnostics=bool(p.get("diagnostics", True)))
    out["measured_peak_rss_mib"] = diag.get("peak_rss_mib")
    return out


CAPTION = ("Computational and memory cost (Buzzega et al., App. C, Fig. 5), counted from the model config: block "
           "passes over the calibration data, FLOPs of the linear projections, Gram accumulation and the closed-form "
           "solves, and the peak memory of the Gram matrices, beside the merge's measured peak RSS.")
