"""Several merge workers on one plan: the claims split the merges, and the models are byte for byte those of one
worker."""

import json
from pathlib import Path

import pytest

from helpers import sample, write_pool
from wildmerge.errors import ConfigError
from wildmerge.merging.workers import HELPER_MEMORY, measure_helper_memory, merge_peak, worker_count


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
    monkeypatch.setattr("wildmerge.merging.workers.usable_cores", lambda: 4)
    assert worker_count(None, "cpu", base, 3) == 1
    assert worker_count(2, "cpu", base, 3) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    assert worker_count(None, "cuda", base, 3) == 3 and worker_count("auto", "cuda", base, 3) == 3
    with pytest.raises(ConfigError, match="3 GPU"):
        worker_count(4, "cuda", base, 3)
    each = HELPER_MEMORY + merge_peak(base, 3)  # a worker: Python with torch and mergekit, and its merge
    monkeypatch.setattr("wildmerge.merging.workers.free_memory", lambda: each * 2 + 1)
    assert worker_count("auto", "cpu", base, 3) == 2
    with pytest.raises(ConfigError, match="at most 2 merge worker"):
        worker_count(3, "cpu", base, 3)
    assert merge_peak(base, 3) == 5 * sum(f.stat().st_size for f in Path(base).glob("*.safetensors"))


def test_an_explicit_count_above_the_cores_or_memory_is_refused_with_the_numbers(tiny_family, monkeypatch):
    """`--merge-workers 1000` on a small model: the model alone would allow thousands; each process's imports do not."""
    base = tiny_family["base"]
    monkeypatch.setattr("wildmerge.merging.workers.usable_cores", lambda: 2)
    monkeypatch.setattr("wildmerge.merging.workers.free_memory", lambda: 64 << 30)
    assert worker_count("auto", "cpu", base, 3) == 2
    with pytest.raises(ConfigError) as refused:
        worker_count(3, "cpu", base, 3)
    message = str(refused.value)
    for part in ("--merge-workers 3", "at most 2 merge worker", "2 usable core", "64.0 GiB free memory",
                 f"{HELPER_MEMORY >> 20} MiB for Python with torch and mergekit", "use --merge-workers 2"):
        assert part in message, (part, message)
    monkeypatch.setattr("wildmerge.merging.workers.usable_cores", lambda: 1000)
    monkeypatch.setattr("wildmerge.merging.workers.free_memory", lambda: 24 << 30)  # the machine of the report
    with pytest.raises(ConfigError, match="at most 4[0-9] merge worker"):
        worker_count(1000, "cpu", base, 1)


def test_the_helper_memory_constant_covers_a_real_helper():
    """HELPER_MEMORY was measured; a helper that has outgrown it (newer torch or mergekit) fails here: re-measure."""
    measured = measure_helper_memory()
    assert HELPER_MEMORY / 2 < measured <= HELPER_MEMORY, f"a helper now holds {measured >> 20} MiB: update HELPER_MEMORY"
