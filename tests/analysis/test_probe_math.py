"""Fresh-head probe maths (the fresh-head probe paper): gap quantities against the paper's per-seed tables, the head on synthetic
features, and the composer's routing on a constructed case."""

import math

import numpy as np
import pytest
import torch

from wildmerge.analysis.probe.metrics import MIN_HEADROOM, HeadSettings, aggregate, gap_metrics, mean_sd, train_fresh_head
from wildmerge.eval.composition import mixing_weights, route

# Paper Table 5 (Ward): (backbone, method) -> per seed (N, FH, J, R as printed).
TABLE5 = {
    ("ViT", "TA"): [(0.1963, 0.8776, 0.8898, 0.9824), (0.2191, 0.8788, 0.8831, 0.9935), (0.1851, 0.8768, 0.8820, 0.9925),
                    (0.2099, 0.8775, 0.8890, 0.9831), (0.2061, 0.8790, 0.8835, 0.9934)],
    ("ViT", "TIES"): [(0.1037, 0.8503, 0.8898, 0.9498), (0.1435, 0.8548, 0.8831, 0.9617),
                      (0.1240, 0.8547, 0.8820, 0.9640), (0.1394, 0.8472, 0.8890, 0.9442),
                      (0.1428, 0.8487, 0.8835, 0.9530)],
    ("R50", "TA"): [(0.4587, 0.7868, 0.8543, 0.8294), (0.4403, 0.7864, 0.8577, 0.8292), (0.4013, 0.7861, 0.8570, 0.8444),
                    (0.4352, 0.7919, 0.8579, 0.8439), (0.4033, 0.7809, 0.8603, 0.8263)],
    ("R50", "TIES"): [(0.4968, 0.7876, 0.8543, 0.8134), (0.4944, 0.7943, 0.8577, 0.8255),
                      (0.4768, 0.7893, 0.8570, 0.8219), (0.4972, 0.7901, 0.8579, 0.8120),
                      (0.4790, 0.7946, 0.8603, 0.8277)],
}
# Paper Table 6 (random partitions), ResNet-50 split 200 and ViT split 100: per seed (N, FH, J, R).
TABLE6 = {
    ("R50", 200, "TIES"): [(0.5111, 0.7990, 0.8566, 0.8333), (0.4981, 0.7689, 0.8642, 0.7397),
                           (0.5441, 0.8015, 0.8575, 0.8213)],
    ("R50", 100, "TA"): [(0.5790, 0.7991, 0.8598, 0.7838), (0.5601, 0.7940, 0.8579, 0.7854),
                         (0.5448, 0.7902, 0.8570, 0.7860)],
    ("ViT", 100, "TIES"): [(0.1250, 0.8532, 0.8898, 0.9521), (0.1540, 0.8548, 0.8887, 0.9539),
                           (0.1655, 0.8482, 0.8872, 0.9460)],
}
# Section 3.1 / 3.2 text: mean ± SD of N and FH, and headline recovered fractions (ratio of means, percent).
HEADLINES = {("ViT", "TA"): (0.203, 0.013, 0.878, 0.001, 98.9), ("ViT", "TIES"): (0.131, 0.017, 0.851, 0.004, 95.45),
             ("R50", "TA"): (0.428, 0.025, 0.786, 0.004, 83.5), ("R50", "TIES"): (0.489, 0.010, 0.791, 0.003, 82.05),
             ("R50", 200, "TIES"): (0.5178, 0.0237, 0.7898, 0.0181, 79.6),
             ("R50", 100, "TA"): (0.5613, 0.0171, 0.7944, 0.0045, 78.5),
             ("ViT", 100, "TIES"): (0.1482, 0.0209, 0.8521, 0.0034, 95.1)}


def _all_rows():
    return [(k, row) for table in (TABLE5, TABLE6) for k, rows in table.items() for row in rows]


@pytest.mark.parametrize("key,row", _all_rows())
def test_per_seed_gap_quantities_match_the_paper(key, row):
    n, fh, j, r_printed = row
    g = gap_metrics(n, fh, j)
    assert g["recovered"] == pytest.approx(r_printed, abs=5e-5)  # printed to 4 decimals
    assert g["delta_rr"] == pytest.approx(fh - n, abs=1e-12)
    assert g["residual"] == pytest.approx(j - fh, abs=1e-12)
    assert g["residual"] == pytest.approx((1 - g["recovered"]) * g["shortfall"], abs=1e-12)  # U = (1 - R) S


@pytest.mark.parametrize("key", list(HEADLINES))
def test_means_sds_and_headline_ratio_match_the_paper(key):
    rows = {**TABLE5, **TABLE6}[key]
    n, fh, j = ([r[i] for r in rows] for i in range(3))
    stats = aggregate(n, fh, j)
    n_mean, n_sd, fh_mean, fh_sd, headline_pct = HEADLINES[key]
    places = 3 if len(key) == 2 else 4
    assert round(stats["native_mean"], places) == pytest.approx(n_mean, abs=10 ** -places)
    assert round(stats["native_sd"], places) == pytest.approx(n_sd, abs=10 ** -places)
    assert round(stats["fresh_head_mean"], places) == pytest.approx(fh_mean, abs=10 ** -places)
    assert round(stats["fresh_head_sd"], places) == pytest.approx(fh_sd, abs=10 ** -places)
    assert 100 * stats["recovered_ratio_of_means"] == pytest.approx(headline_pct, abs=0.06)
    # independent float64 reference: numpy's ddof=1 SD and the ratio of means
    assert stats["native_sd"] == pytest.approx(np.std(np.array(n, dtype=np.float64), ddof=1), rel=1e-12)
    ref = (np.mean(fh) - np.mean(n)) / (np.mean(j) - np.mean(n))
    assert stats["recovered_ratio_of_means"] == pytest.approx(ref, rel=1e-12)
    assert stats["recovered_mean"] == pytest.approx(np.mean([(b - a) / (c - a) for a, b, c in zip(n, fh, j)]), rel=1e-12)


def test_ward_headline_from_rounded_means_is_99_percent():
    assert 100 * gap_metrics(0.203, 0.878, 0.885)["recovered"] == pytest.approx(99.0, abs=0.05)


def test_resnet_random200_ties_ratio_of_means_differs_from_mean_of_ratios():
    stats = aggregate(*([r[i] for r in TABLE6[("R50", 200, "TIES")]] for i in range(3)))
    assert stats["recovered_ratio_of_means"] == pytest.approx(0.7962, abs=5e-5)
    assert stats["recovered_mean"] == pytest.approx(0.7981, abs=5e-5)


def test_missing_or_tiny_headroom_gives_nan_not_a_number():
    assert all(math.isnan(gap_metrics(0.5, 0.6, None)[k]) for k in ("recovered", "residual", "shortfall"))
    assert math.isnan(gap_metrics(0.5, 0.6, 0.5 + MIN_HEADROOM / 2)["recovered"])
    assert gap_metrics(0.5, 0.6, 0.5 + MIN_HEADROOM / 2)["residual"] == pytest.approx(-0.095)
    assert math.isnan(mean_sd([0.3])[1]) and mean_sd([])[0] != mean_sd([])[0]


def _clusters(n_per, means, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.cat([m + 0.3 * torch.randn(n_per, len(m), generator=g) for m in means])
    y = torch.arange(len(means)).repeat_interleave(n_per)
    return z, y


def test_fresh_head_recovers_a_linearly_separable_readout_the_native_one_misses():
    means = [torch.eye(6)[i] * 3 for i in range(4)]
    train, val, test = (_clusters(n, means, s) for n, s in ((1000, 0), (30, 1), (50, 2)))
    native_w = torch.eye(6)[[1, 2, 3, 0]]  # a readout that reads every class as the next one: accuracy 0
    native = float((test[0] @ native_w.T).argmax(-1).eq(test[1]).float().mean())
    fit = train_fresh_head(train, val, test, 4, seed=0)
    assert native < 0.05 and fit["fh"] > 0.97
    assert 1 <= fit["epoch"] <= 10


def test_fresh_head_matches_a_native_readout_that_is_already_optimal():
    means = [torch.eye(6)[i] * 3 for i in range(4)]
    train, val, test = (_clusters(n, means, s) for n, s in ((1000, 0), (30, 1), (50, 2)))
    native = float((test[0] @ torch.stack(means).T).argmax(-1).eq(test[1]).float().mean())  # Bayes-like readout
    fit = train_fresh_head(train, val, test, 4, seed=3)
    assert native > 0.97
    assert fit["fh"] == pytest.approx(native, abs=0.02)  # nothing left to recover: FH - N ~ 0


def test_fresh_head_keeps_the_best_validation_epoch_and_is_seeded():
    means = [torch.randn(8, generator=torch.Generator().manual_seed(i)) for i in range(5)]
    train, val, test = (_clusters(n, means, s) for n, s in ((40, 0), (20, 1), (20, 2)))
    a = train_fresh_head(train, val, test, 5, seed=1, settings=HeadSettings(epochs=3))
    b = train_fresh_head(train, val, test, 5, seed=1, settings=HeadSettings(epochs=3))
    assert a == b


def test_composer_routes_each_input_to_its_nearest_centroids():
    centroids = torch.tensor([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0], [1.0, 1.0, 0, 0]])
    queries = torch.tensor([[0.9, 0.1, 0.0, 0.0], [0.0, 0.05, 0.2, 5.0], [0.0, 0.0, 3.0, 0.1]])
    idx, w = route(queries, centroids, top_k=3, temperature=1.0)
    assert idx[0, :2].tolist() == [0, 4] and idx[1, 0].item() == 3 and idx[2, 0].item() == 2  # per input
    # independent float64 reference: cosine similarities, top-3, softmax over the selected only
    q = queries.double() / queries.double().norm(dim=-1, keepdim=True)
    c = centroids.double() / centroids.double().norm(dim=-1, keepdim=True)
    s = (q @ c.T).numpy()
    for b in range(3):
        top = np.argsort(-s[b], kind="stable")[:3]
        ref = np.exp(s[b, top]) / np.exp(s[b, top]).sum()
        assert idx[b].tolist() == top.tolist()  # both in descending similarity
        assert w[b].double().numpy() == pytest.approx(ref, abs=1e-6)
    full = mixing_weights("composer", 5, queries, centroids, top_k=3)
    assert (full > 0).sum(1).tolist() == [3, 3, 3] and torch.allclose(full.sum(1), torch.ones(3))
    assert full[1, 0] == 0 and full[1, 3] > full[1, 2]  # input 1 never uses expert 0
    assert torch.allclose(mixing_weights("ensemble", 5, queries), torch.full((3, 5), 0.2))
