"""This machine's CPU rates for the cost plan (wildmerge/planning/host_rates.py): real micro-work in a fresh process,
fitted into the plan's ``Calibration`` fields and cached per host; and the plan names where its rates come from."""

import json
import math
from dataclasses import replace

import pytest

from wildmerge.cli import main
from wildmerge.planning import cost, host_rates


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One real measurement of this machine into a cache folder of this module's own: (folder, record, cache file)."""
    folder = tmp_path_factory.mktemp("host_rates")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(host_rates.ENV, "measure")
        patch.setenv(host_rates.CACHE_ENV, str(folder))
        record, path = host_rates.measured()
    return folder, record, path


def _measure_into(monkeypatch, folder):
    monkeypatch.setenv(host_rates.ENV, "measure")
    monkeypatch.setenv(host_rates.CACHE_ENV, str(folder))


def test_the_measurement_gives_positive_finite_rates_and_is_cached(measured, monkeypatch, capsys):
    folder, record, path = measured
    assert path.is_file() and path.parent == folder and host_rates.read_cached(path) == record
    assert record.host["cores"] >= 1 and record.host["name"] and record.measured
    assert record.import_s > 0 and record.forward_s_per_tparam_token > 0 and len(record.merges) == 2
    cal = host_rates.calibration(record, workers=2, path=path)
    for value in (cal.merge_s_per_gparam_read, cal.eval_s_per_tparam_token, cal.run_start_s):
        assert math.isfinite(value) and value > 0
    assert math.isfinite(cal.merge_start_s) and cal.merge_start_s >= 0
    assert cal.device == "cpu" and cal.method_rates == () and cal.eval_start_s == 0.0
    # a second call reads the cache: the file is not rewritten and nothing is measured
    _measure_into(monkeypatch, folder)
    before = path.stat().st_mtime_ns
    capsys.readouterr()
    assert host_rates.host_calibration(workers=2) == cal
    assert path.stat().st_mtime_ns == before and "measuring" not in capsys.readouterr().out


def test_the_rates_are_the_micro_works_mapped_as_documented():
    """By hand: the merges' line through two sizes (start 0.1 s, 4 s per G read); the forward passes and the imports
    at the reference machine's values give the defaults' evaluation rate (at its 2 workers) and run start; each then
    times its anchor on the real job (host_rates.ANCHOR_*)."""
    h = host_rates
    ref = host_rates.Measured(version=host_rates.VERSION, import_s=host_rates.REFERENCE_IMPORT_S,
                              merges=[(0.01, 0.1 + 4 * 0.01), (0.1, 0.1 + 4 * 0.1)],
                              forward_s_per_tparam_token=host_rates.REFERENCE_FORWARD_S_PER_TPARAM_TOKEN)
    cal = host_rates.calibration(ref, workers=2)
    default = cost.DEFAULTS["cpu"]
    assert cal.merge_start_s == pytest.approx(0.1 * h.ANCHOR_MERGES)
    assert cal.merge_s_per_gparam_read == pytest.approx(4.0 * h.ANCHOR_MERGES)
    assert cal.eval_s_per_tparam_token == pytest.approx(default.eval_s_per_tparam_token * h.ANCHOR_EVALUATIONS)
    assert cal.run_start_s == pytest.approx(default.run_start_s * h.ANCHOR_REST)
    # a host twice as slow at the forward passes and the imports, with 4 default workers
    slow = ref.model_copy(update={"import_s": 2 * ref.import_s,
                                  "forward_s_per_tparam_token": 2 * ref.forward_s_per_tparam_token})
    cal = host_rates.calibration(slow, workers=4)
    assert cal.eval_s_per_tparam_token == pytest.approx(
        default.eval_s_per_tparam_token * 2 * 2 / 4 * h.ANCHOR_EVALUATIONS)
    assert cal.run_start_s == pytest.approx(2 * default.run_start_s * h.ANCHOR_REST)
    # merges that cannot tell a start (the larger no slower): the rate through zero, never negative
    flat = ref.model_copy(update={"merges": [(0.01, 0.3), (0.1, 0.3)]})
    cal = host_rates.calibration(flat, workers=2)
    assert cal.merge_start_s == 0.0 and cal.merge_s_per_gparam_read == pytest.approx(3.0 * h.ANCHOR_MERGES)
    # the plan's arithmetic is cost.py's, unchanged: only the rates differ
    study = cost.Study(1_820_736, [cost.Merge("ta", 3), cost.Merge("tsv_m", 13)], 5, 27_300)
    got = cost.executor_time(study, cal, cost.Executor("cpu", 1))
    want = cost.executor_time(study, replace(default, merge_start_s=0.0, merge_s_per_gparam_read=3.0 * h.ANCHOR_MERGES,
                                             eval_s_per_tparam_token=cal.eval_s_per_tparam_token,
                                             run_start_s=cal.run_start_s, source=cal.source), cost.Executor("cpu", 1))
    assert got == pytest.approx(want)


def test_the_cache_key_changes_with_the_host_facts(monkeypatch, tmp_path):
    from importlib.metadata import version

    from wildmerge.resources import usable_cores

    monkeypatch.setenv(host_rates.CACHE_ENV, str(tmp_path))
    facts = host_rates.host_facts()
    assert facts == {"cpu": host_rates.cpu_model(), "cores": usable_cores(), "torch": version("torch"),
                     "version": host_rates.VERSION}
    path = host_rates.cache_file(facts)
    assert path.parent == tmp_path and host_rates.cache_file() == path  # the same host: the same file
    for key, other in (("cpu", facts["cpu"] + " (another)"), ("cores", facts["cores"] + 1),
                       ("torch", facts["torch"] + ".post1"), ("version", facts["version"] + 1)):
        assert host_rates.cache_file({**facts, key: other}) != path, key


def test_a_damaged_cache_file_is_measured_again(monkeypatch, tmp_path, capsys, measured):
    _, record, _ = measured
    _measure_into(monkeypatch, tmp_path)
    path = host_rates.cache_file()
    good = record.model_dump(mode="json")
    for damaged in ("{not json", json.dumps({**good, "forward_s_per_tparam_token": -1.0}),
                    json.dumps({**good, "merges": [[0.1, 0.5]]}), json.dumps({**good, "import_s": None}),
                    json.dumps({**good, "version": host_rates.VERSION + 1}), json.dumps({"unknown": 1})):
        path.write_text(damaged)
        assert host_rates.read_cached(path) is None, damaged
    path.write_text("{\"version\": 1, \"merges\": [[0.1")  # a write cut short: measured again, no traceback
    cal = host_rates.host_calibration(workers=2)
    assert "measuring this machine's CPU rates" in capsys.readouterr().out
    assert host_rates.read_cached(path) is not None and cal.merge_s_per_gparam_read > 0


def test_a_bad_setting_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(host_rates.ENV, "sometimes")
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "WILDMERGE_HOST_RATES='sometimes': expected one of measure, defaults" in err


def test_the_plan_names_its_rate_source(measured, monkeypatch, tmp_path, capsys):
    """The three sources of the CPU rates, as the dry run prints them: built-in, measured here, an earlier run."""
    folder, record, path = measured
    args = ["sample", "--dry-run", "--out", str(tmp_path / "run")]
    monkeypatch.setenv(host_rates.ENV, "defaults")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("rates (cpu): built-in defaults (measured on 2 quiet cores of the project's development machine: TA's "
            "55.7M merge") in out and "measuring" not in out
    assert "merges (cpu): 0.16 s each + 2.71 s per G parameters read" in out

    _measure_into(monkeypatch, folder)
    assert main(args) == 0
    out = capsys.readouterr().out
    cal = host_rates.calibration(record, workers=2, path=path)
    assert f"rates (cpu): measured on this host (cached {path}, {record.measured}); good to about x2" in out
    assert f"merges (cpu): {cal.merge_start_s:.2g} s each + {cal.merge_s_per_gparam_read:.3g} s per G" in out
    assert "measuring" not in out  # read from the cache

    run = tmp_path / "earlier"
    model = run / "models" / "ta__n02_s00"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4, "intermediate_size": 8,
                                                   "num_hidden_layers": 1, "num_attention_heads": 1,
                                                   "vocab_size": 10, "tie_word_embeddings": True}))
    (model / "merge_info.json").write_text(json.dumps({"seconds": 3.0, "experts": ["a", "b"], "method": "ta"}))
    assert main(args + ["--calibrate-from", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"rates (cpu): from run {run} (--calibrate-from): 0 timed evaluation(s), 1 timed merge(s)" in out
    assert "measured on this host" not in out  # the user's run replaces the measured rates


def test_a_failed_measurement_is_said_and_the_plan_uses_the_built_in_rates(monkeypatch, tmp_path, capsys):
    """A measuring process that dies (here: an interpreter that exits at once) is a note, not a failed dry run."""
    import sys

    _measure_into(monkeypatch, tmp_path)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    assert main(["sample", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "note: measuring this machine's CPU rates failed (exit code 1; its output: none)" in out
    assert "set WILDMERGE_HOST_RATES=defaults to skip it; the CPU plan uses the built-in rates" in out
    assert "rates (cpu): built-in defaults" in out and not list(tmp_path.glob("*.json"))


def test_a_billion_parameter_plan_measures_nothing(monkeypatch, tmp_path, capsys):
    """No CPU plan for a 1B+ model, so no measurement: the hub pools' dry runs stay instant."""
    _measure_into(monkeypatch, tmp_path)
    assert main(["sample", "--base", "qwen3-4b", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "measuring" not in out and "this machine, CPU" not in out and not list(tmp_path.glob("*.json"))
