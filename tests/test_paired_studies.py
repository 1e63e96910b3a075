"""benchmarks/paired_studies.py on real runs scored with ``--record-items`` (conftest's tiny LMs, the local mini
suite): the printed differences equal a float64 suite-mean difference computed here from the result files, the
intervals hold them and are ordered, a model against an identical copy gives 0 [0, 0], and an unknown reference
model stops with a message naming the models it could use."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import lm_family, write_plan  # noqa: F401 (fixture)
from wildmerge.cli import main as wildmerge
from wildmerge.run import PlanEntry

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "paired_studies.py"
NUMBER = r"[+-]?\d+\.\d\d"
LINE = re.compile(rf"^(?P<name>.+?)\s+(?P<a>{NUMBER}) vs\s+(?P<b>{NUMBER})  diff\s+(?P<d>{NUMBER}) "
                  rf"\[\s*(?P<lo>{NUMBER}),\s+(?P<hi>{NUMBER})\]$")


def _script():
    spec = importlib.util.spec_from_file_location("paired_studies", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_script(monkeypatch, capsys, *argv):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    assert _script().main() == 0
    return {m["name"].strip(): m.groupdict() for m in map(LINE.match, capsys.readouterr().out.splitlines()) if m}


def _scored_run(root, family, entries):
    run = write_plan(root, [PlanEntry(**e) for e in entries])
    assert wildmerge(["eval", str(run), "--suite", family["suite"], "--no-report", "--executor", "serial",
                      "--record-items"]) == 0
    return run


def _items(run):
    """{model id: {task: float64 per-item scores}}, read straight from the sealed result files."""
    store = Path(run) / "eval" / "mini"
    index = json.loads((store / "index.json").read_text())["models"]
    out = {}
    for model_id, job in index.items():
        record = json.loads((store / "results" / f"{job}.json").read_text())
        out[model_id] = {t: np.array(v, dtype=np.float64) for t, v in record["items"].items()}
    return out


def _suite_diff(a, b) -> float:
    """Points of the suite mean (mean over tasks of the per-task item means), a minus b."""
    return 100.0 * float(np.mean([a[t].mean() - b[t].mean() for t in sorted(a)]))


def _check(row, expected):
    d, lo, hi = float(row["d"]), float(row["lo"]), float(row["hi"])
    assert row["d"] == f"{expected:+.2f}"
    assert lo <= d <= hi


@pytest.fixture(scope="module")
def runs(lm_family, tmp_path_factory):  # noqa: F811
    base, (e0, e1), copy = lm_family["base"], lm_family["experts"], lm_family["copy"]
    root = tmp_path_factory.mktemp("paired")
    a = _scored_run(root / "a", lm_family, [
        {"model_id": "base", "kind": "base", "path": base},
        {"model_id": "e0", "kind": "expert", "path": e0, "n": 1, "experts": ["e0"]},
        {"model_id": "e0_copy", "kind": "expert", "path": copy, "n": 1, "experts": ["e0_copy"]},
        {"model_id": "ta__n02_s00", "kind": "merge", "path": e0, "method": "ta", "n": 2, "subset_id": "n02_s00",
         "experts": ["e0", "e1"]},
        {"model_id": "ta__n02_s01", "kind": "merge", "path": e1, "method": "ta", "n": 2, "subset_id": "n02_s01",
         "experts": ["e0", "e1"]}])
    b = _scored_run(root / "b", lm_family, [
        {"model_id": "base", "kind": "base", "path": base},
        {"model_id": "ta__n02_s00", "kind": "merge", "path": base, "method": "ta", "n": 2, "subset_id": "n02_s00",
         "experts": ["e0", "e1"]}])
    return a, b


def test_models_mode_prints_each_paired_difference_to_the_reference(runs, monkeypatch, capsys):
    a, _ = runs
    items = _items(a)
    assert set(items) == {"base", "e0", "e0_copy", "ta__n02_s00", "ta__n02_s01"}
    rows = _run_script(monkeypatch, capsys, "models", str(a), "--reference", "base", "--suite", "mini",
                       "--iters", "200")
    assert set(rows) == {f"{m} - base" for m in items if m != "base"}
    for model_id in items:
        if model_id != "base":
            _check(rows[f"{model_id} - base"], _suite_diff(items[model_id], items["base"]))
    # the experts really differ from the base on some item, so the check above is not only about zeros
    assert any(_suite_diff(items[m], items["base"]) != 0 for m in ("e0", "ta__n02_s01"))

    # a model against an identical copy of itself: no difference and no spread
    same = _run_script(monkeypatch, capsys, "models", str(a), "--reference", "e0", "--suite", "mini",
                       "--iters", "200")["e0_copy - e0"]
    assert (same["d"], same["lo"], same["hi"]) == ("+0.00", "+0.00", "+0.00")
    assert same["a"] == same["b"]


def test_cells_mode_compares_each_shared_cell_averaged_over_its_subsets(runs, monkeypatch, capsys):
    a, b = runs
    ia, ib = _items(a), _items(b)
    rows = _run_script(monkeypatch, capsys, "cells", str(a), str(b), "--suite", "mini", "--iters", "200")
    assert list(rows) == ["ta n=2 (2 vs 1 merges)"]  # the only (method, n) both runs hold
    cell_a = {t: (ia["ta__n02_s00"][t] + ia["ta__n02_s01"][t]) / 2 for t in ia["base"]}
    row = rows["ta n=2 (2 vs 1 merges)"]
    _check(row, _suite_diff(cell_a, ib["ta__n02_s00"]))
    assert float(row["a"]) == pytest.approx(100 * np.mean([v.mean() for v in cell_a.values()]), abs=0.005)

    # a run against itself: every cell's difference is 0 [0, 0]
    same = _run_script(monkeypatch, capsys, "cells", str(a), str(a), "--suite", "mini", "--iters", "200")
    assert [(r["d"], r["lo"], r["hi"]) for r in same.values()] == [("+0.00", "+0.00", "+0.00")]


def test_models_mode_over_several_runs_pools_the_models_they_share(runs, monkeypatch, capsys):
    """The same study on other subsets: each shared model against the reference, the mean over the runs of the
    suite-mean differences (every run's tasks resampled apart)."""
    a, b = runs
    ia, ib = _items(a), _items(b)
    rows = _run_script(monkeypatch, capsys, "models", str(a), str(b), "--reference", "base", "--suite", "mini",
                       "--iters", "200")
    assert list(rows) == ["ta__n02_s00 - base"]  # e0, e0_copy and ta__n02_s01 are in run a only
    expected = np.mean([_suite_diff(ia["ta__n02_s00"], ia["base"]), _suite_diff(ib["ta__n02_s00"], ib["base"])])
    assert expected != 0  # run b's "merge" is the base itself, run a's is e0: the pooled value is not either one
    _check(rows["ta__n02_s00 - base"], expected)
    suite_means = [100 * np.mean([v.mean() for v in r["ta__n02_s00"].values()]) for r in (ia, ib)]
    assert float(rows["ta__n02_s00 - base"]["a"]) == pytest.approx(np.mean(suite_means), abs=0.005)
    # one run alone gives that run's difference
    alone = _run_script(monkeypatch, capsys, "models", str(b), "--reference", "base", "--suite", "mini",
                        "--iters", "200")["ta__n02_s00 - base"]
    assert (alone["d"], alone["lo"], alone["hi"]) == ("+0.00", "+0.00", "+0.00")


def test_an_unknown_reference_model_says_which_models_it_could_be(runs, monkeypatch):
    a, _ = runs
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "models", str(a), "--reference", "nope", "--suite", "mini"])
    with pytest.raises(SystemExit) as exc:
        _script().main()
    message = str(exc.value.code)
    assert "--reference 'nope'" in message and str(a) in message
    assert all(m in message for m in ("base", "e0", "e0_copy", "ta__n02_s00", "ta__n02_s01"))
