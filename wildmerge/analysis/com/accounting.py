"""FLOPs and memory of RegMean / Chain of Merges counted from the model config (Buzzega et al., arXiv 2508.21421,
App. C, Fig. 5), as our layer-wise engine (plugins/layerwise/chain.py) runs them.

Per decoder layer and per calibration token of each expert:
- CoM pushes the data through the merged block once per linear group up to that group's input (q/k/v: nothing
  before it; o: q/k/v; gate/up: q/k/v + o; down: all but down), then once through the whole finished block;
  RegMean runs each model's own block once. The covariate-shift diagnostic adds the other stream.
- each changed group accumulates one Gram per expert: 2 d^2 FLOPs per token; each linear weight is solved once
  (W_i G_i products, 2 N d_out d^2, and one d x d solve, ~2/3 d^3).
Linear projections only (attention scores and elementwise work are left out, as the paper's count does).
Memory: Grams are float32 d x d; CoM holds one group's N Grams at a time, RegMean every group's at once.
"""

from typing import Dict, List

GRAM_BYTES = 4  # GramAccumulator keeps float32


def group_dims(config) -> Dict[str, dict]:
    """Per linear group: the input width d and the output widths of its projections."""
    h, inter = config.hidden_size, config.intermediate_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    hd = getattr(config, "head_dim", None) or h // heads
    return {"qkv": {"d": h, "outs": [heads * hd, kv * hd, kv * hd]}, "o": {"d": heads * hd, "outs": [h]},
            "up": {"d": h, "outs": [inter, inter]}, "down": {"d": inter, "outs": [h]}}


def accounting(config, tokens: List[int], chain: bool = True, diagnostics: bool = True) -> dict:
    """Forward passes, FLOPs and Gram memory of one merge of len(tokens) experts (tokens: each expert's valid
    calibration tokens)."""
    dims = group_dims(config)
    order = list(dims)
    n, L, T = len(tokens), config.num_hidden_layers, sum(tokens)
    lin = {g: sum(2 * dims[g]["d"] * o for o in dims[g]["outs"]) for g in order}  # FLOPs per token
    block = sum(lin.values())
    partial = {g: sum(lin[x] for x in order[:i]) for i, g in enumerate(order)}  # CoM: the block up to g's input
    if chain:
        passes = {"partial_block_passes": L * len(order) * n, "full_block_passes": L * n * (1 + diagnostics)}
        forward = L * T * (sum(partial.values()) + block * (1 + diagnostics))
        gram_peak = n * max(dims[g]["d"] ** 2 for g in order) * GRAM_BYTES
    else:
        passes = {"partial_block_passes": 0, "full_block_passes": L * n * (1 + diagnostics)}
        forward = L * T * block * (1 + diagnostics)
        gram_peak = n * sum(dims[g]["d"] ** 2 for g in order) * GRAM_BYTES
    grams = L * T * sum(2 * dims[g]["d"] ** 2 for g in order)
    solve = L * sum(2 * n * o * dims[g]["d"] ** 2 + 2 * dims[g]["d"] ** 3 / 3 for g in order for o in dims[g]["outs"])
    return {"experts": n, "layers": L, "tokens": T, **passes, "solves": L * sum(len(dims[g]["outs"]) for g in order),
            "gram_solves": L * len(order), "flops_forward": float(forward), "flops_grams": float(grams),
            "flops_solve": float(solve), "flops_total": float(forward + grams + solve),
            "gram_bytes_peak": int(gram_peak), "gram_bytes_per_layer_group": {g: n * dims[g]["d"] ** 2 * GRAM_BYTES
                                                                               for g in order}}


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
