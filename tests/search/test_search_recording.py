"""The committed protocol recording replays, without the family, to the committed results the docs' tables are drawn
from, and it was recorded on the published family: the search's numbers can be remade and its rules designed on any
machine."""

import gzip
import json
from pathlib import Path

import pytest

from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "benchmarks" / "recordings" / "demo_large_seed0.json.gz"
RESULTS = ROOT / "benchmarks" / "results" / "guided_search_demo_large.json"


def test_the_recording_replays_to_the_committed_results():
    bench, recording = benchmark_module("experiment_guided_search"), benchmark_module("search_recording")
    rec = recording.load(RECORDING)
    results = json.loads(RESULTS.read_text())
    items, arms, merges = rec["items"], rec["arms"], rec["merges"]
    assert bench.resolution(items, merges) == results["resolution"]
    assert {f"{m}@{k}": [list(s) for s in v] for (m, k), v in arms.items()} == results["arms"]
    args = results["args"]
    prot = bench.protocol(items, merges, 0)
    assert prot == results["seeds"]["0"]["protocol"]
    for key, want in results["seeds"]["0"]["searches"].items():
        fraction, rule = key.split()
        budget = float(fraction) * prot["items_spent"] / prot["items_per_model"]
        got = bench.replay(items, arms, budget, 0, rule, args["first"], args["eta"], args["bracket"])
        assert (got["winner"], got["items_spent"], got["candidates"]) == \
            (want["winner"], want["items_spent"], want["candidates"]), key


def test_the_recording_is_of_the_published_family():
    from wildmerge.analysis.report.environment import files_digest
    from wildmerge.families import published

    meta = benchmark_module("search_recording").load(RECORDING)["meta"]
    family = meta["family"]
    assert family["files_sha256"] == files_digest(published.records("demo")[family["key"]]["files"])
    assert (meta["suite"], meta["pool"]) == ("demo_large", "demo")


def test_a_file_of_another_format_is_refused_in_one_line(tmp_path):
    path = tmp_path / "old.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"format": 0, "items": {}}, f)
    with pytest.raises(SystemExit, match="recording format 0, this script reads format 1"):
        benchmark_module("search_recording").load(path)
    (tmp_path / "plain.json.gz").write_text("{}")
    with pytest.raises(SystemExit, match="not a readable recording"):
        benchmark_module("search_recording").load(tmp_path / "plain.json.gz")
