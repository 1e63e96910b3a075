"""Task alignment score (TAS): how far a merged model's features are from each expert's, on unlabelled data.

The reality-check paper ("Model merging beyond image classification: a reality check", Eq. 2):
``TAS_t(theta) = mean_{x in D_t} d(f(x; theta), f(x; theta_t))`` and ``TAS = mean_t TAS_t``; lower is better, and
the hyperparameters with the lowest TAS are chosen with no labels and no evaluation. For LLMs the features are the
final (post-norm) hidden states of every non-padding token; ``d`` is averaged over a sample's tokens, then over
samples. Distances: ``l2`` (the paper's default), ``l1``, ``cosine`` (1 - cos), and ``kl``: the token-level
KL(expert || merged) of the next-token distributions, which uses the merged ``lm_head`` as well.
"""

from typing import Dict, List

DISTANCES = ("l2", "l1", "cosine", "kl")


def features(model, batches) -> List[dict]:
    """Per sample: ``hidden`` [tokens, H] (final hidden states) and ``logp`` [tokens, V] (next-token log-probs)."""
    import torch

    out = []
    with torch.no_grad():
        for ids, mask in batches:
            result = model(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                           output_hidden_states=True)
            hidden = result.hidden_states[-1].float()
            logp = torch.log_softmax(result.logits.float(), dim=-1)
            for row in range(ids.shape[0]):
                keep = mask[row].bool().to(hidden.device)
                out.append({"hidden": hidden[row][keep].cpu(), "logp": logp[row][keep].cpu()})
    return out


def token_distances(merged: dict, expert: dict) -> Dict[str, "object"]:
    """Per-token distances between one sample's merged and expert features, every kind in ``DISTANCES``."""
    import torch

    a, b = merged["hidden"].double(), expert["hidden"].double()
    cos = torch.nn.functional.cosine_similarity(a, b, dim=-1, eps=1e-12)
    lp_m, lp_e = merged["logp"].double(), expert["logp"].double()
    return {
        "l2": (a - b).norm(dim=-1),
        "l1": (a - b).abs().sum(dim=-1),
        "cosine": 1.0 - cos,
        "kl": (lp_e.exp() * (lp_e - lp_m)).sum(dim=-1).clamp_min(0.0),
    }


def task_alignment(merged_feats: List[dict], expert_feats: List[dict]) -> Dict[str, float]:
    """TAS_t for every distance: the per-token distance averaged over each sample's tokens, then over samples."""
    if len(merged_feats) != len(expert_feats) or not merged_feats:
        raise ValueError("merged and expert features must cover the same, non-empty samples")
    totals = {k: 0.0 for k in DISTANCES}
    for m, e in zip(merged_feats, expert_feats):
        for kind, per_token in token_distances(m, e).items():
            totals[kind] += float(per_token.mean())
    return {k: v / len(merged_feats) for k, v in totals.items()}


def mean_over_experts(per_expert: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    """TAS = mean_t TAS_t, for every distance."""
    return {k: sum(d[k] for d in per_expert.values()) / len(per_expert) for k in DISTANCES}
