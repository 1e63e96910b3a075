"""Weight-space mergeability metrics (Zhou et al., arXiv 2601.22285, §3.1-3.3) against a float64 reference written
from the paper, streamed = in-memory, symmetry, the spec's identities, and the per-model cache."""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from wildmerge.analysis.mergeability.compute import MetricSettings, compute_metrics
from wildmerge.analysis.mergeability.pairwise import subspace_metrics
from wildmerge.analysis.mergeability.registry import GROUPS
from wildmerge.analysis.mergeability.weights import WeightSettings

SHAPES = {"model.embed_tokens.weight": (20, 8), "model.layers.0.mlp.up_proj.weight": (16, 8),
          "model.layers.0.input_layernorm.weight": (8,), "model.layers.1.self_attn.q_proj.weight": (8, 12),
          "model.norm.weight": (8,), "lm_head.weight": (20, 8)}
K = 3


def _write(folder, tensors):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "tie_word_embeddings": False}))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return str(folder)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("mergeability_weights")
    g = torch.Generator().manual_seed(0)
    base = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    experts, raw = {}, {}
    for i in range(3):
        sd = {k: v + 0.1 * (i + 1) * torch.randn(v.shape, generator=g) for k, v in base.items()}
        sd["model.norm.weight"] = base["model.norm.weight"].clone() if i == 0 else sd["model.norm.weight"]
        raw[f"e{i}"] = sd
        experts[f"e{i}"] = _write(root / f"e{i}", sd)
    return {"base": _write(root / "base", base), "experts": experts, "raw": raw, "base_sd": base}


def _eff_rank(s):
    p = s / s.sum()
    return math.exp(-sum(x * math.log(x) for x in p if x > 0))


def reference(base, a, b, k=K, k_sv=100):
    """The 18 weight metrics of one pair, float64, written from the paper's definitions."""
    names = sorted(n for n in base if not n.startswith("lm_head"))
    ta = {n: (a[n].double() - base[n].double()).numpy() for n in names}
    tb = {n: (b[n].double() - base[n].double()).numpy() for n in names}
    va, vb = np.concatenate([ta[n].ravel() for n in names]), np.concatenate([tb[n].ravel() for n in names])
    cos = va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb))
    s = np.linalg.svd(np.stack([va, vb]), compute_uv=False)
    er = _eff_rank(s)
    out = {"task_vector_cosine_similarity": cos, "task_vector_l2_distance": np.linalg.norm(va - vb),
           "task_vector_dot_product": va @ vb, "weight_space_angle": math.degrees(math.acos(cos)),
           "task_vector_magnitude_ratio": min(np.linalg.norm(va), np.linalg.norm(vb)) / max(np.linalg.norm(va),
                                                                                          np.linalg.norm(vb)),
           "effective_rank": er, "effective_rank_mergeability_score": 2 - er,
           "stable_rank": s.sum() ** 2 / (s ** 2).sum(), "spectral_gap": (s[0] - s[1]) / s[0],
           "singular_value_ratio": s[1] / s[0]}
    num = den = 0.0
    for n in names:
        na, nb = np.linalg.norm(ta[n]), np.linalg.norm(tb[n])
        if na < 1e-10 or nb < 1e-10:
            continue
        sl = np.linalg.svd(np.stack([ta[n].ravel(), tb[n].ravel()]), compute_uv=False)
        num += (na + nb) * _eff_rank(sl)
        den += na + nb
    out["layerwise_effective_rank"] = num / den
    out["layerwise_effective_rank_mergeability_score"] = 2 - num / den
    acc = {m: [] for m in GROUPS["weights"][12:]}
    for n in names:
        if ta[n].ndim != 2 or ".layers." not in n:
            continue
        Ua, Sa, Vha = np.linalg.svd(ta[n], full_matrices=False)
        Ub, Sb, Vhb = np.linalg.svd(tb[n], full_matrices=False)
        kk = min(k, len(Sa))
        ha, hb = Sa[:k_sv] / Sa.sum(), Sb[:k_sv] / Sb.sum()
        acc["singular_value_overlap"].append(ha @ hb / (np.linalg.norm(ha) * np.linalg.norm(hb)))
        acc["subspace_overlap"].append(np.linalg.norm(Ua[:, :kk].T @ Ub[:, :kk]) / kk)
        Mt, Mb = Vha[:kk] @ Vhb[:kk].T, Vha[-kk:] @ Vhb[-kk:].T
        acc["right_subspace_overlap_top_k"].append(np.linalg.norm(Mt) / math.sqrt(kk))
        acc["right_subspace_overlap_bottom_k"].append(np.linalg.norm(Mb) / math.sqrt(kk))
        acc["interaction_matrix_overlap_top_k"].append(np.mean(np.linalg.svd(Mt, compute_uv=False) ** 2))
        acc["interaction_matrix_overlap_bottom_k"].append(np.mean(np.linalg.svd(Mb, compute_uv=False) ** 2))
    out.update({m: float(np.mean(v)) for m, v in acc.items()})
    return out


def _weights_only(**kw):
    return MetricSettings(groups=["weights"], weights=WeightSettings(k=K, **kw))


def test_weight_metrics_match_float64_reference(family):
    df, side = compute_metrics(family["base"], family["experts"], settings=_weights_only(), progress=False)
    assert side["weights"]["left_out"] == {"lm_head.weight": side["weights"]["left_out"]["lm_head.weight"]}
    assert side["weights"]["subspace_tensors"] == 2 and side["weights"]["tensors"] == 5
    for _, row in df.iterrows():
        ref = reference(family["base_sd"], family["raw"][row["expert_a"]], family["raw"][row["expert_b"]])
        for metric, value in ref.items():
            assert row[metric] == pytest.approx(value, rel=1e-5, abs=1e-6), metric
    assert list(df.columns[3:]) == GROUPS["weights"]


def test_streamed_equals_in_memory_and_symmetric(family):
    whole, _ = compute_metrics(family["base"], family["experts"], settings=_weights_only(), progress=False)
    rows_of_one = _weights_only(chunk_mib=1e-6)  # one row per chunk: every tensor is streamed in pieces
    streamed, _ = compute_metrics(family["base"], family["experts"], settings=rows_of_one, progress=False)
    reversed_order = dict(reversed(list(family["experts"].items())))
    swapped, _ = compute_metrics(family["base"], reversed_order, settings=_weights_only(), progress=False)
    for m in GROUPS["weights"]:
        assert np.allclose(whole[m], streamed[m], rtol=1e-9, atol=1e-12), m
        by_pair = {frozenset((a, b)): v for a, b, v in zip(swapped["expert_a"], swapped["expert_b"], swapped[m])}
        for a, b, v in zip(whole["expert_a"], whole["expert_b"], whole[m]):
            assert by_pair[frozenset((a, b))] == pytest.approx(v, rel=1e-9, abs=1e-12), m


def test_identities_of_the_spec(family):
    df, _ = compute_metrics(family["base"], family["experts"], settings=_weights_only(), progress=False)
    rho = df["singular_value_ratio"]
    assert np.allclose(df["spectral_gap"], 1 - rho, atol=1e-8)
    assert np.allclose(df["stable_rank"], (1 + rho) ** 2 / (1 + rho ** 2), atol=1e-8)
    assert np.allclose(df["effective_rank_mergeability_score"], 2 - df["effective_rank"])
    assert ((df["effective_rank"] >= 1) & (df["effective_rank"] <= 2)).all()
    assert ((df["weight_space_angle"] >= 0) & (df["weight_space_angle"] <= 180)).all()
    # per tensor, interaction overlap = right-subspace overlap squared (one tensor: the means coincide too)
    g = torch.Generator().manual_seed(1)
    sketch = []
    for _ in range(2):
        U, S, Vh = torch.linalg.svd(torch.randn(9, 7, generator=g), full_matrices=False)
        sketch.append({"t": {"U": U[:, :3], "Vt": Vh[:3], "Vb": Vh[-3:], "s": S / S.sum(), "rank": 7}})
    one = subspace_metrics(sketch[0], sketch[1], {"t": 1.0}, {"t": 1.0}, {"t": 1.0}, ["t"])
    assert one["interaction_matrix_overlap_top_k"] == pytest.approx(one["right_subspace_overlap_top_k"] ** 2)
    assert one["interaction_matrix_overlap_bottom_k"] == pytest.approx(one["right_subspace_overlap_bottom_k"] ** 2)
    # a model compared with itself: full overlap everywhere
    same = subspace_metrics(sketch[0], sketch[0], {"t": 1.0}, {"t": 1.0}, {"t": 1.0}, ["t"])
    assert same["right_subspace_overlap_top_k"] == pytest.approx(1.0)
    assert same["subspace_overlap"] == pytest.approx(1 / math.sqrt(3))  # the authors divide by k, not sqrt(k)


def test_cache_adds_one_expert_without_recomputing(family, tmp_path):
    two = dict(itertools.islice(family["experts"].items(), 2))
    _, side = compute_metrics(family["base"], two, settings=_weights_only(), cache_dir=str(tmp_path), progress=False)
    assert side["weights"]["new_models"] == ["e0", "e1"] and side["weights"]["new_pairs"] == 1
    df, side = compute_metrics(family["base"], family["experts"], settings=_weights_only(), cache_dir=str(tmp_path),
                               progress=False)
    assert side["weights"]["new_models"] == ["e2"] and side["weights"]["new_pairs"] == 2
    fresh, _ = compute_metrics(family["base"], family["experts"], settings=_weights_only(), progress=False)
    for m in GROUPS["weights"]:
        assert np.allclose(df[m], fresh[m], rtol=1e-9), m
    _, side = compute_metrics(family["base"], family["experts"], settings=_weights_only(), cache_dir=str(tmp_path),
                              progress=False)
    assert side["weights"]["new_models"] == [] and side["weights"]["new_pairs"] == 0
