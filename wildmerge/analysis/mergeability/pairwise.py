"""The 28 pairwise metrics assembled from per-model statistics (Zhou et al., arXiv 2601.22285, §3, App. A.3).

All of them are reductions of things cached per model or per pair: Gram entries a = |x_A|^2, b = |x_B|^2,
c = <x_A, x_B> (task vectors per tensor, mean activations, gradients) and per-tensor SVD sketches.
"""

import math
from typing import Dict, List

import numpy as np


def vector_metrics(a: float, b: float, c: float) -> tuple:
    """(cosine, L2 distance, dot product, magnitude ratio) of two vectors from their Gram entries."""
    na, nb = math.sqrt(max(a, 0.0)), math.sqrt(max(b, 0.0))
    cos = c / (na * nb) if na > 0 and nb > 0 else 0.0
    l2 = math.sqrt(max(a + b - 2 * c, 0.0))
    ratio = min(na, nb) / max(na, nb) if min(na, nb) >= 1e-8 else 0.0
    return cos, l2, c, ratio


def singular_values_2x2(a: float, b: float, c: float) -> tuple:
    """Singular values of the 2 x D matrix [x_A; x_B]: square roots of the eigenvalues of [[a, c], [c, b]]."""
    mid, half = (a + b) / 2, math.sqrt(((a - b) / 2) ** 2 + c ** 2)
    return math.sqrt(max(mid + half, 0.0)), math.sqrt(max(mid - half, 0.0))


def effective_rank(s1: float, s2: float) -> float:
    """exp of the entropy of the normalised singular values (Roy & Vetterli), with the authors' 1e-10 guards."""
    total = s1 + s2 + 1e-10
    p = [s1 / total, s2 / total]
    return math.exp(-sum(x * math.log(x + 1e-10) for x in p))


def _clamp01(x: float) -> float:
    return min(1.0, max(0.0, x))


def weight_metrics(self_a: Dict[str, float], self_b: Dict[str, float], dots: Dict[str, float],
                   sketch_a: Dict[str, dict], sketch_b: Dict[str, dict], base_sq: Dict[str, float],
                   tensors: List[str], subspace: List[str]) -> Dict[str, float]:
    """The 18 weight-only metrics (task vector 5, effective rank 7, subspace 6) of one pair."""
    a = sum(self_a[t] for t in tensors)
    b = sum(self_b[t] for t in tensors)
    c = sum(dots[t] for t in tensors)
    cos, l2, dot, ratio = vector_metrics(a, b, c)
    out = {"task_vector_cosine_similarity": cos, "task_vector_l2_distance": l2, "task_vector_dot_product": dot,
           "weight_space_angle": math.degrees(math.acos(max(-1.0, min(1.0, cos)))),
           "task_vector_magnitude_ratio": ratio}
    s1, s2 = singular_values_2x2(a, b, c)
    er = effective_rank(s1, s2)
    out.update(effective_rank=er, effective_rank_mergeability_score=_clamp01(2 - er),
               stable_rank=(s1 + s2) ** 2 / (s1 ** 2 + s2 ** 2 + 1e-10),  # the paper's Eq. 5, not the textbook one
               spectral_gap=(s1 - s2) / (s1 + 1e-10), singular_value_ratio=s2 / (s1 + 1e-10))
    num = den = 0.0
    for t in tensors:  # layer-wise: per state-dict tensor, weighted by |tau_A| + |tau_B|
        na, nb = math.sqrt(self_a[t]), math.sqrt(self_b[t])
        if na < 1e-10 or nb < 1e-10:
            continue
        num += (na + nb) * effective_rank(*singular_values_2x2(self_a[t], self_b[t], dots[t]))
        den += na + nb
    lw = num / den if den > 0 else 2.0
    out.update(layerwise_effective_rank=lw, layerwise_effective_rank_mergeability_score=_clamp01(2 - lw))
    out.update(subspace_metrics(sketch_a, sketch_b, self_a, self_b, base_sq, subspace))
    return out


def subspace_metrics(sketch_a, sketch_b, self_a, self_b, base_sq, subspace) -> Dict[str, float]:
    """Unweighted means over the 2-D tensors of the six subspace metrics (App. A.3.3). A tensor that one model
    left (numerically) unchanged is skipped: the SVD of a zero update gives an arbitrary basis."""
    acc = {k: [] for k in ("singular_value_overlap", "subspace_overlap", "right_subspace_overlap_top_k",
                           "right_subspace_overlap_bottom_k", "interaction_matrix_overlap_top_k",
                           "interaction_matrix_overlap_bottom_k")}
    for t in subspace:
        floor = 1e-20 * base_sq.get(t, 0.0)  # |delta| < 1e-10 |theta_0|, squared
        if self_a[t] <= floor or self_b[t] <= floor or self_a[t] == 0 or self_b[t] == 0:
            continue
        A, B = sketch_a[t], sketch_b[t]
        k = A["Vt"].shape[0]
        sa, sb = _pad(A["s"].double().numpy(), B["s"].double().numpy())
        acc["singular_value_overlap"].append(float(sa @ sb / (np.linalg.norm(sa) * np.linalg.norm(sb) + 1e-12)))
        acc["subspace_overlap"].append(float((A["U"].double().T @ B["U"].double()).norm()) / k)  # authors: / k
        top = float((A["Vt"].double() @ B["Vt"].double().T).norm()) / math.sqrt(k)
        bottom = float((A["Vb"].double() @ B["Vb"].double().T).norm()) / math.sqrt(k)
        acc["right_subspace_overlap_top_k"].append(top)
        acc["right_subspace_overlap_bottom_k"].append(bottom)
        acc["interaction_matrix_overlap_top_k"].append(top ** 2)  # mean sigma_i(V_A^T V_B)^2 = |.|_F^2 / k
        acc["interaction_matrix_overlap_bottom_k"].append(bottom ** 2)
    return {k: float(np.mean(v)) if v else float("nan") for k, v in acc.items()}


def _pad(x: np.ndarray, y: np.ndarray) -> tuple:
    n = max(len(x), len(y))
    return np.pad(x, (0, n - len(x))), np.pad(y, (0, n - len(y)))


def activation_metrics(a: float, b: float, c: float) -> Dict[str, float]:
    cos, l2, dot, ratio = vector_metrics(a, b, c)
    return {"activation_l2_distance": l2, "activation_cosine_similarity": cos,
            "activation_magnitude_ratio": ratio, "activation_dot_product": dot}


def gradient_metrics(prefix: str, a: float, b: float, c: float) -> Dict[str, float]:
    cos, l2, dot, _ = vector_metrics(a, b, c)
    return {f"{prefix}_gradient_cosine_similarity": cos, f"{prefix}_gradient_l2_distance": l2,
            f"{prefix}_gradient_dot_product": dot}
