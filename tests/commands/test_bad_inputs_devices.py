"""Devices kept apart, job ids stable, overrides validated: the merge device
(``--merge-device``) and the evaluation device (``--device`` of ``eval``, ``--eval-device`` of ``sample``) are two
settings, evaluation defaults to the suite's device, and a job's id does not change between ``wildmerge sample`` and
a later ``wildmerge eval`` of the same run."""

import json
from pathlib import Path

import pytest
import yaml

from helpers import lm_family, write_pool  # noqa: F401 (fixture)
from wildmerge.cli import main
from wildmerge.commands import sample as sample_command
from wildmerge.eval.jobs import make_job
from wildmerge.eval.suites import load_suite


def _parse(*argv):
    import argparse

    parser = argparse.ArgumentParser()
    sample_command.configure(parser)
    return sample_command.settings(parser.parse_args(list(argv)))


def test_merge_device_and_eval_device_are_two_settings(capsys):
    s = _parse("--merge-device", "cuda", "--eval-device", "cpu")
    assert (s.merge_device, s.evaluation.device) == ("cuda", "cpu")
    assert "deprecated" not in capsys.readouterr().err
    s = _parse("--eval-device", "cuda")
    assert (s.merge_device, s.evaluation.device) == ("cpu", "cuda")
    s = _parse()
    assert s.evaluation.device is None  # the suite's device: the accelerator when there is one


def test_sample_device_is_the_old_name_of_the_merge_device(capsys):
    """``sample --device`` meant the merge device before it was ``--merge-device``: it still does, with a warning."""
    s = _parse("--device", "cuda", "--eval-device", "cpu")
    assert (s.merge_device, s.evaluation.device) == ("cuda", "cpu")
    err = capsys.readouterr().err
    assert "`wildmerge sample --device` is deprecated" in err and "--merge-device cuda" in err


def test_eval_device_is_the_evaluation_device(capsys):
    import argparse

    from wildmerge.commands import eval as eval_command
    from wildmerge.commands.options import eval_options

    parser = argparse.ArgumentParser()
    eval_command.configure(parser)
    options = eval_options(parser.parse_args(["RUN", "--suite", "demo", "--device", "cuda:1"]))
    assert options.device == "cuda:1" and options.suite_overrides() == {"device": "cuda:1"}
    assert main(["eval", "RUN", "--suite", "demo", "--device", "gpu"]) == 2
    err = capsys.readouterr().err  # one message, from the suite's own rule, before anything is read
    assert err.count("\n") == 1 and "the evaluation device 'gpu' is not one of auto, cpu, cuda, cuda:N, mps" in err


def test_a_cpu_job_id_is_what_it_was_before():
    """``sample`` used to evaluate with ``device: cpu``; on a machine without a GPU the suite's ``auto`` now resolves
    to the same settings, so the demo main job's ids (and existing run folders) stay valid."""
    from wildmerge.eval.evaluate import apply_overrides, resolve_device

    demo = load_suite("demo")
    assert demo.settings.device == "auto"
    before = make_job("m", "fp", apply_overrides(demo, {"device": "cpu"}), None, True)
    after = make_job("m", "fp", resolve_device(apply_overrides(demo, {}), "local", cuda=False), None, True)
    assert after.job_id == before.job_id
    on_gpu = resolve_device(demo, "local", cuda=True)
    assert on_gpu.settings.device == "cuda"


def test_eval_after_sample_runs_nothing(lm_family, tmp_path, capsys):  # noqa: F811
    suite = yaml.safe_load(Path(lm_family["suite"]).read_text())
    suite["settings"]["device"] = "auto"
    suite_file = tmp_path / "mini_auto.yml"
    suite_file.write_text(yaml.safe_dump(suite))
    pool = write_pool(tmp_path, lm_family)
    run = tmp_path / "run"
    argv = ["sample", "--base", pool, "--out", str(run), "--sizes", "1", "--k", "1", "--methods", "ta", "--no-full",
            "--evaluate", "--suite", str(suite_file), "--limit", "2"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--suite", str(suite_file), "--limit", "2", "--no-report"]) == 0
    assert "0 to run" in capsys.readouterr().out
    records = [json.loads(p.read_text()) for p in (run / "eval" / "mini" / "results").glob("*.json")]
    assert records and {r["device"] for r in records} == {"cpu"}


@pytest.mark.parametrize("limit", ["1.5", "1.0", "0", "-2", "0.0"])
def test_a_limit_is_whole_documents_or_a_fraction_below_one(lm_family, tmp_path, capsys, limit):  # noqa: F811
    assert main(["eval", "--model", lm_family["base"], "--suite", lm_family["suite"], "--out", str(tmp_path),
                 "--limit", limit]) == 2
    err = capsys.readouterr().err
    assert "--limit" in err and limit in err and "Traceback" not in err
    assert not (tmp_path / "mini").exists()
