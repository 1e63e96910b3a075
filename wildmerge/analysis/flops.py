"""FLOPs and memory of every data-based merge, counted from the model config and the merge's own record, beside its
measured seconds and peak RSS (Buzzega et al., arXiv 2508.21421, App. C, Fig. 5, extended from RegMean / CoM to
MaTS, Fisher merging, ProDistill, the trained Localize-and-Stitch and AdaMerging).

Counts are ours, read from how our engines run each method (``plugins/layerwise/``, ``plugins/layerwise/adamerging.py``),
with the conventions of the CoM paper's count: linear projections only (``F_block`` FLOPs per token per decoder
block), a whole-model pass adding the output head (``F_model = L F_block + 2 h V``), a backward pass counted as two
forwards, float32 buffers of 4 bytes. ``P`` is the parameter count from the config.

- RegMean / CoM: ``accounting`` below (block passes, Grams, closed-form solves; Gram memory), as our layer-wise
  engine (``plugins/layerwise/chain.py``) runs them: per decoder layer and per calibration token of each expert, CoM
  pushes the data through the merged block once per linear group up to that group's input (q/k/v: nothing before
  it; o: q/k/v; gate/up: q/k/v + o; down: all but down), then once through the whole finished block; RegMean runs
  each model's own block once; the covariate-shift diagnostic adds the other stream. Each changed group accumulates
  one Gram per expert (2 d^2 FLOPs per token); each linear weight is solved once (W_i G_i products, 2 N d_out d^2,
  and one d x d solve, ~2/3 d^3). Grams are float32 d x d; CoM holds one group's N Grams at a time, RegMean every
  group's at once.
- MaTS: RegMean's passes and Grams; per linear weight ``B = Σ_i W_i G_i`` (2 N d_out d^2) and ``iterations``
  conjugate-gradient products ``W A`` (2 d_out d^2 each; an upper bound: ``tol`` may stop it earlier). Memory: the
  Grams, as RegMean.
- Fisher: one forward and backward pass of the whole model per sequence, ``fisher_samples`` sequences per expert:
  ``3 F_model`` per token. Memory: one expert in float32 with its gradient and Fisher, and the two running sums:
  ``5 P`` floats.
- ProDistill: per block, each expert's block on its own stream (the teacher) and the finished merged block on the
  merged stream, then ``steps`` Adam steps of forward and backward over the ``samples`` sequences of every expert:
  ``L T F_block (2 + 3 steps)``. Memory: one block's N task vectors and base in float32 and both streams' hidden
  states.
- Localize-and-Stitch (trained): per expert ``steps`` forward and backward passes of the whole model on one batch
  each: ``3 F_model`` per token of those batches. Memory: the model and six model-sized float32 tensors (``7 P``).
- AdaMerging / AdaMerging++: ``iterations`` forward and backward passes of the merged model on
  ``samples_per_step`` (tune's ``batch_size``) sequences of each expert (of its mean length, or of ``seq_len`` tokens when the settings give it):
  ``3 F_model`` per token (``4`` with the ``tas`` loss, which runs
  the expert too). Memory: the base, N task vectors and the merged model (``(N + 2) P`` floats).
"""

import math
from typing import Dict, List, Optional

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




FLOAT_BYTES = 4
DATA_METHODS = ("regmean", "chain_of_merges", "mats", "fisher", "prodistill", "localize_stitch_trained",
                "adamerging", "adamerging_pp")


def _vocab(config) -> int:
    return int(getattr(config, "vocab_size", 0) or 0)


def block_flops(config) -> int:
    """Linear-projection FLOPs per token of one decoder block."""
    dims = group_dims(config)
    return sum(2 * g["d"] * o for g in dims.values() for o in g["outs"])


def model_flops(config) -> int:
    """Per token of a whole-model pass: every block and the output head."""
    return config.num_hidden_layers * block_flops(config) + 2 * config.hidden_size * _vocab(config)


def parameters(config) -> int:
    """Parameters from the config: embeddings, each block's projections and norms, the final norm, the head
    (unless tied)."""
    dims = group_dims(config)
    h, v = config.hidden_size, _vocab(config)
    block = sum(g["d"] * o for g in dims.values() for o in g["outs"]) + 2 * h
    head = 0 if getattr(config, "tie_word_embeddings", False) else h * v
    return v * h + config.num_hidden_layers * block + h + head


def _used(record: dict, limit: Optional[int]) -> int:
    """Tokens of an expert's calibration record that a method reads when it reads at most ``limit`` sequences."""
    samples, tokens = int(record.get("samples") or 0), int(record["tokens"])
    if limit is None or not samples or limit >= samples:
        return tokens
    return int(round(tokens * limit / samples))


def _per_step(record: dict) -> float:
    """Mean valid tokens of one calibration batch of an expert."""
    samples = int(record.get("samples") or 0)
    batches = max(1, math.ceil(samples / int(record.get("batch_size") or 8))) if samples else 1
    return int(record["tokens"]) / batches


def count(method: str, config, calibration: List[dict], params: dict) -> Dict[str, float]:
    """``{"flops": ..., "memory_bytes": ...}`` counted for one merge; ``calibration``: each expert's record
    (``tokens``, ``samples``, ``batch_size``) as ``layerwise_diagnostics.json`` holds it; ``params``: the method's."""
    n, L, h = len(calibration), config.num_hidden_layers, config.hidden_size
    P, F_block, F_model = parameters(config), block_flops(config), model_flops(config)
    if method in ("regmean", "chain_of_merges", "mats"):
        acc = accounting(config, [int(c["tokens"]) for c in calibration], chain=method == "chain_of_merges",
                         diagnostics=bool(params.get("diagnostics", True)))
        flops = acc["flops_total"]
        if method == "mats":
            dims = group_dims(config)
            cg = L * sum(2 * o * g["d"] ** 2 * (n + int(params.get("iterations", 10)))
                         for g in dims.values() for o in g["outs"])
            flops = acc["flops_forward"] + acc["flops_grams"] + cg
        return {"flops": float(flops), "memory_bytes": float(acc["gram_bytes_peak"])}
    if method == "fisher":
        tokens = sum(_used(c, int(params.get("fisher_samples", 64))) for c in calibration)
        return {"flops": float(3 * F_model * tokens), "memory_bytes": float(5 * P * FLOAT_BYTES)}
    if method == "prodistill":
        tokens = sum(_used(c, int(params.get("samples", 16))) for c in calibration)
        steps = int(params.get("steps", 20))
        block = sum(g["d"] * o for g in group_dims(config).values() for o in g["outs"]) + 2 * h
        memory = (n + 1) * block * FLOAT_BYTES + 2 * tokens * h * FLOAT_BYTES
        return {"flops": float(L * tokens * F_block * (2 + 3 * steps)), "memory_bytes": float(memory)}
    if method == "localize_stitch_trained":
        steps = int(params.get("steps", 50))
        tokens = sum(steps * _per_step(c) for c in calibration)
        return {"flops": float(3 * F_model * tokens), "memory_bytes": float(7 * P * FLOAT_BYTES)}
    if method in ("adamerging", "adamerging_pp"):
        steps = int(params.get("iterations", 100))
        size = int(params.get("samples_per_step", params.get("batch_size", 16)))
        if "seq_len" in params:  # tune --adamerging's settings: sequences of seq_len tokens
            tokens = n * steps * size * int(params["seq_len"])
        else:  # a recipe's merge: each expert's calibration record, sequences of its mean length
            tokens = sum(steps * min(size, int(c.get("samples") or size)) * int(c["tokens"])
                         / max(1, int(c.get("samples") or 1)) for c in calibration)
        passes = 3 + (params.get("loss", "entropy") == "tas")  # the tas loss: each expert's own forward too
        return {"flops": float(passes * F_model * tokens), "memory_bytes": float((n + 2) * P * FLOAT_BYTES)}
    raise ValueError(f"no count for {method!r}; counted: {', '.join(DATA_METHODS)}")
