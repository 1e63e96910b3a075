"""The probe over model seeds and class partitions (the fresh-head probe paper, Tables 2, 5-7, App. A.2-A.3, C.2),
each checked against an independent float64 implementation written here from the paper, and against the paper's
own per-seed tables."""

import itertools
import json
import math

import numpy as np
import pytest
import torch

from wildmerge.analysis.probe.geometry import SENTINEL, composer_logits, ensemble_logits
from wildmerge.analysis.probe.partitions import make_partition, parse_partitions, random_partition, ward_partition
from wildmerge.analysis.probe.seeds import aggregate_geometry, aggregate_probe, geometry_markdown
from wildmerge.errors import ConfigError


def ward_reference(means: np.ndarray, n_clusters: int) -> set:
    """Ward from its definition (App. A.2): join the pair with the least increase in within-cluster sum of squares,
    |A||B| / (|A| + |B|) * ||m_A - m_B||^2, until ``n_clusters`` are left."""
    clusters = [[i] for i in range(len(means))]
    while len(clusters) > n_clusters:
        def cost(pair):
            a, b = (np.asarray(clusters[k]) for k in pair)
            ma, mb = means[a].mean(0), means[b].mean(0)
            return len(a) * len(b) / (len(a) + len(b)) * float(((ma - mb) ** 2).sum())

        i, j = min(itertools.combinations(range(len(clusters)), 2), key=cost)
        clusters[i] = clusters[i] + clusters[j]
        del clusters[j]
    return {frozenset(c) for c in clusters}


def test_ward_partition_equals_the_definition():
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(4, 6))
    means = np.concatenate([c + rng.normal(size=(k, 6)) for c, k in zip(centres, (3, 5, 2, 6))])
    classes = list(range(10, 10 + len(means)))  # class ids need not start at 0
    parts = ward_partition(means, classes, 4)
    assert {frozenset(p) for p in parts} == {frozenset(classes[i] for i in c) for c in ward_reference(means, 4)}
    assert sorted(c for p in parts for c in p) == classes  # disjoint and covering
    for k in (2, 3, 5):
        got = {frozenset(p) for p in ward_partition(means, classes, k)}
        assert got == {frozenset(classes[i] for i in c) for c in ward_reference(means, k)}


def test_random_partition_is_the_papers_seeded_randperm():
    """App. A.3: perm = torch.randperm(100) from a generator seeded with s; C_i = perm[20 i : 20 (i + 1)]."""
    for seed in (100, 200):
        perm = torch.randperm(100, generator=torch.Generator().manual_seed(seed)).tolist()
        assert random_partition(list(range(100)), 5, seed) == [sorted(perm[20 * i:20 * (i + 1)]) for i in range(5)]
    assert random_partition(list(range(100)), 5, 100) != random_partition(list(range(100)), 5, 200)
    parts = random_partition([3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377], 3, 7)  # 11 classes: blocks 4, 4, 3
    assert [len(p) for p in parts] == [4, 4, 3]
    assert sorted(c for p in parts for c in p) == [3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377]


def test_partitions_use_only_classes_with_training_items_and_bad_names_are_refused():
    feats = torch.randn(9, 4)
    labels = torch.tensor([0, 0, 2, 2, 5, 5, 7, 7, 7])  # classes 1, 3, 4, 6 have no training item
    parts, why = make_partition("random:1", feats, labels, 2)
    assert not why and sorted(c for p in parts for c in p) == [0, 2, 5, 7]
    parts, why = make_partition("ward", feats, labels, 5)
    assert parts == [] and "4 classes" in why
    assert parse_partitions("ward, random:100,random:200,ward") == ["ward", "random:100", "random:200"]
    for bad in ("wrd", "random", "random:x", ","):
        with pytest.raises(ConfigError, match="--partitions"):
            parse_partitions(bad)


def composer_reference(logits, query, centroids, parts, top_k, tau):
    """App. C.2 per input in float64: cosine to the centroids, top-k, softmax(s / tau) over the selected, each class
    from the selected experts that cover it, else the -1e9 sentinel."""
    logits, query, centroids = (np.asarray(x, dtype=np.float64) for x in (logits, query, centroids))
    n_tasks, batch, n_labels = logits.shape
    out = np.empty((batch, n_labels))
    for b in range(batch):
        q = query[b] / np.linalg.norm(query[b])
        s = np.array([q @ (c / np.linalg.norm(c)) for c in centroids])
        chosen = sorted(range(n_tasks), key=lambda t: -s[t])[:top_k]
        w = {t: math.exp(s[t] / tau) / sum(math.exp(s[u] / tau) for u in chosen) for t in chosen}
        for c in range(n_labels):
            cover = [t for t in chosen if c in parts[t]]
            out[b, c] = sum(w[t] * logits[t, b, c] for t in cover) if cover else -1e9
    return out


def test_composer_and_ensemble_equal_a_float64_loop():
    gen = torch.Generator().manual_seed(3)
    parts = [[0, 4], [1, 2, 7], [3], [5, 6, 8, 9]]
    logits = torch.randn(4, 11, 10, generator=gen)
    query, centroids = torch.randn(11, 6, generator=gen), torch.randn(4, 6, generator=gen)
    for k in (1, 3, 4):
        got = composer_logits(logits, query, centroids, parts, top_k=k, temperature=0.5).double().numpy()
        want = composer_reference(logits, query, centroids, parts, k, 0.5)
        assert np.allclose(got, want, atol=1e-5)
        assert (got.argmax(-1) == want.argmax(-1)).all()
    full = composer_logits(logits, query, centroids, parts, top_k=4)
    assert (full > SENTINEL).all()  # every class is covered when every expert is selected
    one = composer_logits(logits, query, centroids, parts, top_k=1)
    assert ((one == SENTINEL).sum(-1) > 0).all()  # one expert never covers all classes
    assert np.allclose(ensemble_logits(logits).numpy(), logits.double().numpy().mean(0), atol=1e-6)


# Paper Table 7: (backbone, geometry) -> per model seed (ensemble, composer).
TABLE7 = {
    ("ViT", "Ward"): [(0.7718, 0.8574), (0.7654, 0.8463), (0.7618, 0.8527), (0.7563, 0.8547), (0.7575, 0.8512)],
    ("R50", "Ward"): [(0.7134, 0.7812), (0.6997, 0.7786), (0.6989, 0.7796), (0.6977, 0.7716), (0.7020, 0.7816)],
    ("ViT", "R100"): [(0.6600, 0.6725), (0.6443, 0.6521), (0.6762, 0.6660)],
    ("ViT", "R200"): [(0.6721, 0.6691), (0.6761, 0.6657), (0.6767, 0.6616)],
    ("R50", "R100"): [(0.6532, 0.5950), (0.6573, 0.5965), (0.6658, 0.5987)],
    ("R50", "R200"): [(0.6656, 0.5977), (0.6590, 0.5905), (0.6599, 0.5977)],
}
# Paper Table 2: composer, ensemble, composer - ensemble (mean, SD).
TABLE2 = {
    ("ViT", "Ward"): ((0.8525, 0.0042), (0.7626, 0.0063), (0.0899, 0.0068)),
    ("ViT", "R100"): ((0.6635, 0.0104), (0.6602, 0.0160), (0.0034, 0.0120)),
    ("ViT", "R200"): ((0.6655, 0.0038), (0.6750, 0.0025), (-0.0095, 0.0061)),
    ("R50", "Ward"): ((0.7785, 0.0041), (0.7023, 0.0064), (0.0762, 0.0054)),
    ("R50", "R100"): ((0.5967, 0.0019), (0.6588, 0.0064), (-0.0620, 0.0046)),
    ("R50", "R200"): ((0.5953, 0.0042), (0.6615, 0.0036), (-0.0662, 0.0035)),
}


def test_geometry_over_model_seeds_reproduces_table_2_from_table_7():
    runs = [[{"model_id": b, "task": "cifar100", "partition": g, "status": "ok", "composer_mean": c,
              "ensemble_mean": e, "sizes": "[]", "class_sets": "[]"}
             for (b, g), seeds in TABLE7.items() if i < len(seeds) for e, c in [seeds[i]]] for i in range(5)]
    rows = {(r["model_id"], r["partition"]): r for r in aggregate_geometry(runs)}
    for key, ((cm, cs), (em, es), (dm, ds)) in TABLE2.items():
        r = rows[key]
        assert len(json.loads(r["composer_per_seed"])) == len(TABLE7[key])
        for name, mean, sd in (("composer", cm, cs), ("ensemble", em, es), ("delta", dm, ds)):
            assert round(r[f"{name}_mean"], 4) == pytest.approx(mean, abs=1e-4 + 1e-12), (key, name)
            assert round(r[f"{name}_sd"], 4) == pytest.approx(sd, abs=1e-4 + 1e-12), (key, name)
        values = np.array(TABLE7[key], dtype=np.float64)  # independent: numpy over the per-seed deltas
        assert r["delta_mean"] == pytest.approx((values[:, 1] - values[:, 0]).mean(), abs=1e-12)
        assert r["delta_sd"] == pytest.approx((values[:, 1] - values[:, 0]).std(ddof=1), abs=1e-12)
    assert "Tables 2 and 7" in geometry_markdown(list(rows.values()), "model seeds")


# Paper Table 5, ViT-B/16 Ward: per model seed (N, FH, J) of TA.
TABLE5_VIT_TA = [(0.1963, 0.8776, 0.8898), (0.2191, 0.8788, 0.8831), (0.1851, 0.8768, 0.8820),
                 (0.2099, 0.8775, 0.8890), (0.2061, 0.8790, 0.8835)]


def test_probe_over_model_seeds_reproduces_the_papers_ward_row():
    """Sec. 4.1: N 0.203 ± 0.013, FH 0.878 ± 0.001, J 0.885 ± 0.004, R about 99 % (ratio of the means)."""
    runs = [[{"model_id": "ta", "kind": "merge", "task": "cifar100", "readout": "matched", "native": n,
              "fresh_head_mean": f, "joint": j, "status": "ok"}] for n, f, j in TABLE5_VIT_TA]
    (row,) = aggregate_probe(runs)
    x = np.array(TABLE5_VIT_TA, dtype=np.float64)
    assert row["model_seeds"] == 5
    assert (round(row["native_mean"], 3), round(row["native_sd"], 3)) == (0.203, 0.013)
    assert (round(row["fresh_head_mean"], 3), round(row["fresh_head_sd"], 3)) == (0.878, 0.001)
    assert (round(row["joint_mean"], 3), round(row["joint_sd"], 3)) == (0.885, 0.004)
    r = (x[:, 1] - x[:, 0]) / (x[:, 2] - x[:, 0])
    assert row["recovered_mean"] == pytest.approx(r.mean(), abs=1e-12)
    assert row["recovered_sd"] == pytest.approx(r.std(ddof=1), abs=1e-12)
    ratio = (x[:, 1].mean() - x[:, 0].mean()) / (x[:, 2].mean() - x[:, 0].mean())
    assert row["recovered_ratio_of_means"] == pytest.approx(ratio, abs=1e-12) and round(ratio, 3) == 0.989
    assert row["residual_mean"] == pytest.approx((x[:, 2] - x[:, 1]).mean(), abs=1e-12)


def test_probe_aggregation_keeps_compositions_and_missing_rows():
    runs = [[{"model_id": "composer__n02_s00", "kind": "composition", "task": "add", "native": v,
              "readout": "composition", "status": "missing: a composition keeps T models"},
             {"model_id": "base", "kind": "base", "task": "gen", "status": "missing: free text"}] for v in (0.5, 0.7)]
    rows = {r["model_id"]: r for r in aggregate_probe(runs)}
    assert rows["composer__n02_s00"]["native_mean"] == pytest.approx(0.6)
    assert rows["composer__n02_s00"]["native_sd"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert "fresh_head_mean" not in rows["composer__n02_s00"]
    assert rows["base"]["model_seeds"] == 0 and rows["base"]["status"] == "missing: free text"
