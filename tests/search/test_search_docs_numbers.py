"""The search's tables in docs/results.md are the ones the benchmark renders from its recorded results: a number in
the docs cannot drift from ``benchmarks/results/guided_search_*.json``."""

import json
from pathlib import Path

import pytest

from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    return benchmark_module("experiment_guided_search")


@pytest.mark.parametrize("testbed", ["demo_large", "demo_large_no_experts", "smollm2_large",
                                     "smollm2_large_no_experts"])
def test_docs_tables_are_the_benchmarks(testbed):
    results = json.loads((ROOT / "benchmarks" / "results" / f"guided_search_{testbed}.json").read_text())
    docs = (ROOT / "docs" / "results.md").read_text()
    assert _benchmark().table(results).strip() in docs, f"docs/results.md's {testbed} tables differ from its results"
    for seed in results["seeds"].values():  # the reported score is the winner's full evaluation
        for run in seed["searches"].values():
            assert run["score"] == run["full_score_check"]


def test_on_target_is_the_search_rule():
    """At most 1/5 of the protocol's items, and within 1 point of its best; on a testbed whose paired 95 % half-width
    is over 1.5 points, a winner whose paired interval to the best reaches 0 counts too."""
    on_target = _benchmark().on_target
    assert on_target([-0.9, -3.0, 1.2], 0.2, half_width=1.0)
    assert not on_target([-0.9, -3.0, 1.2], 0.21, half_width=1.0)  # too many items
    assert not on_target([-1.7, -4.7, 1.2], 0.15, half_width=1.4)  # a testbed that tells 1.5 points: 1 point counts
    assert on_target([-1.7, -4.7, 1.2], 0.15, half_width=2.1)  # cannot tell: within its interval
    assert not on_target([-3.0, -5.1, -0.8], 0.15, half_width=2.1)  # below the best even at 95 %
