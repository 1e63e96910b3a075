"""Subset sampler: sizes, distinctness, determinism, exhaustive small sizes, per-size independence."""

import math
from collections import Counter

import pytest

from wildmerge.errors import ConfigError
from wildmerge.planning.sampler import domain_subsets, draw_subsets

NAMES = [f"e{i:02d}" for i in range(1, 13)]


def test_paper_protocol_sizes_and_counts():
    draw = draw_subsets(NAMES, sizes=(1, 2, 4, 6, 8, 10), k=15, seed=0)
    counts = Counter(s.n for s in draw.subsets)
    assert counts == {1: 12, 2: 15, 4: 15, 6: 15, 8: 15, 10: 15, 12: 1}
    assert [s.experts for s in draw.subsets if s.n == 1] == [(n,) for n in NAMES]
    assert [s.experts for s in draw.subsets if s.n == 12] == [tuple(NAMES)]
    for s in draw.subsets:
        assert len(s.experts) == s.n == len(set(s.experts))
        assert list(s.experts) == sorted(s.experts, key=NAMES.index)  # pool order inside a subset
    for n in (2, 4, 6, 8, 10):
        sets = [frozenset(s.experts) for s in draw.subsets if s.n == n]
        assert len(set(sets)) == 15, f"n={n}: subsets are not distinct"
    ids = [s.subset_id for s in draw.subsets]
    assert len(ids) == len(set(ids)) and "n12_full" in ids and "n02_s14" in ids


def test_deterministic_and_seed_dependent():
    a = draw_subsets(NAMES, sizes=(2, 4), k=15, seed=3)
    b = draw_subsets(NAMES, sizes=(2, 4), k=15, seed=3)
    c = draw_subsets(NAMES, sizes=(2, 4), k=15, seed=4)
    assert a.subsets == b.subsets
    assert [s.experts for s in a.subsets] != [s.experts for s in c.subsets]


def test_adding_a_size_keeps_the_other_draws():
    small = draw_subsets(NAMES, sizes=(2,), k=5, seed=1, full=False)
    more = draw_subsets(NAMES, sizes=(2, 6), k=5, seed=1, full=False)
    assert [s for s in more.subsets if s.n == 2] == small.subsets


def test_exhaustive_when_fewer_combinations_than_k():
    names = NAMES[:5]
    draw = draw_subsets(names, sizes=(2, 4), k=15, seed=0)
    by_n = Counter(s.n for s in draw.subsets)
    assert by_n[2] == math.comb(5, 2) == 10 and by_n[4] == 5
    assert all(s.exhaustive for s in draw.subsets)
    assert draw.combinations[2] == {"total": 10, "taken": 10, "exhaustive": True}
    assert any("C(5,2) = 10 <= k = 15" in note for note in draw.notes)
    assert len({frozenset(s.experts) for s in draw.subsets if s.n == 2}) == 10


def test_draws_are_uniform_over_experts():
    """Each expert should appear in about n/N of the random subsets (binomial tolerance, many seeds)."""
    hits, total = Counter(), 0
    for seed in range(200):
        for s in draw_subsets(NAMES, sizes=(4,), k=15, seed=seed, full=False).subsets:
            hits.update(s.experts)
            total += 1
    p = 4 / 12
    sd = math.sqrt(total * p * (1 - p))
    for name in NAMES:
        assert abs(hits[name] - total * p) < 5 * sd, (name, hits[name], total * p)


@pytest.mark.parametrize("sizes,k,match", [((13,), 15, "impossible for a pool of 12"), ((0,), 15, "impossible"),
                                           ((2,), 0, "k must be at least 1")])
def test_bad_sizes(sizes, k, match):
    with pytest.raises(ConfigError, match=match):
        draw_subsets(NAMES, sizes=sizes, k=k)


def test_duplicate_names_rejected():
    with pytest.raises(ConfigError, match="duplicate"):
        draw_subsets(["a", "b", "a"], sizes=(2,), k=1)


def test_domain_subsets_appendix_e():
    names = ["m1", "m2", "m3", "d1", "d2", "d3"]
    draw = domain_subsets(names, ["math"] * 3 + ["medical"] * 3)
    assert [(s.subset_id, s.n, s.experts) for s in draw.subsets] == [
        ("domain_math", 3, ("m1", "m2", "m3")), ("domain_medical", 3, ("d1", "d2", "d3")),
        ("domain_all", 6, tuple(names))]
    with pytest.raises(ConfigError, match="domain"):
        domain_subsets(names, ["math", None, "math", "medical", "medical", "medical"])
