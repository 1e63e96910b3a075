"""The README's benchmark commands say what they need instead of crashing: the reproducibility
experiment reads the demo cache wildmerge uses; the screening replay on a run scored without per-item scores."""

import json
import subprocess
import sys
from pathlib import Path

from helpers import lm_family, write_plan  # noqa: F401 (fixture)
from wildmerge.cli import main
from wildmerge.run import PlanEntry

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reproducibility_experiment_reads_the_demo_cache_of_the_environment(tmp_path, monkeypatch):
    import pytest

    from wildmerge.families.demo.family import family_key

    monkeypatch.setenv("WILDMERGE_DEMO_CACHE", str(tmp_path))
    experiment = _load("experiment_demo_reproducibility")
    with pytest.raises(SystemExit) as exc:
        experiment.cached_family(quick=True)
    assert str(tmp_path) in str(exc.value) and "WILDMERGE_DEMO_CACHE" in str(exc.value)
    (tmp_path / family_key(0, True)).mkdir()
    (tmp_path / family_key(0, True) / "family.json").write_text(json.dumps({"files": {"a": "1"}}))
    assert experiment.cached_family(quick=True) == (family_key(0, True), {"a": "1"})


def test_screening_replay_without_per_item_scores_says_what_it_needs(lm_family, tmp_path):  # noqa: F811
    entries = [PlanEntry(model_id="base", kind="base", path=lm_family["base"]),
               PlanEntry(model_id="e0", kind="expert", path=lm_family["experts"][0], n=1, experts=["e0"])]
    run = write_plan(tmp_path / "run", entries)
    assert main(["eval", str(run), "--suite", lm_family["suite"], "--no-report", "--executor", "serial"]) == 0
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_screening.py"), str(run), "--suite", "mini"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--record-items" in done.stderr and "per-item scores" in done.stderr
    # and asking for them now reruns the jobs that lack them
    assert main(["eval", str(run), "--suite", lm_family["suite"], "--no-report", "--executor", "serial",
                 "--record-items"]) == 0
    records = [json.loads(p.read_text()) for p in (run / "eval" / "mini" / "results").glob("*.json")]
    assert records and all("items" in r for r in records)
