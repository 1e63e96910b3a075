"""Several merge workers on one plan: the claims split the merges, and the models are byte for byte those of one
worker."""

import json
from pathlib import Path

import pytest

from helpers import sample, write_pool
from wildmerge.errors import ConfigError
from wildmerge.merging.workers import merge_peak, worker_count


def test_two_cpu_workers_merge_the_same_bytes_as_one(tiny_family, tmp_path):
    pool = write_pool(tmp_path, tiny_family)
    assert sample(pool, tmp_path / "one") == 0
    assert sample(pool, tmp_path / "two", "--merge-workers", "2") == 0
    one, two = sorted((tmp_path / "one" / "models").iterdir()), sorted((tmp_path / "two" / "models").iterdir())
    assert [d.name for d in one] == [d.name for d in two] and len(one) > 3
    for a, b in zip(one, two):
        assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes(), a.name
    stats = json.loads((tmp_path / "two" / "sample_log.json").read_text())["stats"]
    assert stats["workers"] == 2 and stats["merged"] == len(two) and stats["skipped"] == 0
    assert sum(stats["by_worker"]) == len(two) and all(n > 0 for n in stats["by_worker"])  # both merged


def test_worker_count_defaults_and_the_memory_check(tiny_family, monkeypatch):
    base = tiny_family["base"]
    assert worker_count(None, "cpu", base, 3) == 1
    assert worker_count(2, "cpu", base, 3) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert worker_count(None, "cuda", base, 3) == 3 and worker_count("auto", "cuda", base, 3) == 3
    with pytest.raises(ConfigError, match="3 GPU"):
        worker_count(4, "cuda", base, 3)
    monkeypatch.setattr("wildmerge.merging.workers.free_memory", lambda: merge_peak(base, 3) * 2 + 1)
    assert worker_count("auto", "cpu", base, 3) <= 2
    with pytest.raises(ConfigError, match="at most 2 worker"):
        worker_count(3, "cpu", base, 3)
    assert merge_peak(base, 3) == 5 * sum(f.stat().st_size for f in Path(base).glob("*.safetensors"))
