"""The subset predictor: its target rewards merges that beat both the base and their experts, the ridge fit
recovers a known linear law, and its ranking replaces the proxy's."""

import numpy as np
import pytest

from wildmerge.errors import ConfigError
from wildmerge.search.candidates import ranked_subsets
from wildmerge.search.predictor import features, fit, scorer, target


def test_target_is_gain_over_the_better_reference():
    assert target(60.0, [50.0, 54.0], 40.0) == 8.0  # experts' mean 52 beats the base
    assert target(60.0, [30.0, 34.0], 40.0) == 20.0  # the base beats the experts' mean


def test_fit_recovers_a_linear_law_and_needs_enough_rows():
    rng = np.random.default_rng(0)
    x = rng.random((40, 3))
    y = 2.0 - 5.0 * x[:, 0] + 1.0 * x[:, 1] + 3.0 * x[:, 2]
    p = fit(x, y)
    assert p.weights == pytest.approx([2.0, -5.0, 1.0, 3.0], abs=1e-2) and p.r2 == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ConfigError, match="at least 5"):
        fit(x[:3], y[:3])


def test_a_fitted_predictor_ranks_subsets_its_own_way():
    names = ["a", "b", "c"]
    cosine = np.array([[1, 0.9, 0.0], [0.9, 1, 0.0], [0.0, 0.0, 1]])
    norms = np.array([1.0, 1.0, 1.0])
    assert list(features([0, 1], cosine, norms, 3)) == pytest.approx([0.9, 0.0, 2 / 3])
    # a (made-up) law in which aligned experts merge best: the proxy's order reversed
    rng = np.random.default_rng(1)
    x = rng.random((20, 3))
    p = fit(x, 10.0 * x[:, 0])
    ranked = ranked_subsets(names, cosine, norms, [2], score=scorer(p, cosine, norms, 3))
    assert ranked[2][0]["experts"] == ["a", "b"]
    assert ranked_subsets(names, cosine, norms, [2])[2][-1]["experts"] == ["a", "b"]
