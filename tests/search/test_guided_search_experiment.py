"""benchmarks/experiment_guided_search.py states the testbed's resolution from the protocol's two best merges: fewer
than two is one clear line, said from the arguments before anything is resolved or recorded, and by the replay of a
recording that holds fewer."""

import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    return benchmark_module("experiment_guided_search")


LINE = "needs at least two: give more --methods, more --sizes or a larger --per-size"


def test_the_merges_the_arguments_record_are_counted():
    planned = _benchmark().planned_merges
    assert planned(["ta"], [2], 1, 12) == 1
    assert planned(["ta", "ties"], [2, 3], 3, 12) == 12
    assert planned(["ta"], [2, 3], 5, 3) == 3 + 1  # C(3, 2) = 3 subsets of 2, one of 3
    assert planned(["ta", "ties"], [13], 3, 12) == 0  # no subset is larger than the pool


@pytest.mark.parametrize("argv, merges", [(["--methods", "ta", "--sizes", "2", "--per-size", "1"], 1),
                                          (["--methods", "ta,ties", "--sizes", "13"], 0)])
def test_fewer_than_two_merges_is_one_line_before_any_work(argv, merges, tmp_path, monkeypatch):
    out = tmp_path / "exp"
    monkeypatch.setattr(sys, "argv", ["experiment_guided_search.py", "--pool", "demo", "--out", str(out), *argv])
    with pytest.raises(SystemExit) as stop:
        _benchmark().main()
    said = str(stop.value.code)
    assert said.startswith(f"experiment_guided_search: these arguments record {merges} merge(s)") and LINE in said
    assert "\n" not in said and not out.exists()  # nothing resolved, nothing recorded


def test_a_recording_with_one_merge_has_no_resolution():
    items = {c: {"t": np.array([1.0, 0.0, 1.0])} for c in ("base", "ta:a+b")}
    with pytest.raises(SystemExit, match="the recording holds 1 merge"):
        _benchmark().resolution(items, ["ta:a+b"])
    both = {**items, "ties:a+b": {"t": np.array([0.0, 0.0, 1.0])}}
    assert _benchmark().resolution(both, ["ta:a+b", "ties:a+b"])["best_two"] == ["ta:a+b", "ties:a+b"]
