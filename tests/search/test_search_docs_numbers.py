"""The search's tables in docs/search.md are the ones the benchmark renders from its recorded results: a number in
the docs cannot drift from ``benchmarks/results/guided_search_*.json``."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location("experiment_guided_search",
                                                  ROOT / "benchmarks" / "experiment_guided_search.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("testbed", ["demo_large_full", "demo_large_full_no_experts"])
def test_docs_tables_are_the_benchmarks(testbed):
    results = json.loads((ROOT / "benchmarks" / "results" / f"guided_search_{testbed}.json").read_text())
    docs = (ROOT / "docs" / "search.md").read_text()
    assert _benchmark().table(results).strip() in docs, f"docs/search.md's {testbed} tables differ from its results"
    for seed in results["seeds"].values():  # the reported score is the winner's full evaluation
        for run in seed["searches"].values():
            assert run["score"] == run["full_score_check"]
